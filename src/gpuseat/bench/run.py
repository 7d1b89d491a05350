"""Run one benchmark: load MNIST, open the device, train LeNet, test, compare, return a :class:`BenchResult`.

Imports torch inside :func:`run_benchmark` only, so importing this module stays cheap.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, cast

from pydantic import BaseModel, ConfigDict

from gpuseat.bench.data import Mnist, load_mnist
from gpuseat.bench.device import (
    DEVICE_FIX,
    DeviceChoice,
    DeviceFacts,
    cpu_model,
    nvidia_smi_driver_version,
    parse_device,
    split_mig_name,
    usable_cpus,
)
from gpuseat.bench.results import BenchResult, compare
from gpuseat.bench.workload import solver
from gpuseat.catalog import reference_results
from gpuseat.errors import EngineError, InputError

if TYPE_CHECKING:
    import torch

CUDA_FIX = "run with --device cpu, or check `nvidia-smi` and CUDA_VISIBLE_DEVICES on this machine"


class BenchOptions(BaseModel):
    """What to run: the CLI flags, validated by :func:`run_benchmark`."""

    model_config = ConfigDict(frozen=True)

    iterations: int = 10_000
    device: str = "auto"  # CUDA when available, else the CPU
    seed: int = 1
    caffe_tests: bool = False
    threads: int | None = None  # CPU threads; None = every CPU this process may use
    data_dir: Path | None = None
    warmup: int = 5


#: Most iterations one run may ask for (1,000× Caffe's 10,000): more would take days and the loss
#: curve alone would need gigabytes.
MAX_ITERATIONS = 10_000_000


def check_iterations(iterations: int) -> None:
    """Zero, negative or absurdly large iteration counts are an input error."""
    if not 0 < iterations <= MAX_ITERATIONS:
        raise InputError(
            f"iterations must be between 1 and {MAX_ITERATIONS:,}, got {iterations:,}",
            where="--iterations",
            fix="use for example --iterations 10000 (the Caffe reference)",
        )


def fp32_arithmetic() -> Callable[[], None]:
    """Turn TF32 off for matmuls and cuDNN convolutions (PyTorch enables it for cuDNN by default),
    so a GPU run does the FP32 arithmetic Caffe did. Returns a function that restores the old flags."""
    import torch

    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    def restore() -> None:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old

    return restore


def tf32_enabled() -> bool:
    """Whether TF32 is on for matmuls or cuDNN convolutions right now (recorded in every result)."""
    import torch

    return bool(torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32)


def run_benchmark(
    options: BenchOptions,
    on_progress: Callable[[int], None] | None = None,
    mnist: Mnist | None = None,
) -> BenchResult:
    """Train Caffe's LeNet for ``options.iterations`` on one device and test it on all 10,000 test digits."""
    check_iterations(options.iterations)
    if options.threads is not None and options.threads <= 0:
        raise InputError(f"threads must be positive, got {options.threads}", where="--threads", fix="omit it")
    choice = parse_device(options.device)
    mnist = mnist or load_mnist(options.data_dir)

    import torch

    device = open_device(choice)
    threads = options.threads or usable_cpus()
    if device.type == "cpu":
        torch.set_num_threads(threads)
        torch.set_flush_denormal(True)  # late in training, denormal gradients slow CPU kernels ~20 %
    else:
        torch.backends.cudnn.benchmark = True
    restore_tf32 = fp32_arithmetic()

    try:
        return _train_and_test(options, device, threads, mnist, on_progress)
    except RuntimeError as exc:  # CUDA errors (and torch.AcceleratorError) are RuntimeErrors
        if device.type != "cuda":
            raise
        raise EngineError(
            f"CUDA failed on {device} during the benchmark: {str(exc).splitlines()[0]}",
            where="--device",
            fix="check the GPU with `nvidia-smi` and `gpuseat doctor`; try another seat",
        ) from None
    finally:
        # Flushing denormals and TF32 are process-wide state: give the caller back what it had.
        torch.set_flush_denormal(False)
        restore_tf32()


