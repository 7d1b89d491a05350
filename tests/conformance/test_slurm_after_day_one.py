"""Slurm seats after day one, as the participant: on the real cluster of ``test_slurm.py`` (its ``lab`` fixture,
started once for this module), the organiser changes the store and ``gpuseat apply`` alone follows; each
participant then submits as their own unix user with the options they choose.

What ``test_slurm.py`` already runs (a release, a move, a renamed login, the agent) is not repeated here; this
module adds the jobs a participant can keep that are not one plain job (a job array, a heterogeneous job), a
second course on the same cluster and its archive, and session reservations on a controller whose local time
has a DST change.

Seen here and fixed: a participant's heterogeneous job waiting for their own busy GPU (one component without a
GPU, one with it) kept another participant's job in the same session from starting ("Requested nodes are busy"
after 60 s). Each core of a session reservation is a seat's, its GPU bound to it (``enforce-binding``); a job or
component without a GPU takes the lowest free one, and the backfill pass had planned the waiting component on
bob's. job_submit.lua now refuses such jobs in a session. A GPU job asking for more CPUs than the seat's one core
(``-c 2``) never took another's core, but was refused with no word about CPUs, or waited for ever when changed by
``scontrol update``: now refused at once, saying what to ask for.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from datetime import date, datetime, timedelta

import pytest
from test_slurm import (
    INDEX,
    SEATS,
    USERS,
    Lab,
    _apply,
    _gpuseat,
    _long_job,
    _people,
    _plan_steps,
    lab,  # noqa: F401  (its cluster, started once for this module)
)

from gpuseat.engines.slurm import course as service
from gpuseat.engines.slurm.course import device_from_ref

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(name="slurm_conformance")]


def _queue(lab: Lab, who: str) -> list[str]:  # noqa: F811
    """``squeue`` lines (``%i %T``) of the participant's jobs, as the participant sees them."""
    out = lab.as_user(who, "squeue", "-h", "-u", USERS[who], "-o", "%i %T", check=True).stdout
    return out.split("\n")[:-1] if out else []


def _submit(lab: Lab, who: str, *args: str) -> str:  # noqa: F811
    sub = lab.as_user(who, "sbatch", *args, f"--output={lab.cluster.root / 'out' / 'day2-%j.out'}", check=True)
    return sub.stdout.split()[-1]


