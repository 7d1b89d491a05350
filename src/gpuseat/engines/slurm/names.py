"""Names that reach Slurm's command lines and config files, checked against strict patterns.

Slurm parses ``key=value`` words and comma lists, so a name with ``=``, ``,``, spaces or a leading
``-`` could become another option; every name gpuseat passes is matched here first.
"""

from __future__ import annotations

import re

from gpuseat.core.logins import SYSTEM_LOGINS, unix_user
from gpuseat.errors import InputError

SLURM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
GRES_TYPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,62}$")
NODE_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})$")
DEVICE_PATH = re.compile(r"^/[A-Za-z0-9_./-]{1,255}$")


def _check(pattern: re.Pattern[str], value: str, what: str, where: str, fix: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value) or ".." in value.split("/"):
        raise InputError(f"{what} {value!r} is not allowed", where=where, fix=fix)
    return value


def slurm_name(value: str, *, where: str = "name") -> str:
    """A partition, reservation or account name: letters, digits, ``_ . -``; at most 63 characters."""
    return _check(SLURM_NAME, value, "Slurm name", where, "use letters, digits, '_', '.' and '-' (63 at most)")


def participant_login(value: str, *, where: str = "unix_user") -> str:
    """A seat holder's login: a :func:`gpuseat.core.logins.unix_user` that is no system account (one of
    :data:`gpuseat.core.logins.SYSTEM_LOGINS`, or below uid 1000 on this host), whose jobs, reservation places
    and limits are the cluster's own; root is also the placeholder user of a reservation whose last holder is
    replaced (so it is never revoked from one)."""
    import pwd

    unix_user(value, where=where)
    try:
        uid: int | None = pwd.getpwnam(value).pw_uid
    except KeyError:
        uid = None
    if value in SYSTEM_LOGINS or (uid is not None and uid < 1000):
        raise InputError(
            f"{where}: login {value} is a system account{f' (uid {uid})' if uid is not None else ''}, "
            "not a participant's",
            where=where,
            fix="give the participant their own unix_user in the roster (gpuseat roster import)",
        )
    return value


def gres_type(value: str, *, where: str = "gres type") -> str:
    """A GRES type such as ``m60`` or ``1g.18gb``."""
    return _check(GRES_TYPE, value, "GRES type", where, "use letters, digits and '_ . + -'")


def node_name(value: str, *, where: str = "node") -> str:
    """A Slurm node name (a host name label)."""
    return _check(NODE_NAME, value, "node name", where, "use a host name label: letters, digits and '-'")


def device_path(value: str, *, where: str = "device") -> str:
    """An absolute device file path without ``..``, spaces, commas or ``=``."""
    return _check(DEVICE_PATH, value, "device path", where, "give an absolute path such as /dev/nvidia0")


def course_partition(course_key: str) -> str:
    """The partition of one course (without accounting): ``gpuseat-<course>``."""
    return slurm_name(f"gpuseat-{course_key}", where="course key")
