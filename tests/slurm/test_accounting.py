"""Enrolment with accounting: a real slurmdbd on a throw-away MariaDB, sacctmgr associations with a GRES limit.

The cluster runs ``AccountingStorageEnforce=associations,limits,safe``: a user without an association
is refused, and a job over the participant's GPU limit waits with Slurm's reason, which status explains.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuseat.catalog.bundle import load_catalog
from gpuseat.engines.runner import Runner
from gpuseat.engines.slurm import config
from gpuseat.engines.slurm import course as service
from gpuseat.engines.slurm.adapter import Slurm, explain
from gpuseat.services.carving import carve_inventory

from .cluster import ACCOUNTING_BINARIES, Cluster, missing_binaries
from .conftest import USERS, apply, make_store, plan

EXAMPLES = Path(__file__).parents[2] / "examples"
pytestmark = pytest.mark.slow
alice, bob, carol = USERS


@pytest.fixture(scope="module")
def acct_cluster(unix_users: tuple[str, ...]) -> Iterator[Cluster]:
    missing = missing_binaries(ACCOUNTING_BINARIES)
    if missing:
        why = f"accounting programs missing: {', '.join(missing)} (scripts/setup.sh installs slurmdbd mariadb-server)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    root = Path(tempfile.mkdtemp(prefix="gpuseat-slurmdbd-"))
    root.chmod(0o755)
    c = Cluster(root, accounting=True)
    try:
        yield c
    finally:
        c.stop()
        import shutil

        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Acct:
    """The accounting cluster with course c2016 applied once: alice holds seat-01, bob seat-02, carol none."""

    cluster: Cluster
    store: Any
    course: service.SlurmCourse
    slurm: Slurm
    first: Any  # the first apply's Pass


@pytest.fixture(scope="module")
def acct(acct_cluster: Cluster) -> Iterator[Acct]:
    c = acct_cluster
    layout = carve_inventory(EXAMPLES / "ibm-2xM60.toml", load_catalog(), mode="passthrough")
    devices = config.devices_from_layout(layout, "localhost", dev_root=str(c.dev))
    people = {"alice": (alice, devices[0].seat), "bob": (bob, devices[1].seat), "carol": (carol, None)}
    st, _url = make_store(c.root, "c2016", people, devices, tomorrow=False)
    course = service.slurm_course_from_store(st, "c2016")
    c.mknod_gpus([Path(d.files[0]).name for d in devices])
    node = next(
        ln
        for ln in service.config_files(devices, cpus=8)["slurm.conf.gpuseat"].splitlines()
        if ln.startswith("NodeName=")
    )
    c.write_config(
        config.gres_conf(devices),
        node.replace("NodeName=localhost", "NodeName=localhost NodeAddr=127.0.0.1")
        + "\nPartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n",
        extra="JobSubmitPlugins=lua\n",
    )
    service.write_job_submit([], c.conf.parent)  # before slurmctld reads JobSubmitPlugins=lua
    c.start(timeout=120)
    slurm = Slurm(Runner(), conf=c.conf)

    # accounting detected from the cluster; the seat limits are the associations' alone here (job_submit.lua
    # in another folder, not gpuseat's to keep), so a job over the seat waits with Slurm's own reason
    (c.root / "no-lua").mkdir()
    done = apply(st, "c2016", slurm_conf=c.conf, conf_dir=c.root / "no-lua", partitions_conf=c.partitions_conf)
    assert not done.failed, done.failed
    yield Acct(c, st, course, slurm, done)
    st.close()


def test_accounting_associations_limit_the_seat(acct: Acct) -> None:
    c, st, course, slurm, done = acct.cluster, acct.store, acct.course, acct.slurm, acct.first
    actions = {s.action for p in done.planned if p.changes for s in p.changes.steps}
    assert {"account.add", "association.add", "reservation.create", "partition.create"} <= actions
    assert "limits.set" not in actions
    assocs = slurm.run("sacctmgr", ["-n", "-P", "show", "assoc", "format=account,user,grptres,maxtresperjob"]).stdout
    assert f"gpuseat-c2016|{alice}|gres/gpu=1|gres/gpu=1" in assocs.splitlines()
    assert f"gpuseat-c2016|{bob}|gres/gpu=1|gres/gpu=1" in assocs.splitlines()
    assert plan(st, "c2016").steps == []  # a second apply does nothing
    session = config.reservation_name("c2016", course.intervals[0][0])

    got = slurm.probe(alice, partition=course.partition, reservation=session, gres="gpu:1", out_dir=c.root / "out")
    assert got.ok, got.refusal
    refused = slurm.probe(carol, partition="debug", reservation=None, gres="gpu:1", out_dir=c.root / "out")
    assert not refused.ok and "Invalid account" in refused.refusal  # no association, no job

    over = slurm.run(
        "sbatch",
        [f"--partition={course.partition}", f"--reservation={session}", "--gres=gpu:2",
         f"--output={c.root / 'out' / 'over.out'}", "--wrap", "env"],
        as_user=alice,
    )  # fmt: skip
    job_id = int(over.stdout.split()[-1])
    deadline = time.monotonic() + 30
    while True:  # the scheduler gives the reason on its next pass
        status = service.course_status(slurm, course)
        (job,) = next(m for m in status.members if m.unix_user == alice).jobs
        if job["reason"] != "None" or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert job["job_id"] == job_id and job["state"] == "PENDING"
    assert job["reason"].startswith("AssocGrpGRES") or job["reason"].startswith("AssocMaxGRESPerJob")
    assert job["meaning"].startswith("over the participant's seat")

    # alice is released: only `gpuseat apply`; her waiting job is cancelled, her association removed
    st.seats.release("c2016", participant=next(p.key for p in st.roster.participants("c2016") if p.unix_user == alice))
    done = apply(st, "c2016")
    assert not done.failed, done.failed
    order = [s.action for p in done.planned if p.changes for s in p.changes.ordered()]
    assert order.index("jobs.cancel") < order.index("association.remove")
    assert not [j for j in slurm.jobs([alice]) if j.live]
    assocs = slurm.run("sacctmgr", ["-n", "-P", "show", "assoc", "format=account,user"]).stdout.splitlines()
    assert f"gpuseat-c2016|{alice}" not in assocs and f"gpuseat-c2016|{bob}" in assocs
    again = slurm.probe(alice, partition=course.partition, reservation=session, gres="gpu:1", out_dir=c.root / "out")
    assert not again.ok
    assert plan(st, "c2016").steps == []


def _sleeper(acct: Acct, user: str, *, partition: str | None = None, reservation: str | None = None) -> Any:
    """``sbatch`` a job that sleeps, as ``user`` (the participant's own command); the completed process."""
    where = [f"--partition={partition or acct.course.partition}"]
    if reservation or partition is None:
        where.append(f"--reservation={reservation or _session(acct)}")
    # their own seat's GPU type, so that each holds their own seat's GPU (an untyped job is theirs to keep
    # too: test_an_untyped_job_on_another_seats_gpu_survives_apply)
    own = {alice: "seat-01", bob: "seat-02", carol: "seat-03"}[user]
    args = [
        *where,
        f"--gres=gpu:m60.{own}:1",
        f"--output={acct.cluster.root / 'out' / 'sleep-%j.out'}",
        "--wrap",
        "sleep 300",
    ]
    return acct.slurm.run("sbatch", args, as_user=user, check=False)


def _session(acct: Acct) -> str:
    return config.reservation_name("c2016", acct.course.intervals[0][0])


def _running(acct: Acct, user: str) -> list[int]:
    """The user's live jobs once none of them waits for the scheduler any more (its next pass)."""
    deadline = time.monotonic() + 30
    while True:
        jobs = [j for j in acct.slurm.jobs([user]) if j.live]
        if all(j.state == "RUNNING" for j in jobs) or time.monotonic() > deadline:
            return [j.job_id for j in jobs if j.state == "RUNNING"]
        time.sleep(0.2)


def _ask(acct: Acct, user: str, action: str) -> int:
    who = next(p.key for p in acct.store.roster.participants("c2016") if p.unix_user == user)
    return int(acct.store.requests.request_seat("c2016", who, action, actor=f"participant:{who}").id)


def _row(acct: Acct, request_id: int) -> tuple[str, str]:
    (r,) = [r for r in acct.store.requests.seat_requests("c2016", limit=100) if r.id == request_id]
    return r.state, r.reason or ""


def test_an_untyped_job_on_another_seats_gpu_survives_apply(acct: Acct) -> None:
    """As carol (seat-03; her unix user, ``sbatch --gres=gpu:1``): with accounting alone Slurm gives her
    untyped job another seat's GPU, which her association allows; the next apply keeps it and status lists
    no stray. Once she is released, the next apply cancels it."""
    st, slurm, part = acct.store, acct.slurm, acct.course.partition
    carol_key = next(p.key for p in st.roster.participants("c2016") if p.unix_user == carol)
    st.seats.assign("c2016", carol_key, "seat-03")
    try:
        assert not apply(st, "c2016").failed
        out = f"--output={acct.cluster.root / 'out' / 'untyped-%j.out'}"
        args = [f"--partition={part}", f"--reservation={_session(acct)}", "--gres=gpu:1", out, "--wrap", "sleep 300"]
        assert slurm.run("sbatch", args, as_user=carol, check=False).returncode == 0
        (job,) = _running(acct, carol)
        on = slurm.job_gres_index(job)
        given = re.findall(r"gpu:([\w.+-]+):[1-9]", on)  # the types it holds (an untyped job's lists all, 0 GPU)
        assert len(given) == 1 and given != ["m60.seat-03"], on  # Slurm's pick: the first free GPU, not hers
        assert plan(st, "c2016").steps == []
        done = apply(st, "c2016")
        assert not done.failed and [j.job_id for j in slurm.jobs([carol]) if j.live] == [job]
        now = service.slurm_course_from_store(st, "c2016")
        assert service.course_status(slurm, now).strays == []

        st.seats.release("c2016", participant=carol_key)  # released: her job goes at the next apply
        cancel = [s for s in plan(st, "c2016").steps if s.action == "jobs.cancel"]
        assert [(s.target, s.why) for s in cancel] == [(carol, f"1 job(s): {carol} holds no Slurm seat in c2016 now")]
        assert not apply(st, "c2016").failed
        assert not [j for j in slurm.jobs([carol]) if j.live]
    finally:  # as the module found it: carol seatless, without jobs
        if any(p.key == carol_key and p.seat for p in st.roster.participants("c2016")):
            st.seats.release("c2016", participant=carol_key)
        slurm.cancel([j.job_id for j in slurm.jobs([carol])])
        assert not apply(st, "c2016").failed


def test_a_participants_stop_cancels_their_jobs_and_keeps_them_out_until_a_start(acct: Acct) -> None:
    """As bob (his unix user, sbatch): a stop cancels his running job and his next submit is refused with
    Slurm's reason (AssocMaxSubmitJobLimit: MaxSubmitJobs=0 on his association, in the session and in any
    other partition; he is no user of the session reservation either); carol's job runs on; a start lets his next job run. A second apply plans nothing, and a hand-made change to his
    association is put back (restart, reset and key: test_requests.py on the stand-in cluster)."""
    st, slurm, part = acct.store, acct.slurm, acct.course.partition
    carol_key = next(p.key for p in st.roster.participants("c2016") if p.unix_user == carol)
    st.seats.assign("c2016", carol_key, "seat-03")
    try:
        assert not apply(st, "c2016").failed
        assert _sleeper(acct, bob).returncode == 0 and _sleeper(acct, carol).returncode == 0
        (_bobs,), (carols,) = _running(acct, bob), _running(acct, carol)

        stop = _ask(acct, bob, "stop")
        done = apply(st, "c2016")
        assert not done.failed, done.failed
        assert _row(acct, stop) == (
            "done",
            f"stopped: your jobs in partition {part} were cancelled; no new job of yours runs there until a start",
        )
        assert not [j for j in slurm.jobs([bob]) if j.live]
        assert [j.job_id for j in slurm.jobs([carol]) if j.live] == [carols]  # another participant: untouched
        for where in (None, "debug"):  # the course's session, and any partition: his association takes no job
            refused = _sleeper(acct, bob, partition=where)
            assert refused.returncode != 0 and "AssocMaxSubmitJobLimit" in refused.stderr, refused.stderr
            assert explain(refused.stderr).endswith("(the participant's seat is stopped: their association takes "
                                                    "no job until a start)")  # fmt: skip
        session = slurm.reservations()[_session(acct)]["Users"].split(",")
        assert bob not in session and carol in session  # nor is he a user of the session's reservation
        assocs = slurm.associations(part)
        assert (assocs[bob]["maxsubmitjobs"], assocs[carol]["maxsubmitjobs"]) == ("0", "")
        way_in = st.delivery.access_of("c2016")["seat-02"]
        assert way_in["notes"][0].startswith("stopped: on ") and part in way_in["notes"][0]
        assert plan(st, "c2016").steps == []
        # a hand-made change is put back at the next pass
        slurm.sacctmgr(["modify", "user", "where", f"name={bob}", f"account={part}", "set", "MaxSubmitJobs=-1"])
        done = apply(st, "c2016")
        assert [(s.action, s.target) for s in done.planned[0].changes.steps] == [("limit.set", bob)]
        assert not done.failed and slurm.associations(part)[bob]["maxsubmitjobs"] == "0"

        start = _ask(acct, bob, "start")
        assert not apply(st, "c2016").failed
        assert _row(acct, start) == ("done", f"started: you can run jobs in partition {part} again")
        assert slurm.associations(part)[bob]["maxsubmitjobs"] == ""
        assert plan(st, "c2016").steps == []
        assert _sleeper(acct, bob).returncode == 0
        assert len(_running(acct, bob)) == 1  # his next job runs
        assert [j.job_id for j in slurm.jobs([carol]) if j.live] == [carols]
    finally:  # as the module found it: carol seatless (her job cancelled), bob running without jobs
        st.seats.release("c2016", participant=carol_key)
        slurm.cancel([j.job_id for j in slurm.jobs([bob])])
        assert not apply(st, "c2016").failed