def test_a_job_array_and_a_heterogeneous_job_end_with_a_release_and_a_move(lab: Lab) -> None:  # noqa: F811
    """alice runs a job array (task 0 on her GPU, task 1 waiting for it, neither on another seat's GPU) in the
    session and a heterogeneous job in partition debug (its GPU part her seat's, waiting: the session holds her
    GPU's core); carol runs an array on seat-03; bob a plain job. alice is released and carol moved to seat-04,
    then ``gpuseat apply``: none of alice's jobs is left (squeue shows the array's tasks as ``N_0`` and
    ``N_1``, a heterogeneous job's components as ``N+0``, ``N+1``: before, the engine skipped those lines
    and the running task kept her old GPU), carol's array on seat-03 is gone and she gets seat-04's GPU, bob's
    job runs on."""
    session = ("-p", "gpuseat-conf", f"--reservation={lab.session}")
    people = _people(lab)
    bob = _long_job(lab, "bob")
    jobs: dict[str, list[str]] = {"carol": [], "alice": []}
    try:
        assert lab.wait_state(bob, {"RUNNING"}) == "RUNNING"
        for who in ("carol", "alice"):
            jobs[who].append(_submit(lab, who, "--array=0-1", *session, "--gres=gpu:1", "--wrap", "sleep 300"))
        deadline = time.monotonic() + 60
        for who in ("carol", "alice"):
            while time.monotonic() < deadline and not any(ln.endswith("_0 RUNNING") for ln in _queue(lab, who)):
                time.sleep(0.2)
            assert any(ln.endswith("_0 RUNNING") for ln in _queue(lab, who)), _queue(lab, who)
        for who, (array,) in jobs.items():  # one task at a time, on their own GPU; the next waits for it
            assert re.search(rf"GRES=gpu:m60\.{SEATS[who]}:1\(IDX:{INDEX[who]}\)", lab.job(f"{array}_0")), who
            assert [ln for ln in _queue(lab, who) if ln.endswith("RUNNING")] == [f"{array}_0 RUNNING"]
            assert re.findall(r"TresPerNode=(\S+)", lab.job(f"{array}_1")) == [f"gres:gpu:m60.{SEATS[who]}:1"]
        debug = ("-p", "debug")  # outside the session: allowed, and no core of the session's
        jobs["alice"].append(_submit(lab, "alice", *debug, "--wrap", "sleep 300", ":", *debug, "--gres=gpu:1"))
        assert {ln.split()[0] for ln in _queue(lab, "alice")} >= {f"{jobs['alice'][1]}+0", f"{jobs['alice'][1]}+1"}
        lab.store.seats.release("conf", participant=people["alice"])  # type: ignore[attr-defined]
        lab.store.seats.move("conf", people["carol"], "seat-04")  # type: ignore[attr-defined]
        assert _apply(lab) == 0
        assert _queue(lab, "alice") == []
        assert _queue(lab, "carol") == []
        assert lab.wait_state(bob, {"RUNNING"}) == "RUNNING"  # nobody else's job was touched
        rc, seen, err = lab.gpus("carol", *session, "--gres=gpu:1")
        assert rc == 0 and seen == ["3"], err  # seat-04's GPU, at once
        rc, seen, err = lab.gpus("alice", "-p", "debug", "--gres=gpu:1", "--immediate=1")
        assert rc != 0 and not seen, err
        assert _plan_steps(lab) == []
    finally:
        lab.slurm.run("scancel", ["-u", USERS["alice"]], check=False)
        lab.slurm.run("scancel", ["-u", USERS["carol"]], check=False)
        lab.slurm.run("scancel", [bob], check=False)
        lab.store.seats.move("conf", people["carol"], SEATS["carol"])  # type: ignore[attr-defined]
        lab.store.seats.assign("conf", people["alice"], SEATS["alice"])  # type: ignore[attr-defined]
        assert _apply(lab) == 0
    rc, seen, err = lab.gpus("alice", *session, "--gres=gpu:1")
    assert rc == 0 and seen == [INDEX["alice"]], err


def test_a_heterogeneous_job_or_one_without_a_gpu_is_refused_in_the_session(lab: Lab) -> None:  # noqa: F811
    """What kept bob waiting (module docstring) is refused at once, saying what to do: alice's heterogeneous job
    and her job without a GPU (``--gres=gpu:0`` too) in the session, and her held job without a GPU (or
    heterogeneous) moved into it with ``scontrol update``; her held GPU job moved into it is kept."""
    session = ("-p", "gpuseat-conf", f"--reservation={lab.session}")
    try:
        one_gpu = "submit one job with your one GPU (--gres=gpu:1)"
        for args, said in (
            ((*session, "--wrap", "true", ":", *session, "--gres=gpu:1"), "a heterogeneous job cannot run"),
            ((*session, "--gres=gpu:1", "--wrap", "true", ":", *session, "--gres=gpu:1"), "a heterogeneous job"),
            ((*session, "--wrap", "true"), "a job without a GPU would take another participant's core"),
            ((*session, "--gres=gpu:0", "--wrap", "true"), "a job without a GPU would take another"),
        ):
            sub = lab.as_user("alice", "sbatch", *args)
            assert sub.returncode != 0 and said in sub.stderr and one_gpu in sub.stderr, (args, sub.stderr)
        het = lab.as_user("alice", "srun", *session, "true", ":", *session, "--gres=gpu:1", "true")  # interactive
        assert het.returncode != 0 and "a heterogeneous job cannot run" in het.stderr, het.stderr
        # held in debug, then moved into the session (Slurm 22.05 does not pass a refused change's reason on)
        debug = ("--hold", "-p", "debug", "--wrap", "true")
        for args, kept in (((), False), (("--gres=gpu:1",), True), ((":", "-p", "debug", "--gres=gpu:1"), False)):
            held = _submit(lab, "alice", *debug, *args)
            into = (f"jobid={held}", "Partition=gpuseat-conf", f"ReservationName={lab.session}")
            moved = lab.as_user("alice", "scontrol", "update", *into)
            assert (moved.returncode == 0) == kept, (args, moved.stderr)
            assert ("Partition=gpuseat-conf" in lab.job(held)) == kept, lab.job(held)
            if kept:  # and in the session, its GPU is not taken away
                dropped = lab.as_user("alice", "scontrol", "update", f"jobid={held}", "TresPerNode=gres:gpu:0")
                assert dropped.returncode != 0 and "TresPerNode=gres:gpu:m60.seat-01:1" in lab.job(held), lab.job(held)
    finally:
        lab.slurm.run("scancel", ["-u", USERS["alice"]], check=False)


