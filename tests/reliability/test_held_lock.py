"""A held lock: every long-running writer of the store while another process holds the database's write lock.

An adversary, or an admin shell left in ``sqlite3 gpuseat.db`` after ``BEGIN IMMEDIATE;``, holds SQLite's
write lock for longer than the writers' busy timeout (``GPUSEAT_DB_BUSY_TIMEOUT``, set short in each child
process); on PostgreSQL an open transaction holds ``LOCK TABLE``. Each writer runs as a real process
against a real database: the agent (on a stand-in GPU host), the monitor and the CLI. Each must say what
it waits for, never exit with a traceback, and recover on its own once the lock is let go. The set-up
before the hold, and the commands run again after it, are the same CLI in-process (``cli``): a process
each would only add its start-up.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from delivery.conftest import bare_lab, hostcourse, lab, pghostcourse  # noqa: F401 - the stand-in host
from delivery.hostlab import MIG_AND_WHOLE, Lab
from ports import free_port

SRC = Path(__file__).resolve().parents[2] / "src"
MIG = [m["uuid"] for m in MIG_AND_WHOLE[0]["mig"]]  # type: ignore[index]
WAIT_S = 90.0  # a deadline for what must happen (an agent's start-up on a loaded machine), not a timing
HOLD_S = 120.0  # the holder is let go by the test; this only bounds a holder the test forgot
BUSY_S = "0.5"  # the writers' busy timeout under the hold (GPUSEAT_DB_BUSY_TIMEOUT): each failing write waits it out

SQLITE_HOLDER = """
import select, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
select.select([sys.stdin], [], [], float(sys.argv[2]))  # until the test closes our stdin
conn.execute("ROLLBACK")
"""

PG_HOLDER = """
import select, sys
from sqlalchemy import create_engine, text
engine = create_engine(sys.argv[1])
with engine.connect() as conn:
    conn.execute(text("LOCK TABLE " + sys.argv[3] + " IN ACCESS EXCLUSIVE MODE"))
    print("held", conn.execute(text("SELECT pg_backend_pid()")).scalar(), flush=True)
    select.select([sys.stdin], [], [], float(sys.argv[2]))  # until the test closes our stdin
    conn.rollback()
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSEAT_") or k.startswith("GPUSEAT_TEST_")}
    for keep in ("GPUSEAT_DATA_DIR", "GPUSEAT_CACHE_DIR"):
        if keep in os.environ:
            env[keep] = os.environ[keep]
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), *filter(None, [env.get("PYTHONPATH")])])
    return {**env, **extra}


