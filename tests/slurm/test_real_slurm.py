"""gpuseat against a real slurmctld + slurmd + munged (Debian's packages), mknod device files as GPUs.

One course (the 2016 server: 2 × M60 = 4 GPUs, carved passthrough) on a one-node cluster: enrol,
a reservation for the session running now, then jobs submitted as the participants' unix users.
"""

from __future__ import annotations

import concurrent.futures
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from gpuseat.catalog.bundle import load_catalog
from gpuseat.core.carve import CarveRequest, carve
from gpuseat.core.inventory import server_from_toml
from gpuseat.core.needs import SeatNeed
from gpuseat.engines.runner import Runner
from gpuseat.engines.slurm import config
from gpuseat.engines.slurm import course as service
from gpuseat.engines.slurm.adapter import Slurm, explain
from gpuseat.files import read_toml

from .cluster import Cluster
from .conftest import USERS, apply, make_store, plan

EXAMPLES = Path(__file__).parents[2] / "examples"
# the module fixture starts a real cluster (munged, slurmctld, slurmd) and the tests are short: one xdist
# worker runs the file, so the cluster starts once, not once per worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(name="slurm_real")]
alice, bob, carol = USERS


@pytest.fixture(scope="module")
def lab_store(make_cluster: Cluster, unix_users: tuple[str, ...], cluster_dir: Path):
    """Course c2016 in a store: alice holds seat-01, bob seat-02, carol is in the roster without a seat."""
    catalog = load_catalog()
    server = server_from_toml(read_toml(EXAMPLES / "ibm-2xM60.toml"), catalog, where="ibm-2xM60.toml")
    layout = carve(server, CarveRequest(mode="passthrough", need=SeatNeed(isolation="dedicated")), catalog)
    devices = config.devices_from_layout(layout, "localhost", dev_root=str(make_cluster.dev))
    seats = [d.seat for d in devices]
    assert unix_users == USERS
    people = {"alice": (alice, seats[0]), "bob": (bob, seats[1]), "carol": (carol, None)}
    st, _url = make_store(cluster_dir, "c2016", people, devices)
    yield st
    st.close()  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def course(lab_store) -> service.SlurmCourse:
    return service.slurm_course_from_store(lab_store, "c2016")


def _mig_devices(dev: Path) -> list[config.GresDevice]:
    """Two MIG instances (GI 7 and 8 of a fifth GPU) outside the course, typed 1g.18gb with MultipleFiles."""
    minors: dict[tuple[int, int, int | None], int] = {(4, g, None): 3 + 4 * 135 + g * 9 for g in (7, 8)}
    minors |= {(4, g, 0): 4 + 4 * 135 + g * 9 for g in (7, 8)}
    return [
        config.GresDevice(
            node="localhost",
            gres_type="1g.18gb",
            mig=True,
            core=4 + i,
            files=config.mig_files(str(dev), 4, minors, gi=g),
        )
        for i, g in enumerate((7, 8))
    ]


@pytest.fixture(scope="module")
def slurm(make_cluster: Cluster, course: service.SlurmCourse, lab_store) -> Slurm:
    """The cluster started with gpuseat's gres.conf, node line and scheduling settings; then
    ``gpuseat apply`` (partition, job_submit.lua limits, session reservations)."""
    c = make_cluster
    devices = [*course.devices, *_mig_devices(c.dev)]
    c.mknod_gpus([str(Path(f).relative_to(c.dev)) for d in devices for f in d.files if not Path(f).exists()])
    files = service.config_files(devices, cpus=8, real_memory_mb=2000)
    node_line = next(ln for ln in files["slurm.conf.gpuseat"].splitlines() if ln.startswith("NodeName="))
    assert node_line.startswith(
        "NodeName=localhost CPUs=8 RealMemory=2000 Gres=gpu:m60.seat-01:1,gpu:m60.seat-02:1,gpu:m60.seat-03:1,"
        "gpu:m60.seat-04:1,gpu:1g.18gb:2 "
    )
    c.write_config(
        files["gres.conf"],
        node_line.replace("NodeName=localhost", "NodeName=localhost NodeAddr=127.0.0.1") + "\n"
        "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n",
        extra="JobSubmitPlugins=lua\n",
    )
    service.write_job_submit([], c.conf.parent)  # before slurmctld reads JobSubmitPlugins=lua
    c.start()
    done = apply(lab_store, "c2016", slurm_conf=c.conf)
    assert not done.failed, done.failed
    (changes,) = [p.changes for p in done.planned]
    actions = [s.action for s in changes.steps]
    assert actions.count("reservation.create") == 2 and "partition.create" in actions
    assert not changes.notes or all("Include" not in n for n in changes.notes), changes.notes
    return Slurm(Runner(), conf=c.conf)