def test_a_gpu_job_asking_for_more_cpus_than_its_seat_is_refused_saying_how_many(lab: Lab) -> None:  # noqa: F811
    """A seat is one core, its GPU bound to it (``enforce-binding``): alice's GPU job asking for more CPUs (``-c 2``
    for a data loader, two tasks, ``--cpus-per-gpu``, ``--mincpus``, ``--exclusive`` in the session) is refused
    at once saying how many CPUs her seat has and what to ask for. Before, Slurm refused it with "Requested node
    configuration is not available" (nothing about CPUs), and the same request reached by ``scontrol update`` on
    a held job was taken: released, the job waited for ever (``BadConstraints``)."""
    session = ("-p", "gpuseat-conf", f"--reservation={lab.session}")
    at_most = "your seat in gpuseat-conf has 1 CPU (the core its GPU is bound to); ask for at most 1 CPU (-c 1)"
    try:
        for args in (("-c", "2"), ("-n", "2"), ("--ntasks-per-node=2",), ("--cpus-per-gpu=2",), ("--mincpus=2",)):
            for where in (session, ("-p", "debug")):  # outside the session too: her GPU is the seat's, one core
                sub = lab.as_user("alice", "sbatch", *where, *args, "--gres=gpu:1", "--wrap", "true")
                assert sub.returncode != 0 and at_most in sub.stderr, (where, args, sub.stderr)
        sub = lab.as_user("alice", "sbatch", *session, "--exclusive", "--gres=gpu:1", "--wrap", "true")
        assert sub.returncode != 0 and "--exclusive asks for the whole node" in sub.stderr and at_most in sub.stderr
        srun = lab.as_user("alice", "srun", *session, "-c", "4", "--gres=gpu:1", "true")  # interactive
        assert srun.returncode != 0 and "asks for 4 CPUs" in srun.stderr and at_most in srun.stderr, srun.stderr
        held = _submit(lab, "alice", "--hold", *session, "--gres=gpu:1", "--wrap", "true")
        for change in ("CPUsPerTask=2", "NumTasks=2", "NumCPUs=2", "MinCPUsNode=2"):
            changed = lab.as_user("alice", "scontrol", "update", f"jobid={held}", change)
            assert changed.returncode != 0, (change, lab.job(held))
        assert "NumCPUs=1 NumTasks=1 CPUs/Task=1" in lab.job(held) and "MinCPUsNode=1" in lab.job(held)
        assert lab.as_user("alice", "scontrol", "update", f"jobid={held}", "Comment=loader").returncode == 0
        lab.as_user("alice", "scontrol", "release", held, check=True)  # and it runs
        assert lab.wait_state(held, {"COMPLETED", "GONE"}) in {"COMPLETED", "GONE"}
    finally:
        lab.slurm.run("scancel", ["-u", USERS["alice"]], check=False)