class Holder:
    """Another process holding the write lock of ``db`` (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL:
    ``LOCK TABLE tables``) until :meth:`release`."""

    def __init__(self, db: str, tables: str = "seats, agent_leases") -> None:
        if db.startswith("sqlite:///"):
            argv = [sys.executable, "-c", SQLITE_HOLDER, db.removeprefix("sqlite:///"), str(HOLD_S)]
        else:
            argv = [sys.executable, "-c", PG_HOLDER, db, str(HOLD_S), tables]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=_env())
        assert self.proc.stdout is not None
        said = self.proc.stdout.readline().split()
        assert said[:1] == ["held"], said
        #: how the waiting writer names it: its process (SQLite, from /proc), its server process (PostgreSQL)
        self.who = f"backend pid {said[1]}" if len(said) > 1 else f"pid {self.proc.pid}"

    def release(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(30)


def until(what: Callable[[], bool], timeout: float, why: Callable[[], str] = lambda: "") -> float:
    """Seconds until ``what()`` holds; fails the test with ``why()`` when it does not within ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if what():
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {why()}")


def _machine(lab_: Any) -> dict[str, str]:
    """What the host engine wrote on the lab machine: every key file and device-policy drop-in, by path."""
    return {
        str(f): f.read_text(errors="replace")
        for d in (lab_.keys_dir, lab_.dropin_dir)
        for f in sorted(Path(d).rglob("*"))
        if f.is_file()
    }


def gpuseat(*args: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "gpuseat", *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, env=_env(**env), timeout=WAIT_S, check=False)


# -- the agent -----------------------------------------------------------------------------------------


def _seats(db: str, cli: Callable[..., Any]) -> dict[str, str]:
    import json

    r = cli("seats", "export", "--format", "json", "--db", db)
    assert r.code == 0, r.err
    return {s["device_uuid"]: s["key"] for s in json.loads(r.out)}


def _keyed_to(host: Lab, who: str) -> str:
    """The authorized_keys the host has for ``who`` (it names the device they may use); empty: none."""
    path = host.keys_dir / host.people[who].user
    return path.read_text() if path.exists() else ""


def _ann_on_the_first_slice(lab_: Lab, db: str, cli: Callable[..., Any]) -> dict[str, str]:
    """The stand-in host's engine settings stored and ann given the first MIG slice; the seats by device."""
    pairs = [f"{k}={v}" for k, v in lab_.settings().items()]
    assert cli("engines", "settings", "host", *pairs, "--course", "lab", "--db", db).code == 0
    by_uuid = _seats(db, cli)
    assert cli("seats", "assign", "--participant", "ann", "--seat", by_uuid[MIG[0]], "--db", db).code == 0
    return by_uuid


@pytest.mark.parametrize("course", ["hostcourse", "pghostcourse"], ids=["sqlite", "postgresql"])
def test_the_agent_rides_out_a_held_lock_and_applies_a_move_after_it(
    course: str, request: pytest.FixtureRequest, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    lab_, db = request.getfixturevalue(course)
    by_uuid = _ann_on_the_first_slice(lab_, db, cli)
    log = tmp_path / "agent.log"
    argv = ["agent", "--engine", "host", "--host", "gpu1", "--poll", "0.2", "--lease", "2", "--db", db]
    with log.open("ab") as out:
        agent = subprocess.Popen(
            [sys.executable, "-m", "gpuseat", *argv], stdout=out, stderr=out, env=_env(GPUSEAT_DB_BUSY_TIMEOUT=BUSY_S)
        )
    text = lambda: log.read_text(errors="replace")  # noqa: E731
    try:
        until(lambda: MIG[0] in _keyed_to(lab_, "ann"), WAIT_S, text)
        before = len(text())
        holder = Holder(db)
        held_at = time.monotonic()
        try:
            # held past the busy timeout and past the lease (3 s): the agent keeps going and says why it waits
            until(lambda: holder.who in text()[before:], WAIT_S, text)
            # the lease was last renewed before the hold: gone 2 s into it, a renewal tried and failed 0.5 s later
            time.sleep(max(0.0, held_at + 3.0 - time.monotonic()))
            assert agent.poll() is None, text()
            during = text()[before:]
        finally:
            holder.release()
        assert "Traceback" not in during, during
        waits = [line for line in during.splitlines() if "the store failed" in line]
        assert len(waits) == 1, during  # one line while locked, not one per try
        # after the release: a move reaches the machine within seconds, and the agent is the leader again
        r = cli("seats", "move", "--participant", "ann", "--seat", by_uuid[MIG[2]], "--db", db)
        assert r.code == 0, r.err
        until(lambda: MIG[2] in _keyed_to(lab_, "ann"), 30, text)
        assert agent.poll() is None, text()
        # said once the tick that took the lease again is done: that tick may be the one that applied the move
        until(lambda: "the store answers again" in text()[before:], 30, text)
        # nothing half-applied: a plan of the store against the machine now is empty
        until(lambda: "nothing to change" in cli("apply", "--course", "lab", "--dry-run", "--db", db).out, 30)
        assert "Traceback" not in text()
    finally:
        agent.terminate()
        agent.wait(30)
    assert agent.returncode == 0, text()


# -- the CLI -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("course", ["hostcourse", "pghostcourse"], ids=["sqlite", "postgresql"])
def test_seats_assign_and_apply_under_a_held_lock_fail_clearly_and_change_nothing(
    course: str, request: pytest.FixtureRequest, cli: Callable[..., Any]
) -> None:
    lab_, db = request.getfixturevalue(course)
    by_uuid = _ann_on_the_first_slice(lab_, db, cli)
    assert cli("apply", "--course", "lab", "--db", db).code == 0
    move = ("seats", "move", "--participant", "ann", "--seat", by_uuid[MIG[2]], "--db", db)
    assert cli(*move).code == 0  # in the store only: the apply under the lock has work to do
    assign = ("seats", "assign", "--participant", "ben", "--seat", by_uuid[MIG[1]], "--db", db)
    machine = _machine(lab_)
    holder = Holder(db)
    try:  # the two writers under the lock: real processes
        assigned = gpuseat(*assign, GPUSEAT_DB_BUSY_TIMEOUT=BUSY_S)
        applied = gpuseat("apply", "--course", "lab", "--db", db, GPUSEAT_DB_BUSY_TIMEOUT=BUSY_S)
        still_held = holder.proc.poll() is None
    finally:
        holder.release()
    assert still_held
    for done in (assigned, applied):
        assert done.returncode == 1, done.stdout + done.stderr  # exit 1: the store failed (2 is for bad input)
        assert "Traceback" not in done.stderr and holder.who in done.stderr, done.stderr
        assert f"more than {BUSY_S} s" in done.stderr and "nothing was changed" in done.stderr, done.stderr
        assert len(re.findall(r"^error: ", done.stderr, re.M)) == 1, done.stderr
    assert not (lab_.keys_dir / lab_.people["ben"].user).exists()  # ben was not assigned
    if course == "hostcourse":  # the apply failed before its first step: "nothing was changed" holds for the machine
        assert _machine(lab_) == machine  # (it moved ann's device policy, then could not record it)
    # once the lock is let go the same commands work, and the machine ends as the store says
    assert cli(*assign).code == 0
    assert cli("apply", "--course", "lab", "--db", db).code == 0
    assert MIG[2] in _keyed_to(lab_, "ann") and MIG[1] in _keyed_to(lab_, "ben")
    plan = cli("apply", "--course", "lab", "--dry-run", "--db", db)
    assert plan.code == 0 and "nothing to change" in plan.out, plan.out


# -- the monitor ---------------------------------------------------------------------------------------

LEAVES = 4  # the replay's seat-sized devices: 2 GPUs x 2 MIG devices
MONITOR_TABLES = "samples, devices, minute_aggregates, alerts"


def _monitor_db(request: pytest.FixtureRequest, dialect: str, tmp_path: Path) -> str:
    from gpuseat.store import open_monitor
    from pg_schema import pg_schema_url

    db = f"sqlite:///{tmp_path / 'monitor.db'}" if dialect == "sqlite" else pg_schema_url(request)
    open_monitor(db).close()  # the schema, made before the monitor starts
    return db


def _samples(db: str) -> int:
    from sqlalchemy import create_engine, text

    engine = create_engine(db)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM samples")).scalar_one())
    finally:
        engine.dispose()


class MonitorProcess:
    """``gpuseat monitor`` replaying a recording every 0.2 s into ``db`` (busy timeout ``busy``), with ``/metrics``
    on a free port."""

    def __init__(self, db: str, tmp_path: Path, busy: str = BUSY_S) -> None:

        from gpuseat.monitor.replay import synthetic_snapshot, write_replay

        replay = tmp_path / "lab.jsonl"
        t0 = 1_700_000_040.0
        # 40 s of ticks (the replay loops after, later in time): a longer file only costs its writing and reading
        snaps = [synthetic_snapshot(gpus=2, migs_per_gpu=2, processes=3, taken_at=t0 + 5 * i) for i in range(200)]
        write_replay(replay, snaps)
        self.port = free_port()
        self.log = tmp_path / "monitor.log"
        argv = ["monitor", "--replay", replay, "--db", db, "--interval", "0.2", "--listen", f"127.0.0.1:{self.port}"]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gpuseat", *map(str, argv)],
                stdout=out,
                stderr=out,
                env=_env(GPUSEAT_DB_BUSY_TIMEOUT=busy),
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def metrics(self) -> int:
        import httpx

        return httpx.get(f"http://127.0.0.1:{self.port}/metrics", timeout=10).status_code

    def stop(self) -> tuple[int, int, int]:
        """SIGTERM; returns (samples taken, stored, dropped) from its last line."""
        self.proc.terminate()
        self.proc.wait(WAIT_S)
        found = re.search(r"monitor stopped after (\d+) samples \((\d+) stored, (\d+) dropped\)", self.text())
        assert found, self.text()
        return int(found[1]), int(found[2]), int(found[3])


def _hold_while_sampling(monitor: MonitorProcess, db: str, seconds: float) -> Holder:
    until(lambda: _samples(db) >= 3 * LEAVES, WAIT_S, monitor.text)
    holder = Holder(db, MONITOR_TABLES)
    until(lambda: "another" in monitor.text(), WAIT_S, monitor.text)  # a write waited out the busy timeout
    end = time.monotonic() + seconds
    while time.monotonic() < end:  # the metrics endpoint answers all along
        assert monitor.metrics() == 200
        assert monitor.proc.poll() is None, monitor.text()
        time.sleep(0.3)
    return holder


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_the_monitor_writes_what_it_sampled_under_a_held_lock_once_it_is_let_go(
    dialect: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    db = _monitor_db(request, dialect, tmp_path)
    monitor = MonitorProcess(db, tmp_path)
    try:
        holder = _hold_while_sampling(monitor, db, 2.0)  # ~10 ticks queue up behind the lock
        holder.release()
        # what was sampled during the hold is written soon after: the stored rows catch up with the ticks
        taken = lambda: len(monitor.text())  # noqa: E731
        mark = taken()
        until(lambda: "database write failed" not in monitor.text()[mark:] and _samples(db) > 0, 30)
        written = _samples(db)
        until(lambda: _samples(db) > written, 30, monitor.text)  # and the ticks after it are written as they come
    finally:
        ticks, stored, dropped = monitor.stop()
    assert monitor.proc.returncode == 0, monitor.text()
    assert "Traceback" not in monitor.text()
    assert (stored, dropped) == (ticks, 0), monitor.text()
    assert _samples(db) == ticks * LEAVES


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_a_monitor_stopped_under_a_held_lock_reports_what_it_dropped(
    dialect: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    db = _monitor_db(request, dialect, tmp_path)
    monitor = MonitorProcess(db, tmp_path, busy="1")  # 1 s: a wait per queued row would take ~20 s to stop
    holder = _hold_while_sampling(monitor, db, 4.0)  # ~20 ticks queue up behind the lock
    try:
        stopping = time.monotonic()
        ticks, stored, dropped = monitor.stop()
        took = time.monotonic() - stopping
        still_held = holder.proc.poll() is None
    finally:
        holder.release()
    assert still_held
    assert monitor.proc.returncode == 0, monitor.text()
    assert "Traceback" not in monitor.text()
    # each queued row waited out the 1 s busy timeout before: ~20 s to stop; now one wait per flush
    assert took < 10, (took, monitor.text())
    assert dropped > 0 and stored + dropped == ticks, monitor.text()
    assert f"{dropped} samples and" in monitor.text() and "were not written" in monitor.text()
    assert _samples(db) == stored * LEAVES


def test_a_lock_taken_in_the_middle_of_an_apply_says_the_machines_may_have_changed(
    request: pytest.FixtureRequest, cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store answered the pass's check, then another writer took its lock before the first step: the steps
    ran on the machine, their records could not be written. The error says so (not "nothing was changed"),
    and the next apply finishes the pass."""
    from gpuseat.engines.apply import one_pass
    from gpuseat.engines.runner import Runner
    from gpuseat.errors import StoreBusy
    from gpuseat.store import open_store

    lab_, db = request.getfixturevalue("hostcourse")
    by_uuid = _ann_on_the_first_slice(lab_, db, cli)
    assert cli("apply", "--course", "lab", "--db", db).code == 0
    assert cli("seats", "move", "--participant", "ann", "--seat", by_uuid[MIG[2]], "--db", db).code == 0
    monkeypatch.setenv("GPUSEAT_DB_BUSY_TIMEOUT", BUSY_S)
    holders: list[Holder] = []

    def guard() -> bool:  # asked before each step: at the first, another writer takes the lock
        if not holders:
            holders.append(Holder(db))
        return True

    with open_store(db) as store:
        try:
            with pytest.raises(StoreBusy) as caught:
                one_pass(store, course="lab", runner=Runner(), guard=guard)
        finally:
            for h in holders:
                h.release()
    fix = caught.value.fix or ""
    assert holders and "may have changed the machines" in fix and "nothing was changed" not in fix, fix
    monkeypatch.delenv("GPUSEAT_DB_BUSY_TIMEOUT")
    assert cli("apply", "--course", "lab", "--db", db).code == 0
    assert "nothing to change" in cli("apply", "--course", "lab", "--dry-run", "--db", db).out
