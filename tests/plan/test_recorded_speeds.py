"""`gpuseat plan` uses LeNet results recorded by `gpuseat bench` (issue: performance-normalised view)."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_recorded_result_feeds_cost_per_run_and_time_saved(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUSEAT_DATA_DIR", str(tmp_path))
    store = tmp_path / "bench-results.jsonl"
    rows = [
        {"gpu_name": "NVIDIA H200", "gpu_model": "H200-141GB", "iterations": 1000, "seconds": 0.9,
         "recorded_at": "2026-12-01T10:00:00Z"},
        {"gpu_name": "NVIDIA H200", "gpu_model": "H200-141GB", "iterations": 10000, "seconds": 4.55,
         "recorded_at": "2026-12-02T10:00:00Z"},
        {"gpu_name": "AMD EPYC", "gpu_model": None, "iterations": 500, "seconds": 20.0,
         "recorded_at": "2026-12-02T11:00:00Z"},
    ]
    store.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = cli("plan", REPO / "examples" / "course-h200-mig.toml", "--format", "json")
    assert r.code == 0, r.err
    perf = json.loads(r.out)["options"][0]["performance"][0]
    assert perf["lenet_10k_seconds"] == 4.55  # the latest H200 result, scaled to 10k iterations
    assert perf["speed_source"] == "gpuseat bench, 2026-12-02"
    assert perf["time_saved"] == "24 h of K520 work takes 2.4 h on H200-141GB"
    assert perf["usd_per_lenet_run"] == round(perf["usd_per_seat_hour"] * 4.55 / 3600, 6)


def test_corrupt_store_is_an_input_error(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUSEAT_DATA_DIR", str(tmp_path))
    (tmp_path / "bench-results.jsonl").write_text("{not json\n")
    r = cli("plan", REPO / "examples" / "course-2016.toml")
    assert r.code == 2
    assert "bench-results.jsonl:1" in r.err
