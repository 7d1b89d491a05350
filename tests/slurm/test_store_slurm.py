"""The Slurm engine driven from the course store: roster, seats and assignments in SQLite, a real cluster.

The flow an organiser runs: course + roster + seats from a carve layout + assignments in the store,
``slurm config --record`` (seats become engine slurm), ``enroll``, ``sessions``, a participant's job,
``status`` writing the seats' engine state back.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuseat.catalog.bundle import load_catalog
from gpuseat.services import slurm as service
from gpuseat.services.carving import carve_inventory
from gpuseat.slurm import config
from gpuseat.slurm.engine import Slurm

from .cluster import Cluster
from .conftest import USERS

courses = pytest.importorskip("gpuseat.services.courses")
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
    st.create_course(course_file, key="slurmlab", timezone="UTC")
    st.import_roster("slurmlab", roster)
    layout = carve_inventory(EXAMPLES / "ibm-2xM60.toml", load_catalog(), mode="passthrough")
    st.add_seats(
        "slurmlab", [{"key": s.name, "kind": "gpu", "host": "localhost", "memory_gb": 8} for s in layout.slices]
    )
    people = {p.unix_user: p.key for p in st.participants("slurmlab")}
    st.assign("slurmlab", people[unix_users[0]], layout.slices[0].name)
    st.assign("slurmlab", people[unix_users[1]], layout.slices[1].name)
    yield st, layout, f"sqlite:///{tmp / 'course.db'}"
    st.close()


def test_store_to_slurm_and_back(store, make_cluster: Cluster, cli) -> None:
    st, layout, url = store
    c = make_cluster
    devices = config.devices_from_layout(layout, "localhost", dev_root=str(c.dev))
    assert service.record_config(st, "slurmlab", devices) == [s.name for s in layout.slices]
    seat = st.get_seat("slurmlab", layout.slices[0].name)
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
    slurm = Slurm(conf=c.conf)

    enrolled = service.enroll(slurm, service.courses_from_store(st), "slurmlab", conf_dir=c.conf.parent)
    assert [x["user"] for x in enrolled.limits] == sorted(USERS[:2])
    sc = service.course_from_store(st, "slurmlab")
    made = service.sessions(slurm, sc, now=datetime.now())
    assert len(made.created) == 2
    today = sc.intervals[0][0]
    got = slurm.probe(
        USERS[0],
        partition=sc.partition,
        reservation=config.reservation_name("slurmlab", today),
        gres="gpu:1",
        out_dir=c.root / "out",
    )
    assert got.ok, got.refusal
    report = service.status(slurm, sc)
    assert service.record_status(st, report) == [layout.slices[0].name, layout.slices[1].name]
    after = st.get_seat("slurmlab", layout.slices[0].name)
    assert after.state == "running" and after.state_reason.startswith("enrolled;")
    assert after.engine_ref == service.engine_ref(devices[0])

    # the same through the CLI (one test: the cluster lives in this worker)
    args = ("--course", "slurmlab", "--db", url, "--slurm-conf", c.conf)
    r = cli("slurm", "enroll", *args, "--format", "json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["mode"] == "partition" and not json.loads(r.out)["created"]
    r = cli("slurm", "sessions", *args, "--format", "json")
    assert r.code == 0, r.err
    assert len(json.loads(r.out)["existing"]) == 2
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
    r = cli("slurm", "status", "--course", "nope", "--db", url, "--slurm-conf", c.conf)
    assert r.code == 2 and "Traceback" not in r.err
