"""The roster file: participants of a course as CSV text, checked row by row.

Columns are found by header (any order, any case): ``name``, ``email``, ``group``, ``unix_user``,
``ssh_key`` and optionally ``key``; other columns are ignored. UTF-8 with or without a BOM (what
spreadsheets export); fields are separated by ``,``, ``;`` or a tab, whichever the header row uses
(German and French Excel write ``;``, "Unicode text" exports use tabs). Every error names
``FILE:LINE:COLUMN``, what is wrong and how to fix it; the whole file is checked before anything is
stored. Pure: text in, rows out.
"""

from __future__ import annotations

import base64
import binascii
import csv
import hashlib
import io
import re
import struct
from dataclasses import dataclass

from gpuseat.core.logins import SYSTEM_LOGINS, UNIX_USER
from gpuseat.errors import InputError, did_you_mean
from gpuseat.safe_text import csv_value, has_ascii_control, has_control

ROSTER_COLUMNS: tuple[str, ...] = ("key", "name", "email", "group", "unix_user", "ssh_key")
_ALIASES = {
    "e-mail": "email",
    "mail": "email",
    "user": "unix_user",
    "username": "unix_user",
    "login": "unix_user",
    "ssh": "ssh_key",
    "ssh_public_key": "ssh_key",
    "public_key": "ssh_key",
    "id": "key",
}
MAX_ROWS = 100_000
#: longest roster text, in characters, whatever it came from (a file read is capped at gpuseat.files.MAX_BYTES bytes)
MAX_ROSTER_CHARS = 16 * 1024 * 1024

EMAIL = re.compile(
    r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$"
)
PARTICIPANT_KEY = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
SSH_KEY_TYPES: tuple[str, ...] = (
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
)


@dataclass(frozen=True, slots=True)
class RosterRow:
    """One checked roster line (``line`` is where it starts in the file, for later messages)."""

    line: int
    key: str
    name: str | None
    email: str
    group: str | None
    unix_user: str | None
    ssh_key: str | None
    #: the columns the file has: a re-import keeps what a participant has for the others (a late
    #: registrant's ``name,email`` file once wiped everyone's SSH key and login)
    columns: frozenset[str] = frozenset(ROSTER_COLUMNS)
    #: each given column's place in the file, 0-based (for ``FILE:LINE:COLUMN`` messages after parsing)
    places: tuple[tuple[str, int], ...] = ()

    def place(self, where: str, column: str) -> str:
        """``FILE:LINE:COLUMN`` of this row's ``column`` (``FILE:LINE`` when the file has no such column)."""
        return _place(where, self.line, dict(self.places).get(column))


def check_ssh_key(text: str) -> str:
    """A public key line ``TYPE BASE64 [comment]``, normalised to single spaces; ValueError if not one.

    The base64 blob must decode and start with the same key type (what OpenSSH itself checks), so a
    private key, a fingerprint or a truncated paste is caught here rather than at login time.
    """
    parts = text.strip().split()
    if len(parts) < 2:
        raise ValueError("expected 'TYPE BASE64 [comment]', e.g. 'ssh-ed25519 AAAAC3Nza… alice@laptop'")
    kind, blob = parts[0], parts[1]
    if kind not in SSH_KEY_TYPES:
        raise ValueError(f"unknown key type {kind!r} (one of {', '.join(SSH_KEY_TYPES)})")
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the key's base64 part does not decode (was it cut or wrapped?)") from None
    if len(raw) < 4:
        raise ValueError("the key's base64 part is too short")
    (n,) = struct.unpack(">I", raw[:4])
    if raw[4 : 4 + n] != kind.encode():
        raise ValueError(f"the key's data is not a {kind} key (type and base64 part do not match)")
    if kind == "ssh-ed25519" and len(raw) != 51:
        raise ValueError("an ssh-ed25519 key's data is 51 bytes; this one is cut or padded")
    comment = " ".join(parts[2:])
    return f"{kind} {blob} {comment}".strip()


