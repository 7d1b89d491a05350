"""Slurm seats from the participant's side: an enrolled participant (a real unix user) tries every way
to take more than their own GPU on a real slurmctld + slurmd + munged (Debian's packages).

The course is set up the documented way (``slurm config --record --conf-dir`` writes job_submit.lua
before slurm.conf names it, then ``enroll`` and ``sessions``, i.e. ``gpuseat apply --engine slurm``) from a
real course store; a release and a move are then carried out by ``gpuseat apply`` alone. Each bypass
that worked before the per-seat GRES types (issue 23) is run as the participant with ``srun``/
``sbatch``/``scontrol`` through ``runuser``; each must end with at most one GPU, and that one the
participant's own (its global GRES index, which ``CUDA_VISIBLE_DEVICES`` carries without cgroups).
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuseat.cli import main
from gpuseat.engines.runner import Runner
from gpuseat.engines.slurm import config
from gpuseat.engines.slurm import course as service
from gpuseat.engines.slurm.adapter import Slurm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from slurm.cluster import Cluster, missing_binaries  # tests/slurm: the one cluster recipe

# the module fixture starts a real cluster (munged, slurmctld, slurmd) and the tests are short: one xdist
# worker runs the file, so the cluster starts once, not once per worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(name="slurm_conformance")]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "gw")
NAMES = ("alice", "bob", "carol")
USERS = {n: f"gq{n}-{_WORKER}" for n in NAMES}
SEATS = {"alice": "seat-01", "bob": "seat-02", "carol": "seat-03"}
INDEX = {"alice": "0", "bob": "1", "carol": "2"}  # the seats' GRES index (gres.conf order)
UUID = "GPU-00000000-0000-4000-8000-00000000000{}"
# A stand-in nvidia-smi: lists the job's GPUs (CUDA_VISIBLE_DEVICES) by UUID, as the real one does
# under device confinement.
NVIDIA_SMI = f"""#!/bin/sh
for i in $(echo "$CUDA_VISIBLE_DEVICES" | tr ',' ' '); do
  echo "GPU $i: Tesla M60 (UUID: {UUID.format("$i")})"
