"""Benchmark results: the result of one run, the comparison with the reference machines, and the store.

The store is a JSON-lines file (one result per line) under the user data dir, or under
``$GPUSEAT_DATA_DIR`` when set. :func:`recorded_results` is what ``gpuseat plan`` reads. No torch here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuseat.bench.device import DeviceFacts, split_mig_name
from gpuseat.catalog import ReferenceResult, find_gpu
from gpuseat.errors import InputError

STORE_NAME = "bench-results.jsonl"


class Comparison(BaseModel):
    """How this run compares with one reference machine, at the same number of iterations."""

    model_config = ConfigDict(frozen=True)

    name: str
    gpu: str
    seconds: float  # the reference time scaled to this run's iterations
    speedup: float  # reference seconds / this run's seconds (> 1: this seat is faster)


class BenchResult(BaseModel):
    """One benchmark run: the ``--format json`` object and the full record in the store."""

    model_config = ConfigDict(frozen=True)

    iterations: int
    seconds: float = Field(description="training time, warm-up and test passes excluded")
    iterations_per_second: float
    warmup_seconds: float
    test_seconds: float = Field(description="Caffe-schedule test passes (0 without --caffe-tests)")
    test_accuracy: float
    test_loss: float
    seed: int
    caffe_tests: bool
    losses: list[tuple[int, float]] = Field(description="(iteration, training loss) every 100 iterations")
    test_curve: list[tuple[int, float]] = Field(description="(iteration, test accuracy) of each test pass")
    device: DeviceFacts
    reference: list[Comparison]
    recorded_at: datetime


class RecordedResult(BaseModel):
    """A stored result as the planner sees it (the store's lines carry more fields; they are ignored)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    gpu_name: str  # as the device reported it, e.g. "NVIDIA H200" or the CPU model
    gpu_model: str | None  # catalog id via gpuseat.catalog.find_gpu(gpu_name); None for CPU or unknown
    iterations: int = Field(gt=0)
    seconds: float = Field(gt=0)  # training time, warm-up excluded
    recorded_at: datetime


def compare(iterations: int, seconds: float, references: Iterable[ReferenceResult]) -> list[Comparison]:
    """This run against each reference, scaling the reference time linearly to ``iterations``."""
    out = []
    for ref in references:
        scaled = ref.seconds * iterations / ref.iterations
        out.append(Comparison(name=ref.name, gpu=ref.gpu, seconds=scaled, speedup=scaled / seconds))
    return out


def summary_line(result: BenchResult) -> str:
    """``this seat: 4.1 s, 6.5× an M60, 11× a K520`` (fastest reference first)."""
    parts = [f"this seat: {_fmt(result.seconds)} s"]
    for comp in sorted(result.reference, key=lambda c: c.seconds):
        article = "an" if comp.gpu[:1].upper() in "AEFHILMNORSX" else "a"
        parts.append(f"{_fmt(comp.speedup)}× {article} {comp.gpu}")
    return ", ".join(parts)


def _fmt(value: float) -> str:
    """Two significant figures at most, the way people quote speed-ups (11, 6.5, 0.17)."""
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


def gpu_model_id(facts: DeviceFacts) -> str | None:
    """The catalog id of the GPU a result ran on (MIG suffix stripped); None for a CPU or unknown GPU."""
    if facts.kind != "cuda":
        return None
    model = find_gpu(split_mig_name(facts.name)[0])
    return model.id if model else None


def results_path() -> Path:
    """The store: ``$GPUSEAT_DATA_DIR/bench-results.jsonl`` or the same file under the user data dir."""
    from gpuseat.paths import data_dir

    return data_dir() / STORE_NAME


def record(result: BenchResult, path: Path | None = None) -> RecordedResult:
    """Append ``result`` to the store (one JSON line: the planner's fields, then the full result)."""
    path = path or results_path()
    recorded = RecordedResult(
        gpu_name=result.device.name,
        gpu_model=gpu_model_id(result.device),
        iterations=result.iterations,
        seconds=result.seconds,
        recorded_at=result.recorded_at,
    )
    line = {**recorded.model_dump(mode="json"), **result.model_dump(mode="json", exclude={"recorded_at"})}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")
    except OSError as exc:
        raise InputError(
            f"cannot write the results store: {exc.strerror}",
            where=str(path),
            fix="set GPUSEAT_DATA_DIR to a writable folder",
        ) from None
    return recorded


def recorded_results(path: Path | None = None) -> list[RecordedResult]:
    """Every result in the store, oldest first; ``[]`` when nothing was recorded yet."""
    path = path or results_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the results store: {exc}", where=str(path), fix="check the file") from None
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(RecordedResult.model_validate(json.loads(line)))
        except (json.JSONDecodeError, ValidationError) as exc:
            raise InputError(
                f"not a benchmark result: {str(exc).splitlines()[0]}",
                where=f"{path}:{number}",
                fix="delete or correct that line",
            ) from None
    return out
