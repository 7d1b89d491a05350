"""After day one on a real host (real Unix users, a real SQLite store, the host engine's own plan and apply):
moves and releases whose old holder still runs a process on the seat, and an agent stopped between the
revoke and the grant.

The seats' capability files here are plain files (not ``mknod`` devices without a driver), so a
participant's process can hold one open, as a CUDA process holds its GPU.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from delivery.hostlab import MIG_AND_WHOLE, Lab, have_tools, new_lab
from gpuseat.engines.apply import one_pass, plan_all
from gpuseat.engines.host.machine import Machine
from gpuseat.engines.runner import Runner
from gpuseat.store import CourseStore, open_store

MIG = [m["uuid"] for m in MIG_AND_WHOLE[0]["mig"]]  # type: ignore[index]
GI = [7, 8, 9]
COURSE = 'name = "lab"\nparticipants = 3\n[schedule]\nstart = 2026-09-07\ndays = 5\n'


@pytest.fixture
def lab() -> Iterator[Lab]:
    """A stand-in host whose MIG capability files can be held open; users and group removed after."""
    why = have_tools()
    if why:
        pytest.skip(why)
    made = new_lab()
    try:
        made.build(MIG_AND_WHOLE)
        for gi in GI:
            for ci in (None, 0):
                cap = made.cap_file(0, gi, ci)
                cap.unlink()
                cap.write_text("")
                cap.chmod(0o666)
        yield made
    finally:
        made.close()


@pytest.fixture
def db(lab: Lab, tmp_path: Path, cli: Callable[..., Any]) -> str:
    """Course ``lab``: ann, ben, cat; four host seats on gpu1; the engine's settings point at the lab."""
    url = f"sqlite:///{tmp_path / 'course.db'}"
    (tmp_path / "lab.toml").write_text(COURSE)
    for who in ("ann", "ben", "cat"):
        lab.person(who)
    (tmp_path / "roster.csv").write_text(lab.roster())
    listing = subprocess.run([str(lab.nvidia_smi), "-L"], capture_output=True, text=True, check=True).stdout
    (tmp_path / "smi.txt").write_text(listing)
    settings = [f"{k}={v}" for k, v in lab.settings().items() if k != "ssh_port"]
    for args in (
        ("course", "create", tmp_path / "lab.toml", "--key", "lab"),
        ("roster", "import", tmp_path / "roster.csv"),
        ("seats", "add", "--from-nvidia-smi", tmp_path / "smi.txt", "--engine", "host", "--host", "gpu1"),
        ("engines", "settings", "host", *settings, "--course", "lab"),
    ):
        r = cli(*args, "--db", url)
        assert r.code == 0, (args, r.out, r.err)
    return url


def _seat(store: CourseStore, uuid: str) -> str:
    return next(s.key for s in store.seats.seats("lab") if s.device_uuid == uuid)


def _uid(lab: Lab, who: str) -> int:
    return int(subprocess.run(["id", "-u", lab.people[who].user], capture_output=True, text=True, check=True).stdout)


def _acl(lab: Lab, gi: int) -> set[int] | None:
    """Who may open MIG GI ``gi``'s capability file now."""
    return Machine(Runner()).acl_users(lab.cap_file(0, gi))


def _holding(lab: Lab, who: str, gi: int) -> subprocess.Popen[bytes]:
    """A process of ``who`` that holds MIG GI ``gi`` open (as a CUDA process holds its GPU)."""
    with open(lab.cap_file(0, gi), "rb") as held:
        return subprocess.Popen(["sleep", "600"], stdin=held, user=_uid(lab, who))


def _pass(db: str, *, stop_after: str | None = None, host: str | None = None) -> Any:
    """One real pass; ``stop_after``: the agent dies right after the last step of that action."""
    with open_store(db) as store:
        if stop_after is None:
            result = one_pass(store, course="lab", runner=Runner(), host=host)
            assert not result.failed, result.failed
            return result
        [planned] = plan_all(store, course="lab", runner=Runner())
        assert planned.changes is not None and planned.engine is not None
        steps = planned.changes.ordered()
        upto = max(i for i, s in enumerate(steps) if s.action == stop_after) + 1
        calls = iter(range(len(steps) + 1))
        return planned.engine.apply(planned.changes, guard=lambda: next(calls) < upto)


