"""The Slurm engine driven from the course store: roster, seats and assignments in SQLite, a real cluster.

The flow an organiser runs: course + roster + seats from a carve layout + assignments in the store,
``slurm config --record`` (seats become engine slurm), ``enroll`` (= ``gpuseat apply --engine slurm``),
a participant's job, ``status`` writing the seats' engine state back and naming the jobs of people who
no longer hold a seat.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuseat.catalog.bundle import load_catalog
from gpuseat.engines.runner import Runner
from gpuseat.engines.slurm import config
from gpuseat.engines.slurm import course as service
from gpuseat.engines.slurm.adapter import Slurm
from gpuseat.services.carving import carve_inventory

from .cluster import Cluster
from .conftest import USERS

courses = pytest.importorskip("gpuseat.store")
EXAMPLES = Path(__file__).parents[2] / "examples"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, unix_users: tuple[str, ...]):
    """Course ``slurmlab`` (one session today, all day, UTC): 3 participants, 4 M60 seats, 2 assigned."""
    tmp = tmp_path_factory.mktemp("store")
    today = datetime.now(UTC).date()
    course_file = tmp / "slurmlab.toml"
    course_file.write_text(
        'name = "Slurm lab"\nparticipants = 3\n\n[needs]\nmin_gpu_memory_gb = 4\n\n'
        f"[schedule]\nstart = {today}\nend = {today + timedelta(days=1)}\n\n"
        f'[[schedule.session]]\ndate = {today}\nhours = "00:00-24:00"\n\n'
        f'[[schedule.session]]\ndate = {today + timedelta(days=1)}\nhours = "09:00-17:00"\n'
    )
    roster = tmp / "roster.csv"
    roster.write_text(
        "name,email,group,unix_user\n"
        + "".join(
            f"{u.split('-')[0][2:].title()},{u.split('-')[0][2:]}@example.edu,participants,{u}\n" for u in unix_users
        )
    )
    st = courses.open_store(f"sqlite:///{tmp / 'course.db'}", create=True)
    st.courses.create_course(course_file, key="slurmlab", timezone="UTC")
    st.roster.import_roster("slurmlab", roster)
    layout = carve_inventory(EXAMPLES / "ibm-2xM60.toml", load_catalog(), mode="passthrough")
    st.seats.add_seats(
        "slurmlab", [{"key": s.name, "kind": "gpu", "host": "localhost", "memory_gb": 8} for s in layout.slices]
    )
    people = {p.unix_user: p.key for p in st.roster.participants("slurmlab")}
    st.seats.assign("slurmlab", people[unix_users[0]], layout.slices[0].name)
    st.seats.assign("slurmlab", people[unix_users[1]], layout.slices[1].name)
    yield st, layout, f"sqlite:///{tmp / 'course.db'}"
    st.close()


def test_store_to_slurm_and_back(store, make_cluster: Cluster, cli) -> None:
    st, layout, url = store
    c = make_cluster
    devices = config.devices_from_layout(layout, "localhost", dev_root=str(c.dev))
    assert service.record_config(st, "slurmlab", devices) == [s.name for s in layout.slices]
    seat = st.seats.get_seat("slurmlab", layout.slices[0].name)
    assert (seat.engine, seat.state, seat.host) == ("slurm", "requested", "localhost")
    assert service.device_from_ref(seat.key, seat.engine_ref) == devices[0]

    c.mknod_gpus([Path(d.files[0]).name for d in devices])
    node = service.config_files(devices, cpus=8)["slurm.conf.gpuseat"]
    node_line = next(ln for ln in node.splitlines() if ln.startswith("NodeName="))
    c.write_config(
        config.gres_conf(devices),
        node_line.replace("NodeName=localhost", "NodeName=localhost NodeAddr=127.0.0.1")
        + "\nPartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n",
        extra="JobSubmitPlugins=lua\n",
    )
    service.write_job_submit([], c.conf.parent)  # before slurmctld reads JobSubmitPlugins=lua
    c.start()
    slurm = Slurm(Runner(), conf=c.conf)

    # `slurm enroll` is `gpuseat apply --engine slurm`, its flags stored as the course's slurm settings
    args = ("--course", "slurmlab", "--db", url, "--slurm-conf", c.conf)
    r = cli("slurm", "enroll", *args, "--format", "json")
    assert r.code == 0, r.err + r.out
    (planned,) = json.loads(r.out)["plans"]
    made = [s for s in planned["steps"] if s["action"] == "reservation.create"]
    assert len(made) == 2 and planned["error"] is None
    limits = next(s for s in planned["steps"] if s["action"] == "limits.set")
    assert limits["phase"] == "grant" and limits["target"] == str(c.conf.parent / "job_submit.lua")
    assert st.agents.engine_settings("slurmlab", "slurm") == {"slurm_conf": str(c.conf), "conf_dir": str(c.conf.parent)}
    sc = service.slurm_course_from_store(st, "slurmlab")
    today = sc.intervals[0][0]
    got = slurm.probe(
        USERS[0],
        partition=sc.partition,
        reservation=config.reservation_name("slurmlab", today),
        gres="gpu:1",
        out_dir=c.root / "out",
    )
    assert got.ok, got.refusal
    report = service.course_status(slurm, sc)
    assert service.record_status(st, report) == [layout.slices[0].name, layout.slices[1].name]
    after = st.seats.get_seat("slurmlab", layout.slices[0].name)
    assert after.state == "running" and after.state_reason.startswith("enrolled;")
    assert after.engine_ref == service.gres_ref(devices[0])
    access = st.delivery.access_of("slurmlab")[layout.slices[0].name]
    assert access["holder"] == st.seats.get_seat("slurmlab", layout.slices[0].name).participant
    assert access["command"].startswith("srun -p gpuseat-slurmlab --reservation=gpuseat-slurmlab-")

    # the same through the CLI (one test: the cluster lives in this worker): nothing left to do
    r = cli("slurm", "sessions", *args)
    assert r.code == 0, r.err
    assert "nothing to change" in r.out
    r = cli("slurm", "status", *args)
    assert r.code == 0, r.err
    assert "gpu:m60:1" in r.out and USERS[0] in r.out
    r = cli("slurm", "check", *args, "--out-dir", c.root / "check", "--format", "json")
    assert r.code == 0, r.err + r.out
    checked = json.loads(r.out)
    assert [x["unix_user"] for x in checked] == list(USERS[:2]) and all(x["ok"] for x in checked)
    assert all(x["cuda_visible_devices"] in {"0", "1", "2", "3"} for x in checked)
    r = cli("slurm", "config", "--course", "slurmlab", "--db", url, "--cpus", "8")
    assert r.code == 0, r.err
    assert config.gres_conf(devices) in r.out and "PartitionName=gpuseat-slurmlab Nodes=localhost" in r.out
    # a job of someone released (nothing applied yet): status names it as theirs, without a seat
    held = slurm.run(
        "sbatch",
        ["-p", sc.partition, f"--reservation={config.reservation_name('slurmlab', today)}", "--gres=gpu:1",
         f"--output={c.root / 'out' / 'held.out'}", "--wrap", "sleep 120"],
        as_user=USERS[1],
    )  # fmt: skip
    job = held.stdout.split()[-1]
    st.seats.release("slurmlab", seat=layout.slices[1].name)
    r = cli("slurm", "status", *args, "--format", "json")
    assert r.code == 0, r.err
    (stray,) = json.loads(r.out)["strays"]
    assert (str(stray["job_id"]), stray["user"], stray["why"]) == (job, USERS[1], "holds no seat now")
    r = cli("slurm", "status", *args)
    assert f"{USERS[1]} holds no seat now: job {job}" in r.err
    r = cli("apply", "--course", "slurmlab", "--engine", "slurm", "--db", url)
    assert r.code == 0, r.err + r.out
    cancel = next(ln for ln in r.out.splitlines() if "- jobs.cancel" in ln)
    assert f" {USERS[1]} " in cancel and cancel.endswith("done"), r.out
    assert r.out.index("- jobs.cancel") < r.out.index("seat.clear"), r.out
    assert not [j for j in slurm.jobs([USERS[1]]) if j.live]
    r = cli("slurm", "status", "--course", "nope", "--db", url, "--slurm-conf", c.conf)
    assert r.code == 2 and "Traceback" not in r.err
