"""A claim whose wait ends just as the claim before it in the SQLite writers' queue takes a seat for it.

The portal's claims wait 5 s (``GPUSEAT_WEB_BUSY_TIMEOUT``), a JupyterHub's or the CLI's the store's busy
timeout (60 s). Behind a held lock a portal claim queues after a hub's claim, asking it to take its seat too
(:func:`gpuseat.store.claims._serve`). When the lock is let go as the portal claim's wait ends, the hub's claim
took the seat in its transaction while the portal claim left the queue: the participant was told "busy, try
again" (503) and held a seat. A second claim of the same participant (a double submit, two tabs) is not
served (the participant's one open assignment) and left the same way, though the first claim's seat was
committed. Each must answer the seat the participant holds, and never two seats.

The hub's claim is a real claim paused inside its transaction (its seat taken, the write lock and its turn
held), as a claim whose write is slow or whose process is not scheduled; the portal claims' clock
(:mod:`gpuseat.store.turns`) is moved past their deadline instead of waiting for it.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gpuseat.store import claims, open_store, turns

from .conftest import two_seat_lab
from .test_turns import Queue

pytestmark = pytest.mark.skipif(not hasattr(__import__("fcntl"), "F_OFD_SETLKW"), reason="Linux queue")


class Clock:
    """``time`` for the writers' queue: the real clock, moved on by :attr:`ahead` seconds."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.ahead

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def _blocked(path: str) -> int:
    """How many lock requests on the file at ``path`` wait in the kernel (``/proc/locks``)."""
    inode = f":{os.stat(path).st_ino} "
    with open("/proc/locks") as locks:
        return sum(1 for line in locks if "->" in line and inode in line)


def test_claims_whose_wait_ends_while_the_claim_before_serves_them_answer_the_seat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUSEAT_DB_BUSY_TIMEOUT", "60")
    url = f"sqlite:///{tmp_path / 'course.db'}"
    with open_store(url, create=True) as setup:
        ann, ben = two_seat_lab(setup)
    hub, portal = open_store(url), open_store(url)
    portal.database.wait_at_most(30)  # the portal waits less than the hub (the clock is moved, not waited)
    clock = Clock()
    monkeypatch.setattr(turns, "time", clock)
    queue = Queue(tmp_path)
    queue.path = Path(f"{tmp_path / 'course.db'}.lock")
    got: dict[str, Any] = {}
    paused, go, served, commit = (threading.Event() for _ in range(4))
    real_serve = claims._serve

    def serve(raw: Any, queued: Any) -> None:  # the hub's claim, in its transaction with its own seat taken
        if threading.current_thread().name != "hub":
            return real_serve(raw, queued)
        paused.set()
        assert go.wait(30)
        real_serve(raw, queued)
        served.set()
        assert commit.wait(30)
        return None

    monkeypatch.setattr(claims, "_serve", serve)

    def claim(name: str, store: Any, who: str) -> threading.Thread:
        def run() -> None:
            try:
                got[name] = store.claims.claim_seat("lab", who, mode="pool", actor=name).key
            except Exception as exc:  # what the portal would have answered
                got[name] = exc

        thread = threading.Thread(target=run, name=name)
        thread.start()
        return thread

    threads = [claim("hub", hub, ben)]
    try:
        assert paused.wait(30)  # the hub's claim holds its turn and the write lock
        for i, tab in enumerate(("tab1", "tab2"), start=1):
            threads.append(claim(tab, portal, ann))
            queue.until(f"{tab} to ask", lambda i=i: queue.behind(b"\x04" * i))
        go.set()
        assert served.wait(30)  # tab1's seat taken in the hub's transaction; tab2's refused (ann has one)
        clock.ahead = 3600.0  # the portal claims' wait ends
        tabs = threads[1:]
        queue.until(
            "each tab to leave the queue or wait for the hub's claim",
            lambda: _blocked(str(queue.path)) == sum(t.is_alive() for t in tabs),
        )
        commit.set()
    finally:
        go.set()
        commit.set()
        for t in threads:
            t.join(30)
    held = {a.participant: a.seat for a in hub.seats.history("lab") if a.valid_to is None}
    hub.close()
    portal.close()
    assert got["hub"] == held[ben]
    assert got["tab1"] == held[ann] and got["tab2"] == held[ann], (got, held)  # the seat ann holds, not a 503
    assert sorted(held) == sorted([ann, ben]) and len(set(held.values())) == 2  # one seat each


def test_an_asker_taken_on_and_rolled_back_leaves_at_its_deadline_once_the_writer_before_gives_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer before took the request on, then rolled back (its transaction failed): the asker, past its
    deadline, waited for it and now leaves with the timeout (nothing was done for it), and the queue goes on."""
    clock = Clock()
    monkeypatch.setattr(turns, "time", clock)
    path = str(tmp_path / "course.db.lock")
    head, asker, after = (turns.Turns(path) for _ in range(3))
    left: list[BaseException] = []

    def ask() -> None:
        try:
            asker.take(lambda: b"a seat, please", deadline=clock.monotonic() + 30)
        except TimeoutError as exc:
            left.append(exc)

    try:
        assert head.take() is None
        thread = threading.Thread(target=ask)
        thread.start()
        queue = Queue(tmp_path)
        queue.path = Path(path)
        queue.until("the asker to ask", lambda: queue.behind(b"\x04"))
        assert [r for _, r in head.asking(4)] == [b"a seat, please"]  # taken on
        clock.ahead = 3600.0
        queue.until("the asker to wait for the writer before", lambda: _blocked(path) == 1)
        head.give()  # no deliver: rolled back
        thread.join(30)
        assert not thread.is_alive() and len(left) == 1
        assert Path(path).read_bytes() == b"\x01\x01"  # both done, nobody served
        assert after.take(deadline=clock.monotonic() + 30) is None
        after.give()
    finally:
        for q in (head, asker, after):
            q.close()
