"""A writer that waits for another writer's lock says so: "waiting for another writer (pid …)…".

SQLite lets one writer in at a time; a command that queues behind a long write (a roster import, a
survey close in another terminal) would otherwise sit silent for as long as that write lasts. After
:data:`NOTICE_AFTER_S` of waiting, the notice set with :func:`set_notice` (the CLI prints to stderr;
servers and libraries set none, and pay one global check per write) gets one line naming the
processes that have the database open, read from ``/proc`` where it can be.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["NOTICE_AFTER_S", "set_notice", "waiting"]

NOTICE_AFTER_S = 2.0

_notice: Callable[[str], None] | None = None


def set_notice(notice: Callable[[str], None] | None) -> None:
    """Where "waiting for another writer" goes (None: nowhere, the default)."""
    global _notice
    _notice = notice


@contextmanager
def waiting(database: str | None, *, after_s: float | None = None) -> Iterator[None]:
    """Around a wait for SQLite's write lock (or the writers' queue) of ``database``: after ``after_s``
    (default :data:`NOTICE_AFTER_S`) the notice says who holds it; nothing when no notice is set."""
    notice = _notice
    if notice is None or not database or database == ":memory:":
        yield
        return
    timer = threading.Timer(NOTICE_AFTER_S if after_s is None else after_s, _say, args=(notice, database))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def message(database: str) -> str:
    """The notice's line: who has ``database`` open (the writer holding its lock is among them)."""
    from gpuseat.db.holders import lock_holders

    holders = lock_holders(Path(database))
    who = ", ".join(holders) if holders else "process not visible from here"
    return f"waiting for another writer ({who})…"


def _say(notice: Callable[[str], None], database: str) -> None:
    try:
        notice(message(database))
    except Exception:  # a notice must never break the write it is about
        return
