"""Benchmark results: the result of one run, the comparison with the reference machines, and the store.

The store is a JSON-lines file (one result per line) under the user data dir, or under
``$GPUSEAT_DATA_DIR`` when set; it is rewritten atomically (temporary file + rename), and a torn last
line left by an older version's crash is skipped with a warning. No torch here.

For the planner: :func:`speeds_by_key` gives the latest recorded time per (GPU model, MIG profile,
iterations class), and :func:`whole_gpu_speeds` the ones a plan may use — full runs on whole GPUs —
so a MIG slice's or a 5-iteration run's time never stands for a whole GPU model's speed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuseat.bench.device import DeviceFacts, split_mig_name
from gpuseat.catalog import ReferenceResult, find_gpu
from gpuseat.errors import InputError
from gpuseat.files import write_file

STORE_NAME = "bench-results.jsonl"
MAX_STORE_BYTES = 64 * 1024 * 1024
#: Runs of at least Caffe's 10,000 iterations are "full"; shorter ones time mostly start-up effects.
FULL_ITERATIONS = 10_000
IterationsClass = Literal["full", "short"]
#: What the 2016 reference times may contain besides training (benchmark.md §2).
REFERENCE_NOTE = "2016 Caffe time; may include start-up and Caffe's 21 test passes"

log = logging.getLogger("gpuseat.bench")


class Comparison(BaseModel):
    """How this run compares with one reference machine, at the same number of iterations."""

    model_config = ConfigDict(frozen=True)

    name: str
    gpu: str
    seconds: float  # the reference time scaled to this run's iterations
    speedup: float  # reference seconds / this run's seconds (> 1: this seat is faster)
    note: str = REFERENCE_NOTE


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
    tf32: bool = Field(False, description="TF32 on for matmuls/cuDNN during the run (gpuseat turns it off)")
    reference: list[Comparison]
    recorded_at: datetime

    def to_dict(self) -> dict[str, object]:
        """What ``bench --format json`` prints."""
        return {"schema_version": SCHEMA_VERSION, **self.model_dump(mode="json")}


SCHEMA_VERSION = 1


class RecordedResult(BaseModel):
    """A stored result as the planner sees it (the store's lines carry more fields; they are ignored)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    gpu_name: str  # as the device reported it, e.g. "NVIDIA H200" or the CPU model
    gpu_model: str | None  # catalog id via gpuseat.catalog.find_gpu(gpu_name); None for CPU or unknown
    iterations: int = Field(gt=0)
    seconds: float = Field(gt=0)  # training time, warm-up excluded
    recorded_at: datetime
    profile: str | None = None  # MIG profile of the seat (e.g. "1g.18gb"); None = the whole GPU
    device: DeviceFacts | None = None  # what it ran on (its UUID names the seat); absent in older lines

    @property
    def mig_profile(self) -> str | None:
        """The MIG profile, also for lines written before ``profile`` was stored (from the device name)."""
        return self.profile or split_mig_name(self.gpu_name)[1]

    @property
    def iterations_class(self) -> IterationsClass:
        """``full`` (≥ 10,000 iterations, as Caffe's run) or ``short``."""
        return "full" if self.iterations >= FULL_ITERATIONS else "short"

    @property
    def seconds_per_10k(self) -> float:
        """Training seconds scaled to Caffe's 10,000 iterations."""
        return self.seconds * FULL_ITERATIONS / self.iterations


SpeedKey = tuple[str, str | None, IterationsClass]  # (GPU model id, MIG profile or None, iterations class)


def speeds_by_key(results: Iterable[RecordedResult]) -> dict[SpeedKey, RecordedResult]:
    """The latest result per (GPU model, MIG profile, iterations class); CPU and unknown GPUs are left out."""
    out: dict[SpeedKey, RecordedResult] = {}
    for r in sorted(results, key=lambda r: r.recorded_at):
        if r.gpu_model is not None:
            out[(r.gpu_model, r.mig_profile, r.iterations_class)] = r
    return out


def whole_gpu_speeds(results: Iterable[RecordedResult], profile: str | None = None) -> dict[str, RecordedResult]:
    """Per GPU model, the latest full run on a whole GPU (or on ``profile`` when given): what a plan may use."""
    return {
        model: r for (model, prof, klass), r in speeds_by_key(results).items() if prof == profile and klass == "full"
    }


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
        profile=split_mig_name(result.device.name)[1] if result.device.kind == "cuda" else None,
    )
    line = {**recorded.model_dump(mode="json"), **result.model_dump(mode="json", exclude={"recorded_at"})}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        kept = _complete_lines(path)
    except OSError as exc:
        raise InputError(
            f"cannot write the results store: {exc.strerror or exc}",
            where=str(path),
            fix="set GPUSEAT_DATA_DIR to a writable folder",
        ) from None
    write_file(path, kept + json.dumps(line) + "\n", where="the results store")  # old or new, never half a line
    return recorded


def _complete_lines(path: Path) -> str:
    """The store's text without a torn last line (no newline at the end: a crash mid-write)."""
    if not path.exists():
        return ""
    text = _read_store(path)
    if text and not text.endswith("\n"):
        head, _, torn = text.rpartition("\n")
        log.warning("%s: dropping a torn last line (%d bytes) left by an interrupted write", path, len(torn))
        return head + "\n" if head else ""
    return text


def _read_store(path: Path) -> str:
    from gpuseat.files import read_text

    return read_text(path, max_bytes=MAX_STORE_BYTES)


def recorded_results(path: Path | None = None) -> list[RecordedResult]:
    """Every result in the store, oldest first; ``[]`` when nothing was recorded yet."""
    path = path or results_path()
    if not path.exists() and not path.is_symlink():
        return []
    text = _read_store(path)
    lines = text.splitlines()
    out = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            out.append(RecordedResult.model_validate(json.loads(line)))
        except (json.JSONDecodeError, ValidationError, RecursionError) as exc:
            if number == len(lines) and not text.endswith("\n"):
                log.warning("%s:%d: skipping a torn last line (an interrupted write)", path, number)
                continue
            raise InputError(
                f"not a benchmark result: {str(exc).splitlines()[0]}",
                where=f"{path}:{number}",
                fix="delete or correct that line",
            ) from None
    return out