def _session(course: service.SlurmCourse) -> str:
    return config.reservation_name(course.key, course.intervals[0][0])


def test_participant_job_sees_one_device_of_the_course(slurm: Slurm, course, make_cluster: Cluster) -> None:
    got = slurm.probe(
        alice,
        partition=course.partition,
        reservation=_session(course),
        gres="gpu:1",
        out_dir=make_cluster.root / "out",
    )
    assert got.ok, got.refusal
    cvd = got.env["CUDA_VISIBLE_DEVICES"]
    assert cvd == got.env["SLURM_JOB_GPUS"]
    assert cvd in {"0", "1", "2", "3"}  # one device, one of the 4 course GPUs


def test_two_participants_at_once_get_disjoint_devices(slurm: Slurm, course, make_cluster: Cluster) -> None:
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = [
            pool.submit(
                slurm.probe,
                u,
                partition=course.partition,
                reservation=_session(course),
                gres="gpu:m60:1",
                out_dir=make_cluster.root / "out",
                hold_s=3,
            )
            for u in (alice, bob)
        ]
        results = [f.result() for f in futures]
    assert all(r.ok for r in results), [r.refusal for r in results]
    a, b = (r.env["SLURM_JOB_GPUS"] for r in results)
    assert a != b


def test_status_shows_running_jobs_with_device_index(slurm: Slurm, course, make_cluster: Cluster) -> None:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(
            slurm.probe,
            bob,
            partition=course.partition,
            reservation=_session(course),
            gres="gpu:1",
            out_dir=make_cluster.root / "out",
            hold_s=4,
        )
        deadline = datetime.now() + timedelta(seconds=20)
        report = service.course_status(slurm, course)
        while datetime.now() < deadline and not any(j["state"] == "RUNNING" for m in report.members for j in m.jobs):
            time.sleep(0.2)
            report = service.course_status(slurm, course)
        assert fut.result().ok
    member = next(m for m in report.members if m.unix_user == bob)
    running = [j for j in member.jobs if j["state"] == "RUNNING"]
    assert running and running[0]["gres_idx"].startswith(f"gpu:m60.{member.seat}:1(IDX:")
    assert report.partition_exists and len(report.reservations) == 2
    states = report.seat_states()
    assert states[member.seat][0] == "running" and "job(s) running" in states[member.seat][1]


def test_over_the_seat_limit_is_refused_with_the_reason(slurm: Slurm, course, make_cluster: Cluster) -> None:
    got = slurm.probe(
        alice,
        partition=course.partition,
        reservation=_session(course),
        gres="gpu:2",
        out_dir=make_cluster.root / "out",
    )
    assert not got.ok and got.job_id is None
    assert "your seat in gpuseat-c2016 is gpu:m60:1; this job asks for 2 GPUs" in got.refusal
    assert "outside the participant's seat" in got.refusal


def test_outside_the_reservation_is_refused(slurm: Slurm, course, make_cluster: Cluster) -> None:
    refused = slurm.probe(
        carol, partition=None, reservation=_session(course), gres="gpu:1", out_dir=make_cluster.root / "out"
    )
    assert not refused.ok and "Access denied to requested reservation" in refused.refusal
    no_session = slurm.probe(
        alice, partition=course.partition, reservation=None, gres="gpu:1", out_dir=make_cluster.root / "out"
    )
    assert not no_session.ok and "only inside a session reservation" in no_session.refusal
    in_course = slurm.probe(
        carol, partition=course.partition, reservation=None, gres="gpu:1", out_dir=make_cluster.root / "out"
    )
    assert not in_course.ok and f"{carol} is not enrolled in partition gpuseat-c2016" in in_course.refusal


def test_a_second_apply_plans_nothing(slurm: Slurm, lab_store) -> None:
    assert plan(lab_store, "c2016").steps == []


def test_the_cluster_schedules_with_gpuseats_settings(slurm: Slurm, make_cluster: Cluster) -> None:
    """Issue 38 item 17: the scheduler settings are the generated slurm.conf.gpuseat's, not the fixture's."""
    shipped = dict(ln.split("=", 1) for ln in config.cluster_settings().splitlines() if "=" in ln and ln[0] != "#")
    seen = slurm.config()
    assert seen["SchedulerParameters"] == shipped["SchedulerParameters"] == "bf_interval=5,bf_continue"
    assert (
        seen["SelectType"] == shipped["SelectType"]
        and seen["SelectTypeParameters"].lower() == shipped["SelectTypeParameters"].lower()
    )
    assert "sched_interval" not in make_cluster.conf.read_text()


