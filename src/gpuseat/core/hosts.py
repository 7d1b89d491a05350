"""The one rule for a host name or address, wherever one is typed or stored.

A seat's ``host``, ``seats connect --ssh``/``--jump``, the host engine's ``ssh_host``, an inventory's
``ssh_host``, ``top/monitor --ssh``: each value ends up in an ``ssh`` command line, an
``~/.ssh/config`` block or a participant's page, so each is checked here and nowhere else, and a value
gets the same verdict wherever it is typed.

The rule:

* an IPv4 address in dotted-quad form (``10.0.0.5``), or an IPv6 address (``fe80::1``, also written
  ``[fe80::1]``): returned without brackets. Never with an interface zone (``fe80::1%eth0``): the zone
  names a network interface of the machine ssh runs on, so it means nothing on a participant's computer
  (and ``%`` is a token character in ``~/.ssh/config``);
* else a host name: dot-separated labels of 1–63 ASCII letters, digits, ``-`` and ``_``, each label
  starting and ending with a letter, digit or ``_``, at most 253 characters, one optional trailing dot
  (``gpu01.lab.example.``). Underscores are DNS-invalid but real lab machines in ``/etc/hosts`` have
  them and ``ssh`` resolves them, so they are accepted everywhere alike;
* never a leading ``-`` (ssh would read an option), whitespace, control characters, ``/``, shell
  characters or non-ASCII letters; a name whose last label is all digits must be a real IPv4 address
  (``1.2.3`` or ``1234`` are read as addresses by the resolver); nothing that looks like a file
  (``h200.toml``);
* ``user@`` only where the caller takes one: a participant's login (``seats connect --ssh``, ``--jump``,
  ``jump_host``: :func:`split_user_host`, the Unix user rule of :data:`gpuseat.core.logins.UNIX_USER`) or
  the organizer's own account (``top/monitor --ssh``: :func:`ssh_target`, :data:`OPERATOR_USER`); a
  port only where :func:`split_user_host` parses one.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable

from gpuseat.core.logins import UNIX_USER
from gpuseat.errors import InputError

#: one label of a host name: ASCII letters, digits, '_' and inner '-' (never first or last)
LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
#: a host name (not an address): labels joined by single dots, one optional trailing dot
HOST_RE = re.compile(rf"(?:{LABEL})(?:\.{LABEL})*\.?", re.ASCII)
_FILE_LIKE = re.compile(r"\.(toml|ya?ml|json|csv|txt|xml)\.?$", re.IGNORECASE)
_DIGITS = re.compile(r"[0-9]+", re.ASCII)

#: the user of an organizer's own ``--ssh user@host``: an account that exists there (letters, digits, '.', '_',
#: '-'; never a leading '-'), not a login gpuseat makes (those follow :data:`gpuseat.core.logins.UNIX_USER`)
OPERATOR_USER = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._-]{0,31}", re.ASCII)

#: a seat host as gpuseat stored it before this rule (its store's pattern): such hosts stay in older stores,
#: so where a host only *selects* stored seats (``apply/agent --host``) it must still match them
STORED_BEFORE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}", re.ASCII)

#: the fix every refusal gives
HOST_EXAMPLES = "a host name such as gpu01 or gpu01.lab.example, or an IP address such as 10.0.0.5 or 2001:db8::1"


def host_problem(text: str) -> str | None:
    """What is wrong with ``text`` as a host name or address (no user, no port), or None when it is one."""
    if not text:
        return "it is empty"
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in text):
        return "it has a space, line break or control character"
    if text.startswith("-"):
        return "it starts with '-' (ssh would read it as an option)"
    if not text.isascii():
        return "it has non-ASCII characters"
    if "@" in text:
        return "it has a user@ part, which this field does not take"
    if "/" in text or _FILE_LIKE.search(text):
        return "it looks like a file, not a machine"
    if text.startswith("[") or ":" in text:
        address = normal_host(text)
        if "%" in address and _ipv6(address.partition("%")[0]):
            return (
                "it has an interface zone ('%' and a network interface), which names an interface of one machine, "
                "not a way in from a participant's computer; give a global address or the host's name"
            )
        if _ipv6(address):
            return None
        return "it has '[' or ':' but is not an IPv6 address (a port is not part of a host)"
    if len(text.removesuffix(".")) > 253:
        return "it is longer than 253 characters"
    odd = next((c for c in text if not (c.isalnum() or c in "._-")), None)
    if odd is not None:
        return f"it has {odd!r}, which a host name never has"
    if any(len(label) > 63 for label in text.split(".")):
        return "a label (the part between dots) is longer than 63 characters"
    if not HOST_RE.fullmatch(text):
        return "a name is labels of letters, digits, '-' and '_' joined by single dots, none starting or ending in '-'"
    last = text.removesuffix(".").rpartition(".")[2]
    if _DIGITS.fullmatch(last) and not _ipv4(text):
        return "it is all digits but not an IPv4 address (four numbers 0-255 without leading zeros)"
    return None


def _ipv4(text: str) -> bool:
    return _parses(ipaddress.IPv4Address, text)


def _ipv6(text: str) -> bool:
    return "%" not in text and _parses(ipaddress.IPv6Address, text)  # ipaddress takes any zone text


def is_address(host: str) -> bool:
    """Whether ``host`` (as :func:`check_host` returns it) is an IP address rather than a name."""
    return _ipv4(host) or _ipv6(normal_host(host))


def bare_label(host: str) -> bool:
    """Whether ``host`` is a single label (``h200-2x``), as an inventory names its server: never a way in
    by itself. A DNS name has a dot; an address (``2001:db8::5`` has none) is reachable as it is."""
    return "." not in host and not is_address(host)


def _parses(address: Callable[[str], object], text: str) -> bool:
    """Whether ``ipaddress`` reads ``text`` as that kind of address."""
    try:
        address(text)
    except ValueError:
        return False
    return True


def normal_host(text: str) -> str:
    """A host the rule accepts, as it is used (an IPv6 address without its brackets)."""
    return text[1:-1] if text.startswith("[") and text.endswith("]") else text


def check_host(value: str, *, field: str) -> str:
    """``value`` as a host name or address, checked by the one rule; else an :class:`InputError` naming
    ``field`` (exit 2). IPv6 brackets are dropped."""
    problem = host_problem(value)
    if problem is not None:
        raise InputError(f"{value[:100]!r} is not a host name: {problem}", where=field, fix=f"give {HOST_EXAMPLES}")
    return normal_host(value)


def ssh_target(value: str, *, field: str = "--ssh") -> str:
    """``[user@]host`` for the organizer's own ``ssh`` (``top/monitor --ssh``): the host by the one
    rule, the user an existing account of theirs on that machine (:data:`OPERATOR_USER`, looser than a
    participant's login, which gpuseat creates: ``First.Last@gpu01`` is an admin's usual name)."""
    name, at, host = value.rpartition("@")
    if at and not OPERATOR_USER.fullmatch(name):
        raise InputError(
            f"user {name[:40]!r} in {value[:100]!r} is not a user name ssh can take",
            where=field,
            fix="write it as user@host with a user of letters, digits, '.', '_' and '-' (not starting with '-'), "
            "or leave the user out and set User in ~/.ssh/config",
        )
    host = check_host(host, field=field)
    return f"{name}@{host}" if at else host


def split_user_host(value: str, *, field: str = "--ssh") -> tuple[str | None, str, int | None]:
    """``user@host[:port]`` (user and port optional; ``[v6]:port`` for IPv6) → parts, each checked."""
    user, _, rest = value.rpartition("@")
    if user and not UNIX_USER.fullmatch(user):
        raise InputError(f"user {user[:40]!r} is not a Unix user name", where=field, fix="write it as user@host[:port]")
    port: int | None = None
    host = rest
    if rest.startswith("[") and "]:" in rest:
        host, _, tail = rest.partition("]:")
        host += "]"
        port = tcp_port(tail, field)
    elif rest.count(":") == 1:
        host, _, tail = rest.partition(":")
        port = tcp_port(tail, field)
    return (user or None), check_host(host, field=field), port


def jump_target(value: str, *, field: str) -> str:
    """An ``ssh -J`` target ``[user@]host[:port]``, checked part by part and written back as ssh takes it:
    an IPv6 address always in brackets (``-J`` and ``ProxyJump`` read ``ann@2001:db8::1`` as host ``2001``
    and refuse it), unlike the destination of ``ssh user@2001:db8::1`` and ``HostName``, which take it bare."""
    user, host, port = split_user_host(value, field=field)
    shown = f"[{host}]" if ":" in host else host
    return (f"{user}@" if user else "") + shown + (f":{port}" if port else "")


def tcp_port(text: str, field: str) -> int:
    """``text`` as a TCP port (1-65535), in the digits 0-9 only (``int`` also reads ``١٢``; ``isdigit`` also
    passes ``²``, which ``int`` then refuses with a traceback)."""
    if not _DIGITS.fullmatch(text) or not 0 < int(text) < 65536:
        raise InputError(f"port {text[:20]!r} is not a TCP port", where=field, fix="give a port between 1 and 65535")
    return int(text)


def bad_stored_host(seat: str, host: str, problem: str) -> str:
    """What to say of a seat whose host was stored before this rule and fails it: which seat, what is
    wrong, how to give it a way in (the seat itself stays as stored)."""
    return (
        f"seat {seat}'s host {host[:100]!r} is not a host name participants can reach ({problem}): run "
        f"`gpuseat seats connect {seat} --ssh USER@HOST` with the server's DNS name or IP address"
    )
