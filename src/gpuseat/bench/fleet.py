"""``--all-seats``: benchmark every visible GPU or MIG device at once, one process each, and flag outliers.

A seat is whatever one ``CUDA_VISIBLE_DEVICES`` value selects: a whole GPU, or a MIG device (CUDA shows
a process only one MIG device, hence one process per seat). Seats are listed from ``nvidia-smi -L``;
when ``CUDA_VISIBLE_DEVICES`` is set, only the seats it names are used. A seat where the child process
fails (CUDA cannot use it, the driver is broken) becomes a finding, never a crash.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import IO, TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, ValidationError, computed_field

if TYPE_CHECKING:
    from subprocess import Popen

from gpuseat import nvsmi
from gpuseat.bench.results import BenchResult
from gpuseat.bench.run import BenchOptions
from gpuseat.core.listing import parse_list
from gpuseat.engines.runner import default_runner
from gpuseat.errors import InputError

OUTLIER_RATIO = 1.15  # slower than 115 % of the median of same-profile seats
NO_SEATS_FIX = "check `nvidia-smi -L` and CUDA_VISIBLE_DEVICES; --all-seats needs at least one NVIDIA GPU"


class BenchTarget(BaseModel):
    """One benchmark target: its ``CUDA_VISIBLE_DEVICES`` value, GPU name and profile (name + MIG profile)."""

    model_config = ConfigDict(frozen=True)

    select: str
    name: str
    mig_profile: str | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def profile(self) -> str:
        """Seats with the same profile should run at the same speed."""
        return f"{self.name} MIG {self.mig_profile}" if self.mig_profile else self.name


class SeatOutcome(BaseModel):
    """What one seat did: a result, or the error that stopped it; and how it compares with its siblings."""

    model_config = ConfigDict(frozen=True)

    seat: BenchTarget
    result: BenchResult | None = None
    error: str | None = None
    vs_median: float | None = None  # seconds / median seconds of the seats with the same profile
    outlier: bool = False
    judged_by: str | None = None  # "median" (of same-profile seats), "reference" (shipped), None: not judged

    @computed_field  # type: ignore[prop-decorator]
    @property
    def finding(self) -> str | None:
        """A line for the organiser, or None when the seat is fine."""
        if self.error is not None:
            return f"{self.seat.select}: CUDA run failed: {self.error}"
        if self.outlier and self.vs_median is not None:
            if self.judged_by == "reference":
                return f"{self.seat.select}: {self.vs_median:.2f}× the shipped reference time of {self.seat.profile}"
            return f"{self.seat.select}: {self.vs_median:.2f}× the median time of {self.seat.profile} seats"
        return None


def parse_gpu_list(text: str, mig_mode: Mapping[str, bool | None] | None = None) -> list[BenchTarget]:
    """Targets from ``nvidia-smi -L``: each MIG device, or the GPU itself when it has none.

    A GPU in MIG mode (``mig_mode[uuid]`` True) without MIG devices is no target: CUDA cannot use it.
    """
    targets: list[BenchTarget] = []
    for gpu in parse_list(text):
        if gpu.mig:
            targets.extend(BenchTarget(select=m.uuid, name=gpu.name, mig_profile=m.profile) for m in gpu.mig)
        elif not (mig_mode or {}).get(gpu.uuid):
            targets.append(BenchTarget(select=gpu.uuid, name=gpu.name))
    return targets


def select_visible(
    listed: Sequence[BenchTarget], gpus: Sequence[BenchTarget], visible: str | None
) -> list[BenchTarget]:
    """The seats ``CUDA_VISIBLE_DEVICES`` allows (all when unset); an index counts whole GPUs in list order."""
    if visible is None:
        return list(listed)
    known = {seat.select: seat for seat in (*gpus, *listed)}
    out = []
    for entry in (e.strip() for e in visible.split(",")):
        if not entry or entry == "-1":
            break  # CUDA ignores everything from the first invalid entry on
        if entry.isascii() and entry.isdigit() and int(entry) < len(gpus):  # not "²": int() refuses it
            entry = gpus[int(entry)].select
        out.append(known.get(entry, BenchTarget(select=entry, name="unknown")))
    return out


def visible_seats(env: Mapping[str, str] | None = None) -> list[BenchTarget]:
    """The targets on this machine (``nvidia-smi -L`` and MIG mode), restricted by ``CUDA_VISIBLE_DEVICES``."""
    from gpuseat.errors import EngineError

    env = os.environ if env is None else env
    try:
        text = nvsmi.nvidia_smi(["-L"], timeout_s=60)
        modes = nvsmi.parse_query_gpu_csv(
            nvsmi.nvidia_smi(["--query-gpu=index,uuid,mig.mode.current", "--format=csv"], timeout_s=60), host="local"
        )
    except EngineError as exc:
        raise InputError(f"no GPU seat is visible: {exc.what}", where="--all-seats", fix=NO_SEATS_FIX) from None
    mig_mode = {g.uuid: g.mig_enabled for g in modes.gpus}
    gpus = [BenchTarget(select=g.uuid, name=g.name) for g in parse_list(text)]
    seats = select_visible(parse_gpu_list(text, mig_mode), gpus, env.get("CUDA_VISIBLE_DEVICES"))
    if not seats:
        raise InputError("no GPU or MIG device is visible", where="--all-seats", fix=NO_SEATS_FIX)
    return seats


def flag_outliers(
    outcomes: Sequence[SeatOutcome],
    ratio: float = OUTLIER_RATIO,
    references: Mapping[str, float] | None = None,
) -> list[SeatOutcome]:
    """Each outcome with ``vs_median``, ``outlier`` and ``judged_by`` set.

    Seats are compared with the median of the seats of the same profile; a seat alone in its profile
    is compared with the reference time for its GPU model (``references``: profile → seconds per
    10,000 iterations), and stays unjudged when there is none.
    """
    times: dict[str, list[float]] = {}
    for o in outcomes:
        if o.result is not None:
            times.setdefault(o.seat.profile, []).append(o.result.seconds)
    medians = {profile: statistics.median(values) for profile, values in times.items() if len(values) > 1}
    out = []
    for o in outcomes:
        if o.result is None:
            out.append(o)
            continue
        if o.seat.profile in medians:
            vs = o.result.seconds / medians[o.seat.profile]
            how = "median"
        elif references and o.seat.profile in references:
            vs = o.result.seconds / (references[o.seat.profile] * o.result.iterations / 10_000)
            how = "reference"
        else:
            out.append(o)
            continue
        out.append(o.model_copy(update={"vs_median": vs, "outlier": vs > ratio, "judged_by": how}))
    return out


def fleet_dict(outcomes: Sequence[SeatOutcome]) -> dict[str, object]:
    """What ``bench --all-seats --format json`` prints."""
    from gpuseat.bench.results import SCHEMA_VERSION

    return {
        "schema_version": SCHEMA_VERSION,
        "seats": [o.model_dump(mode="json") for o in outcomes],
        "findings": [o.finding for o in outcomes if o.finding],
    }


def child_command(options: BenchOptions) -> list[str]:
    """The ``gpuseat bench`` command each seat's process runs (the seat comes from its environment)."""
    cmd = [sys.executable, "-m", "gpuseat", "bench", "--device", "cuda", "--format", "json", "--no-record"]
    cmd += ["--iterations", str(options.iterations), "--seed", str(options.seed)]
    if options.caffe_tests:
        cmd.append("--caffe-tests")
    if options.data_dir is not None:
        cmd += ["--data", str(options.data_dir)]
    return cmd


