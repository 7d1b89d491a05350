"""Errors that reach users.

Hierarchy (every class is public: ``from gpuseat import NotFound``)::

    GpuseatError                root: the CLI and the portal catch it in one place each
    ├── InputError              bad file, field, row or body → exit code 2
    │   ├── UnknownGpu          a GPU model the catalog does not know
    │   ├── NoOfferFits         no offer can seat a group of the course
    │   ├── Infeasible          availability limits cannot seat every participant
    │   ├── NotFound            a course, participant or seat that does not exist
    │   ├── NoFreeSeat          every seat that suits the participant is taken
    │   ├── SeatTaken           the seat asked for already has a participant
    │   └── InvalidTransition   a seat state change the state machine refuses
    └── EngineError             an outside engine (NVML, libvirt, a database) failed → exit code 1
        ├── StoreError          the course database cannot be opened, is not gpuseat's, or failed
        │   ├── DiskFull        the file system is full: nothing was changed → exit code 2
        │   └── StoreBusy       another writer held a lock past the wait: nothing was changed
        └── MissingDependency   an optional dependency is not installed (the fix names the extra)

Each error carries *where* (the file and line, or the field: ``course``, ``participant``,
``seat``…), *what* is wrong, and *fix* (how to put it right), so every front end can print one clear
message without a traceback. Library errors name fields, not command-line flags; the CLI shows the
flag (:mod:`gpuseat.cli.flags`).
"""

from __future__ import annotations

from collections.abc import Iterable


class GpuseatError(Exception):
    """Root of every error gpuseat raises on purpose."""

    exit_code = 1

    def __init__(self, what: str, *, where: str | None = None, fix: str | None = None) -> None:
        self.what = what
        self.where = where
        self.fix = fix
        super().__init__(self.message)

    @property
    def message(self) -> str:
        """One human-readable message: ``where: what`` then ``To fix: ...``."""
        head = f"{self.where}: {self.what}" if self.where else self.what
        return f"{head}\nTo fix: {self.fix}" if self.fix else head


class InputError(GpuseatError):
    """The user's input (file, flag, roster row, HTTP body) is wrong; exit code 2."""

    exit_code = 2


class EngineError(GpuseatError):
    """An outside engine failed in a way the user cannot fix by changing the input."""

    exit_code = 1


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A ``Did you mean X?`` hint (empty when nothing is close), for unknown ids and names."""
    import difflib  # here: every command imports this module, few ever need a hint

    close = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.5)
    return f" Did you mean {', '.join(close)}?" if close else ""


class UnknownGpu(InputError):
    """A GPU model name that the catalog does not know."""


class NoOfferFits(InputError):
    """No offer in the catalog can seat a group of the course."""


class Infeasible(InputError):
    """Offers fit each group, but availability limits cannot seat every participant."""


class StoreError(EngineError):
    """The course database cannot be opened, is not gpuseat's, or failed."""


class DiskFull(StoreError):
    """The file system of a file gpuseat writes (the database, an output file) is full; nothing was
    changed. Exit code 2, as for bad input: the user frees space, or writes elsewhere, and runs it again."""

    exit_code = 2


class StoreBusy(StoreError):
    """Another writer (another process, an open transaction) held a lock this write needs for longer than
    the write may wait (the busy timeout); nothing was changed, and the same write may succeed later."""


def disk_full(path: object, *, where: str | None = None) -> DiskFull:
    """The one message for a full disk: ``disk full at PATH, nothing changed`` (``where``: the flag)."""
    return DiskFull(
        f"disk full at {path}, nothing changed",
        where=where,
        fix="no space left on the device: free space on that file system (or write elsewhere) and run it again",
    )


class MissingDependency(EngineError):
    """An optional dependency (torch, libvirt-python, …) is not installed; the fix names the extra."""


class NotFound(InputError):
    """A course, participant or seat named by the caller does not exist."""


class NoFreeSeat(InputError):
    """Every seat that suits the participant is taken (or there is none); the fix says what to add."""


class SeatTaken(InputError):
    """The seat asked for already has a participant."""


class InvalidTransition(InputError):
    """A seat state change the state machine does not allow (e.g. released → running)."""
