"""The doctor's only I/O: a read-only view of a host's /proc, /sys, /etc and /dev under a root.

Every path the checks look at goes through :class:`HostView`, which remembers what it saw. That
record is what ``--capture`` writes, so ``--root`` on the extracted capture sees the same things
and gives the same verdict. Paths are written root-relative (``/proc/cmdline``) everywhere.
"""

from __future__ import annotations

import io
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from gpuseat.doctor.parse import MIG_QUERY, MIG_QUERY_PATH
from gpuseat.errors import InputError

#: Largest file the doctor reads (``/proc/cpuinfo`` of a 512-thread host is ~1 MB).
MAX_FILE_BYTES = 4 * 1024 * 1024
#: Most entries read from one directory (a host has a few thousand PCI functions at most).
MAX_DIR_ENTRIES = 65536


class _Outside(OSError):
    """A path under ``--root`` whose symlinks lead out of it (never read, never captured)."""


@dataclass(frozen=True)
class _Seen:
    """One thing a check looked at: file bytes, a directory listing, a symlink target, or presence."""

    kind: str  # "file" | "dir" | "link" | "present"
    data: bytes = b""
    names: tuple[str, ...] = ()
    target: str = ""


class HostView:
    """Reads files under ``root`` (``root/proc/...``, ``root/sys/...``) and records each read.

    ``live`` (the root is ``/``) also allows running ``nvidia-smi`` for MIG mode; on any other root
    its captured output is read from :data:`MIG_QUERY_PATH` instead.
    """

    def __init__(self, root: Path = Path("/")) -> None:
        if not root.is_dir():
            raise InputError(
                "not a directory" if root.exists() else "directory not found",
                where=f"--root {root}",
                fix="give a directory; extract a capture first: mkdir DIR && tar xzf CAPTURE.tar.gz -C DIR",
            )
        self.root = root
        self._resolved = root.resolve()
        self.live = self._resolved == Path("/")
        self.seen: dict[str, _Seen] = {}
        self.outside: list[str] = []  # paths refused because they lead out of the root

    def _real(self, path: str, *, follow: bool = True) -> Path:
        """``root/path``; off the live root, a path whose symlinks lead out of the root is refused."""
        real = self.root / path.lstrip("/")
        if not self.live:
            try:
                resolved = real.resolve() if follow else real.parent.resolve() / real.name
            except (RuntimeError, OSError):  # a symlink loop (RuntimeError before Python 3.13)
                self.outside.append(path)
                raise _Outside(path) from None
            if resolved != self._resolved and self._resolved not in resolved.parents:
                self.outside.append(path)
                raise _Outside(path)
        return real

    def text(self, path: str) -> str | None:
        """The file's text (a regular file, at most :data:`MAX_FILE_BYTES`), or None when missing or refused."""
        from gpuseat.files import read_bytes

        try:
            data = read_bytes(self._real(path), max_bytes=MAX_FILE_BYTES)
        except (OSError, InputError):
            return None
        self.seen[path] = _Seen("file", data=data)
        return data.decode("utf-8", errors="replace")

    def listdir(self, path: str) -> list[str] | None:
        """Sorted entry names of a directory (at most :data:`MAX_DIR_ENTRIES`), or None when it is missing."""
        try:
            with os.scandir(self._real(path)) as it:
                names = sorted(e.name for _, e in zip(range(MAX_DIR_ENTRIES), it, strict=False))
        except OSError:
            return None
        self.seen[path] = _Seen("dir", names=tuple(names))
        return names

    def readlink(self, path: str) -> str | None:
        """A symlink's target text (sysfs ``driver``, ``iommu_group``), or None when it is not a link."""
        try:
            target = os.readlink(self._real(path, follow=False))
        except OSError:
            return None
        self.seen[path] = _Seen("link", target=target)
        return target

    def exists(self, path: str) -> bool:
        """Whether the path exists (``/dev/kvm``, ``/sys/module/vfio``)."""
        try:
            real = self._real(path, follow=False)
        except _Outside:
            return False
        if not (real.exists() or real.is_symlink()):
            return False
        self.seen.setdefault(path, _Seen("present"))
        return True

    def nvidia_smi_mig(self) -> str | None:
        """``nvidia-smi`` MIG mode CSV: run live on ``/``, else read from the capture."""
        if not self.live:
            return self.text(MIG_QUERY_PATH)
        from gpuseat import nvsmi
        from gpuseat.errors import EngineError

        try:
            out = nvsmi.nvidia_smi(list(MIG_QUERY[1:]), timeout_s=20)
        except EngineError:
            return None
        self.seen[MIG_QUERY_PATH] = _Seen("file", data=out.encode())
        return out

    def write_capture(self, out: Path) -> None:
        """Write everything seen as a ``.tar.gz`` whose extraction is a root for :class:`HostView`."""
        check_capture_path(out)
        from gpuseat.files import write_file

        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            for member, data in capture_members(self.seen):
                tar.addfile(member, io.BytesIO(data) if data is not None else None)
        write_file(out, buffer.getvalue(), where=f"--capture {out}")


def check_capture_path(out: Path) -> None:
    """Refuse a capture path that cannot be written, before any work is done."""
    if not out.name.endswith((".tar.gz", ".tgz")):
        raise InputError("capture file must end in .tar.gz", where=f"--capture {out}", fix="e.g. host.tar.gz")
    if not out.parent.is_dir():
        raise InputError("folder does not exist", where=f"--capture {out}", fix="create the folder first")
    if out.is_dir():
        raise InputError("is a directory", where=f"--capture {out}", fix="give a file name such as host.tar.gz")


_RANK = {"placeholder": 0, "dir": 1, "file": 2, "link": 2}


def capture_members(seen: dict[str, _Seen]) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    """Tar members for what was seen: parents as folders, listed-but-unread names as empty files."""
    kinds: dict[PurePosixPath, str] = {}
    payload: dict[PurePosixPath, bytes] = {}
    links: dict[PurePosixPath, str] = {}

    def put(path: PurePosixPath, kind: str) -> None:
        if _RANK[kind] >= _RANK[kinds.get(path, "placeholder")]:
            kinds[path] = kind

    for raw, what in seen.items():
        path = PurePosixPath(raw.lstrip("/"))
        if what.kind == "file":
            payload[path] = what.data
            put(path, "file")
        elif what.kind == "link":
            links[path] = what.target
            put(path, "link")
        elif what.kind == "dir":
            put(path, "dir")
            for name in what.names:
                if path / name not in kinds:
                    put(path / name, "placeholder")
        else:
            put(path, "placeholder")
    # a name that has children must be a folder, whatever else was recorded for it
    for path in list(kinds):
        for parent in path.parents:
            if parent != PurePosixPath("."):
                kinds[parent] = "dir"

    members: list[tuple[tarfile.TarInfo, bytes | None]] = []
    for path in sorted(kinds, key=lambda p: (len(p.parts), str(p))):
        info = tarfile.TarInfo(str(path))
        info.mtime = 0
        kind = kinds[path]
        if kind == "dir":
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            members.append((info, None))
        elif kind == "link":
            info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, links[path]
            members.append((info, None))
        else:
            data = payload.get(path, b"")
            info.mode, info.size = 0o644, len(data)
            members.append((info, data))
    return members
