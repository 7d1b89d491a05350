"""The SQLite writers' queue (gpuseat.store.turns) from the other side: real processes that queue, hold,
ask to be served, die with SIGKILL; what they write to a shared log, the queue file's own marks and, for
claims, the database's rows are what is checked. Every wait is on an observable event (the queue file growing a byte per ticket, a
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
    if mode == "ask":  # ask the writer before to write for us
        answer = q.take(name.encode)
        say(f"{name}={answer.decode()} " if answer is not None else name + " ")
        if answer is None:
            q.give()
        sys.exit(0)
    if mode == "serve":  # hold the turn until the release file appears, then answer those asking
        q.take()
        say(name + " ")
        while not os.path.exists(extra[0]):
            time.sleep(0.005)
        asking = q.asking(32)
        say(name + ":" + ",".join(r.decode() for _, r in asking) + " ")
        for u, r in asking:
            assert q.answer(u, b"ok-" + r)
        if extra[1] == "commit":
            q.deliver()
        q.give()
        sys.exit(0)
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

    def behind(self, marks: bytes) -> bool:
        """The last writers' marks are ``marks`` and each asker's request is in the box. An asker writes its
        mark first and its request after it: a writer released in between finds no request to serve (the
        asker then writes for itself), so a test that expects it served waits for both."""
        from gpuseat.store.turns import _ASKING, _HEAD, SLOT, SLOTS

        data = self.path.read_bytes()
        if data[-len(marks) :] != marks:
            return False
        box = Path(f"{self.path}.box")
        raw = box.read_bytes() if box.exists() else b""
        first = len(data) - len(marks)
        for ticket in (first + i for i, mark in enumerate(marks) if mark == _ASKING[0]):
            at = (ticket % SLOTS) * SLOT
            if len(raw) < at + _HEAD.size or _HEAD.unpack_from(raw, at)[0] != ticket:
                return False
        return True

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


def served(queue: Queue, ending: str, behind: list[tuple[str, str]], marks: bytes) -> list[str]:
    """H holds the turn while the writers ``behind`` queue (and ``marks`` shows they asked or not),
    then answers the requests it finds and ends its turn with or without delivering (``ending``);
    returns what everyone said, in order."""
    release = queue.tmp / "release"
    queue.queued("H", "serve", str(release), ending)
    queue.until("H to hold the turn", lambda: "H " in queue.text())
    for name, mode in behind:
        queue.queued(name, mode)
    queue.until("the writers behind to ask", lambda: queue.behind(marks))
    release.touch()
    for p in queue.procs:
        assert p.wait(timeout=30) == 0
    return queue.text().split()


def _answered(said: list[str]) -> list[str]:
    """Whom H answered (``H:A,B``), after checking H went first."""
    assert said[0] == "H" and said[1].startswith("H:"), said
    return said[1].removeprefix("H:").split(",")


def test_the_writer_whose_turn_it_is_answers_those_behind_it(queue):
    said = served(queue, "commit", [("A", "ask"), ("B", "ask"), ("C", "ask")], b"\x04\x04\x04")
    # the requests, in queue order (a request still being written when H looks is left to its writer)
    answered = _answered(said)
    assert answered == ["A", "B", "C"][: len(answered)] and answered
    rest = [n for n in "ABC" if n not in answered]
    assert sorted(said[2:]) == sorted([f"{n}=ok-{n}" for n in answered] + rest)  # each got its own answer


def test_answers_without_a_commit_leave_each_writer_to_write_itself_in_order(queue):
    said = served(queue, "rollback", [("A", "ask"), ("B", "ask"), ("C", "ask")], b"\x04\x04\x04")
    answered = _answered(said)
    assert answered == ["A", "B", "C"][: len(answered)] and answered
    assert said[2:] == ["A", "B", "C"]  # nothing delivered: each wrote itself, in queue order


def test_asking_stops_at_a_writer_that_asks_nothing(queue):
    # W: an ordinary write (roster import, seats add) asks nothing
    said = served(queue, "commit", [("A", "ask"), ("W", "once"), ("C", "ask")], b"\x04\x00\x04")
    assert said[:2] == ["H", "H:A"]
    assert sorted(said[2:]) == ["A=ok-A", "C", "W"] and said.index("W") < said.index("C")


def test_the_queue_file_starts_over(queue):
    for i in range(4):
        queue.start(f"w{i}", "restart", "100", "64")
    for p in queue.procs:
        assert p.wait(timeout=120) == 0
    assert queue.text().count("<") == queue.text().count(">") == 400
    assert queue.size() <= 64 + 4, "the queue file did not start over"


def _open_files() -> dict[str, str]:
    """This process's open descriptors and what each points to (one that closed meanwhile is left out)."""
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            out[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
    return out


def test_a_store_write_leaves_no_descriptor_open(tmp_path):
    """Twenty writes leave no descriptor of the store's own files (the database, its WAL, the writer queue)
    open, and no descriptor of any kind per write. Other threads of this test process (another test's server
    or sender in the same xdist worker) may open one meanwhile: that is neither under this store's folder nor
    one a write."""
    from gpuseat.store import open_store

    writes = 20
    with open_store(f"sqlite:///{tmp_path}/s.db", create=True) as store:
        (tmp_path / "c.toml").write_text('name = "c"\nparticipants = 2\n[schedule]\nstart = 2026-01-05\ndays = 5\n')
        store.courses.create_course(tmp_path / "c.toml", key="c")
        before = _open_files()
        for _ in range(writes):
            with store.database.write():
                pass
        after = _open_files()
        new = {fd: where for fd, where in after.items() if before.get(fd) != where}
        assert not [w for w in new.values() if w.startswith(str(tmp_path))], new
        assert len(new) < writes, new


# -- claims served by the claim whose turn it is --------------------------------------------------------

CLAIMER = textwrap.dedent(
    """
    import json, os, sys, time
    from gpuseat.store import open_store
    from gpuseat.store import claims, turns
    url, log, who, pause = sys.argv[1:5]
    def say(text):
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, text.encode())
        os.close(fd)
    served = []
    take = turns.Turns.take
    def spy(self, ask=None, deadline=None):
        answer = take(self, ask, deadline)
        served.append(answer is not None)
        return answer
    turns.Turns.take = spy
    if pause != "-":  # hold the turn inside the transaction (after this claim's own take) until told
        serve = claims._serve
        def paused(raw, q):
            say(who + ":paused\\n")
            while not os.path.exists(pause):
                time.sleep(0.005)
            serve(raw, q)
        claims._serve = paused
    seat = open_store(url).claim_seat(None, who, mode="pool", actor="t-" + who).key
    say(json.dumps({"who": who, "seat": seat, "served": served}) + "\\n")
    """
)


def claimer(queue: Queue, url: str, who: str, pause: str = "-") -> subprocess.Popen[bytes]:
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    proc = subprocess.Popen([sys.executable, "-c", CLAIMER, url, str(queue.log), who, pause], env=env)
    queue.procs.append(proc)
    return proc


def claims_store(tmp_path: Path, queue: Queue) -> tuple[str, list[str]]:
    from gpuseat.store import open_store

    from .test_concurrency import course_with

    url = f"sqlite:///{tmp_path}/c.db"
    with open_store(url, create=True) as store:
        who = course_with(store, tmp_path, 6, 6)
    queue.path = tmp_path / "c.db.lock"  # the store's queue file
    return url, who


def answers(queue: Queue) -> dict[str, dict[str, object]]:
    import json

    return {d["who"]: d for d in (json.loads(x) for x in queue.text().splitlines() if x.startswith("{"))}


def stored(url: str) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    """Open assignments (participant → seat) and the claim events (participant, seat, actor)."""
    import sqlite3

    db = sqlite3.connect(url.removeprefix("sqlite:///"))
    held = dict(
        db.execute(
            "SELECT p.key, s.key FROM assignments a JOIN participants p ON p.id = a.participant_id "
            "JOIN seats s ON s.id = a.seat_id WHERE a.valid_to IS NULL"
        ).fetchall()
    )
    events = db.execute(
        "SELECT participant, seat, actor FROM events WHERE action = 'seat.claim' ORDER BY id"
    ).fetchall()
    db.close()
    return held, events


def queued_claims(queue: Queue, tmp_path: Path) -> tuple[str, list[str], subprocess.Popen[bytes], Path]:
    """A store with 6 participants and 6 seats; the first participant's claim holds the turn inside its
    transaction (its own seat taken) until ``go`` appears, and three more claims queue behind it, asking."""
    url, who = claims_store(tmp_path, queue)
    go = tmp_path / "go"
    first = claimer(queue, url, who[0], str(go))
    queue.until("the first claim to hold the turn", lambda: f"{who[0]}:paused" in queue.text())
    for p in who[1:4]:
        before = queue.size()
        claimer(queue, url, p)
        queue.until(f"{p} to queue", lambda before=before: queue.size() > before)
    queue.until("the three to ask", lambda: queue.behind(b"\x04\x04\x04"))
    return url, who, first, go


def test_a_claim_takes_the_seats_of_the_claims_queued_behind_it(queue, tmp_path):
    url, who, _, go = queued_claims(queue, tmp_path)
    go.touch()
    for p in queue.procs:
        assert p.wait(timeout=60) == 0
    got = answers(queue)
    assert {p: got[p]["seat"] for p in who[:4]} == {p: f"s{i:05d}" for i, p in enumerate(who[:4])}  # queue order
    assert [got[p]["served"] for p in who[1:4]] == [[True]] * 3, "the queued claims wrote for themselves"
    held, events = stored(url)
    assert held == {p: got[p]["seat"] for p in who[:4]}
    assert events == [(p, got[p]["seat"], f"t-{p}") for p in who[:4]]  # one row each, in its own name


def test_claims_queued_behind_a_killed_claim_take_their_own_seats(queue, tmp_path):
    url, who, first, _ = queued_claims(queue, tmp_path)
    first.send_signal(signal.SIGKILL)  # in its transaction, its own seat taken, nobody served yet
    for p in queue.procs[1:]:
        assert p.wait(timeout=60) == 0
    got = answers(queue)
    assert sorted(got) == sorted(who[1:4])
    # the next claim writes itself (after the killed one is passed over) and serves the two behind it
    assert [got[p]["served"] for p in who[1:4]] == [[False], [True], [True]]
    held, events = stored(url)
    assert held == {p: got[p]["seat"] for p in who[1:4]}  # the killed claim's seat was rolled back
    assert len(set(held.values())) == 3
    assert sorted(events) == sorted((p, got[p]["seat"], f"t-{p}") for p in who[1:4])


def test_served_writers_that_are_not_running_hold_up_no_one(queue):
    """The writer whose turn it is serves A1 and A2, which are stopped (SIGSTOP: not scheduled, as on a
    busy machine) before they can read their answers; the writer queued behind them gets its turn when
    the server ends, not when they run again. The queue used to wait for each served writer to be
    scheduled and let go of its byte, one after another (the convoy of 16 writers on 2 busy cores)."""
    release = queue.tmp / "release"
    queue.queued("H", "serve", str(release), "commit")
    queue.until("H to hold the turn", lambda: "H " in queue.text())
    stopped = [queue.queued(name, "ask") for name in ("A1", "A2")]
    queue.until("A1 and A2 to ask", lambda: queue.behind(b"\x04\x04"))
    for p in stopped:
        p.send_signal(signal.SIGSTOP)
    try:
        waiter = queue.queued("W", "once")
        release.touch()
        queue.until("W's turn while A1 and A2 are stopped", lambda: "W " in queue.text())
        assert queue.text().split()[:2] == ["H", "H:A1,A2"]
        assert waiter.wait(timeout=30) == 0
    finally:
        for p in stopped:
            p.send_signal(signal.SIGCONT)
    for p in queue.procs:
        assert p.wait(timeout=30) == 0
    said = queue.text().split()
    assert sorted(said[2:]) == ["A1=ok-A1", "A2=ok-A2", "W"]  # each asker got its own answer, none wrote itself


def test_an_asker_served_between_its_looks_takes_the_answer_not_a_turn(tmp_path: Path, monkeypatch) -> None:
    """The writer before an asker marks it served and then itself done. An asker that checked its own mark
    just before that and sees the writer done just after must still take the answer: taking the turn
    instead made it write for itself a second time (a claim whose seat was the last one then heard "no
    seat is left" with a seat held: the portal's 50-claims-on-20-seats test, once in a run)."""
    from gpuseat.store.turns import Turns

    path = str(tmp_path / "queue")
    first, asker = Turns(path), Turns(path)
    try:
        assert first.take() is None  # ticket 0: its turn
        real = os.pread
        looks = {"at the first writer": 0}

        def pread(fd: int, size: int, at: int) -> bytes:
            if fd == asker._fd and at == 0:
                looks["at the first writer"] += 1
                if looks["at the first writer"] == 2:  # take()'s look, then _wait's: its own mark was read
                    ((ticket, request),) = first.asking(4)
                    assert request == b"a seat, please"
                    assert first.answer(ticket, b"seat 7")
                    first.deliver()
                    first.give()
            return real(fd, size, at)

        monkeypatch.setattr(os, "pread", pread)
        assert asker.take(lambda: b"a seat, please") == b"seat 7"
        monkeypatch.undo()
        assert Path(path).read_bytes() == b"\x01\x05"  # done, served: nobody's turn is left open
    finally:
        first.close()
        asker.close()
