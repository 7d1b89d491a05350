"""Enrolment with accounting: a real slurmdbd on a throw-away MariaDB, sacctmgr associations with a GRES limit.

The cluster runs ``AccountingStorageEnforce=associations,limits,safe``: a user without an association
is refused, and a job over the participant's GPU limit waits with Slurm's reason, which status explains.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuseat.catalog.bundle import load_catalog
from gpuseat.engines.runner import Runner
from gpuseat.engines.slurm import config
from gpuseat.engines.slurm import course as service
from gpuseat.engines.slurm.adapter import Slurm
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


def test_accounting_associations_limit_the_seat(acct_cluster: Cluster) -> None:
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
    st.close()
