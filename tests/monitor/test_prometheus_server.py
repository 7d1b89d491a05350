"""Issue 15: a real Prometheus server (Debian package ``prometheus``) scrapes ``gpuseat monitor --listen``
every second and answers queries for the seat metrics with their participant labels.

Both processes are started here on loopback and stopped by pid. Off CI the test is skipped when the
``prometheus`` binary is missing; on CI (``CI=true``) it fails instead.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from gpuseat.monitor.replay import synthetic_snapshot, write_replay
from ports import free_port

PROMETHEUS = shutil.which("prometheus") or ("/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None and os.environ.get("CI") != "true",
    reason="prometheus not installed (apt-get install prometheus)",
)


def query(port: int, promql: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with urllib.request.urlopen(url, timeout=5) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success"
    return body["data"]["result"]


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.mark.parametrize("names", ["dcgm", "gpuseat"])
def test_real_prometheus_scrapes_seat_metrics_with_participants(tmp_path, names):
    assert PROMETHEUS, "prometheus must be installed on CI"
    snaps = [synthetic_snapshot(gpus=1, migs_per_gpu=2, processes=1, taken_at=1_700_000_040.0 + i) for i in range(5)]
    write_replay(tmp_path / "r.jsonl", snaps)
    migs = [m.uuid for m in snaps[0].gpus[0].mig]
    (tmp_path / "seats.toml").write_text(
        "".join(f'[[seat]]\nid = "s{i}"\ndevice = "{u}"\nparticipant = "p{i}"\n' for i, u in enumerate(migs))
    )
    gpuseat_port, prom_port = free_port(), free_port()
    env = {**os.environ, "GPUSEAT_DATA_DIR": str(tmp_path / "data")}
    env.pop("GPUSEAT_DB_URL", None)
    args = ["--seats", str(tmp_path / "seats.toml"), "--interval", "0.5", "--metrics-names", names]
    monitor = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuseat",
            "monitor",
            "--replay",
            str(tmp_path / "r.jsonl"),
            *args,
            "--listen",
            f"127.0.0.1:{gpuseat_port}",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: gpuseat\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{gpuseat_port}']\n"
    )
    prom = subprocess.Popen(
        [
            str(PROMETHEUS),
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    metric = "gpuseat_seat_processes"
    used = "DCGM_FI_DEV_FB_USED" if names == "dcgm" else "gpuseat_memory_used_mib"
    try:
        deadline = time.monotonic() + 90
        seats: list[dict] = []
        while time.monotonic() < deadline:
            assert monitor.poll() is None, monitor.stderr.read() if monitor.stderr else ""
            try:
                seats = query(prom_port, f'{metric}{{participant!=""}}')
            except (OSError, ValueError):  # not up yet, or an answer cut short under load (not JSON)
                seats = []  # Prometheus still starting
            if len(seats) == 2:
                break
            time.sleep(1)
        assert {s["metric"]["participant"] for s in seats} == {"p0", "p1"}
        by_seat = {s["metric"]["seat"]: s for s in seats}
        assert by_seat["s0"]["value"][1] == "1" and by_seat["s1"]["value"][1] == "0"
        assert by_seat["s0"]["metric"]["job"] == "gpuseat"
        memory = query(prom_port, f'{used}{{seat="s0"}}')
        assert [m["value"][1] for m in memory] == ["512"]
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/api/v1/targets", timeout=5).read())
        assert targets["data"]["activeTargets"][0]["health"] == "up"
    finally:
        stop(prom)
        stop(monitor)


#: Metrics of the panels of dcgm-exporter's Grafana dashboard that a capture can feed (temperature, power,
#: SM clock, framebuffer) — and the health metrics of issue 26.
DASHBOARD = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_FB_USED")


def test_real_prometheus_scrapes_health_metrics_from_a_capture_with_an_xid(tmp_path):
    """Issue 26: telegraf's A100 `-q -x` plus a real dmesg with Xid 32/32/31 on the same PCI bus."""
    assert PROMETHEUS, "prometheus must be installed on CI"
    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    gpuseat_port, prom_port = free_port(), free_port()
    env = {**os.environ, "GPUSEAT_DATA_DIR": str(tmp_path / "data")}
    env.pop("GPUSEAT_DB_URL", None)
    monitor = subprocess.Popen(
        [
            sys.executable, "-m", "gpuseat", "monitor",
            "--from-xml", str(fixtures / "telegraf__a100-sxm4-v12.xml"),
            "--kernel-log", str(fixtures / "bumblebee-677__xid-dmesg.txt"),
            "--interval", "0.5", "--listen", f"127.0.0.1:{gpuseat_port}",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: gpuseat\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{gpuseat_port}']\n"
    )
    prom = subprocess.Popen(
        [
            str(PROMETHEUS),
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 90
        xid: list[dict] = []
        while time.monotonic() < deadline and not xid:
            assert monitor.poll() is None, monitor.stderr.read() if monitor.stderr else ""
            try:
                xid = query(prom_port, "DCGM_FI_DEV_XID_ERRORS")
            except (OSError, ValueError):
                xid = []
            time.sleep(0.5)
        assert [(s["metric"]["gpu"], s["value"][1]) for s in xid] == [("0", "31")]
        assert xid[0]["metric"]["DCGM_FI_DRIVER_VERSION"] == "535.54.03"
        assert xid[0]["metric"]["modelName"] == "NVIDIA A100-SXM4-80GB"
        values = {
            name: query(prom_port, f'{name}{{gpu="0",GPU_I_ID=""}}')
            for name in (
                "DCGM_FI_DEV_POWER_MGMT_LIMIT",
                "DCGM_FI_DEV_MEM_CLOCK",
                "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
                "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
                "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
            )
        }
        assert {k: [s["value"][1] for s in v] for k, v in values.items()} == {
            "DCGM_FI_DEV_POWER_MGMT_LIMIT": ["500"],
            "DCGM_FI_DEV_MEM_CLOCK": ["1593"],
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ["0"],
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ["0"],
            "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": ["0"],
        }
        assert query(prom_port, "DCGM_FI_DEV_FAN_SPEED") == []  # N/A on this card: no series, never 0
        for name in DASHBOARD:
            assert query(prom_port, f"avg({name})"), f"dashboard panel {name} has no data"
        assert query(prom_port, "DCGM_FI_DEV_GPU_UTIL") == []  # MIG on: dcgm-exporter has none either
    finally:
        stop(prom)
        stop(monitor)