def _key_from(email: str, unix_user: str | None) -> str:
    """The participant key when the roster has no ``key`` column: the Unix user or the email's local part,
    as is when it is already a key, else a slug plus a short hash (so distinct sources stay distinct)."""
    base = unix_user or email.split("@", 1)[0].lower()
    if PARTICIPANT_KEY.fullmatch(base):
        return base
    slug = re.sub(r"[^a-z0-9._-]+", "-", base.lower()).strip("-._")[:54]
    return f"{slug or 'p'}-{hashlib.sha256(base.encode()).hexdigest()[:8]}"


DELIMITERS: tuple[str, ...] = (",", ";", "\t")


def sniff_delimiter(text: str) -> str:
    """The separator the header row uses: the most frequent of ``,``, ``;`` and tab outside quotes.

    Only the header is looked at (it names the columns, so it has no free text with stray commas);
    ties and a one-column header keep the comma.
    """
    counts = dict.fromkeys(DELIMITERS, 0)
    quoted = False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch in "\r\n":
            break
        elif not quoted and ch in counts:
            counts[ch] += 1
    best = max(DELIMITERS, key=lambda d: (counts[d], d == ","))
    return best if counts[best] else ","


class _Cell:
    """Where a value sits, to build ``FILE:LINE:COLUMN`` messages."""

    def __init__(self, where: str, line: int, columns: dict[str, int]) -> None:
        self.where, self.line, self.columns = where, line, columns

    def error(self, column: str, what: str, fix: str) -> InputError:
        return InputError(f"{column}: {what}", where=_place(self.where, self.line, self.columns.get(column)), fix=fix)


def _place(where: str, line: int, col: int | None) -> str:
    """``FILE:LINE:COLUMN`` (``col`` 0-based), or ``FILE:LINE`` without a column."""
    return f"{where}:{line}:{col + 1}" if col is not None else f"{where}:{line}"


def parse_roster(text: str, *, groups: tuple[str, ...], where: str = "roster") -> list[RosterRow]:
    """Check every row of a roster; raises :class:`InputError` at the first bad cell or duplicate.

    ``groups`` are the course's group names: a row's group must be one of them (an empty group cell
    is allowed when the course has exactly one group).
    """
    if len(text) > MAX_ROSTER_CHARS:
        raise InputError(f"{len(text)} characters, more than a roster can be", where=where, fix="split the file")
    text = text.removeprefix("\ufeff")
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=sniff_delimiter(text), strict=True)
    try:
        header = next(reader, None)
    except csv.Error as exc:
        raise InputError(f"malformed CSV: {exc}", where=f"{where}:1", fix="fix the quoting") from None
    if not header or not any(h.strip() for h in header):
        raise InputError(
            "empty roster, no header row", where=where, fix="start with: name,email,group,unix_user,ssh_key"
        )
    columns: dict[str, int] = {}
    for i, raw in enumerate(header):
        name = raw.strip().lower().replace(" ", "_")
        name = _ALIASES.get(name, name)
        if name in ROSTER_COLUMNS:
            if name in columns:
                raise InputError(f"column {name!r} appears twice", where=f"{where}:1:{i + 1}", fix="keep one of them")
            columns[name] = i
    if "email" not in columns:
        raise InputError(
            f"no 'email' column (header: {', '.join(h.strip() for h in header)})",
            where=f"{where}:1",
            fix="name the columns name,email,group,unix_user,ssh_key",
        )
    rows: list[RosterRow] = []
    seen: dict[str, dict[str, int]] = {"email": {}, "key": {}, "unix_user": {}}
    line = reader.line_num + 1
    try:
        for record in reader:
            start, line = line, reader.line_num + 1
            if not any(cell.strip() for cell in record):
                continue
            if len(rows) >= MAX_ROWS:
                raise InputError(f"more than {MAX_ROWS} rows", where=where, fix="split the file")
            cell = _Cell(where, start, columns)
            if len(record) > len(header):
                raise InputError(
                    f"{len(record)} fields, the header has {len(header)}",
                    where=f"{where}:{start}:{len(header) + 1}",
                    fix="quote values that contain the separator, or remove the extra fields",
                )
            rows.append(_row(record, cell, groups, seen))
    except csv.Error as exc:
        raise InputError(f"malformed CSV: {exc}", where=f"{where}:{reader.line_num}", fix="fix the quoting") from None
    if not rows:
        raise InputError("no participants, only a header", where=where, fix="add one row per participant")
    return rows


