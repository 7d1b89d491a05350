"""Comparison with the reference machines and the JSON-lines results store."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuseat.bench.results import compare, gpu_model_id, record, recorded_results, results_path, summary_line
from gpuseat.catalog import reference_results
from gpuseat.errors import InputError

from .results_factory import make_result


def test_reference_times_scale_with_iterations():
    by_gpu = {c.gpu: c for c in compare(5_000, 26.73 / 2, reference_results())}
    assert by_gpu["M60"].seconds == pytest.approx(13.365)
    assert by_gpu["M60"].speedup == pytest.approx(1.0)
    assert by_gpu["K520"].speedup == pytest.approx(45.5 / 26.73)


@given(st.integers(1, 10**6), st.floats(1e-3, 1e5))
def test_speedup_times_seconds_is_the_scaled_reference(iterations, seconds):
    for comp in compare(iterations, seconds, reference_results()):
        assert comp.speedup * seconds == pytest.approx(comp.seconds)
        assert comp.seconds > 0


def test_summary_line_reads_like_the_issue():
    result = make_result(26.73 / 6.5)
    assert summary_line(result) == "this seat: 4.1 s, 6.5× an M60, 11× a K520"


def test_gpu_model_of_mig_and_cpu():
    assert gpu_model_id(make_result(1, name="NVIDIA H200 MIG 1g.18gb").device) == "H200-141GB"
    assert gpu_model_id(make_result(1, name="NVIDIA Tesla M60").device) == "M60"
    assert gpu_model_id(make_result(1, name="AMD EPYC", kind="cpu").device) is None
    assert gpu_model_id(make_result(1, name="Some Future GPU").device) is None


def test_store_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUSEAT_DATA_DIR", str(tmp_path / "data"))
    assert results_path() == tmp_path / "data" / "bench-results.jsonl"
    assert recorded_results() == []
    record(make_result(4.0))
    record(make_result(300.0, name="AMD EPYC", kind="cpu", iterations=500))
    first, second = recorded_results()
    assert (first.gpu_name, first.gpu_model, first.iterations, first.seconds) == (
        "NVIDIA H200",
        "H200-141GB",
        10_000,
        4.0,
    )
    assert (second.gpu_model, second.iterations) == (None, 500)
    assert first.recorded_at.year == 2026


def test_corrupt_store_line_names_the_line(tmp_path):
    store = tmp_path / "results.jsonl"
    record(make_result(4.0), store)
    with store.open("a") as fh:
        fh.write('{"gpu_name": "x"}\n')
    with pytest.raises(InputError) as err:
        recorded_results(store)
    assert err.value.where == f"{store}:2"


def test_results_and_cli_import_without_torch():
    code = (
        "import sys; import gpuseat.cli, gpuseat.bench.results, gpuseat.bench.fleet, gpuseat.bench.run;"
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
