"""The real CLI: JSON contract, monitor → database → usage, clean SIGTERM shutdown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from gpuseat.monitor.replay import synthetic_snapshot, write_replay
from gpuseat.services.monitoring import Source, snapshot_once, usage_report

from .conftest import FIXTURES, H100_MIG, section

REPO = FIXTURES.parents[1]
GPU_KEYS = {
    "index", "uuid", "name", "pci_bus_id", "memory_used_mib", "memory_total_mib", "memory_free_mib",
    "utilization_gpu", "temperature_c", "power_w", "clock_sm_mhz", "mig_enabled", "mig", "healthy", "error",
    "bar1_total_mib",
    # health (issue 26)
    "driver_version", "clock_mem_mhz", "fan_percent", "power_limit_w", "clocks_event_reasons",
    "ecc_sbe_volatile", "ecc_dbe_volatile", "ecc_sbe_aggregate", "ecc_dbe_aggregate",
    "retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending",
    "remapped_rows_correctable", "remapped_rows_uncorrectable", "remapped_rows_pending", "remapped_rows_failure",
    "xid_last", "xid_count",
}  # fmt: skip
PROC_KEYS = {
    "pid", "gpu_uuid", "mig_uuid", "gpu_instance_id", "used_memory_mib", "name", "kind",
    "user", "seat", "participant", "foreign",
}  # fmt: skip


def test_from_xml_json_contract(cli, data_dir):
    """Issue 15 item 8: every field the sampler reads (temperature, power, process names), equal to to_dict()."""
    r = cli("monitor", "--from-xml", FIXTURES / "telegraf__tesla-t4.xml", "--once", "--format", "json")
    assert r.code == 0, r.err
    data = json.loads(r.out)
    assert set(data) == {"schema_version", "host", "taken_at", "gpus", "processes", "seats"}
    assert data["schema_version"] == 1
    assert set(data["gpus"][0]) == GPU_KEYS and all(set(p) == PROC_KEYS for p in data["processes"])
    gpu = data["gpus"][0]
    assert (gpu["temperature_c"], gpu["power_w"], gpu["memory_free_mib"]) == (
        40,
        26.78,
        13939,
    )  # free as reported (388 MiB reserved), not total - used
    assert [(p["name"], p["kind"], p["used_memory_mib"]) for p in data["processes"]] == [
        ("/usr/lib/xorg/Xorg", "G", 22),
        ("python", "C", 1005),
    ]
    assert data["processes"][0]["user"] is None  # a capture's pids are not this machine's
    assert not data_dir.exists()  # --once writes no history
    view = snapshot_once(Source(from_xml=FIXTURES / "telegraf__tesla-t4.xml"))
    expected = view.to_dict()
    assert {**data, "taken_at": None} == {**json.loads(json.dumps(expected)), "taken_at": None}


def test_from_csv_with_apps_list_and_seats(cli, tmp_path, data_dir):
    (tmp_path / "g.csv").write_text(section(H100_MIG, "load :: query-gpu (csv, what the exporter parses)"))
    (tmp_path / "a.csv").write_text(section(H100_MIG, "load :: query-compute-apps (per-process)"))
    (tmp_path / "l.txt").write_text(section(H100_MIG, "capabilities :: list (-L)"))
    (tmp_path / "s.csv").write_text("id,device,participant\nwhole,GPU-00000000-0000-0000-0000-000000000000,eve\n")
    r = cli(
        "top",
        "--from-csv",
        tmp_path / "g.csv",
        "--apps",
        tmp_path / "a.csv",
        "--list",
        tmp_path / "l.txt",
        "--seats",
        tmp_path / "s.csv",
        "--once",
        "-f",
        "json",
    )
    assert r.code == 0, r.err
    data = json.loads(r.out)
    assert [m["profile"] for m in data["gpus"][0]["mig"]] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    assert [(p["pid"], p["seat"], p["participant"]) for p in data["processes"]] == [
        (21180, "whole", "eve"),
        (21181, "whole", "eve"),
        (21198, "whole", "eve"),
    ]


def test_bad_inputs_exit_2(cli, tmp_path, data_dir):
    (tmp_path / "bad.toml").write_text('[[seat]]\nid = "a"\ndevice = "nope"\n')
    r = cli("top", "--from-xml", FIXTURES / "telegraf__a10g.xml", "--seats", tmp_path / "bad.toml", "--once")
    assert r.code == 2 and "device" in r.err
    assert cli("monitor", "--from-xml", tmp_path / "missing.xml", "--once").code == 2
    assert cli("monitor", "--apps", tmp_path / "x.csv", "--once").code == 2
    assert cli("usage", "--since", "last tuesday").code == 2


def test_examples_seats_file_is_valid(cli, tmp_path, data_dir):
    (tmp_path / "l.txt").write_text(section(H100_MIG, "capabilities :: list (-L)"))
    (tmp_path / "g.csv").write_text(section(H100_MIG, "idle :: query-gpu (csv, what the exporter parses)"))
    r = cli(
        "top",
        "--from-csv",
        tmp_path / "g.csv",
        "--list",
        tmp_path / "l.txt",
        "--seats",
        REPO / "examples" / "seats.toml",
        "--once",
    )
    assert r.code == 0, r.err
    assert "seat-01" in r.out and "alice" in r.out


def test_monitor_replay_into_db_then_usage_and_chart(cli, tmp_path, data_dir):
    t0 = 1_700_000_040.0
    snaps = [synthetic_snapshot(gpus=1, migs_per_gpu=2, processes=1, taken_at=t0 + 30 * i) for i in range(9)]
    write_replay(tmp_path / "r.jsonl", snaps)
    migs = [m.uuid for m in snaps[0].gpus[0].mig]
    (tmp_path / "seats.toml").write_text(
        "".join(f'[[seat]]\nid = "s{i}"\ndevice = "{u}"\nparticipant = "p{i}"\n' for i, u in enumerate(migs))
    )
    r = cli(
        "monitor",
        "--replay",
        tmp_path / "r.jsonl",
        "--seats",
        tmp_path / "seats.toml",
        "--interval",
        "0.1",
        "--ticks",
        "9",
    )
    assert r.code == 0, r.err
    assert (data_dir / "gpuseat.db").exists()
    r = cli("usage", "--format", "json", "--chart", tmp_path / "u.html")  # minutes 0-3 finished
    assert r.code == 0, r.err
    data = json.loads(r.out)
    assert data["schema_version"] == 1
    assert data == usage_report(None, None).to_dict()  # the CLI prints the service result's to_dict()
    report = {u["participant"]: u for u in data["participants"]}
    assert report["p0"]["gpu_hours"] == round(4 / 60, 3) and report["p0"]["peak_memory_mib"] == 512
    assert report["p1"]["gpu_hours"] == 0 and report["p1"]["idle_hours"] == round(4 / 60, 3)
    page = (tmp_path / "u.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and 'data-participant="p0"' in page and "<script" not in page


def _has_samples(path):
    import sqlite3

    if not path.exists():
        return False
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1) as conn:
            return conn.execute("SELECT count(*) FROM samples").fetchone()[0] > 0
    except sqlite3.Error:
        return False


def test_monitor_stops_cleanly_on_sigterm(tmp_path):
    snaps = [synthetic_snapshot(gpus=1, migs_per_gpu=1, processes=1, taken_at=1_700_000_040.0 + i) for i in range(3)]
    write_replay(tmp_path / "r.jsonl", snaps)
    env = {**os.environ, "GPUSEAT_DATA_DIR": str(tmp_path / "data")}
    env.pop("GPUSEAT_DB_URL", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuseat",
            "monitor",
            "--replay",
            str(tmp_path / "r.jsonl"),
            "--interval",
            "0.2",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not _has_samples(tmp_path / "data" / "gpuseat.db") and time.monotonic() < deadline:
        time.sleep(0.1)  # the loop runs (signal handlers installed) once the first sample is stored
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "monitor stopped after" in err and "Traceback" not in err