done
"""


def _need_slurm() -> None:
    missing = missing_binaries()
    why = f"Slurm/MUNGE programs missing: {', '.join(missing)} (scripts/setup.sh installs slurm-wlm munge)"
    if missing or os.geteuid() != 0:
        why = why if missing else "the real-Slurm tests run as root (mknod, useradd, daemons)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)


def _gpuseat(*args: object) -> int:
    """Run the real CLI in-process (the module fixture cannot use the function-scoped ``cli``)."""
    return main([str(a) for a in args])


@dataclass
class Lab:
    """The running course: its store, cluster, session reservation and what the set-up saw."""

    store: object
    url: str
    cluster: Cluster
    slurm: Slurm
    session: str
    lua_before_start: bool
    setup_codes: dict[str, int]

    def as_user(self, who: str, cmd: str, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        slurm = Slurm(Runner(), conf=self.slurm.conf, timeout_s=120)
        return slurm.run(cmd, list(args), as_user=USERS[who], check=check)

    def gpus(self, who: str, *args: str) -> tuple[int, list[str], str]:
        """``srun ARGS`` as the participant: exit code, the GPUs the job saw, and what Slurm said."""
        proc = self.as_user(who, "srun", "--immediate=60", *args, "--", "sh", "-c", 'echo "CVD=$CUDA_VISIBLE_DEVICES"')
        m = re.search(r"^CVD=(.*)$", proc.stdout, re.M)
        seen = [x for x in (m.group(1) if m else "").split(",") if x]
        return proc.returncode, seen, proc.stderr

    def job(self, job_id: str) -> str:
        return self.slurm.run("scontrol", ["-d", "show", "job", job_id], check=False).stdout

    def wait_state(self, job_id: str, states: set[str], timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while True:
            m = re.search(r"JobState=(\S+)", self.job(job_id))
            state = m.group(1) if m else "GONE"
            if state in states or time.monotonic() > deadline:
                return state
            time.sleep(0.2)


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with start_lab() as started:
        yield started


@contextmanager
def start_lab(cores_per_seat: int = 1, cpus: int = 8) -> Iterator[Lab]:
    """The course set up the documented way on a fresh cluster of ``cpus`` CPUs, each seat bound to
    ``cores_per_seat`` cores (the Slurm engine setting, stored before ``slurm config``); everything stopped
    and removed afterwards."""
    _need_slurm()
    made = []
    for u in USERS.values():
        try:
            pwd.getpwnam(u)
        except KeyError:
            subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", u], check=True)
            made.append(u)
    root = Path(tempfile.mkdtemp(prefix="gpuseat-conf-slurm-"))
    root.chmod(0o755)
    cluster = Cluster(root)
    from gpuseat.store import open_store

    st = None
    try:
        today = datetime.now(UTC).date()
        (root / "course.toml").write_text(
            'name = "Slurm conformance"\nparticipants = 3\n\n[needs]\nmin_gpu_memory_gb = 4\n\n'
            f"[schedule]\nstart = {today}\nend = {today + timedelta(days=1)}\n\n"
            f'[[schedule.session]]\ndate = {today}\nhours = "00:00-24:00"\n'
        )
        (root / "roster.csv").write_text(
            "name,email,group,unix_user\n" + "".join(f"{n},{n}@example.edu,participants,{USERS[n]}\n" for n in NAMES)
        )
        url = f"sqlite:///{root / 'course.db'}"
        st = open_store(url, create=True)
        st.courses.create_course(root / "course.toml", key="conf", timezone="UTC")
        st.roster.import_roster("conf", root / "roster.csv")
        st.seats.add_seats(
            "conf",
            [
                {
                    "key": f"seat-0{i + 1}",
                    "kind": "gpu",
                    "host": "localhost",
                    "memory_gb": 8,
                    "device_uuid": UUID.format(i),
                }
                for i in range(4)
            ],
        )
        if cores_per_seat != 1:
            st.agents.set_engine_settings("conf", "slurm", {"cores_per_seat": cores_per_seat})
        people = {p.unix_user: p.key for p in st.roster.participants("conf")}
        for n in NAMES:
            st.seats.assign("conf", people[USERS[n]], SEATS[n])
        # the documented order: config (+ --record, + --conf-dir: job_submit.lua first), merge, start, enroll, sessions
        etc, out = root / "etc", root / "generated"
        etc.mkdir()
        config_args = ["--inventory", EXAMPLES / "ibm-2xM60.toml", "--node", "localhost", "--cpus", cpus,
                       "--dev-root", cluster.dev, "--course", "conf", "--record", "--db", url]  # fmt: skip
        codes = {"config": _gpuseat("slurm", "config", *config_args, "--out", out, "--conf-dir", etc)}
        lua_before_start = (etc / "job_submit.lua").is_file()
        merged = (out / "slurm.conf.gpuseat").read_text()
        node_and_part = "".join(
            ln.replace("NodeName=localhost", "NodeName=localhost NodeAddr=127.0.0.1") + "\n"
            for ln in merged.splitlines()
            if ln.startswith(("NodeName=", "PartitionName="))
        )
        cluster.mknod_gpus([f"nvidia{i}" for i in range(4)])
        cluster.write_config(
            (out / "gres.conf").read_text(),
            node_and_part + "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n",
            # the cluster takes gpuseat's scheduling settings (SchedulerParameters, SelectType, GresTypes)
            # from the same generated file (tests/slurm/cluster.py); the plug-in line comes from the merge
            extra="".join(ln + "\n" for ln in merged.splitlines() if ln.startswith("JobSubmitPlugins=")),
        )
        bin_dir = root / "bin"
        bin_dir.mkdir()
        (bin_dir / "nvidia-smi").write_text(NVIDIA_SMI)
        (bin_dir / "nvidia-smi").chmod(0o755)
        cluster.start()
        slurm = Slurm(Runner(), conf=cluster.conf)
        codes["enroll"] = _gpuseat("slurm", "enroll", "--course", "conf", "--db", url, "--slurm-conf", cluster.conf)
        codes["sessions"] = _gpuseat("slurm", "sessions", "--course", "conf", "--db", url, "--slurm-conf", cluster.conf)
        (session,) = [n for n in slurm.reservations() if n.startswith("gpuseat-conf-")]
        yield Lab(st, url, cluster, slurm, session, lua_before_start, codes)
    finally:
        cluster.stop()
        if st is not None:
            st.close()
        for u in made:
            subprocess.run(["userdel", "-f", u], check=False)  # -f: a failed test may leave a job step
        shutil.rmtree(root, ignore_errors=True)


def test_the_documented_order_starts_slurmctld_cleanly(lab: Lab) -> None:
    assert lab.setup_codes == {"config": 0, "enroll": 0, "sessions": 0}
    assert lab.lua_before_start  # gpuseat wrote job_submit.lua before slurm.conf named the plugin
    assert "\nJobSubmitPlugins=lua\n" in lab.cluster.conf.read_text()  # merged from slurm.conf.gpuseat
    log = (lab.cluster.root / "log" / "slurmctld.log").read_text()
    assert "fatal" not in log and "failed to initialize job_submit plugin" not in log
    assert lab.slurm.run("scontrol", ["ping"]).returncode == 0


def test_an_honest_job_gets_exactly_the_participants_own_gpu(lab: Lab) -> None:
    for who in NAMES:
        rc, seen, err = lab.gpus(who, "-p", "gpuseat-conf", f"--reservation={lab.session}", "--gres=gpu:1")
        assert rc == 0, err
        assert seen == [INDEX[who]]


def test_bypass_reservation_without_partition_gets_at_most_its_own_gpu(lab: Lab) -> None:
    rc, seen, err = lab.gpus("alice", f"--reservation={lab.session}", "--gres=gpu:4")
    assert rc != 0 and not seen
    assert "gpuseat: your seat in gpuseat-conf is gpu:m60:1; this job asks for 4 GPUs" in err
    rc, seen, err = lab.gpus("alice", f"--reservation={lab.session}", "--gres=gpu:1")  # no -p: still their own
    assert rc == 0 and seen == [INDEX["alice"]], err


def test_bypass_partition_list_gets_no_gpu(lab: Lab) -> None:
    rc, seen, err = lab.gpus("alice", "-p", "gpuseat-conf,debug", "--gres=gpu:2")
    assert rc != 0 and not seen
    assert "name only your course partition (-p gpuseat-conf)" in err


def test_bypass_other_partition_with_the_session_reservation_gets_no_gpu(lab: Lab) -> None:
    rc, seen, err = lab.gpus("alice", "-p", "debug", f"--reservation={lab.session}", "--gres=gpu:4")
    assert rc != 0 and not seen
    assert "the sessions of gpuseat-conf run in partition gpuseat-conf only" in err
    # --gpus (tres_per_job) is counted and rewritten the same way as --gres
    rc, seen, err = lab.gpus("bob", "-p", "gpuseat-conf", f"--reservation={lab.session}", "--gpus=1")
    assert rc == 0 and seen == [INDEX["bob"]], err


def test_bypass_hold_modify_release_keeps_one_gpu(lab: Lab) -> None:
    out = lab.cluster.root / "out" / "held-%j.out"
    sub = lab.as_user(
        "alice", "sbatch", "--hold", "-p", "gpuseat-conf", f"--reservation={lab.session}", "--gres=gpu:1",
        f"--output={out}", "--wrap", 'echo "CVD=$CUDA_VISIBLE_DEVICES"', check=True,
    )  # fmt: skip
    job_id = sub.stdout.split()[-1]
    try:
        for change in ("TresPerNode=gres:gpu:4", "TresPerNode=gres:gpu:m60.seat-02:1", "Partition=debug"):
            upd = lab.as_user("alice", "scontrol", "update", f"jobid={job_id}", change)
            assert upd.returncode != 0, change
        assert "TresPerNode=gres:gpu:m60.seat-01:1" in lab.job(job_id)
        lab.as_user("alice", "scontrol", "release", job_id, check=True)
        assert lab.wait_state(job_id, {"COMPLETED", "FAILED", "CANCELLED"}) == "COMPLETED"
        text = Path(str(out).replace("%j", job_id)).read_text()
        assert f"CVD={INDEX['alice']}\n" in text
    finally:
        lab.slurm.run("scancel", [job_id], check=False)


def test_bypass_four_jobs_at_once_never_makes_another_participant_wait(lab: Lab) -> None:
    """On the scheduler settings gpuseat ships (slurm.conf.gpuseat, issue 38 item 17), not a faster
    fixture's: a participant flooding the queue never keeps the next one from their GPU."""
    shipped = next(ln for ln in config.cluster_settings().splitlines() if ln.startswith("SchedulerParameters="))
    assert lab.slurm.config_value("SchedulerParameters") == shipped.split("=", 1)[1]
    assert "sched_interval" not in lab.cluster.conf.read_text()
    out = lab.cluster.root / "out" / "many-%j.out"
    jobs = []
    try:
        for _ in range(4):
            sub = lab.as_user(
                "alice", "sbatch", "-p", "gpuseat-conf", f"--reservation={lab.session}", "--gres=gpu:1",
                f"--output={out}", "--wrap", 'echo "CVD=$CUDA_VISIBLE_DEVICES"; sleep 30', check=True,
            )  # fmt: skip
            jobs.append(sub.stdout.split()[-1])
        assert lab.wait_state(jobs[0], {"RUNNING"}) == "RUNNING"
        # bob and carol get their own GPUs while alice's jobs queue behind her own
        for who in ("bob", "carol"):
            rc, seen, err = lab.gpus(who, "-p", "gpuseat-conf", f"--reservation={lab.session}", "--gres=gpu:1")
            assert rc == 0 and seen == [INDEX[who]], err
        running = [j for j in jobs if "JobState=RUNNING" in lab.job(j)]
        assert len(running) == 1
        assert re.search(r"GRES=gpu:m60\.seat-01:1\(IDX:0\)", lab.job(running[0]))
        status = service.course_status(lab.slurm, service.slurm_course_from_store(lab.store, "conf"))
        alice = next(m for m in status.members if m.unix_user == USERS["alice"])
        assert alice.blocked_by is None  # she waits for herself, nobody else holds her GPU
    finally:
        lab.slurm.run("scancel", jobs, check=False)