def test_a_move_into_a_held_seat_grants_nothing_before_the_old_holders_process_ends(lab: Lab, db: str) -> None:
    """ann runs on MIG 7; she moves to MIG 9 and ben moves onto MIG 7. Until ann's process that still holds
    MIG 7 has ended, ben must not be able to open it: the revoke phase only takes access away, even when the
    agent stops right there."""
    with open_store(db) as store:
        store.seats.assign("lab", "ann", _seat(store, MIG[0]))
        store.seats.assign("lab", "ben", _seat(store, MIG[1]))
    _pass(db)
    ann, ben = _uid(lab, "ann"), _uid(lab, "ben")
    assert _acl(lab, 7) == {ann} and _acl(lab, 8) == {ben}
    proc = _holding(lab, "ann", 7)
    try:
        with open_store(db) as store:
            store.seats.move("lab", "ann", _seat(store, MIG[2]))
            store.seats.move("lab", "ben", _seat(store, MIG[0]))
        with open_store(db) as store:
            [planned] = plan_all(store, course="lab", runner=Runner(dry_run=True))
        assert planned.changes is not None
        revokes = [s for s in planned.changes.ordered() if s.phase == "revoke"]
        assert any(s.action == "processes.end" and s.data.get("pids") == [proc.pid] for s in revokes), revokes
        mig7 = {str(lab.cap_file(0, 7)), str(lab.cap_file(0, 7, 0))}
        for s in revokes:  # a revoke on ann's old seat leaves nobody new able to open it
            if s.action == "device.revoke" and s.target in mig7:
                assert lab.people["ben"].user not in s.data["logins"], s
        # the agent dies right after the device revokes: ann's process still runs on MIG 7
        report = _pass(db, stop_after="device.revoke")
        assert [o.state for o in report.outcomes].count("done") >= 1
        assert proc.poll() is None
        assert ben not in (_acl(lab, 7) or set()), "ben may open MIG 7 while ann's process still holds it"
        # the next pass finishes the job: ann's stray process ends, then ben gets MIG 7 and ann MIG 9
        _pass(db)
        assert proc.wait(10) is not None
        assert _acl(lab, 7) == {ben} and _acl(lab, 9) == {ann} and not _acl(lab, 8)
        with open_store(db) as store:
            [again] = plan_all(store, course="lab", runner=Runner(dry_run=True))
        assert again.changes is not None and again.changes.empty, again.changes.to_dict()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


CHAIN = """import os, sys, time
deadline = time.time() + float(sys.argv[2])
if os.fork():
    time.sleep(60)  # the process a look at the machine sees
    sys.exit()
while time.time() < deadline:  # each generation forks and exits: never the same pid twice
    if os.fork():
        os._exit(0)
open(sys.argv[1], "w").write("still running")
"""


def _end_all_of(lab: Lab, who: str) -> None:
    """Clean-up: SIGKILL every process of ``who`` at once (kill -1 as that user: nothing forks past it)."""
    subprocess.run(["kill", "-KILL", "-1"], user=_uid(lab, who), check=False, capture_output=True)


