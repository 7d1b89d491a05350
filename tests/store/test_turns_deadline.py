"""A writer's deadline in the SQLite writers' queue (gpuseat.store.turns): it leaves the queue at its own
deadline however long the writers before it wait or write, and the queue goes on without it. Each writer is
a thread with its own queue files (open-file-description locks exclude them as they do processes)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from gpuseat.store.turns import Turns

pytestmark = pytest.mark.skipif(not hasattr(__import__("fcntl"), "F_OFD_SETLKW"), reason="Linux queue")

BOUND_S = 0.3  # the short writer's wait


def test_a_writer_leaves_the_queue_at_its_deadline_behind_writers_that_wait_longer(tmp_path: Path) -> None:
    path = str(tmp_path / "course.db.lock")
    head, long, short, after = (Turns(path) for _ in range(4))
    try:
        assert head.take() is None  # its turn, held: a write that takes long, or a writer with no bound
        turns: list[str] = []
        queued = threading.Event()

        def wait_long() -> None:
            queued.set()
            long.take(deadline=time.monotonic() + 60)  # a writer with the default busy timeout
            turns.append("long")
            long.give()

        waiter = threading.Thread(target=wait_long)
        waiter.start()
        assert queued.wait(5)
        ticketed = time.monotonic() + 5
        while Path(path).stat().st_size < 2 and time.monotonic() < ticketed:  # the long writer has its ticket
            time.sleep(0.001)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            short.take(lambda: b"a request", deadline=started + BOUND_S)
        took = time.monotonic() - started
        assert BOUND_S <= took < 3 * BOUND_S, took  # its own bound, not the long writer's
        assert turns == []  # the head still holds its turn
        head.give()
        waiter.join(5)
        assert turns == ["long"], turns  # the writer that left holds up no one
        started = time.monotonic()
        assert after.take(deadline=started + BOUND_S) is None
        after.give()
    finally:
        for q in (head, long, short, after):
            q.close()