def test_status_flags_a_participant_whose_gpu_someone_else_holds(lab: Lab) -> None:
    """An operator's job (root may disable binding) holds carol's GPU: carol's job waits, status says why."""
    hog = lab.slurm.run(
        "sbatch", ["-p", "debug", "--gres-flags=disable-binding", "--gres=gpu:m60.seat-03:1",
                   f"--output={lab.cluster.root / 'out' / 'hog.out'}", "--wrap", "sleep 120"],
    )  # fmt: skip
    hog_id = hog.stdout.split()[-1]
    mine = None
    try:
        assert lab.wait_state(hog_id, {"RUNNING"}) == "RUNNING"
        sub = lab.as_user(
            "carol", "sbatch", "-p", "gpuseat-conf", f"--reservation={lab.session}", "--gres=gpu:1",
            f"--output={lab.cluster.root / 'out' / 'carol.out'}", "--wrap", "true", check=True,
        )  # fmt: skip
        mine = sub.stdout.split()[-1]
        assert lab.wait_state(mine, {"PENDING"}) == "PENDING"
        report = service.course_status(lab.slurm, service.slurm_course_from_store(lab.store, "conf"))
        carol = next(m for m in report.members if m.unix_user == USERS["carol"])
        assert carol.blocked_by is not None
        assert f"seat-03's GPU is held by job {hog_id} of root" in carol.blocked_by
        assert report.seat_states()["seat-03"][1].startswith("waiting: seat-03's GPU is held")
        assert all(m.blocked_by is None for m in report.members if m is not carol)
        code = _gpuseat("slurm", "status", "--course", "conf", "--db", lab.url, "--slurm-conf", lab.cluster.conf)
        assert code == 0
        assert lab.store.seats.get_seat("conf", "seat-03").state_reason.startswith("waiting: seat-03's GPU")
    finally:
        lab.slurm.run("scancel", [hog_id, *([mine] if mine else [])], check=False)


