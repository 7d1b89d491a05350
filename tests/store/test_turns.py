"""The SQLite writers' queue (gpuseat.store.turns) from the other side: real processes that queue, hold,
lend, die with SIGKILL and come back; what they write to a shared log, and the queue file's own marks,
are what is checked. Every wait is on an observable event (the queue file growing a byte per ticket, a
line in the log), never on a fixed sleep."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpuseat.store import turns
from gpuseat.store.turns import Turns

pytestmark = pytest.mark.skipif(not hasattr(__import__("fcntl"), "F_OFD_SETLKW"), reason="Linux queue")

WRITER = textwrap.dedent(
    """
    import os, sys, time
    from gpuseat.store import turns
    path, log, name, mode = sys.argv[1:5]
    extra = sys.argv[5:]
    def say(text):
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, text.encode())
        os.close(fd)
    if mode == "restart":
        turns.RESTART_AT = int(extra[1])
    q = turns.Turns(path)
    if mode in ("loop", "restart"):
        for _ in range(int(extra[0])):
            q.take()
            say("<")
            time.sleep(0.0002)
            say(">")
            q.give()
        sys.exit(0)
    if mode == "lend":  # come straight back once: the second turn is lent, not ended
        turns.LEASE_S = 60.0
        q.take(); q.give(); q.take(); q.give()
        say(name + " ")
        time.sleep(600)
    q.take()
    say(name + " ")
    if mode == "hold":  # until the release file appears
        while not os.path.exists(extra[0]):
            time.sleep(0.005)
        say(name + "- ")
    elif mode == "hang":  # until killed
        time.sleep(600)
    q.give()
    q.close()
    """
)


class Queue:
    """A queue file, a log, and the writer processes started on them (all killed at the end)."""

    def __init__(self, tmp: Path) -> None:
        self.path, self.log, self.tmp = tmp / "db.lock", tmp / "log", tmp
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, mode: str, *extra: str) -> subprocess.Popen[bytes]:
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
        cmd = [sys.executable, "-c", WRITER, str(self.path), str(self.log), name, mode, *extra]
        proc = subprocess.Popen(cmd, env=env)
        self.procs.append(proc)
        return proc

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def size(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def until(self, what: str, ok: object, timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while not ok():  # type: ignore[operator]
            if time.monotonic() > end:
                raise AssertionError(f"timed out waiting for {what}; log: {self.text()!r}, queue: {self.size()} bytes")
            time.sleep(0.005)

    def queued(self, name: str, mode: str, *extra: str) -> subprocess.Popen[bytes]:
        """Start a writer and return once it has its ticket (the queue file grew by a byte)."""
        before = self.size()
        proc = self.start(name, mode, *extra)
        self.until(f"{name} to take a ticket", lambda: self.size() > before)
        return proc

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()


@pytest.fixture
def queue(tmp_path):
    q = Queue(tmp_path)
    yield q
    q.close()


def test_writers_take_turns_one_at_a_time(queue):
    for i in range(6):
        queue.start(f"w{i}", "loop", "150")
    for p in queue.procs:
        assert p.wait(timeout=120) == 0
    log = queue.text()
    assert len(log) == 6 * 150 * 2
    assert log == "<>" * (6 * 150), "two writers held the turn at once"


def test_first_come_first_served(queue):
    release = queue.tmp / "release"
    queue.queued("H", "hold", str(release))
    queue.until("H to hold the turn", lambda: "H " in queue.text())
    for name in "ABC":
        queue.queued(name, "once")
    assert queue.text() == "H ", "a writer went ahead of the one holding the turn"
    release.touch()
    for p in queue.procs:
        assert p.wait(timeout=30) == 0
    assert queue.text() == "H H- A B C "


def test_a_killed_holder_passes_the_turn_on(queue):
    holder = queue.queued("H", "hang")
    queue.until("H to hold the turn", lambda: "H " in queue.text())
    waiter = queue.queued("W", "once")
    assert "W" not in queue.text()
    holder.send_signal(signal.SIGKILL)
    assert waiter.wait(timeout=30) == 0
    assert queue.text() == "H W "


def test_killed_waiters_are_passed_over_in_order(queue):
    release = queue.tmp / "release"
    queue.queued("H", "hold", str(release))
    queue.until("H to hold the turn", lambda: "H " in queue.text())
    killed = [queue.queued(name, "once") for name in ("K1", "K2")]
    waiter = queue.queued("W", "once")
    for k in killed:
        k.send_signal(signal.SIGKILL)
        k.wait()
    # W now waits for H, whom K1 and K2 were waiting for: it must not go while H holds the turn
    deadline = time.monotonic() + 0.5  # well past STALE_S: a passed-over K shows within it
    while time.monotonic() < deadline:
        assert queue.text() == "H ", "a writer went while another held the turn"
        time.sleep(0.01)
    release.touch()
    assert waiter.wait(timeout=30) == 0
    assert queue.text() == "H H- W "


def test_an_idle_writer_with_a_lent_turn_holds_no_one_up(queue):
    queue.start("L", "lend")
    queue.until("L to lend its turn", lambda: "L " in queue.text())
    marks = queue.path.read_bytes()
    assert marks[-1:] == b"\x02", f"the last turn should be lent, queue marks {marks!r}"
    waiter = queue.queued("W", "once")
    assert waiter.wait(timeout=30) == 0
    assert queue.text() == "L W "


def test_the_queue_file_starts_over(queue):
    for i in range(4):
        queue.start(f"w{i}", "restart", "100", "64")
    for p in queue.procs:
        assert p.wait(timeout=120) == 0
    assert queue.text().count("<") == queue.text().count(">") == 400
    assert queue.size() <= 64 + 4, "the queue file did not start over"


def test_a_writer_that_comes_straight_back_keeps_its_turn_for_a_streak(tmp_path, monkeypatch):
    monkeypatch.setattr(turns, "LEASE_S", 60.0)  # "straight back" without depending on this machine's speed
    q = Turns(str(tmp_path / "db.lock"))
    marks = tmp_path / "db.lock"
    seen = []
    for _ in range(2 + turns.STREAK):
        q.take()
        q.give()
        seen.append(marks.read_bytes())
    q.close()
    # the first turn ends (nobody came back yet); from the second, the writer comes straight back: lent
    # turns until STREAK writes, then ended, so the next ticket is new
    assert seen[0] == b"\x01"
    assert seen[1] == b"\x01\x02"
    assert seen[turns.STREAK] == b"\x01\x01", "a streak longer than STREAK"
    assert seen[turns.STREAK + 1] == b"\x01\x01\x02"
    assert marks.read_bytes() == b"\x01\x01\x01", "close() must end a lent turn"


def test_a_store_write_leaves_no_descriptor_open(tmp_path):
    from gpuseat.services.courses import open_store

    with open_store(f"sqlite:///{tmp_path}/s.db", create=True) as store:
        (tmp_path / "c.toml").write_text('name = "c"\nparticipants = 2\n[schedule]\nstart = 2026-01-05\ndays = 5\n')
        store.create_course(tmp_path / "c.toml", key="c")
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(20):
            with store._write():
                pass
        assert len(os.listdir("/proc/self/fd")) == before
