"""The agent keeps a real host true to the store, with no organizer command after a change.

A stand-in GPU host (real sshd, real Unix users, ``mknod`` devices, a stand-in ``nvidia-smi``) and
``gpuseat agent`` running as its own process: the organizer only moves, releases, assigns, archives and
deletes in the store; the participants' side is checked by logging in as them.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .hostlab import MIG_AND_WHOLE, Lab

MIG = [m["uuid"] for m in MIG_AND_WHOLE[0]["mig"]]  # type: ignore[index]
WHOLE = str(MIG_AND_WHOLE[1]["uuid"])
GOAL_S = 20.0  # issue 37: p99 <= 10 s on SQLite; the test allows twice that on a loaded CI machine
#: a deadline for what must happen but is not timed against the goal (an agent's start-up, a pass under load):
#: each wait ends as soon as its condition holds. On a loaded 2-core machine an agent's start-up to its first
#: "leader" line took 0.3 s unloaded and up to 5 s beside 6 busy processes, and once more than 20 s.
AGENT_WAIT_S = 90.0


# Agents that are killed one after another are forked from one warm process (Python, Typer, SQLAlchemy and the
# agent's modules imported; tests/forked.py): each is a process of its own that runs ``gpuseat agent``'s own entry
# point and opens its own store connection, as ``python -m gpuseat agent`` would a second later, and is killed
# for real with SIGKILL. A fresh interpreter per round spent most of each round starting (1-2.5 s of its ~3 s
# on a loaded 2-core machine). The warm process reaps them: ``poll`` and ``reap`` give a child's exit code.
FORKER = textwrap.dedent(
    """
    import json, os, sys
    import sqlalchemy, typer
    import gpuseat.cli.apply, gpuseat.engines.agent, gpuseat.engines.apply, gpuseat.engines.host.engine
    import gpuseat.store
    from forked import exit_code, run_main
    print("ready", flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        if "argv" in job:  # stdout and stderr both to the agent's log
            print(run_main(job["argv"], out=job["log"], before=lambda: os.dup2(1, 2)), flush=True)
        elif "poll" in job:
            pid, status = os.waitpid(job["poll"], os.WNOHANG)
            print(json.dumps(None if pid == 0 else os.waitstatus_to_exitcode(status)), flush=True)
        else:
            print(exit_code(job["reap"]), flush=True)
    """
)


class Forker:
    """The warm process of :data:`FORKER` (closed with the test)."""

    def __init__(self) -> None:
        env = {**os.environ}
        tests = str(Path(__file__).resolve().parents[1])  # tests/forked.py
        env["PYTHONPATH"] = os.pathsep.join([tests, *filter(None, [env.get("PYTHONPATH")])])
        self.proc = subprocess.Popen(
            [sys.executable, "-c", FORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        assert self.ask() == "ready"

    def ask(self, **job: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if job:
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        return line.strip() if line.strip() == "ready" else json.loads(line)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)


class Forked:
    """A forked agent, seen through the calls of :class:`subprocess.Popen` that :class:`AgentProcess` makes."""

    def __init__(self, forker: Forker, argv: list[str], log: Path) -> None:
        self.forker = forker
        self.code: int | None = None
        log.touch()  # there before the child opens it: the test reads it at once
        self.pid: int = forker.ask(argv=argv, log=str(log))

    def poll(self) -> int | None:
        if self.code is None:
            self.code = self.forker.ask(poll=self.pid)
        return self.code

    def send_signal(self, sig: int) -> None:
        if self.code is None:
            os.kill(self.pid, sig)

    def wait(self, timeout: float | None = None) -> int:
        if self.code is None:
            self.code = self.forker.ask(reap=self.pid)
        return self.code


class AgentProcess:
    """``gpuseat agent`` as a separate process (killed by pid at the end); ``forker``: forked from it."""

    def __init__(self, db: str, log: Path, *extra: str, forker: Forker | None = None) -> None:
        self.db, self.log, self.extra, self.forker = db, log, extra, forker
        self.proc: subprocess.Popen[bytes] | Forked | None = None

    def start(self) -> AgentProcess:
        argv = ["agent", "--engine", "host", "--host", "gpu1", "--poll", "0.2", *self.extra, "--db", self.db]
        if self.forker is not None:
            self.proc = Forked(self.forker, argv, self.log)
            return self
        out = open(self.log, "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen([sys.executable, "-m", "gpuseat", *argv], stdout=out, stderr=out)
        return self

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def until_leader(self, timeout: float = AGENT_WAIT_S) -> float:
        """Seconds until this agent's log says it leads; fails at once, with its log, when it exits first."""

        def leads() -> bool:
            assert self.proc is not None
            exited = self.proc.poll()  # looked at before the log: an agent that led, then exited, did lead
            if "leader" in self.text():
                return True
            assert exited is None, f"the agent exited ({exited}) before it led:\n{self.text()}"
            return False

        return until(leads, timeout, every=0.02, why=lambda: f"{self.log.name}:\n{self.text()}")


def until(
    what: Callable[[], bool], timeout: float = GOAL_S, every: float = 0.1, *, why: Callable[[], str] | None = None
) -> float:
    """Seconds until ``what()`` holds (fails the test when it does not within ``timeout``, with ``why()``: what
    was seen, e.g. the agent's log)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if what():
            return time.monotonic() - start
        time.sleep(every)
    raise AssertionError(f"not within {timeout} s" + (f": {why()}" if why is not None else ""))


def _alive_of(uid: int) -> bool:
    """True while a process of ``uid`` runs (zombies, which hold nothing, do not count)."""
    for p in Path("/proc").iterdir():
        try:
            if (
                p.name.isdigit()
                and p.stat().st_uid == uid
                and (p / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
            ):
                return True
        except OSError:
            continue
    return False


def _settings(cli: Callable[..., Any], lab: Lab, db: str) -> None:
    pairs = [f"{k}={v}" for k, v in lab.settings().items()]
    r = cli("engines", "settings", "host", *pairs, "--course", "lab", "--db", db)
    assert r.code == 0, r.err


def _seat_of(cli: Callable[..., Any], db: str) -> dict[str, str]:
    r = cli("seats", "export", "--format", "json", "--db", db)
    return {s["device_uuid"]: s["key"] for s in json.loads(r.out)}


def _env(lab: Lab, who: str) -> str | None:
    done = lab.ssh(who, "env")
    if done.returncode != 0:
        return None
    return next((x.split("=", 1)[1] for x in done.stdout.splitlines() if x.startswith("CUDA_VISIBLE_DEVICES=")), "")


@pytest.fixture(params=["sqlite", "postgresql"])
def running(request: pytest.FixtureRequest, cli: Callable[..., Any], tmp_path: Path) -> Any:
    """ann on MIG 0 and ben on MIG 1, the agent running, sshd started once the agent wrote its drop-in.
    On SQLite the agent polls the events head; on PostgreSQL a NOTIFY wakes it."""
    lab, db = request.getfixturevalue("hostcourse" if request.param == "sqlite" else "pghostcourse")
    _settings(cli, lab, db)
    by_uuid = _seat_of(cli, db)
    for who, uuid in (("ann", MIG[0]), ("ben", MIG[1])):
        assert cli("seats", "assign", "--participant", who, "--seat", by_uuid[uuid], "--db", db).code == 0
    agent = AgentProcess(db, tmp_path / "agent.log").start()
    try:  # the set-up (the agent's start-up and first pass) is not timed
        until(lambda: (lab.keys_dir / lab.people["ben"].user).exists(), AGENT_WAIT_S, why=agent.text)
        until(lambda: Path(lab.settings()["sshd_dropin"]).exists(), AGENT_WAIT_S, why=agent.text)
        lab.start_sshd()
        until(lambda: _env(lab, "ann") == MIG[0] and _env(lab, "ben") == MIG[1], AGENT_WAIT_S, why=agent.text)
        yield lab, db, by_uuid, agent
    finally:
        agent.stop()


def test_move_release_and_handover_with_no_organizer_command(running: Any, cli: Callable[..., Any]) -> None:
    lab, db, by_uuid, _agent = running
    # ben leaves a process running, as a participant does
    assert lab.ssh("ben", "nohup sleep 600 >/dev/null 2>&1 &").returncode == 0
    ben_uid = int(lab.ssh("ann", f"id -u {lab.people['ben'].user}").stdout)

    def ben_runs() -> bool:
        return _alive_of(ben_uid)

    assert ben_runs()
    # the organizer: ann moves to MIG 2, ben is released, dan gets ben's old seat. Nothing else.
    assert cli("seats", "move", "--participant", "ann", "--seat", by_uuid[MIG[2]], "--db", db).code == 0
    assert cli("seats", "release", "--participant", "ben", "--db", db).code == 0
    assert cli("seats", "assign", "--participant", "dan", "--seat", by_uuid[MIG[1]], "--db", db).code == 0

    shown: list[str] = []

    def dan_in() -> bool:
        way = cli("seats", "connect", by_uuid[MIG[1]], "--format", "json", "--db", db)
        shown.append(way.out)
        return _env(lab, "dan") == MIG[1]

    took = until(dan_in)
    # the old holder is refused, their process is gone, the mover sees only the new seat
    refused = lab.ssh("ben", "true")
    assert refused.returncode == 255 and "denied" in refused.stderr.lower()
    until(lambda: not ben_runs(), timeout=5)
    assert _env(lab, "ann") == MIG[2]
    seen = lab.ssh("ann", f"{lab.nvidia_smi} -L").stdout
    assert MIG[2] in seen and MIG[0] not in seen
    # the new holder's seat never showed the previous holder's login: "being prepared" until it was theirs
    ben_login = f"{lab.people['ben'].user}@"
    assert all(ben_login not in out for out in shown), shown
    assert took < GOAL_S
    final = json.loads(cli("seats", "connect", by_uuid[MIG[1]], "--format", "json", "--db", db).out)
    assert final["command"] and f"{lab.people['dan'].user}@127.0.0.1" in final["command"]
    # what the agent did is in the events log; a plan now is empty
    from gpuseat.store import open_store

    with open_store(db) as store:
        applied = [e for e in store.events.events("lab") if e.action == "engine.apply"]
    assert any("key.remove" in json.dumps(e.detail) for e in applied)
    again = cli("apply", "--course", "lab", "--dry-run", "--db", db)
    assert again.code == 0 and "nothing to change" in again.out, again.out


def test_archive_and_delete_take_every_access_away(running: Any, cli: Callable[..., Any], tmp_path: Path) -> None:
    lab, db, _by_uuid, agent = running
    r = cli("course", "delete", "lab", "--yes", "--export-to", tmp_path / "lab.zip", "--db", db)
    assert r.code == 0, r.err
    assert "is deleted once the engines have taken every access away" in r.out
    until(lambda: lab.ssh("ann", "true").returncode == 255 and lab.ssh("ben", "true").returncode == 255)
    for who in ("ann", "ben"):
        assert not (lab.keys_dir / lab.people[who].user).exists()
    # then the course is gone from the store (the agent deleted it once nothing was held)
    until(lambda: "lab: deleted" in agent.text())
    assert cli("course", "show", "lab", "--db", db).code == 2


def test_apply_by_hand_on_the_host_takes_a_deleted_courses_access_away(
    running: Any, cli: Callable[..., Any], tmp_path: Path
) -> None:
    """``apply --host gpu1`` (by hand, no agent) after ``course delete``: the host is known by what the
    deleted course still holds there, so the pass revokes it without the note for a host no seat is on."""
    lab, db, _by_uuid, agent = running
    agent.stop()
    r = cli("course", "delete", "lab", "--yes", "--export-to", tmp_path / "lab.zip", "--db", db)
    assert r.code == 0, r.err
    r = cli("apply", "--course", "lab", "--engine", "host", "--host", "gpu1", "--db", db)
    assert r.code == 0 and "note:" not in r.err, r.out + r.err
    assert lab.ssh("ann", "true").returncode == 255
    for who in ("ann", "ben"):
        assert not (lab.keys_dir / lab.people[who].user).exists()
    # nothing is on gpu1 now: apply there is no error (a server between two courses), but says so
    r = cli("apply", "--engine", "host", "--host", "gpu1", "--db", db)
    assert r.code == 0 and "note: no seat of any course is on host 'gpu1'" in r.err, r.out + r.err


def test_drift_is_reverted_and_logged(running: Any, cli: Callable[..., Any], tmp_path: Path) -> None:
    lab, db, _by_uuid, agent = running
    agent.stop()
    resyncing = AgentProcess(db, tmp_path / "resync.log", "--resync", "1").start()
    try:
        assert cli("seats", "release", "--participant", "ben", "--db", db).code == 0
        ben = lab.people["ben"].user
        until(lambda: lab.ssh("ben", "true").returncode == 255)
        time.sleep(1.0)  # the agent's own pass after its writes: nothing left to do
        # by hand, as root: unlock ben and give him a key again
        subprocess.run(["usermod", "--expiredate", "", ben], check=True)
        (lab.keys_dir / ben).write_text(lab.people["ben"].public_key + "\n")
        os.chmod(lab.keys_dir / ben, 0o644)
        # the next resync undoes it (ben may have slipped in for up to a second: that is the resync period)
        until(lambda: lab.ssh("ben", "true").returncode == 255 and not (lab.keys_dir / ben).exists())
    finally:
        resyncing.stop()
    from gpuseat.store import open_store

    with open_store(db) as store:
        drift = [e for e in store.events.events("lab") if e.action == "drift.reverted"]
    assert drift, "the resync logs what it reverted"
    done = " ".join(d for e in drift for d in e.detail["done"])  # type: ignore[index]
    assert f"key.remove {ben}" in done and f"account.lock {ben}" in done


def test_two_agents_one_applies_and_the_standby_takes_over(
    hostcourse: tuple[Lab, str], cli: Callable[..., Any], tmp_path: Path
) -> None:
    lab, db = hostcourse
    _settings(cli, lab, db)
    by_uuid = _seat_of(cli, db)
    assert cli("seats", "assign", "--participant", "ann", "--seat", by_uuid[MIG[0]], "--db", db).code == 0
    # a 5 s lease (renewed every 5/3 s): on a loaded 2-core CI machine a leader stalled past a 3 s lease was
    # rightly replaced by the standby, and "only one applies" then failed for the lease doing its job
    lease = 5
    first = AgentProcess(db, tmp_path / "a.log", "--lease", str(lease)).start()
    second = AgentProcess(db, tmp_path / "b.log", "--lease", str(lease))
    try:
        first.until_leader()
        second.start()
        until(lambda: "standby" in second.text(), AGENT_WAIT_S, why=second.text)  # its start-up is not timed
        time.sleep(1.5)
        assert "leader" not in second.text()  # only one applies
        # `agent status` lists both, the leader first: the standby is seen to be alive (its row hid it before)
        (row,) = json.loads(cli("agent", "status", "--format", "json", "--db", db).out)
        assert row["holder"].split(":")[1] == str(first.proc.pid)  # the leader's status row, not hidden
        assert [(a["holder"].split(":")[1], a["role"]) for a in row["agents"]] == [
            (str(first.proc.pid), "leader"), (str(second.proc.pid), "standby"),
        ]  # fmt: skip
        until(lambda: (lab.keys_dir / lab.people["ann"].user).exists())
        first.kill9()  # the lease holder dies without a word
        killed = time.monotonic()
        assert cli("seats", "assign", "--participant", "cat", "--seat", by_uuid[WHOLE], "--db", db).code == 0
        until(lambda: (lab.keys_dir / lab.people["cat"].user).exists(), timeout=GOAL_S)
        assert "leader" in second.text()
        assert time.monotonic() - killed < lease + GOAL_S
    finally:
        first.stop()
        second.stop()


def test_kill9_at_random_steps_converges_and_never_keys_the_wrong_person(
    hostcourse: tuple[Lab, str], cli: Callable[..., Any], tmp_path: Path
) -> None:
    lab, db = hostcourse
    _settings(cli, lab, db)
    by_uuid = _seat_of(cli, db)
    seats = [by_uuid[u] for u in (*MIG, WHOLE)]
    people = ["ann", "ben", "cat", "dan"]
    rng = random.Random(37)
    public = {lab.people[p].user: lab.people[p].public_key.split()[1] for p in people}

    def keys_are_own() -> None:
        for login in public:
            path = lab.keys_dir / login
            if path.exists():
                text = path.read_text()
                for other, theirs in public.items():
                    assert other == login or theirs not in text, f"{login}'s keys hold {other}'s key"

    # Each round's agent holds a 1 s lease, so the next one leads as soon as the killed one's lease has run
    # out, and is killed at a random point of its pass (a pass here takes 0.4-1.2 s). With the default 15 s
    # lease the agents after a killed leader were all standby, and a kill at a fixed delay after the start
    # mostly hit Python's start-up: of 20 rounds, 2 killed an agent that was applying. Now every round does.
    forker = Forker()  # the rounds' agents are forked (see FORKER); the final one starts as `python -m gpuseat`
    try:
        for round_ in range(12):
            # a random reshuffle in the store
            for p in people:
                cli("seats", "release", "--participant", p, "--db", db)
            for p, s in zip(rng.sample(people, rng.randint(1, 4)), rng.sample(seats, 4), strict=False):
                assert cli("seats", "assign", "--participant", p, "--seat", s, "--db", db).code == 0
            agent = AgentProcess(db, tmp_path / f"agent-{round_}.log", "--lease", "1", forker=forker).start()
            try:  # its start-up is not what is tested (nor timed): on a loaded 2-core machine it took over 20 s
                agent.until_leader()
                time.sleep(rng.uniform(0.0, 0.9))
            finally:
                agent.kill9()
            keys_are_own()
    finally:
        forker.close()
    agent = AgentProcess(db, tmp_path / "agent-final.log").start()
    try:
        # it converges: the time it takes (a start-up, then whole passes, under load) is not what is tested
        until(
            lambda: "nothing to change" in cli("apply", "--course", "lab", "--dry-run", "--db", db).out,
            AGENT_WAIT_S,
            why=agent.text,
        )
    finally:
        agent.stop()
    keys_are_own()
    from gpuseat.store import open_store

    with open_store(db) as store:
        holders = {s.participant for s in store.seats.seats("lab") if s.participant}
    for p in people:
        login = lab.people[p].user
        assert (lab.keys_dir / login).exists() == (p in holders), p


WINDOW_TOML = """name = "Lab with homework hours"
participants = 2

[needs]
min_gpu_memory_gb = 16
isolation = "partitioned"

[schedule]
start = 2026-09-07
days = 5
access = "09:00-17:00"
"""


def test_access_windows_open_and_close_logins(lab: Lab, tmp_path: Path, cli: Callable[..., Any]) -> None:
    from datetime import UTC, datetime

    from gpuseat.engines.apply import one_pass
    from gpuseat.engines.runner import Runner
    from gpuseat.store import open_store

    db = f"sqlite:///{tmp_path / 'win.db'}"
    (tmp_path / "win.toml").write_text(WINDOW_TOML)
    for who in ("ann", "ben"):
        lab.person(who)
    (tmp_path / "roster.csv").write_text(lab.roster())
    listing = subprocess.run([str(lab.nvidia_smi), "-L"], capture_output=True, text=True, check=True).stdout
    (tmp_path / "smi.txt").write_text(listing)
    for args in (
        ("course", "create", tmp_path / "win.toml", "--key", "lab", "--timezone", "UTC"),
        ("roster", "import", tmp_path / "roster.csv"),
        ("seats", "add", "--from-nvidia-smi", tmp_path / "smi.txt", "--engine", "host", "--host", "gpu1"),
        ("seats", "assign"),
    ):
        r = cli(*args, "--db", db)
        assert r.code == 0, (args, r.err)
    from .hostlab import free_port

    lab.port = free_port()
    _settings(cli, lab, db)

    def at(hour: int, minute: int = 0) -> None:
        with open_store(db) as store:
            result = one_pass(store, course="lab", runner=Runner(), now=datetime(2026, 9, 8, hour, minute, tzinfo=UTC))
        assert not result.failed, result.failed

    at(20)  # the first pass, the window shut: the accounts it makes are locked before their keys are written
    lab.start_sshd()
    assert lab.ssh("ann", "true").returncode == 255 and lab.ssh("ben", "true").returncode == 255
    assert (lab.keys_dir / lab.people["ann"].user).exists()
    at(12)  # inside the window
    assert lab.ssh("ann", "true").returncode == 0
    assert lab.ssh("ann", "nohup sleep 600 >/dev/null 2>&1 &").returncode == 0
    at(20)  # the window shut: logins refused, sessions ended; keys and devices kept for the morning
    assert lab.ssh("ann", "true").returncode == 255
    ann_uid = int(subprocess.run(["id", "-u", lab.people["ann"].user], capture_output=True, text=True).stdout)
    until(lambda: not _alive_of(ann_uid), timeout=5)
    assert (lab.keys_dir / lab.people["ann"].user).exists()
    at(8, 50)  # ten minutes before it opens: seats are open for the ready-check
    assert lab.ssh("ann", "true").returncode == 0 and lab.ssh("ben", "true").returncode == 0


def test_seats_check_proves_the_previous_holder_is_refused(
    hostcourse: tuple[Lab, str], cli: Callable[..., Any]
) -> None:
    lab, db = hostcourse
    _settings(cli, lab, db)
    by_uuid = _seat_of(cli, db)
    seat = by_uuid[MIG[0]]
    assert cli("seats", "assign", "--participant", "ann", "--seat", seat, "--db", db).code == 0
    assert cli("apply", "--db", db).code == 0
    lab.start_sshd()
    assert cli("seats", "release", "--participant", "ann", "--db", db).code == 0
    assert cli("seats", "assign", "--participant", "dan", "--seat", seat, "--db", db).code == 0
    # until the engine has handed the seat over, dan's way in is "being prepared", never ann's login
    waiting = json.loads(cli("seats", "connect", seat, "--format", "json", "--db", db).out)
    assert waiting["command"] is None and waiting["access"] is None
    assert waiting["missing"].startswith("being prepared") and lab.people["dan"].user in waiting["missing"]
    assert lab.people["ann"].user not in json.dumps(waiting)
    assert cli("apply", "--db", db).code == 0
    check = cli("seats", "check", "--seat", seat, "--format", "json", "--db", db)
    assert json.loads(check.out)["seats"][0]["state"] == "ready", check.out
    # someone unlocks ann's account and gives her key back by hand: dan's seat is no longer exclusive
    ann = lab.people["ann"].user
    subprocess.run(["usermod", "--expiredate", "", ann], check=True)
    (lab.keys_dir / ann).write_text(lab.people["ann"].public_key + "\n")
    os.chmod(lab.keys_dir / ann, 0o644)
    check = cli("seats", "check", "--seat", seat, "--format", "json", "--db", db)
    row = json.loads(check.out)["seats"][0]
    assert row["state"] == "broken" and "previous holder ann is not refused" in row["reason"], row
    assert cli("apply", "--db", db).code == 0  # the next apply (or the agent's resync) locks her out again
    assert lab.ssh("ann", "true").returncode == 255
    assert (
        json.loads(cli("seats", "check", "--seat", seat, "--format", "json", "--db", db).out)["seats"][0]["state"]
        == "ready"
    )
