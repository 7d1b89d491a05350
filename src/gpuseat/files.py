"""Reading user files (TOML, CSV) into plain data, with errors that name the file, line and field.

Every user file goes through here so that a malformed file gives one clear ``InputError``
(exit code 2) instead of a traceback.
"""

from __future__ import annotations

import csv
import math
import stat
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from gpuseat.errors import InputError

M = TypeVar("M", bound=BaseModel)


#: Largest user file read by default (course, offers, inventory, roster files are a few kB; a
#: 1,000-GPU nvidia-smi capture is a few MB). Readers of bigger formats pass their own cap.
MAX_BYTES = 16 * 1024 * 1024


def read_bytes(path: Path, *, max_bytes: int = MAX_BYTES) -> bytes:
    """A regular file's bytes, at most ``max_bytes``: FIFOs, devices and oversized files are refused."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise InputError("file not found", where=str(path), fix="check the path") from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", where=str(path), fix="check permissions") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError("is a directory, not a file", where=str(path), fix="give a file")
    if not stat.S_ISREG(st.st_mode):
        raise InputError("not a regular file (a FIFO, socket or device)", where=str(path), fix="give a regular file")
    if st.st_size > max_bytes:
        raise InputError(
            f"file is {st.st_size:,} bytes, more than the {max_bytes:,} bytes gpuseat reads for this kind of file",
            where=str(path),
            fix="check that this is the right file, or split it",
        )
    try:
        with path.open("rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", where=str(path), fix="check permissions") from None
    if len(data) > max_bytes:  # grew while we read it
        raise InputError(f"file is larger than {max_bytes:,} bytes", where=str(path), fix="check the file")
    return data


def read_text(path: Path, *, max_bytes: int = MAX_BYTES) -> str:
    """The file's text (UTF-8, a byte-order mark is dropped); bad files are input errors, never hangs."""
    data = read_bytes(path, max_bytes=max_bytes)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start})", where=str(path), fix="save the file as UTF-8") from None


def check_finite(data: Any, *, where: str, path: str = "", limit: float = 1e15) -> None:
    """Refuse ``inf``, ``nan`` and numbers beyond ``limit`` anywhere in parsed TOML/JSON data."""
    if isinstance(data, bool):
        return
    if isinstance(data, int | float):
        if isinstance(data, float) and not math.isfinite(data):
            bad = f"{data} is not a finite number"
        elif abs(data) > limit:
            bad = f"{data:g} is too large (at most {limit:g})"
        else:
            return
        raise InputError(
            bad, where=f"{where}: field '{path}'" if path else where, fix="give a finite, realistic number"
        )
    if isinstance(data, dict):
        for key, value in data.items():
            check_finite(value, where=where, path=f"{path}.{key}" if path else str(key), limit=limit)
    elif isinstance(data, list | tuple):
        for i, value in enumerate(data):
            check_finite(value, where=where, path=f"{path}[{i}]", limit=limit)


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file; syntax errors name the line."""
    return parse_toml(read_text(path), where=str(path))


def parse_toml(text: str, *, where: str) -> dict[str, Any]:
    """Parse TOML text read from ``where``: syntax errors name the line, numbers must be finite."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"malformed TOML: {exc}", where=where, fix="correct the TOML syntax on that line") from None
    check_finite(data, where=where)
    return data


def field_path(loc: tuple[int | str, ...]) -> str:
    """``('groups', 0, 'count')`` → ``groups[0].count``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _find_in_toml(lines: list[str], table: list[str], index: int | None, key: str | None) -> int | None:
    """Line of ``key`` in the table ``table`` (its ``index``-th element if an array of tables), or of
    the table's header when ``key`` is None."""
    wanted = ".".join(table)
    inside = not table
    seen: dict[str, int] = {}
    for number, raw in enumerate(lines, 1):
        stripped = raw.split("#", 1)[0].strip()
        if stripped.startswith("["):
            header = stripped.strip("[]").strip()
            if stripped.startswith("[["):
                seen[header] = seen.get(header, -1) + 1
            inside = header == wanted and (index is None or seen.get(header) == index)
            if inside and key is None:
                return number
        elif inside and key is not None and "=" in stripped and stripped.split("=", 1)[0].strip().strip("\"'") == key:
            return number
    return None


def toml_line(text: str, loc: tuple[int | str, ...]) -> int | None:
    """The line of ``loc`` (e.g. ``('group', 1, 'count')``) in TOML ``text``: the key's line inside its
    table, else the table's header; None when neither is found (inline tables, dotted keys)."""
    lines = text.splitlines()
    ints = [i for i, p in enumerate(loc) if isinstance(p, int)]
    if ints:
        cut = ints[-1]
        table = [str(p) for p in loc[:cut] if isinstance(p, str)]
        index: int | None = int(loc[cut])
        rest = [str(p) for p in loc[cut + 1 :]]
    else:
        table, index, rest = [str(p) for p in loc[:-1]], None, [str(p) for p in loc[-1:]]
    for key in [rest[0]] if rest else []:
        found = _find_in_toml(lines, table, index, key)
        if found:
            return found
        found = _find_in_toml(lines, [*table, key], None, None)  # a [table] rather than a key
        if found:
            return found
    return _find_in_toml(lines, table, index, None) if table else None


def validate(
    model: type[M], data: Any, *, where: str, text: str | None = None, context: dict[str, Any] | None = None
) -> M:
    """Validate ``data`` into ``model``; the first error names the field (and its line when the file's
    ``text`` is given), what is wrong and the fix."""
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first["loc"])
        field = field_path(loc)
        what = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            what = "unknown field"
            fix = f"remove '{field}' or correct its spelling"
        elif first["type"] == "missing":
            fix = f"add '{field}'"
        elif not field or isinstance(first.get("input"), dict | list):
            fix = f"correct {'the file' if not field else repr(field)} as the message says"
        else:
            got = first.get("input")
            shown = repr(got) if len(repr(got)) <= 60 else repr(got)[:57] + "..."
            fix = f"correct '{field}' (got {shown}{', a ' + type(got).__name__ if isinstance(got, bool) else ''})"
        number = toml_line(text, loc) if text is not None else None
        place = f"{where}:{number}" if number else where
        raise InputError(what, where=f"{place}: field '{field}'" if field else place, fix=fix) from None


def read_toml_model(model: type[M], path: Path, *, context: dict[str, Any] | None = None) -> M:
    """Read, parse and validate a TOML file; errors name the file, the line and the field."""
    text = read_text(path)
    return validate(model, parse_toml(text, where=str(path)), where=str(path), text=text, context=context)


def read_csv(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """Rows of a CSV file with a header, as ``(line_number, {column: value})``."""
    text = read_text(path)
    reader = csv.DictReader(text.splitlines())
    if not reader.fieldnames:
        raise InputError("empty CSV, no header row", where=str(path), fix="add a header row")
    try:
        for row in reader:
            if None in row:
                raise InputError(
                    f"{len(row[None]) + len(reader.fieldnames)} fields, header has {len(reader.fieldnames)}",
                    where=f"{path}:{reader.line_num}",
                    fix="make every row have as many fields as the header",
                )
            yield reader.line_num, {k: (v or "").strip() for k, v in row.items()}
    except csv.Error as exc:
        raise InputError(f"malformed CSV: {exc}", where=f"{path}:{reader.line_num}", fix="fix the quoting") from None
