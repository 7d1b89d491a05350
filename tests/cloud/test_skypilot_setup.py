"""A generated SkyPilot task's setup, run in a throw-away root with a wheel built from this checkout and no
package index: gpuseat installs, the roster's user and SSH key exist, a missing PyTorch does not fail the
setup, a hand-over takes the previous holder's key away; SkyPilot's own loader loads the task (with its
``file_mounts``); no autostop stops a seat inside the course's access window.
"""

from __future__ import annotations

import os
import re
import subprocess
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from gpuseat.catalog.bundle import load_catalog
from gpuseat.core.roster import RosterText
from gpuseat.engines.skypilot import tasks as cloud
from gpuseat.store import open_store

from .skysetup import build_wheel, load_task, new_vm, ssh_key, vm_python
from .test_skypilot import _sky_load

# the module fixture (a wheel of this checkout and an image Python) takes seconds: one xdist worker runs the
# file, so it is built once, not once per worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(name="skypilot_setup")]
EXAMPLES = Path(__file__).parents[2] / "examples"
OPTION = {
    "rank": 1,
    "offers": [{"offer": "aws:g4dn.xlarge", "count": 2}],
    "groups": [{"group": "students", "offer": "aws:g4dn.xlarge", "units": 2, "seats": 2}],
}


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> dict:
    if os.geteuid() != 0:
        pytest.skip("useradd --prefix needs root (CI runs as root)")
    out = tmp_path_factory.mktemp("image")
    return {"wheel": build_wheel(out), "python": vm_python(out), "out": out}


@pytest.fixture
def course(tmp_path: Path):
    store = open_store(f"sqlite:///{tmp_path / 'course.db'}", create=True)
    store.courses.create_course(
        EXAMPLES / "course-lab-hours.toml", key="lab", timezone="Europe/Berlin", plan_option=OPTION
    )
    keys = {p: ssh_key(tmp_path, p) for p in ("ann", "bob")}
    roster = "name,email,group,unix_user,ssh_key\n" + "".join(
        f"{p.title()},{p}@example.edu,students,{p},{k}\n" for p, k in keys.items()
    )
    store.roster.import_roster("lab", RosterText(roster, where="roster.csv"))
    store.seats.add_seats("lab", [{"key": f"cloud-{i}", "kind": "cloud"} for i in (1, 2)])
    store.seats.assign("lab", "ann", "cloud-1")
    yield store, keys
    store.close()


def _tasks(store, out: Path, wheelhouse: Path) -> dict[str, dict]:
    opts = cloud.TaskOptions(wheelhouse=str(wheelhouse), offline=True)
    written = cloud.write_for_course(store, "lab", out, load_catalog().offers, opts, force=True)
    return {Path(p).stem: load_task(p) for p in written.tasks}