def _people(lab: Lab) -> dict[str, str]:
    """name → participant key."""
    by_user = {p.unix_user: p.key for p in lab.store.roster.participants("conf")}  # type: ignore[attr-defined]
    return {n: by_user[USERS[n]] for n in NAMES}


def _apply(lab: Lab) -> int:
    return _gpuseat("apply", "--course", "conf", "--engine", "slurm", "--db", lab.url)


def _plan_steps(lab: Lab) -> list[str]:
    from gpuseat.engines.apply import plan_all

    (planned,) = plan_all(lab.store, course="conf", engine="slurm", runner=Runner(dry_run=True))  # type: ignore[arg-type]
    assert planned.error is None and planned.changes is not None, planned.error
    return [f"{s.action} {s.target}" for s in planned.changes.steps]


def test_engine_probe_as_the_participant_and_revocation(lab: Lab) -> None:
    """SlurmEngine (from the registry): the probe runs srun as the participant (stand-in nvidia-smi on
    PATH) and judges exactly one GPU, the seat's UUID; a release and ``gpuseat apply`` take bob out
    (refused, the probe not ready, exclusivity holds); assigned again and applied, he is back."""
    from gpuseat.engines import registry

    engine = registry.build("slurm", lab.store, "conf", settings={"slurm_conf": str(lab.cluster.conf)})  # type: ignore[arg-type]
    seat = lab.store.seats.get_seat("conf", SEATS["bob"])
    bob = next(p for p in lab.store.roster.participants("conf") if p.unix_user == USERS["bob"])
    path = os.environ["PATH"]
    os.environ["PATH"] = f"{lab.cluster.root / 'bin'}:{path}"
    try:
        seen = engine.probe(seat, bob)  # type: ignore[attr-defined]
    finally:
        os.environ["PATH"] = path
    assert seen.ready, seen
    assert seen.visible == (UUID.format(1),) and seen.engine == "slurm"
    access = engine.connect(seat)
    assert access is not None and access.kind == "slurm" and access.user == USERS["bob"]
    assert f"--reservation={lab.session}" in (access.command or "") and access.holder == bob.key

    lab.store.seats.release("conf", participant=bob.key)  # type: ignore[attr-defined]
    try:
        assert _apply(lab) == 0
        rc, seen_gpus, err = lab.gpus("bob", "-p", "gpuseat-conf", f"--reservation={lab.session}", "--gres=gpu:1")
        assert rc != 0 and not seen_gpus
        assert "not enrolled in partition gpuseat-conf" in err or "Access denied" in err
        after = engine.probe(seat, bob)  # type: ignore[attr-defined]
        assert not after.ready and after.reason
        assert engine.refused(bob) is None  # type: ignore[attr-defined]
        assert engine.connect(lab.store.seats.get_seat("conf", SEATS["bob"])) is None
    finally:
        lab.store.seats.assign("conf", bob.key, SEATS["bob"])  # type: ignore[attr-defined]
        assert _apply(lab) == 0
    rc, seen_gpus, err = lab.gpus("bob", "-p", "gpuseat-conf", f"--reservation={lab.session}", "--gres=gpu:1")
    assert rc == 0 and seen_gpus == [INDEX["bob"]], err
    assert _plan_steps(lab) == []


