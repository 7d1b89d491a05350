"""A participant's login name on a machine: the one rule every engine, the roster and the way in share.

A login is a portable Unix user name (useradd's default ``NAME_REGEX``: a lower-case letter or ``_``, then
letters, digits, ``_`` or ``-``, at most 32). It is never an account the machine already has for itself:
a participant given ``root``, ``daemon`` or ``slurm`` would get that account's key, processes and jobs, and a
release would revoke the system's own access.
"""

from __future__ import annotations

import re

from gpuseat.errors import InputError

#: ``\Z``, not ``$``: ``$`` also matches before a trailing newline, and a login ends up in files and commands
UNIX_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}\Z")

#: accounts a Linux machine, a Slurm cluster or a cloud image has for itself (Debian's base-passwd and
#: Ubuntu's cloud image, systemd's, and the daemons gpuseat's engines run beside: munge, slurm, chrony);
#: cloud images' admin users (``ubuntu``, ``ec2-user``) are the SkyPilot engine's own list
SYSTEM_LOGINS = frozenset(
    {
        "root", "daemon", "bin", "sys", "adm", "sync", "games", "man", "lp", "mail", "news", "uucp", "proxy",
        "www-data", "backup", "list", "irc", "gnats", "nobody", "nfsnobody", "sshd", "messagebus", "syslog",
        "systemd-network", "systemd-resolve", "systemd-timesync", "polkitd", "_apt", "tss", "uuidd", "tcpdump",
        "landscape", "pollinate", "lxd", "dnsmasq", "chrony", "ntp", "slurm", "munge",
    }
)  # fmt: skip


def is_login(value: str) -> bool:
    """Whether ``value`` is a portable Unix user name (not whether it is a system account)."""
    return bool(UNIX_USER.match(value))


def is_participant_login(value: str) -> bool:
    """Whether ``value`` may be a participant's login: a portable Unix user name that is no account the
    machines have for themselves (the roster's rule; a seats file, an export and a VM's guest follow it)."""
    return is_login(value) and value not in SYSTEM_LOGINS


def unix_user(value: str, *, where: str = "unix_user") -> str:
    """``value`` when it is a portable Unix user name (:data:`UNIX_USER`), else one clear error; whether a
    system account is allowed too is each caller's policy (a Slurm reservation's placeholder is ``root``)."""
    if not isinstance(value, str) or not UNIX_USER.fullmatch(value):
        raise InputError(
            f"unix user {value!r} is not allowed",
            where=where,
            fix="use a lower-case login name such as 'alice' or 'a_smith'",
        )
    return value
