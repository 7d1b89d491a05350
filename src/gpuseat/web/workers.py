"""Heavy, rare portal work in a worker process: a 20,000-row roster import parses and validates in
Python, and in a thread it would share the GIL with the event loop (every page would slow down).

The worker opens its own store from the database URL; errors come back as (kind, what, where, fix)
so the page shows the same message as in-process.
"""

from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from typing import TYPE_CHECKING, Any

from gpuseat.core.roster import RosterText
from gpuseat.errors import GpuseatError, InputError, StoreError

if TYPE_CHECKING:
    from gpuseat.store import RosterReport

_pool: ProcessPoolExecutor | None = None
_lock = threading.Lock()


def _import_roster(url: str, course: str, text: str, where: str, actor: str) -> tuple[str, Any]:
    from gpuseat.store import open_store

    try:
        store = open_store(url)
    except GpuseatError as exc:
        return "error", ("store", exc.what, exc.where, exc.fix)
    try:
        return "ok", store.roster.import_roster(course, RosterText(text, where=where), actor=actor)
    except GpuseatError as exc:
        return "error", ("input" if isinstance(exc, InputError) else "store", exc.what, exc.where, exc.fix)
    finally:
        store.close()


def pool() -> ProcessPoolExecutor:
    """The one worker process (spawned on first use, so no thread state is forked)."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        return _pool


def import_roster(url: str, course: str, text: str, *, where: str, actor: str) -> RosterReport:
    """``CourseStore.import_roster`` in the worker process (blocks the calling thread, not the GIL)."""
    kind, value = pool().submit(_import_roster, url, course, text, where, actor).result()
    if kind == "ok":
        report: RosterReport = value
        return report
    which, what, where_, fix = value
    raise (InputError if which == "input" else StoreError)(what, where=where_, fix=fix)


def shutdown() -> None:
    """Stop the worker (server shutdown)."""
    global _pool
    with _lock:
        if _pool is not None:
            _pool.shutdown(wait=False, cancel_futures=True)
            _pool = None