def _long_job(lab: Lab, who: str) -> str:
    sub = lab.as_user(
        who, "sbatch", "-p", "gpuseat-conf", f"--reservation={lab.session}", "--gres=gpu:1",
        f"--output={lab.cluster.root / 'out' / 'long-%j.out'}", "--wrap", "sleep 300", check=True,
    )  # fmt: skip
    return sub.stdout.split()[-1]


def test_release_and_move_are_carried_out_by_apply_alone(lab: Lab) -> None:
    """Issue 37 from the participants' side: alice (seat-01) and carol (seat-03) each run a job; alice is
    released and carol moved onto alice's seat, in the store only; then ``gpuseat apply`` and nothing
    else. Alice's job and carol's job on her old seat are cancelled, alice's new ``srun`` with or
    without the session reservation gets no GPU, carol is scheduled on seat-01 at once (not "Requested
    nodes are busy"), the reservation's users are exactly the holders, and a second plan is empty."""
    people = _people(lab)
    jobs = {who: _long_job(lab, who) for who in ("alice", "carol")}
    for job in jobs.values():
        assert lab.wait_state(job, {"RUNNING"}) == "RUNNING"
    # the organiser's commands, which only write the store
    assert _gpuseat("seats", "release", "--participant", USERS["alice"], "--course", "conf", "--db", lab.url) == 0
    assert _gpuseat("seats", "move", "--participant", USERS["carol"], "--seat", SEATS["alice"], "--course", "conf",
                    "--db", lab.url) == 0  # fmt: skip
    assert "Users=" in lab.slurm.run("scontrol", ["show", "reservation", lab.session]).stdout
    assert USERS["alice"] in lab.slurm.reservations()[lab.session]["Users"]  # nothing changed on the cluster yet
    try:
        from gpuseat.engines.apply import one_pass

        done = one_pass(lab.store, course="conf", engine="slurm", runner=Runner())  # type: ignore[arg-type]
        assert not done.failed, done.failed
        (report,) = done.reports
        ran = [(o.step.action, o.step.target, o.step.phase) for o in report.outcomes if o.state == "done"]
        cancels = [r for r in ran if r[0] == "jobs.cancel"]
        assert sorted(t for _a, t, _p in cancels) == sorted([USERS["alice"], USERS["carol"]]), ran
        last_revoke = max(i for i, r in enumerate(ran) if r[2] == "revoke")
        assert all(r[2] != "grant" for r in ran[:last_revoke]), ran  # every revoke before any grant
        scancel = [c for o in report.outcomes for c in o.commands if c.argv[0] == "scancel"]
        assert {a for c in scancel for a in c.argv[1:]} >= set(jobs.values())
        for job in jobs.values():  # gone before the new holder was let in: apply waited for them
            assert re.search(r"JobState=(CANCELLED|COMPLETED)", lab.job(job)) or not lab.job(job), lab.job(job)
        users = lab.slurm.reservations()[lab.session]["Users"].split(",")
        assert sorted(users) == sorted([USERS["bob"], USERS["carol"]])
        for args in (
            ("-p", "gpuseat-conf", f"--reservation={lab.session}", "--gres=gpu:2"),
            (f"--reservation={lab.session}", "--gres=gpu:1"),
            ("-p", "gpuseat-conf", "--gres=gpu:1"),
            ("-p", "debug", "--gres=gpu:1", "--immediate=5"),
        ):
            rc, seen, err = lab.gpus("alice", *args)
            assert rc != 0 and not seen, (args, seen, err)
        rc, seen, err = lab.gpus("carol", "-p", "gpuseat-conf", f"--reservation={lab.session}", "--gres=gpu:1")
        assert rc == 0 and seen == [INDEX["alice"]], err  # seat-01's GPU, at once
        assert "busy" not in err
        assert _plan_steps(lab) == []
        access = lab.store.delivery.access_of("conf")  # type: ignore[attr-defined]
        assert access[SEATS["alice"]]["user"] == USERS["carol"] and access[SEATS["alice"]]["holder"] == people["carol"]
        assert not access[SEATS["carol"]].get("holder")
    finally:
        lab.slurm.run("scancel", list(jobs.values()), check=False)
        lab.store.seats.move("conf", people["carol"], SEATS["carol"])  # type: ignore[attr-defined]
        lab.store.seats.assign("conf", people["alice"], SEATS["alice"])  # type: ignore[attr-defined]
        assert _apply(lab) == 0
    rc, seen, err = lab.gpus("alice", "-p", "gpuseat-conf", f"--reservation={lab.session}", "--gres=gpu:1")
    assert rc == 0 and seen == [INDEX["alice"]], err


