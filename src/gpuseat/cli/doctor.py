"""CLI for ``gpuseat doctor``: parse flags, call :func:`gpuseat.doctor.diagnose`, print, exit 0/1."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpuseat.cli._output import Format, FormatOption, print_csv, print_json

if TYPE_CHECKING:
    from gpuseat.doctor import Report


class ForTarget(StrEnum):
    """What the host should be ready for."""

    passthrough = "passthrough"
    vgpu = "vgpu"
    mig = "mig"
    containers = "containers"


_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def _doctor(
    target: ForTarget | None = typer.Option(
        None, "--for", help="Only the checks that matter for this use (default: what each GPU is set up for)."
    ),
    root: Path = typer.Option(
        Path("/"), "--root", help="Read DIR/proc, DIR/sys... instead of / (e.g. an extracted capture)."
    ),
    capture: Path | None = typer.Option(
        None, "--capture", help="Also write every file the checks read to OUT.tar.gz (for support)."
    ),
    from_probe: Path | None = typer.Option(
        None, "--from-probe", help="Check the host a `gpuseat probe` bundle recorded (its /proc and /sys capture)."
    ),
    fmt: FormatOption = Format.table,
) -> None:
    """Will passthrough, vGPU or MIG work on this host — and if not, exactly why and what to change."""
    from gpuseat.doctor import diagnose
    from gpuseat.doctor.host import check_capture_path

    if capture is not None:
        check_capture_path(capture)
    if from_probe is not None:
        import tempfile

        from gpuseat.services.probe import doctor_root, read_bundle

        with tempfile.TemporaryDirectory() as tmp:
            report, view = diagnose(doctor_root(read_bundle(from_probe), Path(tmp)), target.value if target else None)
    else:
        report, view = diagnose(root, target.value if target else None)
    if capture is not None:
        view.write_capture(capture)
    if fmt is Format.json:
        print_json(report.to_dict())
    elif fmt is Format.csv:
        rows = [c.as_dict() for c in report.checks]
        print_csv(rows, ["gpu", "id", "status", "evidence", "fix"])
    else:
        _print_report(report, capture)
    raise typer.Exit(report.exit_code)


def _print_report(report: Report, capture: Path | None) -> None:
    """Rich tables: the host checks, then one table per GPU."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from gpuseat.doctor import NO_GPU

    console = Console()
    if not report.gpus:
        console.print(f"[bold]{NO_GPU}[/]: host checks only; GPU checks skipped.")
    for title, checks in report.groups():
        table = Table(title=escape(title), title_justify="left", show_lines=True)  # a GPU's name, as reported
        table.add_column("check", no_wrap=True)
        table.add_column("status")
        table.add_column("evidence", overflow="fold")
        table.add_column("fix", overflow="fold")
        for c in checks:
            style = _STYLE[c.status]
            table.add_row(c.id, f"[{style}]{c.status}[/]", escape(c.evidence), escape(c.fix or ""))
        console.print(table)
    console.print(escape(report.summary() + (f"; capture written to {capture}" if capture else "")))


def register(app: typer.Typer) -> None:
    """Add ``gpuseat doctor``."""
    app.command("doctor")(_doctor)