def run_fleet(options: BenchOptions, seats: Sequence[BenchTarget]) -> list[SeatOutcome]:
    """Start one process per seat at once, wait for all, and compare the seats."""
    cmd = child_command(options)
    running: list[tuple[BenchTarget, Popen[bytes], IO[bytes], IO[bytes]]] = []
    with contextlib.ExitStack() as stack:  # output goes to files: a full pipe would stall a child
        for seat in seats:
            out = stack.enter_context(tempfile.TemporaryFile())
            err = stack.enter_context(tempfile.TemporaryFile())
            env = {**os.environ, "CUDA_VISIBLE_DEVICES": seat.select}
            proc = default_runner().spawn(cmd, stdout=out, stderr=err, env=env, text=False)
            running.append((seat, proc, out, err))
        outcomes = [_outcome(seat, proc.wait(), _read(out), _read(err)) for seat, proc, out, err in running]
    return flag_outliers(outcomes, references=shipped_references(seats))


def shipped_references(targets: Sequence[BenchTarget]) -> dict[str, float]:
    """Profile → seconds per 10,000 iterations of the shipped reference run on the same whole-GPU model."""
    from gpuseat.catalog import find_gpu, reference_results

    by_model = {r.gpu: r.seconds * 10_000 / r.iterations for r in reference_results()}
    out = {}
    for t in targets:
        model = find_gpu(t.name) if t.mig_profile is None else None
        if model is not None and model.id in by_model:
            out[t.profile] = by_model[model.id]
    return out


def _read(fh: IO[bytes]) -> str:
    fh.seek(0)
    return fh.read().decode("utf-8", errors="replace")


def _outcome(seat: BenchTarget, code: int, stdout: str, stderr: str) -> SeatOutcome:
    """A child's exit code and output as an outcome; its last stderr line explains a failure."""
    if code == 0:
        try:
            return SeatOutcome(seat=seat, result=BenchResult.model_validate(json.loads(stdout)))
        except (json.JSONDecodeError, ValidationError) as exc:
            return SeatOutcome(seat=seat, error=f"unreadable result ({str(exc).splitlines()[0]})")
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    reason = next((line for line in lines if line.startswith("error:")), lines[-1] if lines else "no output")
    return SeatOutcome(seat=seat, error=f"exit code {code}: {reason.removeprefix('error: ')}")
