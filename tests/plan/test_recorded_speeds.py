"""`gpuseat plan` uses LeNet results recorded by `gpuseat bench` (issue: performance-normalised view)."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_recorded_result_feeds_cost_per_run_and_time_saved(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUSEAT_DATA_DIR", str(tmp_path))
    store = tmp_path / "bench-results.jsonl"
    rows = [
        {
            "gpu_name": "NVIDIA H200",
            "gpu_model": "H200-141GB",
            "iterations": 1000,
            "seconds": 0.9,
            "recorded_at": "2026-12-01T10:00:00Z",
        },
        {
            "gpu_name": "NVIDIA H200",
            "gpu_model": "H200-141GB",
            "iterations": 10000,
            "seconds": 4.55,
            "recorded_at": "2026-12-02T10:00:00Z",
        },
        {
            "gpu_name": "AMD EPYC",
            "gpu_model": None,
            "iterations": 500,
            "seconds": 20.0,
            "recorded_at": "2026-12-02T11:00:00Z",
        },
    ]
    store.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = cli("plan", REPO / "examples" / "course-h200-mig.toml", "--format", "json")
    assert r.code == 0, r.err
    perf = json.loads(r.out)["options"][0]["performance"][0]
    assert perf["lenet_10k_seconds"] == 4.55  # the latest H200 result, scaled to 10k iterations
    assert perf["speed_source"] == "gpuseat bench, 2026-12-02"
    assert perf["time_saved"] == "24 h of K520 work takes 2.4 h on H200-141GB"
    assert perf["usd_per_lenet_run"] == round(perf["usd_per_seat_hour"] * 4.55 / 3600, 6)
    assert (
        json.loads(r.out)["speeds"]
        == "shipped reference results, and 1 result(s) recorded by gpuseat bench (H200-141GB)"
    )
    explain = cli("plan", REPO / "examples" / "course-h200-mig.toml", "--explain").out
    assert "Speeds: shipped reference results, and 1 result(s) recorded by gpuseat bench (H200-141GB)" in explain
    # the planner itself never reads the store: without the argument, the shipped references only
    from gpuseat.catalog.bundle import load_catalog
    from gpuseat.services.planning import plan_course

    alone = plan_course(REPO / "examples" / "course-h200-mig.toml", load_catalog()).to_dict()
    assert alone["speeds"] == "shipped reference results only"
    assert "lenet_10k_seconds" not in alone["options"][0]["performance"][0]


def test_corrupt_store_is_an_input_error(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUSEAT_DATA_DIR", str(tmp_path))
    (tmp_path / "bench-results.jsonl").write_text("{not json\n")
    r = cli("plan", REPO / "examples" / "course-2016.toml")
    assert r.code == 2
    assert "bench-results.jsonl:1" in r.err


def test_a_mig_slice_or_short_run_never_changes_the_whole_gpu_speed(cli, tmp_path, monkeypatch):
    """Issue 15 item 12: recorded speeds are keyed by (GPU model, profile, iterations class)."""
    from gpuseat.bench.results import recorded_results, speeds_by_key, whole_gpu_speeds

    monkeypatch.setenv("GPUSEAT_DATA_DIR", str(tmp_path))
    rows = [
        {"gpu_name": "NVIDIA H200", "gpu_model": "H200-141GB", "iterations": 10000, "seconds": 4.55,
         "recorded_at": "2026-12-01T10:00:00Z"},
        {"gpu_name": "NVIDIA H200 MIG 1g.18gb", "gpu_model": "H200-141GB", "iterations": 10000, "seconds": 21.0,
         "recorded_at": "2026-12-02T10:00:00Z"},
        {"gpu_name": "NVIDIA H200", "gpu_model": "H200-141GB", "iterations": 5, "seconds": 0.5,
         "recorded_at": "2026-12-02T11:00:00Z"},
    ]  # fmt: skip
    (tmp_path / "bench-results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    keyed = speeds_by_key(recorded_results())
    assert set(keyed) == {
        ("H200-141GB", "1g.18gb", "full"),
        ("H200-141GB", None, "full"),
        ("H200-141GB", None, "short"),
    }
    assert whole_gpu_speeds(recorded_results())["H200-141GB"].seconds == 4.55
    assert whole_gpu_speeds(recorded_results(), "1g.18gb")["H200-141GB"].seconds == 21.0
    r = cli("plan", REPO / "examples" / "course-h200-mig.toml", "--format", "json")
    assert r.code == 0, r.err
    perf = json.loads(r.out)["options"][0]["performance"][0]
    assert perf["lenet_10k_seconds"] == 4.55 and perf["speed_source"] == "gpuseat bench, 2026-12-01"


def test_a_torn_last_line_is_skipped_with_a_warning(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUSEAT_DATA_DIR", str(tmp_path))
    good = {"gpu_name": "NVIDIA H200", "gpu_model": "H200-141GB", "iterations": 10000, "seconds": 4.55,
            "recorded_at": "2026-12-01T10:00:00Z"}  # fmt: skip
    (tmp_path / "bench-results.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(good)[:40])
    r = cli("plan", REPO / "examples" / "course-h200-mig.toml", "--format", "json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["options"][0]["performance"][0]["lenet_10k_seconds"] == 4.55


def test_the_planner_knows_the_results_file_name_without_importing_the_bench():
    from gpuseat.bench.results import STORE_NAME
    from gpuseat.services.planning import RESULTS_FILE

    assert RESULTS_FILE == STORE_NAME