def test_the_agent_carries_out_a_release_with_no_command_after_it(lab: Lab) -> None:
    """``gpuseat agent`` (its loop, in a thread with its own store connection): bob's running job ends and
    he leaves the session after ``seats release``; after ``seats assign`` he is back, with no other command."""
    import threading

    from gpuseat.engines.agent import Agent, AgentOptions
    from gpuseat.store import open_store

    job = _long_job(lab, "bob")
    assert lab.wait_state(job, {"RUNNING"}) == "RUNNING"
    stop = threading.Event()
    with open_store(lab.url) as own:
        agent = Agent(own, AgentOptions(engine="slurm", course="conf", poll_s=0.2), say=lambda _line: None)
        thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
        thread.start()
        try:
            assert _gpuseat("seats", "release", "--participant", USERS["bob"], "--course", "conf", "--db", lab.url) == 0
            deadline = time.monotonic() + 120  # a bound for a stuck agent, not a timing claim
            while time.monotonic() < deadline and (
                USERS["bob"] in lab.slurm.reservations()[lab.session]["Users"] or "JobState=RUNNING" in lab.job(job)
            ):
                time.sleep(0.2)
            assert "JobState=RUNNING" not in lab.job(job)
            assert USERS["bob"] not in lab.slurm.reservations()[lab.session]["Users"]
            rc, seen, err = lab.gpus("bob", "-p", "gpuseat-conf", f"--reservation={lab.session}", "--gres=gpu:1")
            assert rc != 0 and not seen, err
            assert _gpuseat("seats", "assign", "--participant", USERS["bob"], "--seat", SEATS["bob"], "--course",
                            "conf", "--db", lab.url) == 0  # fmt: skip
            while time.monotonic() < deadline and USERS["bob"] not in lab.slurm.reservations()[lab.session]["Users"]:
                time.sleep(0.2)
            while time.monotonic() < deadline and _plan_steps(lab):  # the limits and the way in follow
                time.sleep(0.2)
        finally:
            stop.set()
            thread.join(timeout=60)
            lab.slurm.run("scancel", [job], check=False)
    rc, seen, err = lab.gpus("bob", "-p", "gpuseat-conf", f"--reservation={lab.session}", "--gres=gpu:1")
    assert rc == 0 and seen == [INDEX["bob"]], err