def _train_and_test(
    options: BenchOptions,
    device: torch.device,
    threads: int,
    mnist: Mnist,
    on_progress: Callable[[int], None] | None,
) -> BenchResult:
    """Warm up (excluded from the time), train in timed blocks, test; the Caffe test passes timed apart."""
    from gpuseat.bench.lenet import LeNet, Trainer, device_tensors, evaluate, to_device

    s = solver()
    model = to_device(LeNet().caffe_init(options.seed), device)
    train_x, train_y = device_tensors(mnist.train_images, mnist.train_labels, s.input_scale, device)
    test_x, test_y = device_tensors(mnist.test_images, mnist.test_labels, s.input_scale, device)
    trainer = Trainer(model, train_x, train_y, s, options.iterations)

    start = time.perf_counter()
    trainer.warm_up(options.warmup)
    warmup_seconds = time.perf_counter() - start

    points = s.test_points(options.iterations) if options.caffe_tests else [0, options.iterations]
    train_seconds = test_seconds = 0.0
    curve: list[tuple[int, float]] = []
    for previous, point in itertools.pairwise(points):
        if options.caffe_tests:
            start = time.perf_counter()
            curve.append((previous, evaluate(model, test_x, test_y)[0]))
            test_seconds += time.perf_counter() - start
        start = time.perf_counter()
        trainer.run(point - previous, on_progress)
        train_seconds += time.perf_counter() - start
    start = time.perf_counter()
    accuracy, loss = evaluate(model, test_x, test_y)
    if options.caffe_tests:
        test_seconds += time.perf_counter() - start
    curve.append((options.iterations, accuracy))

    return BenchResult(
        iterations=options.iterations,
        seconds=train_seconds,
        iterations_per_second=options.iterations / train_seconds,
        warmup_seconds=warmup_seconds,
        test_seconds=test_seconds,
        test_accuracy=accuracy,
        test_loss=loss,
        seed=options.seed,
        caffe_tests=options.caffe_tests,
        losses=trainer.loss_curve(),
        test_curve=curve,
        device=device_facts(device, threads),
        tf32=tf32_enabled(),
        reference=compare(options.iterations, train_seconds, reference_results()),
        recorded_at=datetime.now(UTC),
    )


def open_device(choice: DeviceChoice) -> torch.device:
    """The torch device for ``choice``; one CUDA cannot use is an input error naming the reason."""
    import torch

    if choice.kind == "cpu" or (choice.kind == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if torch.version.cuda is None:
        raise InputError(f"this PyTorch ({torch.__version__}) is built without CUDA", where="--device", fix=CUDA_FIX)
    index = choice.index
    if choice.uuid is not None:
        # torch.cuda.is_initialized has no annotations: called through its precise type
        initialised = cast(Callable[[], bool], torch.cuda.is_initialized)()
        _select_uuid(choice.uuid, already_initialised=initialised)
        index = 0
    if not torch.cuda.is_available():
        raise InputError("CUDA is not available: no usable NVIDIA GPU is visible", where="--device", fix=CUDA_FIX)
    count = torch.cuda.device_count()
    if index >= count:
        raise InputError(
            f"cuda:{index} does not exist; {count} CUDA device(s) visible", where="--device", fix=DEVICE_FIX
        )
    device = torch.device("cuda", index)
    try:
        (torch.ones(1, device=device) + 1).item()
    except RuntimeError as exc:
        raise InputError(
            f"CUDA cannot use {device}: {str(exc).splitlines()[0]}", where="--device", fix=CUDA_FIX
        ) from None
    return device


def _select_uuid(uuid: str, *, already_initialised: bool) -> None:
    """Make ``uuid`` the only visible CUDA device (the way CUDA itself selects a MIG device)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() and uuid not in [v.strip() for v in visible.split(",")]:
        raise InputError(f"{uuid} is not among CUDA_VISIBLE_DEVICES={visible}", where="--device", fix=DEVICE_FIX)
    if already_initialised:
        raise InputError(
            "CUDA is already initialised in this process; a UUID must be chosen before",
            where="--device",
            fix="run `CUDA_VISIBLE_DEVICES=<uuid> gpuseat bench --device cuda` instead",
        )
    os.environ["CUDA_VISIBLE_DEVICES"] = uuid


def device_facts(device: torch.device, threads: int) -> DeviceFacts:
    """Name, memory, driver, CUDA and MIG profile of a GPU, or the CPU model and threads."""
    import torch

    common = {"torch": torch.__version__, "cpu_model": cpu_model(), "threads": threads}
    if device.type != "cuda":
        return DeviceFacts(kind="cpu", name=common["cpu_model"], **common)
    index = device.index or 0
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    _, mig = split_mig_name(props.name)
    return DeviceFacts(
        kind="cuda",
        name=props.name,
        index=index,
        uuid=str(uuid) if uuid is not None else None,
        memory_gb=round(props.total_memory / 1e9, 2),
        compute_capability=f"{props.major}.{props.minor}",
        mig_profile=mig,
        driver=nvidia_smi_driver_version(),
        cuda=torch.version.cuda,
        **common,
    )