def test_the_partition_and_sessions_survive_reconfigure(slurm: Slurm, course, make_cluster: Cluster) -> None:
    """Issue 38 item 18: the partition apply creates is in the include slurm.conf reads, so `scontrol
    reconfigure` keeps it and the session reservations in it."""
    assert f"PartitionName={course.partition} Nodes=localhost ReqResv=YES" in make_cluster.partitions_conf.read_text()
    before = sorted(n for n in slurm.reservations() if n.startswith(course.partition))
    slurm.reconfigure()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and slurm.run("scontrol", ["ping"], check=False).returncode != 0:
        time.sleep(0.2)
    assert course.partition in slurm.partitions()
    assert sorted(n for n in slurm.reservations() if n.startswith(course.partition)) == before and len(before) == 2


def test_mig_instances_are_typed_gres_with_multiple_files(slurm: Slurm, course, make_cluster: Cluster) -> None:
    """slurmd accepts MultipleFiles; a job asking for the MIG type gets one; the course seat's type is enforced."""
    got = slurm.probe(
        carol, partition="debug", reservation=None, gres="gpu:1g.18gb:1", out_dir=make_cluster.root / "out"
    )
    assert got.ok, got.refusal
    assert got.env["SLURM_JOB_GPUS"] in {"4", "5"}  # the 5th and 6th GRES in gres.conf order
    wrong = slurm.probe(
        alice,
        partition=course.partition,
        reservation=_session(course),
        gres="gpu:1g.18gb:1",
        out_dir=make_cluster.root / "out",
    )
    assert (
        not wrong.ok and "your seat in gpuseat-c2016 is gpu:m60:1; this job asks for gpu type 1g.18gb" in wrong.refusal
    )


def test_a_stopped_participant_is_refused_the_session_until_a_start(slurm: Slurm, course, lab_store) -> None:
    """Without accounting, as bob (his unix user, sbatch): his stop cancels his running job and takes him off
    the session reservation, so his next submit is refused with Slurm's reason; alice stays in; a start lets
    his next job run."""
    args = [f"--partition={course.partition}", f"--reservation={_session(course)}", "--gres=gpu:1",
            "--output=/dev/null", "--wrap", "sleep 300"]  # fmt: skip

    def running() -> list[int]:
        deadline = time.monotonic() + 30
        while True:
            jobs = [j for j in slurm.jobs([bob]) if j.live]
            if all(j.state == "RUNNING" for j in jobs) or time.monotonic() > deadline:
                return [j.job_id for j in jobs if j.state == "RUNNING"]
            time.sleep(0.2)

    def ask(action: str) -> int:
        who = next(p.key for p in lab_store.roster.participants("c2016") if p.unix_user == bob)
        return int(lab_store.requests.request_seat("c2016", who, action, actor=f"participant:{who}").id)

    def row(request_id: int) -> tuple[str, str]:
        (r,) = [r for r in lab_store.requests.seat_requests("c2016", limit=100) if r.id == request_id]
        return r.state, r.reason or ""

    assert slurm.run("sbatch", args, as_user=bob).returncode == 0 and len(running()) == 1
    stop = ask("stop")
    try:
        assert not apply(lab_store, "c2016").failed
        assert row(stop)[0] == "done" and not [j for j in slurm.jobs([bob]) if j.live]
        refused = slurm.run("sbatch", args, as_user=bob, check=False)
        assert refused.returncode != 0 and "Access denied to requested reservation" in refused.stderr
        assert "or their seat is stopped?" in explain(refused.stderr)
        users = {n: f["Users"].split(",") for n, f in slurm.reservations().items() if n.startswith(course.partition)}
        assert users and all(alice in u and bob not in u for u in users.values())
        assert plan(lab_store, "c2016").steps == []
    finally:
        start = ask("start")
        assert not apply(lab_store, "c2016").failed
    assert row(start) == ("done", f"started: you can run jobs in partition {course.partition} again")
    assert slurm.run("sbatch", args, as_user=bob).returncode == 0 and len(running()) == 1
    slurm.cancel(running())
    assert plan(lab_store, "c2016").steps == []