@pytest.fixture
def berlin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The controller's local time is Europe/Berlin (gpuseat and scontrol read ``TZ``; scontrol parses and
    shows reservation times in its own local time)."""
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        yield
    finally:
        monkeypatch.undo()
        time.tzset()


def _second_course(lab: Lab) -> None:  # noqa: F811
    """Course ``dst`` (Europe/Berlin) on the same cluster: carol, who also holds seat-03 of ``conf``, holds
    its seat-04; two sessions from 00:00 to 06:00 on the days the clocks change in 2027."""
    root = lab.cluster.root
    (root / "dst.toml").write_text(
        'name = "Spring and autumn"\nparticipants = 1\n\n[needs]\nmin_gpu_memory_gb = 4\n\n'
        "[schedule]\nstart = 2027-03-28\nend = 2027-10-31\n\n"
        '[[schedule.session]]\ndate = 2027-03-28\nhours = "00:00-06:00"\n\n'
        '[[schedule.session]]\ndate = 2027-10-31\nhours = "00:00-06:00"\n'
    )
    (root / "dst.csv").write_text(
        f"name,email,group,unix_user\ncarol,carol@example.edu,participants,{USERS['carol']}\n"
    )
    st = lab.store
    st.courses.create_course(root / "dst.toml", key="dst", timezone="Europe/Berlin")  # type: ignore[attr-defined]
    st.roster.import_roster("dst", root / "dst.csv")  # type: ignore[attr-defined]
    st.seats.add_seats("dst", [{"key": "seat-04", "kind": "gpu", "host": "localhost", "memory_gb": 8}])  # type: ignore[attr-defined]
    ref = st.seats.get_seat("conf", "seat-04").engine_ref  # type: ignore[attr-defined]
    service.record_config(st, "dst", [device_from_ref("seat-04", ref)])  # type: ignore[arg-type]
    (carol,) = st.roster.participants("dst")  # type: ignore[attr-defined]
    st.seats.assign("dst", carol.key, "seat-04")  # type: ignore[attr-defined]
    st.agents.set_engine_settings("dst", "slurm", {"slurm_conf": str(lab.cluster.conf)})  # type: ignore[attr-defined]


def test_a_second_course_its_sessions_across_dst_and_its_archive(lab: Lab, berlin: None) -> None:  # noqa: F811
    """On a controller in Europe/Berlin, a session from 00:00 to 06:00 on the day the clocks go forward lasts
    5 hours and on the day they go back 7: the reservation ends at 06:00 both days, as the participant reads it
    (before: Duration=360 from the wall times, so 07:00 and 05:00). alice, not in course ``dst``, cannot use its
    partition or session; carol cannot take its session into her ``conf`` partition. Then ``dst`` is archived:
    carol's job waiting in its session is cancelled, its reservations and partition go, and her job in ``conf``
    runs on; ``conf``'s plan stays empty."""
    _second_course(lab)
    assert _gpuseat("apply", "--course", "dst", "--engine", "slurm", "--db", lab.url) == 0
    shown = lab.as_user("carol", "scontrol", "-o", "show", "reservation", check=True).stdout
    times = dict(re.findall(r"ReservationName=(gpuseat-dst-\S+) (StartTime=\S+ EndTime=\S+)", shown))
    assert times == {
        "gpuseat-dst-20270328T0000": "StartTime=2027-03-28T00:00:00 EndTime=2027-03-28T06:00:00",
        "gpuseat-dst-20271031T0000": "StartTime=2027-10-31T00:00:00 EndTime=2027-10-31T06:00:00",
    }, shown
    spring = "--reservation=gpuseat-dst-20270328T0000"
    for who, args, said in (
        ("alice", ("-p", "gpuseat-dst", spring), "not enrolled in partition gpuseat-dst"),
        ("alice", (spring,), "not enrolled in partition gpuseat-dst"),
        ("carol", ("-p", "gpuseat-conf", spring), "belongs to partition gpuseat-dst, not gpuseat-conf"),
    ):
        sub = lab.as_user(who, "sbatch", "--hold", *args, "--gres=gpu:1", "--wrap", "true")
        assert sub.returncode != 0 and said in sub.stderr, (who, args, sub.stderr)
    waiting = _submit(lab, "carol", "-p", "gpuseat-dst", spring, "--gres=gpu:1", "--wrap", "true")
    assert re.search(r"TresPerNode=gres:gpu:m60\.seat-04:1\b", lab.job(waiting))
    running = _long_job(lab, "carol")
    try:
        assert lab.wait_state(running, {"RUNNING"}) == "RUNNING"
        assert _gpuseat("course", "archive", "dst", "--db", lab.url) == 0
        assert _gpuseat("apply", "--course", "dst", "--engine", "slurm", "--db", lab.url) == 0
        assert lab.wait_state(waiting, {"CANCELLED", "GONE"}) in {"CANCELLED", "GONE"}
        assert not [n for n in lab.slurm.reservations() if n.startswith("gpuseat-dst-")]
        assert "gpuseat-dst" not in lab.slurm.partitions()
        assert lab.wait_state(running, {"RUNNING"}) == "RUNNING"
    finally:
        lab.slurm.run("scancel", [waiting, running], check=False)
    rc, seen, err = lab.gpus("carol", "-p", "gpuseat-dst", "--gres=gpu:1", "--immediate=5")
    assert rc != 0 and not seen, err
    rc, seen, err = lab.gpus("carol", "-p", "gpuseat-conf", f"--reservation={lab.session}", "--gres=gpu:1")
    assert rc == 0 and seen == [INDEX["carol"]], err