def test_bypass_whole_node_jobs_get_no_other_gpu(lab: Lab) -> None:
    """``--exclusive`` (a whole node) and a GPU request with no count, in and out of the session, submitted by
    alice: what Slurm holds for each job (read back with ``scontrol``, as it would run it) is at most her own
    seat's GPU. These jobs never start on the test node (the session's reservation keeps it from a whole-node
    job), so an ``srun`` would see nothing either way and prove nothing: the job's recorded request does."""
    out = lab.cluster.root / "out" / "whole-%j.out"
    for args, want in (
        (("-p", "gpuseat-conf", f"--reservation={lab.session}", "--exclusive"), None),  # no GPU asked: none bound
        (("-p", "gpuseat-conf", f"--reservation={lab.session}", "--exclusive", "--gres=gpu"), "gres:gpu:m60.seat-01:1"),
        (("-p", "gpuseat-conf", f"--reservation={lab.session}", "--gres=gpu:m60"), "gres:gpu:m60.seat-01:1"),
        (("-p", "debug", "--exclusive"), None),
    ):
        sub = lab.as_user("alice", "sbatch", "--hold", *args, f"--output={out}", "--wrap", "true")
        if sub.returncode != 0:  # refused outright: nothing of anyone's is given
            continue
        job_id = sub.stdout.split()[-1]
        try:
            shown = lab.job(job_id)
            asked = re.findall(r"TresPerNode=(\S+)", shown)
            assert asked == ([want] if want else []), (args, shown)
            assert not re.search(r"gres[:/]gpu[^ \n]*seat-0[23]", shown), (args, shown)  # nobody else's GPU
        finally:
            lab.slurm.run("scancel", [job_id], check=False)


