"""Build BenchResult values for tests of the pure parts (comparison, store, fleet)."""

from __future__ import annotations

from datetime import UTC, datetime

from gpuseat.bench.device import DeviceFacts
from gpuseat.bench.results import BenchResult, compare
from gpuseat.catalog import reference_results


def make_result(seconds: float, *, name: str = "NVIDIA H200", kind: str = "cuda", iterations: int = 10_000):
    device = DeviceFacts(kind=kind, name=name, torch="2.13.0", cpu_model="test CPU", threads=2)
    return BenchResult(
        iterations=iterations,
        seconds=seconds,
        iterations_per_second=iterations / seconds,
        warmup_seconds=0.5,
        test_seconds=0.0,
        test_accuracy=0.99,
        test_loss=0.03,
        seed=1,
        caffe_tests=False,
        losses=[(0, 2.3)],
        test_curve=[(iterations, 0.99)],
        device=device,
        reference=compare(iterations, seconds, reference_results()),
        recorded_at=datetime(2026, 12, 2, 12, 0, tzinfo=UTC),
    )