def test_setup_installs_the_wheel_offline_and_creates_the_roster_user(course, image, tmp_path):
    store, keys = course
    tasks = _tasks(store, tmp_path / "sky", image["wheel"].parent)
    task = tasks["gs-lab-cloud-1"]
    assert task["file_mounts"] == {"~/.gpuseat/wheels": str(image["wheel"].parent.resolve())}
    assert "--no-index" in task["setup"] and image["wheel"].name in task["setup"]
    assert "autostop" not in task["resources"]
    vm = new_vm(tmp_path / "vm", image["python"])
    done = vm.setup(task)
    assert done.returncode == 0, done.stdout + done.stderr
    # gpuseat from the shipped wheel, in the cluster user's site, runnable
    assert "no PyTorch on this image: benchmark skipped" in done.stdout
    gpuseat = vm.home / ".local" / "bin" / "gpuseat"
    assert gpuseat.exists()
    where = subprocess.run(
        [vm.python_bin / "python3", "-c", "import gpuseat; print(gpuseat.__file__)"],
        env=vm.env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(vm.home / ".local")), where
    ran = subprocess.run([gpuseat, "plan", str(EXAMPLES / "course-2016.toml"), "--format", "json"], env=vm.env(),
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert ran.returncode == 0 and '"options"' in ran.stdout, ran.stderr
    # the roster's user and key
    ann = vm.passwd("ann")
    assert ann is not None and ann[5] == "/home/ann" and ann[6] == "/bin/bash"
    ssh = vm.root / "home" / "ann" / ".ssh"
    keyfile = ssh / "authorized_keys"
    assert keyfile.read_text().splitlines() == [keys["ann"]]
    assert (ssh.stat().st_mode & 0o777, keyfile.stat().st_mode & 0o777) == (0o700, 0o600)
    assert (keyfile.stat().st_uid, keyfile.stat().st_gid) == (int(ann[2]), int(ann[3]))
    # setup re-runs on every sky launch: a second run changes nothing and does not fail
    again = vm.setup(task)
    assert again.returncode == 0, again.stderr
    assert (vm.root / "etc" / "passwd").read_text().count("\nann:") == 1


def test_a_hand_over_takes_the_previous_holders_key_away(course, image, tmp_path):
    store, keys = course
    vm = new_vm(tmp_path / "vm", image["python"])
    first = _tasks(store, tmp_path / "sky", image["wheel"].parent)["gs-lab-cloud-1"]
    assert vm.setup(first).returncode == 0
    store.seats.release("lab", participant="ann", reason="moved")
    store.seats.assign("lab", "bob", "cloud-1")
    second = _tasks(store, tmp_path / "sky", image["wheel"].parent)["gs-lab-cloud-1"]
    done = vm.setup(second)
    assert done.returncode == 0, done.stderr
    assert (vm.root / "home" / "bob" / ".ssh" / "authorized_keys").read_text().splitlines() == [keys["bob"]]
    assert not (vm.root / "home" / "ann" / ".ssh" / "authorized_keys").exists()
    assert vm.shadow("ann")[7] == "1"  # account expired (1970-01-02): PAM refuses the login
    assert vm.shadow("bob")[7] == ""


def test_setup_without_torch_and_without_a_wheel_does_not_fail(course, image, tmp_path):
    store, _ = course
    written = cloud.write_for_course(store, "lab", tmp_path / "sky", load_catalog().offers, cloud.TaskOptions())
    task = load_task(next(p for p in written.tasks if p.endswith("gs-lab-cloud-2.yaml")))
    vm = new_vm(tmp_path / "vm", image["python"])
    done = vm.setup(task)
    assert done.returncode == 0, done.stderr
    assert "nobody holds this seat yet" in done.stdout and "no gpuseat wheel shipped" in done.stdout
    assert "file_mounts" not in task


def test_skypilots_loader_loads_tasks_with_the_wheelhouse(course, image, tmp_path):
    store, _ = course
    tasks_dir = tmp_path / "sky"
    opts = cloud.TaskOptions(wheelhouse=str(image["wheel"].parent), offline=True)
    written = cloud.write_for_course(store, "lab", tasks_dir, load_catalog().offers, opts)
    loaded = _sky_load([Path(p) for p in written.tasks], tmp_path / "home")
    for t in loaded:
        assert "error" not in t, t
        assert t["idle_minutes"] is None  # no autostop: nothing stops a seat inside a session
        assert "--no-index" in t["setup"]
        assert t["file_mounts"] == {"~/.gpuseat/wheels": str(image["wheel"].parent.resolve())}
    held = next(t for t in loaded if t["name"] == "gs-lab-cloud-1")
    assert "useradd" in held["setup"] and "P_USER=ann" in held["setup"]


def test_no_stop_inside_an_access_window_and_none_for_a_24_7_course(tmp_path):
    offer = next(o for o in load_catalog().offers if o.id == "aws:g4dn.xlarge")
    seats = [cloud.CloudSeat("lab", "s1", offer)]
    day = datetime(2026, 3, 2)
    sessions = [(day + timedelta(days=d, hours=9), day + timedelta(days=d, hours=17)) for d in range(3)]
    lab = cloud.write(tmp_path / "lab", "lab", seats, sessions, "UTC", cloud.TaskOptions())
    always = cloud.write(tmp_path / "always", "always", [cloud.CloudSeat("always", "s1", offer)],
                         [(day, day + timedelta(days=15))], "UTC", cloud.TaskOptions())  # fmt: skip
    for written, intervals in ((lab, sessions), (always, [(day, day + timedelta(days=15))])):
        task = load_task(written.tasks[0])
        assert "autostop" not in task["resources"]
        wins = cloud.windows(intervals)
        crontab = Path(next(p for p in written.schedule if p.endswith("crontab"))).read_text()
        stops = []
        for line in crontab.splitlines():
            m = re.match(r"^(\d+) (\d+) (\d+) (\d+) \* .*\$\(date \+\\%Y\)\" = (\d+) \] && sky (\w+)", line)
            if m and m.group(6) != "start":
                minute, hour, dom, month, year = (int(m.group(i)) for i in range(1, 6))
                stops.append(datetime(year, month, dom, hour, minute))
        assert stops == [w.stop for w in wins]  # the only stops: each window's end
        assert not any(w.start < t < w.stop for w in wins for t in stops)
    assert len(cloud.windows([(day, day + timedelta(days=15))])) == 1  # 24/7: one stop, at the course's end