def _sessions(text: str, days: dict[int, str]) -> str:
    """The course file ``text`` with sessions on the days ``days`` names (after its first) added, its end after
    the last: what the organiser stores when they change the schedule after day one."""
    first = date.fromisoformat(re.search(r"^start = (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]
    text = re.sub(r"^end = \S+$", f"end = {first + timedelta(days=6)}", text, flags=re.M)
    return text + "".join(
        f'\n[[schedule.session]]\ndate = {first + timedelta(days=d)}\nhours = "{hours}"\n' for d, hours in days.items()
    )


def _shown(lab: Lab) -> dict[str, str]:  # noqa: F811
    """Each reservation's ``StartTime=… EndTime=…`` as ``scontrol show reservation`` reads them back."""
    out = lab.slurm.run("scontrol", ["-o", "show", "reservation"], check=True).stdout
    return dict(re.findall(r"ReservationName=(\S+) (StartTime=\S+ EndTime=\S+)", out))


def _core_ids(lab: Lab, name: str) -> str:  # noqa: F811
    """The cores a reservation holds (``CoreIDs=`` of ``scontrol -o show reservation``, which slurmctld shows a
    few seconds after it made one with ``IGNORE_JOBS``)."""
    deadline = time.monotonic() + 30
    while "CoreIDs" not in (fields := lab.slurm.reservations()[name]) and time.monotonic() < deadline:
        time.sleep(0.2)
    return fields.get("CoreIDs", "")


def test_a_changed_schedule_lengthens_moves_and_cancels_the_sessions_on_the_cluster(
    lab: Lab,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    """After day one the organiser edits the course's sessions: day 2's lengthened to 13:00, day 3's moved from
    09:00 to 14:00, day 4's from 09:00 to 10:00. One ``gpuseat apply`` and ``scontrol show reservation`` shows:
    day 2's ends at 13:00 (``scontrol update … EndTime=``, which Slurm 22.05 takes on a core reservation; with
    ``Flags=IGNORE_JOBS``, as carol's job with no time limit runs on the node: without it, "Requested nodes are
    busy"), day 3's old reservation is gone and the new one is there. Day 4's old one holds bob's job waiting for it, which Slurm
    will not let go ("Requested reservation is in use"): it stays, the apply's note names the job, and the new
    one, which would overlap it (and be given other cores), waits; the first apply after the job ends makes the
    move. Back to day one's schedule, the sessions it no longer has are deleted. A reservation named like a
    session but not in the course partition (made by hand), and one of course ``conf-x``, are never touched.
    Before, the lengthened session kept its old end and the moved and cancelled ones kept holding the course's
    cores.

    alice's job (no time limit) runs through it all, on her seat's core 0: the sessions made meanwhile hold the
    seats' cores 0-3 and carol, released, leaves the sessions still to come (``Flags=IGNORE_JOBS``). Before, such
    a session got cores 1-4 (alice's GPU outside it) and each update of one still to come was refused
    ("Requested nodes are busy"): the released carol stayed in them.

    Day 2's session is first made by hand on cores 1-4 (another reservation holding core 0 then, as a job did
    before ``IGNORE_JOBS``): the first apply leaves it (a new one would get 1-4 again), the next, that reservation
    gone, makes it again on the seats' cores 0-3. Before, only its core count was compared: it kept 1-4."""
    text = lab.store.courses.course_text("conf")  # type: ignore[attr-defined]
    first = date.fromisoformat(re.search(r"^start = (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]

    def at(day: int, hhmm: str) -> str:  # the controller's local time, as scontrol shows it
        when = datetime.fromisoformat(f"{first + timedelta(days=day)}T{hhmm}+00:00").astimezone()
        return when.strftime("%Y-%m-%dT%H:%M:%S")

    def name(day: int, hhmm: str) -> str:
        return f"gpuseat-conf-{first + timedelta(days=day):%Y%m%d}T{hhmm.replace(':', '')}"

    hand = {
        name(5, "09:00"): "debug",  # a session's name, in another partition
        f"gpuseat-conf-x-{first + timedelta(days=5):%Y%m%d}T0900": "debug",  # course conf-x's
    }
    changed = _sessions(text, {2: "09:00-13:00", 3: "14:00-17:00", 4: "10:00-13:00"})
    people, released = _people(lab), False
    busy = _long_job(lab, "alice")  # today's session, no time limit, on her seat's core 0, through every pass
    try:
        for resv, part in hand.items():
            lab.slurm.run("scontrol", ["create", "reservation", f"ReservationName={resv}", "Users=root",
                                       f"StartTime={at(5, '09:00')}", "Duration=60", "Nodes=localhost",
                                       "CoreCnt=1", f"PartitionName={part}"], check=True)  # fmt: skip
        for resv, part, cores in (("blocker", "debug", 1), (name(2, "09:00"), "gpuseat-conf", 4)):  # 0, then 1-4
            lab.slurm.run("scontrol", ["create", "reservation", f"ReservationName={resv}", "Users=root",
                                       f"StartTime={at(2, '09:00')}", "Duration=180", "Nodes=localhost",
                                       f"CoreCnt={cores}", f"PartitionName={part}", "Flags=IGNORE_JOBS"], check=True)  # fmt: skip
        store = lab.store.courses  # type: ignore[attr-defined]
        store.set_course_text("conf", _sessions(text, {d: "09:00-12:00" for d in (2, 3, 4)}), changes=[])
        assert lab.wait_state(busy, {"RUNNING"}) == "RUNNING"
        assert _apply(lab) == 0  # day 2's, made by hand on cores 1-4, stays while the blocker holds core 0 then
        lab.slurm.run("scontrol", ["delete", "ReservationName=blocker"], check=True)
        made = {n for n in _shown(lab) if n.startswith("gpuseat-conf-2")}
        assert made == {lab.session, *(name(d, "09:00") for d in (2, 3, 4, 5))}
        waiting = _submit(lab, "bob", "-p", "gpuseat-conf", f"--reservation={name(4, '09:00')}", "--gres=gpu:1",
                          "--wrap", "true")  # fmt: skip
        lab.store.seats.release("conf", participant=people["carol"])  # type: ignore[attr-defined]
        released = True
        store.set_course_text("conf", changed, changes=[])
        capsys.readouterr()
        assert _core_ids(lab, name(2, "09:00")) == "1-4"
        assert _apply(lab) == 0
        said = capsys.readouterr().out
        assert "cores 0-3 on localhost for its seats, not 1-4: made again" in said, said
        shown = _shown(lab)
        assert shown[name(2, "09:00")] == f"StartTime={at(2, '09:00')} EndTime={at(2, '13:00')}", shown
        assert shown[name(3, "14:00")] == f"StartTime={at(3, '14:00')} EndTime={at(3, '17:00')}", shown
        assert name(3, "09:00") not in shown and name(4, "10:00") not in shown, shown
        assert name(4, "09:00") in shown and f"job(s) {waiting} are in it" in said, said
        assert f"session {name(4, '10:00')} is made once {name(4, '09:00')} is gone" in said, said
        assert lab.wait_state(waiting, {"PENDING"}) == "PENDING"  # bob's job is his to cancel
        for resv in hand:
            assert shown[resv] == f"StartTime={at(5, '09:00')} EndTime={at(5, '10:00')}", shown
        users = {n: f["Users"].split(",") for n, f in lab.slurm.reservations().items() if n.startswith("gpuseat-")}
        assert USERS["carol"] not in users[lab.session] and USERS["carol"] not in users[name(2, "09:00")], users
        assert _plan_steps(lab) == []
        assert _core_ids(lab, name(4, "09:00")) == "0-3"  # made while alice's job runs: the seats' cores
        lab.slurm.run("scancel", [waiting], check=True)
        assert lab.wait_state(waiting, {"CANCELLED", "GONE"}) in {"CANCELLED", "GONE"}
        assert _apply(lab) == 0
        shown = _shown(lab)
        assert name(4, "09:00") not in shown, shown
        assert shown[name(4, "10:00")] == f"StartTime={at(4, '10:00')} EndTime={at(4, '13:00')}", shown
        lab.store.seats.assign("conf", people["carol"], SEATS["carol"])  # type: ignore[attr-defined]
        released = False
        store.set_course_text("conf", text, changes=[])  # back to day one's schedule: the rest are cancelled
        assert _apply(lab) == 0
        assert {n for n in _shown(lab) if n.startswith("gpuseat-conf-")} == {lab.session, *hand}
        assert USERS["carol"] in lab.slurm.reservations()[lab.session]["Users"].split(",")
        assert _plan_steps(lab) == []
    finally:
        for who in ("alice", "bob"):
            lab.slurm.run("scancel", ["-u", USERS[who]], check=False)
        for resv in (*hand, "blocker"):
            lab.slurm.run("scontrol", ["delete", f"ReservationName={resv}"], check=False)
        lab.store.courses.set_course_text("conf", text, changes=[])  # type: ignore[attr-defined]
        if released:
            lab.store.seats.assign("conf", people["carol"], SEATS["carol"])  # type: ignore[attr-defined]
            _apply(lab)
    rc, seen, err = lab.gpus("bob", "-p", "gpuseat-conf", f"--reservation={lab.session}", "--gres=gpu:1")
    assert rc == 0 and seen == [INDEX["bob"]], err


def test_a_session_kept_for_a_running_job_takes_no_new_job(lab: Lab, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    """Today's session is moved to tomorrow while alice's job (no time limit) runs in it: Slurm deletes no
    reservation in use, so the old one stays, but after ``gpuseat apply`` it admits nobody (``Users=root``):
    alice's and bob's new ``sbatch --reservation=`` of it are refused, while alice's job runs on. A second plan is
    empty; once her job has ended the next apply deletes the reservation. Before, it kept its users, who could
    start new jobs in a session the course no longer has, on its cores, for as long as her job ran."""
    text = lab.store.courses.course_text("conf")  # type: ignore[attr-defined]
    first = date.fromisoformat(re.search(r"^start = (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]
    moved = text.replace(f"date = {first}\nhours", f"date = {first + timedelta(days=1)}\nhours")
    assert moved != text
    busy = _long_job(lab, "alice")
    try:
        assert lab.wait_state(busy, {"RUNNING"}) == "RUNNING"
        lab.store.courses.set_course_text("conf", moved, changes=[])  # type: ignore[attr-defined]
        capsys.readouterr()
        assert _apply(lab) == 0
        said = capsys.readouterr().out
        assert f"job(s) {busy} are in it, so it stays, open to no new job" in said, said
        assert f"no new job in it (Users=root); deleted once job(s) {busy} end" in said, said
        assert lab.slurm.reservations()[lab.session]["Users"] == "root"
        for who in ("alice", "bob"):
            sub = lab.as_user(who, "sbatch", "-p", "gpuseat-conf", f"--reservation={lab.session}", "--gres=gpu:1",
                              f"--output={lab.cluster.root / 'out' / 'kept-%j.out'}", "--wrap", "true")  # fmt: skip
            assert sub.returncode != 0 and "Access denied to requested reservation" in sub.stderr, (who, sub.stderr)
        assert "JobState=RUNNING" in lab.job(busy), lab.job(busy)  # her job is hers: it runs on
        assert _plan_steps(lab) == []
        lab.slurm.run("scancel", [busy], check=True)
        assert lab.wait_state(busy, {"CANCELLED", "GONE"}) in {"CANCELLED", "GONE"}
        assert _apply(lab) == 0
        assert lab.session not in lab.slurm.reservations()
    finally:
        lab.slurm.run("scancel", ["-u", USERS["alice"]], check=False)
        lab.store.courses.set_course_text("conf", text, changes=[])  # type: ignore[attr-defined]
        assert _apply(lab) == 0
    rc, seen, err = lab.gpus("alice", "-p", "gpuseat-conf", f"--reservation={lab.session}", "--gres=gpu:1")
    assert rc == 0 and seen == [INDEX["alice"]], err


def test_the_last_session_cancelled_shuts_its_reservation(lab: Lab, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    """The course's one session (today) is moved to yesterday by ``course update`` (the course starts yesterday,
    its end kept): no session is still to come while the course stays active with holders. With alice's job in
    it, ``gpuseat apply`` keeps today's reservation but admits nobody (``Users=root``, her new ``sbatch`` refused);
    once her job has ended the next apply deletes it and her ``sbatch --reservation=`` of it is refused. Each
    second plan is empty. Before, with no session to come the stale-session rule did not run: the reservation
    kept its users, who could run jobs in a session the course no longer has, on its cores."""
    text = lab.store.courses.course_text("conf")  # type: ignore[attr-defined]
    first = date.fromisoformat(re.search(r"^start = (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]
    day = first - timedelta(days=1)
    past = text.replace(f"start = {first}\n", f"start = {day}\n")
    past = past.replace(f"date = {first}\nhours", f"date = {day}\nhours")
    assert past.count(str(day)) == 2, past

    def sbatch() -> subprocess.CompletedProcess[str]:
        return lab.as_user("alice", "sbatch", "-p", "gpuseat-conf", f"--reservation={lab.session}", "--gres=gpu:1",
                           f"--output={lab.cluster.root / 'out' / 'past-%j.out'}", "--wrap", "true")  # fmt: skip

    busy = _long_job(lab, "alice")
    try:
        assert lab.wait_state(busy, {"RUNNING"}) == "RUNNING"
        lab.store.courses.set_course_text("conf", past, changes=[])  # type: ignore[attr-defined]
        capsys.readouterr()
        assert _apply(lab) == 0
        said = capsys.readouterr().out
        assert f"no new job in it (Users=root); deleted once job(s) {busy} end" in said, said
        assert lab.slurm.reservations()[lab.session]["Users"] == "root"
        sub = sbatch()
        assert sub.returncode != 0 and "Access denied to requested reservation" in sub.stderr, sub.stderr
        assert _plan_steps(lab) == []
        lab.slurm.run("scancel", [busy], check=True)
        assert lab.wait_state(busy, {"CANCELLED", "GONE"}) in {"CANCELLED", "GONE"}
        assert _apply(lab) == 0
        assert lab.session not in lab.slurm.reservations()
        sub = sbatch()
        assert sub.returncode != 0 and "Requested reservation is invalid" in sub.stderr, sub.stderr
        assert _plan_steps(lab) == []
    finally:
        lab.slurm.run("scancel", ["-u", USERS["alice"]], check=False)
        lab.store.courses.set_course_text("conf", text, changes=[])  # type: ignore[attr-defined]
        assert _apply(lab) == 0
    rc, seen, err = lab.gpus("alice", "-p", "gpuseat-conf", f"--reservation={lab.session}", "--gres=gpu:1")
    assert rc == 0 and seen == [INDEX["alice"]], err