def test_a_released_holders_forking_processes_all_end_and_the_next_holder_waits_for_it(lab: Lab, db: str) -> None:
    """The adversary: ann keeps her GPU with a chain of processes that fork and exit (a pid-by-pid sweep
    never catches the live one). Released, every one of her processes ends; cat gets the seat after."""
    python = Path("/usr/bin/python3")
    if not python.exists():
        pytest.skip("needs /usr/bin/python3 for a participant's process")
    with open_store(db) as store:
        store.seats.assign("lab", "ann", _seat(store, MIG[0]))
    _pass(db)
    script, marker = lab.root / "chain.py", lab.root / "out" / "chain"
    script.write_text(CHAIN)
    script.chmod(0o644)
    marker.parent.mkdir(mode=0o777)
    marker.parent.chmod(0o777)
    with open(lab.cap_file(0, 7), "rb") as held:
        subprocess.Popen([str(python), str(script), str(marker), "4"], stdin=held, user=_uid(lab, "ann"))
    try:
        with open_store(db) as store:
            store.seats.release("lab", participant="ann", reason="left the course")
            store.seats.assign("lab", "cat", _seat(store, MIG[0]))
        with open_store(db) as store:
            [planned] = plan_all(store, course="lab", runner=Runner(dry_run=True))
        assert planned.changes is not None
        ends = [s for s in planned.changes.steps if s.action == "processes.end"]
        with open_store(db) as store:
            seat = _seat(store, MIG[0])
        # ann's processes hold that seat: the new holder's grant waits for them to end
        assert [s.seats for s in ends] == [(seat,)], ends
        started = time.monotonic()
        result = _pass(db)
        assert any(o.step.action == "processes.end" for r in result.reports for o in r.done), [
            o.to_dict() for r in result.reports for o in r.outcomes
        ]
        time.sleep(max(0.0, 5.0 - (time.monotonic() - started)))
        assert not marker.exists(), "ann's process chain outlived her release"
        assert _acl(lab, 7) == {_uid(lab, "cat")}
    finally:
        _end_all_of(lab, "ann")


