"""Reading user files (TOML, CSV) into plain data, with errors that name the file, line and field.

Every user file goes through here so that a malformed file gives one clear ``InputError``
(exit code 2) instead of a traceback.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import math
import os
import re
import secrets
import shutil
import stat
import tempfile
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from gpuseat.errors import GpuseatError, InputError, disk_full

M = TypeVar("M", bound=BaseModel)


#: Largest user file read by default (course, offers, inventory, roster files are a few kB; a
#: 1,000-GPU nvidia-smi capture is a few MB). Readers of bigger formats pass their own cap.
MAX_BYTES = 16 * 1024 * 1024


def regular_file(path: Path) -> os.stat_result:
    """The stat of ``path``, a regular file: a missing file, a directory, a FIFO or a device is one clear
    error before anything opens it (opening a FIFO would block)."""
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
    return st


def read_bytes(path: Path, *, max_bytes: int = MAX_BYTES) -> bytes:
    """A regular file's bytes, at most ``max_bytes``: FIFOs, devices and oversized files are refused."""
    st = regular_file(path)
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
    except RecursionError:  # tomllib parses nested arrays and inline tables by recursion
        raise InputError(
            "arrays or inline tables nested too deeply to read",
            where=where,
            fix="no gpuseat file nests more than a few levels: check that this is the right file",
        ) from None
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


#: Rows a CSV file may have (a SkyPilot catalog has tens of thousands; a roster a few hundred).
MAX_CSV_ROWS = 1_000_000


def read_csv(
    path: Path, *, max_bytes: int = MAX_BYTES, max_rows: int = MAX_CSV_ROWS
) -> Iterator[tuple[int, dict[str, str]]]:
    """Rows of a CSV file with a header, as ``(line_number, {column: value})``, at most ``max_rows``."""
    text = read_text(path, max_bytes=max_bytes)
    reader = csv.DictReader(text.splitlines())
    if not reader.fieldnames:
        raise InputError("empty CSV, no header row", where=str(path), fix="add a header row")
    try:
        for count, row in enumerate(reader, 1):
            if count > max_rows:
                raise InputError(
                    f"more than {max_rows:,} rows", where=f"{path}:{reader.line_num}", fix="split the file"
                )
            if None in row:
                raise InputError(
                    f"{len(row[None]) + len(reader.fieldnames)} fields, header has {len(reader.fieldnames)}",
                    where=f"{path}:{reader.line_num}",
                    fix="make every row have as many fields as the header",
                )
            yield reader.line_num, {k: (v or "").strip() for k, v in row.items()}
    except csv.Error as exc:
        raise InputError(f"malformed CSV: {exc}", where=f"{path}:{reader.line_num}", fix="fix the quoting") from None


def stream_csv(path: Path, *, max_rows: int = MAX_CSV_ROWS) -> tuple[list[str], Iterator[tuple[int, list[str]]]]:
    """The header of a CSV file and an iterator over its rows, as ``(line_number, fields)``: the file is
    read as it is iterated (memory does not grow with its size), at most ``max_rows`` rows.

    Like :func:`read_csv`: blank lines are skipped, a short row is padded with empty fields, a long one
    and malformed quoting are input errors naming the line; fields are not stripped. Only a regular
    file is opened (a FIFO or device is refused, never blocked on).
    """
    regular_file(path)
    try:
        handle = path.open(encoding="utf-8-sig", newline="")
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", where=str(path), fix="check permissions") from None
    reader = csv.reader(handle)

    def fail(exc: Exception) -> InputError:
        handle.close()
        if isinstance(exc, UnicodeDecodeError):
            return InputError(
                f"not UTF-8 text (after line {reader.line_num})", where=str(path), fix="save the file as UTF-8"
            )
        if isinstance(exc, OSError):
            return InputError(f"cannot read: {exc.strerror}", where=str(path), fix="check the file")
        return InputError(f"malformed CSV: {exc}", where=f"{path}:{reader.line_num}", fix="fix the quoting")

    try:
        header = next((row for row in reader if row), None)
    except (csv.Error, UnicodeDecodeError, OSError) as exc:
        raise fail(exc) from None
    if header is None:
        handle.close()
        raise InputError("empty CSV, no header row", where=str(path), fix="add a header row")
    width = len(header)

    def rows() -> Iterator[tuple[int, list[str]]]:
        count = 0
        with handle:
            try:
                for row in reader:
                    if not row:
                        continue
                    count += 1
                    if count > max_rows:
                        raise InputError(
                            f"more than {max_rows:,} rows", where=f"{path}:{reader.line_num}", fix="split the file"
                        )
                    if len(row) != width:
                        if len(row) > width:
                            raise InputError(
                                f"{len(row)} fields, header has {width}",
                                where=f"{path}:{reader.line_num}",
                                fix="make every row have as many fields as the header",
                            )
                        row += [""] * (width - len(row))
                    yield reader.line_num, row
            except (csv.Error, UnicodeDecodeError, OSError) as exc:
                raise fail(exc) from None

    return header, rows()