def test_seats_check_probes_every_seat_as_its_participant(lab: Lab, capsys: pytest.CaptureFixture[str]) -> None:
    """``gpuseat seats check`` (the organiser's command) on the Slurm seats: each probe is an ``srun`` as
    the participant in the session; ready when the job saw exactly the seat's UUID, and a stand-in
    ``nvidia-smi`` that shows the neighbour's GPU makes every seat broken, naming both UUIDs."""
    import json

    wrong = lab.cluster.root / "wrong-bin"
    wrong.mkdir(exist_ok=True)
    (wrong / "nvidia-smi").write_text(NVIDIA_SMI.replace("0$i)", "0$((i + 1)))"))
    (wrong / "nvidia-smi").chmod(0o755)
    args = ("seats", "check", "--course", "conf", "--db", lab.url, "--set", f"slurm.slurm_conf={lab.cluster.conf}")
    path = os.environ["PATH"]
    runs = {}
    try:
        for name, bin_dir in (("good", lab.cluster.root / "bin"), ("wrong", wrong)):
            os.environ["PATH"] = f"{bin_dir}:{path}"
            capsys.readouterr()
            code = _gpuseat(*args, "--timeout", "120", "--format", "json")
            runs[name] = (code, json.loads(capsys.readouterr().out))
    finally:
        os.environ["PATH"] = path
    code, report = runs["good"]
    assert code == 0, report
    assert report["summary"] == {"ready": 3, "broken": 0, "total": 3}
    seen = {r["participant"]: r for r in report["seats"]}
    people = {p.key: p.unix_user for p in lab.store.roster.participants("conf")}  # type: ignore[attr-defined]
    for key, row in seen.items():
        who = next(n for n in NAMES if USERS[n] == people[key])
        assert row["seat"] == SEATS[who] and row["engine"] == "slurm"
        assert row["visible"] == [UUID.format(INDEX[who])] and row["state"] == "ready"
    code, report = runs["wrong"]
    assert code == 3 and report["summary"]["broken"] == 3
    for row in report["seats"]:
        assert row["state"] == "broken" and "not the seat's GPU-" in row["reason"], row
    stored = lab.store.delivery.readiness_of("conf")  # type: ignore[attr-defined]
    assert {k: v["state"] for k, v in stored.items()} == dict.fromkeys(SEATS.values(), "broken")


def test_a_renamed_login_is_taken_out_and_the_new_one_gets_exactly_the_seat(lab: Lab) -> None:
    """A roster re-import gives alice a new unix_user; ``gpuseat apply`` and nothing else: her old login's
    running job is cancelled as for a release, and that login gets no GPU of the course in any way (with or
    without the session reservation, in the course partition or not); the new login is in the session and gets
    exactly seat-01's GPU; her way in names it; a second plan is empty. Her old login back: the same again."""
    new = f"gqalice2-{_WORKER}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", new], check=True)
    USERS["alice2"] = new
    roster = lab.cluster.root / "rename.csv"

    def rename(login: str) -> None:  # the organizer's re-import: only alice's row, her unix_user changed
        roster.write_text(f"name,email,group,unix_user\nalice,alice@example.edu,participants,{login}\n")
        assert _gpuseat("roster", "import", roster, "--course", "conf", "--db", lab.url) == 0

    job = _long_job(lab, "alice")
    try:
        assert lab.wait_state(job, {"RUNNING"}) == "RUNNING"
        rename(new)
        assert _apply(lab) == 0
        assert lab.wait_state(job, {"CANCELLED", "COMPLETED", "GONE"}) != "RUNNING", lab.job(job)
        users = lab.slurm.reservations()[lab.session]["Users"].split(",")
        assert USERS["alice"] not in users and new in users, users
        for args in (
            ("-p", "gpuseat-conf", f"--reservation={lab.session}", "--gres=gpu:1"),
            (f"--reservation={lab.session}", "--gres=gpu:1"),
            ("-p", "gpuseat-conf", "--gres=gpu:1"),
            ("-p", "debug", "--gres=gpu:1", "--immediate=5"),
        ):
            rc, seen, err = lab.gpus("alice", *args)
            assert rc != 0 and not seen, (args, seen, err)
        rc, seen, err = lab.gpus("alice2", "-p", "gpuseat-conf", f"--reservation={lab.session}", "--gres=gpu:1")
        assert rc == 0 and seen == [INDEX["alice"]], err
        rc, seen, err = lab.gpus("alice2", "-p", "gpuseat-conf", f"--reservation={lab.session}", "--gres=gpu:2")
        assert rc != 0 and not seen, err  # exactly her seat's GPU, not one more
        access = lab.store.delivery.access_of("conf")[SEATS["alice"]]  # type: ignore[attr-defined]
        assert access["user"] == new and f"{USERS['alice']} " not in (access.get("command") or "")
        assert _plan_steps(lab) == []
    finally:
        lab.slurm.run("scancel", [job], check=False)
        rename(USERS["alice"])  # her own login back
        assert _apply(lab) == 0
        del USERS["alice2"]
        subprocess.run(["userdel", "-f", new], check=False)
    rc, seen, err = lab.gpus("alice", "-p", "gpuseat-conf", f"--reservation={lab.session}", "--gres=gpu:1")
    assert rc == 0 and seen == [INDEX["alice"]], err