def _get(record: list[str], columns: dict[str, int], name: str) -> str:
    i = columns.get(name)
    return csv_value(record[i].strip()) if i is not None and i < len(record) else ""


def _row(record: list[str], cell: _Cell, groups: tuple[str, ...], seen: dict[str, dict[str, int]]) -> RosterRow:
    def get(name: str) -> str:
        return _get(record, cell.columns, name)

    for column in ROSTER_COLUMNS:
        cell_text = get(column)
        # C1 controls and bidi overrides too: a name is shown on pages and in terminals, and a CSV download cleans
        # them (safe_text.csv_cell), so a name holding one came back changed from every export and re-import
        if has_ascii_control(cell_text) or has_control(cell_text):
            raise cell.error(
                column,
                "control characters (line breaks, escape sequences, bidirectional overrides)",
                "keep each value on one line of plain text",
            )
        if len(cell_text) > (limit := 16384 if column == "ssh_key" else 256):
            raise cell.error(column, f"{len(cell_text)} characters, more than {limit}", "shorten it")
    email = get("email")
    if not email:
        raise cell.error("email", "missing", "give every participant an email address")
    if not EMAIL.fullmatch(email) or len(email) > 254:
        raise cell.error("email", f"{email!r} is not an email address", "write it as name@example.org")
    unix_user = get("unix_user") or None
    if unix_user is not None and not UNIX_USER.match(unix_user):
        raise cell.error(
            "unix_user",
            f"{unix_user!r} is not a Unix user name",
            "use lower-case letters, digits, '_' or '-', starting with a letter or '_', at most 32",
        )
    if unix_user in SYSTEM_LOGINS:
        raise cell.error(
            "unix_user",
            f"{unix_user!r} is an account the machines have for themselves, not a participant's login",
            "give the participant a login of their own, e.g. the name part of their email",
        )
    key = get("key") or _key_from(email, unix_user)
    if not PARTICIPANT_KEY.fullmatch(key):
        raise cell.error("key", f"{key!r} is not a participant key", "use lower-case letters, digits, '.', '_' or '-'")
    group = get("group") or None
    if group is None and len(groups) > 1:
        raise cell.error("group", "missing", f"give one of the course's groups: {', '.join(groups)}")
    if group is not None and group not in groups:
        raise cell.error(
            "group",
            f"unknown group {group!r}.{did_you_mean(group, groups)}",
            f"use one of the course's groups: {', '.join(groups)}",
        )
    if group is None and len(groups) == 1:
        group = groups[0]
    pasted = get("ssh_key") or None
    ssh_key: str | None = None
    if pasted is not None:
        try:
            ssh_key = check_ssh_key(pasted)
        except ValueError as exc:
            raise cell.error("ssh_key", str(exc), "paste the one-line public key (the .pub file)") from None
    checks: tuple[tuple[str, str | None], ...] = (("email", email.lower()), ("unix_user", unix_user), ("key", key))
    for column, value in checks:
        if value is None:
            continue
        if value in seen[column]:
            if column == "key" and "key" not in cell.columns:  # made from the email's local part
                raise cell.error(
                    "email",
                    f"the participant key {value!r} made from it is already on line {seen[column][value]}",
                    "add a 'key' column (or a unix_user) to tell these participants apart",
                )
            raise cell.error(
                column,
                f"{value!r} is already on line {seen[column][value]}",
                f"give each participant their own {column}",
            )
        seen[column][value] = cell.line
    given = frozenset(cell.columns)
    places = tuple(sorted(cell.columns.items()))
    return RosterRow(cell.line, key, get("name") or None, email.lower(), group, unix_user, ssh_key, given, places)


@dataclass(frozen=True, slots=True)
class RosterText:
    """A roster's CSV text and the name its errors give (``upload.csv``, ``demo roster``).

    What the course store imports when the roster is not a file on disk: a plain string could be a
    file name or the text itself, so the store takes a :class:`~pathlib.Path`, this, or parsed rows.
    """

    text: str
    where: str = "roster"