# --- writing ------------------------------------------------------------------------------------------
#
# Every file gpuseat writes goes through here: a path that is a symbolic link, a FIFO, a device or a
# folder is refused (never followed, never blocked on), data lands in a temporary file beside the
# target and is renamed over it, so a reader or a crash sees the old file or the new one, never half.


def check_target(path: Path, *, where: str | None = None) -> None:
    """Refuse to write ``path`` when it is a symbolic link, a folder, a FIFO, a socket or a device."""
    place = where or str(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InputError(f"cannot use it: {exc.strerror}", where=place, fix="check the path") from None
    if stat.S_ISLNK(st.st_mode):
        raise InputError(
            "is a symbolic link; gpuseat never writes through links",
            where=place,
            fix="remove the link or give the real path",
        )
    if stat.S_ISDIR(st.st_mode):
        raise InputError("is a folder, not a file", where=place, fix="give a file name")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(
            "is not a regular file (a FIFO, socket or device)", where=place, fix="give a regular file's path"
        )


def write_error(exc: OSError, where: str) -> GpuseatError:
    """One clear message for a failed write (disk full, read-only, permissions); exit code 2."""
    if exc.errno == errno.ENOSPC or exc.errno == errno.EDQUOT:
        flag, _, path = where.partition(" ")  # "--out PATH", or the path alone
        return disk_full(path, where=flag) if flag.startswith("--") and path else disk_full(where)
    if exc.errno == errno.EFBIG:
        return InputError("the file would exceed the size limit", where=where, fix="raise the file size limit")
    if exc.errno == errno.EROFS:
        return InputError("the file system is read-only", where=where, fix="write somewhere writable")
    return InputError(
        f"cannot write: {exc.strerror or exc}", where=where, fix="check the folder exists and is writable"
    )


def write_file(
    path: Path, data: bytes | str, *, where: str | None = None, mode: int = 0o644, mtime: float | None = None
) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file beside it, fsync, rename over it. The one
    atomic writer of gpuseat. ``mtime``, when given, is set before the rename, so a reader that polls the
    modification time never sees the new text with the old time."""
    place = where or str(path)
    check_target(path, where=place)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    parent = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{path.name[:40]}.gpuseat-")
    except OSError as exc:
        raise write_error(exc, place) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if mtime is not None:
            os.utime(tmp, (mtime, mtime))
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise write_error(exc, place) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


_STAGING = re.compile(r"^\.(?P<name>.+)\.gpuseat-(?P<what>new|old)-(?P<pid>\d+)-[a-z0-9_]+$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover_folder(out: Path) -> None:
    """Finish or undo a folder swap that a killed run left behind (see :func:`replace_folder`).

    A staged new folder of a dead writer is removed; a previous folder moved aside by a writer that
    died before the new one took its place is put back.
    """
    parent = out.parent if str(out.parent) else Path(".")
    try:
        entries = list(parent.iterdir())
    except OSError:
        return
    for entry in entries:
        m = _STAGING.match(entry.name)
        if not m or m["name"] != out.name or _alive(int(m["pid"])):
            continue
        if m["what"] == "old" and not out.exists() and not out.is_symlink():
            with contextlib.suppress(OSError):
                os.rename(entry, out)
                continue
        shutil.rmtree(entry, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where unsupported."""
    import ctypes  # here: every command imports this module, few swap folders

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    result = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    if result == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(a))


def replace_folder(
    out: Path,
    files: dict[str, bytes],
    *,
    modes: dict[str, int] | None = None,
    keep: Iterable[str] = (),
    last: str | None = None,
    where: str | None = None,
) -> None:
    """Make ``out`` hold exactly ``files`` (plus the entries named in ``keep``), all or nothing.

    Everything is written into a staging folder beside ``out`` (``last`` — the manifest — written
    last), then swapped in with one atomic exchange. A run killed at any moment leaves the previous
    folder intact; the next run removes the stale staging folder (:func:`recover_folder`).
    """
    place = where or str(out)
    parent = out.parent if str(out.parent) else Path(".")
    recover_folder(out)
    tag = f"{os.getpid()}-{secrets.token_hex(4)}"
    staged = parent / f".{out.name}.gpuseat-new-{tag}"
    try:
        staged.mkdir(mode=0o755)
        order = sorted(files, key=lambda n: n == last)
        for name in order:
            target = staged / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "xb") as handle:
                handle.write(files[name])
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(target, (modes or {}).get(name, 0o644))
        for name in keep:
            source = out / name
            if source.is_dir() and not source.is_symlink():
                shutil.copytree(source, staged / name, symlinks=True)
            elif source.exists() or source.is_symlink():
                shutil.copy2(source, staged / name, follow_symlinks=False)
        if out.exists():
            if _exchange(staged, out):
                shutil.rmtree(staged, ignore_errors=True)
                return
            aside = parent / f".{out.name}.gpuseat-old-{tag}"
            os.rename(out, aside)
            os.rename(staged, out)
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.rename(staged, out)
    except OSError as exc:
        shutil.rmtree(staged, ignore_errors=True)
        raise write_error(exc, place) from None
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
