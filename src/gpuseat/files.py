"""Reading user files (TOML, CSV) into plain data, with errors that name the file, line and field.

Every user file goes through here so that a malformed file gives one clear ``InputError``
(exit code 2) instead of a traceback.
"""

from __future__ import annotations

import csv
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from gpuseat.errors import InputError

M = TypeVar("M", bound=BaseModel)


def read_text(path: Path) -> str:
    """The file's text; a missing or unreadable file is an input error."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("file not found", where=str(path), fix="check the path") from None
    except IsADirectoryError:
        raise InputError("is a directory, not a file", where=str(path), fix="give a file") from None
    except UnicodeDecodeError as exc:
        raise InputError(
            f"not UTF-8 text (byte {exc.start})", where=str(path), fix="save the file as UTF-8"
        ) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", where=str(path), fix="check permissions") from None


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file; syntax errors name the line."""
    text = read_text(path)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(
            f"malformed TOML: {exc}", where=str(path), fix="correct the TOML syntax on that line"
        ) from None


def field_path(loc: tuple[int | str, ...]) -> str:
    """``('groups', 0, 'count')`` → ``groups[0].count``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def validate(model: type[M], data: Any, *, where: str) -> M:
    """Validate ``data`` into ``model``; the first error names the field, what is wrong and the fix."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = field_path(tuple(first["loc"]))
        what = first["msg"]
        if first["type"] == "extra_forbidden":
            what = "unknown field"
            fix = f"remove '{field}' or correct its spelling"
        elif first["type"] == "missing":
            fix = f"add '{field}'"
        else:
            fix = f"correct '{field}' (got {first.get('input')!r})"
        loc = f"{where}: field '{field}'" if field else where
        raise InputError(what, where=loc, fix=fix) from None


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