def test_a_clock_step_between_ticks_neither_cuts_the_pass_nor_delays_the_revoke(
    lab: Lab, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The machine's wall clock jumps a day ahead between the agent's lease renewal and its pass. Lease
    times are the database's clock, so the agent still holds its lease: the very next tick revokes the
    released participant, no step is skipped, and she is not left in until the next resync. (When each agent
    wrote its own clock's time, the agent saw its lease as expired and stopped before the first step.)"""
    from gpuseat.engines.agent import Agent, AgentOptions

    with open_store(db) as store:
        store.seats.assign("lab", "ann", _seat(store, MIG[0]))
        agent = Agent(store, AgentOptions(engine="host", host="gpu1", resync_s=3600), say=lambda _line: None)
        assert agent.tick() is not None and agent.role == "leader"
        key = lab.keys_dir / lab.people["ann"].user
        assert key.exists()
        store.seats.release("lab", participant="ann", reason="left the course")
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 86_400)
        done = agent.tick()
        assert done is not None and not any(o.state == "skipped" for r in done.reports for o in r.outcomes)
        assert not key.exists(), "the released participant keeps her key after a clock step"
        assert agent.role == "leader"
        with open_store(db) as again:
            leases = again.agents.leases()
        assert [x["holder"] for x in leases] == [agent.holder]


def test_a_second_server_for_another_course_does_not_fail_the_first_servers_agent(
    lab: Lab, db: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    """A second server comes in for a second course. The first server's agent serves every course of the
    store: it keeps delivering its own seats and has nothing to do, and nothing to fail, for the other."""
    with open_store(db) as store:
        store.seats.assign("lab", "ann", _seat(store, MIG[0]))
    (tmp_path / "lab2.toml").write_text(COURSE.replace('"lab"', '"lab two"'))
    (tmp_path / "gpu2.txt").write_text("GPU 0: NVIDIA H200 (UUID: GPU-cccccccc-0000-4000-8000-000000000002)\n")
    (tmp_path / "roster2.csv").write_text("key,name,email\nzoe,Zoe,zoe@example.org\n")
    for args in (
        ("course", "create", tmp_path / "lab2.toml", "--key", "lab2"),
        ("roster", "import", tmp_path / "roster2.csv", "--course", "lab2"),
        ("seats", "add", "--from-nvidia-smi", tmp_path / "gpu2.txt", "--engine", "host", "--host", "gpu2",
         "--course", "lab2"),
        ("seats", "assign", "--course", "lab2"),
    ):  # fmt: skip
        r = cli(*args, "--db", db)
        assert r.code == 0, (args, r.err)
    with open_store(db) as store:  # the agent of the first server, as it runs there: every course
        result = one_pass(store, engine="host", host="gpu1", runner=Runner())
        assert not result.failed, result.failed
        assert (lab.keys_dir / lab.people["ann"].user).exists()
        again = one_pass(store, engine="host", host="gpu1", runner=Runner(dry_run=True))
        assert not again.failed and all(p.changes is not None and p.changes.empty for p in again.planned)
        assert {p.course for p in again.planned} == {"lab"}
        # asked by name, the wrong server is still one clear error
        wrong = plan_all(store, course="lab2", engine="host", host="gpu1", runner=Runner(dry_run=True))
        assert [p.error for p in wrong] == [
            "--host: host 'gpu1' is not in course 'lab2' (its host seats are on: gpu2) (to fix: give the host name the "
            "seats were added with (gpuseat seats status lists them))"
        ]


def test_a_pass_longer_than_the_lease_keeps_the_lease_and_finishes(lab: Lab, db: str) -> None:
    """A big course's first pass takes longer than the lease (1,000 seats: minutes against 15 s). The agent
    renews its lease as it goes: the pass is done in one tick, not cut short and left to a resync."""
    from gpuseat.engines.agent import Agent, AgentOptions

    with open_store(db) as store:
        for who, uuid in zip(("ann", "ben", "cat"), MIG, strict=True):
            store.seats.assign("lab", who, _seat(store, uuid))
        options = AgentOptions(engine="host", host="gpu1", resync_s=3600, lease_s=0.05)
        agent = Agent(store, options, say=lambda _line: None)
        first = agent.tick()
        assert first is not None and first.reports
        skipped = [o.step.key for r in first.reports for o in r.outcomes if o.state != "done"]
        assert not skipped, f"the pass outlived its lease and stopped: {skipped}"
        for who in ("ann", "ben", "cat"):
            assert (lab.keys_dir / lab.people[who].user).exists()


def test_an_agent_started_without_host_keeps_its_server_true_after_a_second_one_is_added(
    lab: Lab, db: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    """The course ran on one server, whose agent was started without ``--host`` (there was only one). A
    second server is added to the course, then ann is released: the first server still takes her access
    away (it knows itself by the GPUs it has), instead of failing every pass on "several hosts"."""
    with open_store(db) as store:
        store.seats.assign("lab", "ann", _seat(store, MIG[0]))
    _pass(db)
    key = lab.keys_dir / lab.people["ann"].user
    assert key.exists()
    (tmp_path / "gpu2.txt").write_text("GPU 0: NVIDIA H200 (UUID: GPU-cccccccc-0000-4000-8000-000000000002)\n")
    r = cli("seats", "add", "--from-nvidia-smi", tmp_path / "gpu2.txt", "--engine", "host", "--host", "gpu2",
            "--db", db)  # fmt: skip
    assert r.code == 0, r.err
    with open_store(db) as store:
        store.seats.release("lab", participant="ann", reason="left the course")
        store.seats.assign("lab", "ben", next(s.key for s in store.seats.seats("lab") if s.host == "gpu2"))
    result = _pass(db)
    assert [p.host for p in result.planned] == ["gpu1"]
    assert not key.exists() and Machine(Runner()).locked(lab.people["ann"].user)
    assert not (lab.keys_dir / lab.people["ben"].user).exists(), "ben's seat is on the other server"
    with open_store(db) as store:  # away from both servers, the host must still be named
        away = {"host": {"nvidia_smi": str(tmp_path / "no-nvidia-smi")}}
        wrong = plan_all(store, course="lab", engine="host", runner=Runner(dry_run=True), overrides=away)
    assert [p.error for p in wrong] == [
        "--host: the course's host seats are on several hosts: gpu1, gpu2 (to fix: say which one this server is with --host "
        "NAME)"
    ]


def test_a_deleted_course_waits_for_every_server_then_nothing_is_left(
    lab: Lab, db: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    """Course deleted while a second server still holds access for it: this server takes everything of
    the course away (keys, logins, processes, device access, the profile file), the course stays (archived)
    until the other server reports that it holds nothing either, then the next pass deletes it. The course's
    probe key (a private key that could log in as any holder while they held a seat) goes with it."""
    from gpuseat.engines.host.engine import state_dir

    with open_store(db) as store:
        store.seats.assign("lab", "ann", _seat(store, MIG[0]))
    _pass(db)
    assert (state_dir("lab") / "probe_ed25519").exists()
    proc = _holding(lab, "ann", 7)
    try:
        with open_store(db) as store:  # what the second server's agent last found there
            gpu2 = [{"engine": "host", "what": "key", "login": "gben", "participant": "ben", "seat": "s9"}]
            store.agents.set_holdings("lab", "host", "gpu2", gpu2)
        r = cli("course", "delete", "lab", "--yes", "--export-to", tmp_path / "lab.zip", "--db", db)
        assert r.code == 0, r.err
        result = _pass(db, host="gpu1")
        assert result.deleted == [] and proc.wait(10) is not None
        user = lab.people["ann"].user
        assert not (lab.keys_dir / user).exists() and Machine(Runner()).account(user) is None
        assert all(not _acl(lab, gi) for gi in GI) and not Path(lab.settings()["profile_d"]).exists()
        with open_store(db) as store:
            assert [h["host"] for h in store.agents.holdings("lab")] == ["gpu2"]
            assert store.courses.get_course("lab").key == "lab"  # still there: gpu2 holds something
            store.agents.set_holdings("lab", "host", "gpu2", [])  # gpu2's agent took ben's access away
        assert _pass(db, host="gpu1").deleted == ["lab"]
        assert not state_dir("lab").exists(), "the deleted course's probe key is left on the server"
        # the account and its home folder go with the course: a later course of the same key that gives
        # someone the same login must not hand them the old participant's files
        assert Machine(Runner()).account(user) is None, f"{user} is left on the server"
        assert cli("course", "show", "lab", "--db", db).code == 2
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_course_group_that_holds_someone_else_takes_no_course_account_in(lab: Lab, db: str) -> None:
    """The engine's ``group`` names a group that already holds an account gpuseat did not make (an
    operator's, a service's): the pass adds no course account to it and says why, so the participants never
    share what that group grants; with the stranger gone the same pass lets them in."""
    stranger = f"g{lab.tag}x"[:32]
    subprocess.run(["groupadd", "--system", lab.group], check=True)
    subprocess.run(["useradd", "--no-create-home", "--groups", lab.group, stranger], check=True)
    try:
        with open_store(db) as store:
            store.seats.assign("lab", "ann", _seat(store, MIG[0]))
            result = one_pass(store, course="lab", runner=Runner())
        messages = [str(f) for f in result.failed]
        assert any("already holds accounts gpuseat did not make" in m and stranger in m for m in messages), messages
        user = lab.people["ann"].user
        assert Machine(Runner()).account(user) is None, "a course account went into a group with someone else in it"
    finally:
        subprocess.run(["userdel", stranger], capture_output=True, check=False)
    _pass(db)
    assert Machine(Runner()).account(lab.people["ann"].user) is not None


def test_a_process_that_becomes_the_released_holder_right_after_the_kill_is_ended_too(lab: Lab, db: str) -> None:
    """A session being set up as the revoke's kill runs (sshd forks as root, then the child becomes the
    user) comes after the kill: here a root process starts one more of ann's the moment her first one dies.
    The revoke kills again until none is left, instead of failing the step and leaving that process running
    until the next pass (CI met this under load: a stop's apply left the participant's shell alive)."""
    import threading

    with open_store(db) as store:
        store.seats.assign("lab", "ann", _seat(store, MIG[0]))
    _pass(db)
    uid = _uid(lab, "ann")
    first = subprocess.Popen(["sleep", "600"], user=uid)
    late: list[subprocess.Popen[bytes]] = []

    def become_ann_after_the_kill() -> None:
        first.wait(60)
        late.append(subprocess.Popen(["sleep", "600"], user=uid))

    watcher = threading.Thread(target=become_ann_after_the_kill, daemon=True)
    watcher.start()
    try:
        with open_store(db) as store:
            store.seats.release("lab", participant="ann", reason="left the course")
        _pass(db)  # no failed step: "survived SIGKILL" was the old answer
        watcher.join(10)
        assert late and late[0].wait(10) is not None, "the process that came after the first kill still runs"
        assert not Machine(Runner()).processes({uid})
    finally:
        for p in (first, *late):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_a_pass_with_nothing_to_do_runs_no_command_and_writes_no_row_per_seat(lab: Lab, db: str) -> None:
    """An agent's pass over a settled course (every resync, every event of the course) read each seat's device
    files' ACLs with one getfacl each (3,000 processes a pass for 1,000 MIG seats), and deleted and wrote again
    what each holder holds (two rows a seat, under the store's write lock). The ACLs are read from the files'
    attributes, and unchanged holdings are not written: the pass runs nvidia-smi's two reads, whatever the seats."""
    from sqlalchemy import event

    with open_store(db) as store:
        for who, uuid in zip(("ann", "ben", "cat"), MIG, strict=True):
            store.seats.assign("lab", who, _seat(store, uuid))
    _pass(db)
    runner = Runner()
    said: list[str] = []
    with open_store(db) as store:
        held = store.agents.holdings("lab")
        on = lambda _conn, _cursor, sql, *_rest: said.append(sql)  # noqa: E731
        event.listen(store.database.engine, "before_cursor_execute", on)
        try:
            result = one_pass(store, course="lab", runner=runner, host="gpu1")
        finally:
            event.remove(store.database.engine, "before_cursor_execute", on)
        assert store.agents.holdings("lab") == held and len(held) == 6, held  # three accounts, three keys
    assert [p.changes.steps for p in result.planned if p.changes] == [[]]
    wrote = [sql for sql in said if "engine_holdings" in sql and not sql.lstrip().upper().startswith("SELECT")]
    assert wrote == [], wrote
    ran = [r.argv for r in runner.log]
    assert [argv[1:] for argv in ran] == [("-q", "-x"), ("-L",)], ran
    for who, gi in zip(("ann", "ben", "cat"), GI, strict=True):  # as getfacl lists them
        listed = subprocess.run(["getfacl", "--numeric", "--omit-header", str(lab.cap_file(0, gi))],
                                capture_output=True, text=True, check=True).stdout  # fmt: skip
        assert f"user:{_uid(lab, who)}:rw-" in listed.split() and _acl(lab, gi) == {_uid(lab, who)}, listed


def test_a_reset_whose_agent_died_before_marking_it_done_is_not_done_again(
    lab: Lab, db: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    """kill -9 after a reset restored ann's home, before its request was marked done: the next leader planned the
    pending reset again and restored her home a second time, wiping what she wrote since (she logs in again as
    soon as the reset is done). The reset is carried out once per request; the request is then marked done."""
    import pwd

    skeleton = tmp_path / "skel"
    skeleton.mkdir()
    (skeleton / "README").write_text("welcome\n")
    r = cli("engines", "settings", "host", f"skeleton={skeleton}", "--course", "lab", "--db", db)
    assert r.code == 0, r.err
    with open_store(db) as store:
        store.seats.assign("lab", "ann", _seat(store, MIG[0]))
    _pass(db)
    home = Path(pwd.getpwnam(lab.people["ann"].user).pw_dir)
    (home / "before.txt").write_text("gone with the reset\n")
    with open_store(db) as store:
        store.requests.request_seat("lab", "ann", "reset", actor="organizer", by_participant=False)
    _pass(db, stop_after="home.reset")  # the agent dies here
    assert sorted(p.name for p in home.iterdir()) == ["README"]
    (home / "after.txt").write_text("her work since the reset\n")
    _pass(db)  # the next leader
    assert (home / "after.txt").exists(), "the reset was done again"
    with open_store(db) as store:
        [request] = store.requests.seat_requests("lab", participant="ann")
    assert (request.action, request.state) == ("reset", "done"), request
