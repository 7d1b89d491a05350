"""CLI for ``gpuseat top``, ``gpuseat monitor`` and ``gpuseat usage``: parse flags, call the service, print.

The work is in :mod:`gpuseat.services.monitoring`; heavy imports happen inside the command functions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpuseat.cli._options import StoreDbOption, shared_flags
from gpuseat.cli._output import Format, FormatOption, print_csv, print_json, print_rows, print_table
from gpuseat.errors import EngineError, InputError

if TYPE_CHECKING:
    from gpuseat.monitor.runner import Tick
    from gpuseat.services.monitoring import Source, TickView

FROM_XML = typer.Option(None, "--from-xml", help="Read a saved 'nvidia-smi -q -x' file instead of NVML.")
FROM_CSV = typer.Option(None, "--from-csv", help="Read a saved 'nvidia-smi --query-gpu=... --format=csv' file.")
APPS = typer.Option(None, "--apps", help="With --from-csv: a '--query-compute-apps=... --format=csv' file.")
LISTING = typer.Option(None, "--list", help="A saved 'nvidia-smi -L' (adds MIG profiles and UUIDs).")
SSH = typer.Option(None, "--ssh", help="Sample HOST ([user@]name) by running nvidia-smi and ps over SSH.")
REPLAY = typer.Option(None, "--replay", help="Play back a recorded JSON Lines snapshot file.")
FROM_PROBE = typer.Option(None, "--from-probe", help="Read a `gpuseat probe` bundle (names MIG devices from -lgi).")
TABLE = typer.Option(
    None, "--table", help="A saved plain 'nvidia-smi' print: places CSV processes on their MIG device (GI/CI ids)."
)
KERNEL_LOG = typer.Option(None, "--kernel-log", help="A saved 'dmesg' / 'journalctl -k': Xid errors per GPU.")
SEATS = typer.Option(None, "--seats", help="Seat mapping file (TOML or CSV): seat → device UUID → participant.")
COURSE = typer.Option(None, "--course", help="Only this course's seats, from the course store (gpuseat course list).")
ONCE = typer.Option(False, "--once", help="Take one sample, print it and exit.")
CHART = typer.Option(None, "--chart", help="Write an HTML/SVG chart of usage over time.")

PROCESS_COLUMNS = (
    "pid",
    "gpu_uuid",
    "mig_uuid",
    "used_memory_mib",
    "name",
    "kind",
    "user",
    "seat",
    "participant",
    "foreign",
)


@dataclass(frozen=True)
class Sampling:
    """What ``top`` and ``monitor`` sample (the source, checked) and how they name its seats."""

    source: Source
    seats: Path | None
    db: str | None
    course: str | None
    once: bool

    def print_once(self, fmt: Format) -> None:
        """``--once``: one sample, printed."""
        from gpuseat.services import monitoring

        _print_view(monitoring.snapshot_once(self.source, self.seats, self.db, self.course), fmt)


def sampling(
    from_xml: Path | None = FROM_XML,
    from_csv: Path | None = FROM_CSV,
    apps: Path | None = APPS,
    listing: Path | None = LISTING,
    ssh: str | None = SSH,
    replay: Path | None = REPLAY,
    from_probe: Path | None = FROM_PROBE,
    table: Path | None = TABLE,
    kernel_log: Path | None = KERNEL_LOG,
    seats: Path | None = SEATS,
    db: StoreDbOption = None,
    course: str | None = COURSE,
    once: bool = ONCE,
) -> Sampling:
    """The flags ``top`` and ``monitor`` share (:func:`~gpuseat.cli._options.shared_flags`), checked:
    a bad --ssh host is refused before anything runs."""
    from gpuseat.services.monitoring import Source

    source = Source(from_xml, from_csv, apps, listing, ssh, replay, from_probe, table, kernel_log)
    source.check()
    return Sampling(source, seats, db, course, once)


def _print_view(seat_view: TickView, fmt: Format) -> None:
    from gpuseat.monitor.view import MONITOR_TABLE_COLUMNS, seat_rows

    if fmt == Format.json:
        print_json(seat_view.to_dict())
    elif fmt == Format.csv:
        print_csv(seat_view.to_dict()["processes"], PROCESS_COLUMNS)
    else:
        title = f"gpuseat top — {seat_view.snapshot.host}"
        print_table(seat_rows(list(seat_view.states)), MONITOR_TABLE_COLUMNS, title=title)


@shared_flags("sampled", sampling)
def top(
    sampled: Sampling,
    interval: float = typer.Option(1.0, "--interval", min=0.1, max=86400, help="Seconds between refreshes."),
    fmt: FormatOption = Format.table,
) -> None:
    """Live seat-centric view: participant, seat, GPU/MIG, memory, utilisation, processes, idle time."""
    if sampled.once:
        sampled.print_once(fmt)
        return
    from rich.live import Live

    from gpuseat.monitor.alerts import AlertTracker
    from gpuseat.monitor.runner import Monitor
    from gpuseat.monitor.view import rich_table, seat_rows
    from gpuseat.services import monitoring

    seat_map = monitoring.seat_map(sampled.seats, sampled.db, write=False, course=sampled.course)
    monitor = Monitor(monitoring.open_sampler(sampled.source), seat_map)
    tracker = AlertTracker()
    monitor.install_signal_handlers()
    with Live(auto_refresh=False) as live:

        def show(tick: Tick) -> None:
            tracker.update(tick.snapshot, tick.states)
            rows = seat_rows(tick.states, tracker.idle_since, tick.snapshot.taken_at)
            stamp = time.strftime("%H:%M:%S", time.localtime(tick.snapshot.taken_at))
            live.update(rich_table(rows, f"gpuseat top — {tick.snapshot.host} — {stamp}"), refresh=True)

        try:
            monitor.run(interval, on_tick=show)
        finally:
            monitor.close()


@shared_flags("sampled", sampling)
def monitor(
    sampled: Sampling,
    interval: float = typer.Option(5.0, "--interval", min=0.1, max=86400, help="Seconds between samples."),
    listen: str | None = typer.Option(None, "--listen", help="Serve Prometheus /metrics on HOST:PORT."),
    metrics_names: str = typer.Option(
        "dcgm", "--metrics-names", help="Metric names: dcgm (dcgm-exporter's, the default) or gpuseat."
    ),
    webhook: str | None = typer.Option(None, "--webhook", help="POST each alert as JSON to this URL."),
    idle_hours: float = typer.Option(
        24.0, "--idle-hours", min=0, max=8760, help="Alert when a seat is idle this long."
    ),
    ticks: int | None = typer.Option(None, "--ticks", min=1, max=10**9, help="Stop after this many samples."),
    fmt: FormatOption = Format.table,
) -> None:
    """Sample on an interval into the course database, with alerts and Prometheus metrics.

    Exits 1 when samples were taken but the database stored none of them.
    """
    if sampled.once:
        ignored = [flag for flag, value in (("--listen", listen), ("--webhook", webhook), ("--ticks", ticks)) if value]
        import click

        given = click.get_current_context().get_parameter_source  # --metrics-names 'a;b' was not even checked
        ignored += [
            flag
            for flag, name in (
                ("--interval", "interval"),
                ("--metrics-names", "metrics_names"),
                ("--idle-hours", "idle_hours"),
            )
            if given(name) is click.core.ParameterSource.COMMANDLINE
        ]
        if ignored:  # they were dropped unsaid (an unchecked webhook URL, a port out of range: exit 0)
            raise InputError(
                f"--once prints one sample and exits: {', '.join(ignored)} would do nothing",
                where="gpuseat monitor",
                fix=f"leave out --once to run the monitor, or {', '.join(ignored)} to print one sample",
            )
        sampled.print_once(fmt)
        return
    import logging

    from gpuseat.safe_text import log_handler
    from gpuseat.services import monitoring

    logging.basicConfig(level=logging.INFO, handlers=[log_handler("%(asctime)s %(levelname)s %(message)s")])
    logging.getLogger("alembic").setLevel(logging.WARNING)  # a new store's migrations: not the monitor's news
    run = monitoring.run_monitor(
        sampled.source,
        seats=sampled.seats,
        db=sampled.db,
        interval_s=interval,
        ticks=ticks,
        listen=listen,
        webhook=webhook,
        idle_hours=idle_hours,
        metrics_names=metrics_names,
        course=sampled.course,
    )
    if fmt == Format.json:
        print_json(run.to_dict())
    typer.echo(f"monitor stopped after {run.ticks} samples ({run.stored} stored, {run.dropped} dropped)", err=True)
    if not run.ok:
        raise EngineError(
            f"none of the {run.ticks} samples could be stored ({run.write_failures} failed writes)",
            where="--db",
            fix="check the database named by --db / GPUSEAT_DB_URL (the log above has the driver's message)",
        )


def usage(
    since: str | None = typer.Option(None, "--since", help="Start: ISO date/time, or 7d / 12h / 30m ago."),
    chart: Path | None = CHART,
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --chart file not written by gpuseat."),
    db: StoreDbOption = None,
    course: str | None = COURSE,
    fmt: FormatOption = Format.table,
) -> None:
    """GPU-hours, peak memory and idle time per participant, from the course database."""
    from gpuseat.services import monitoring

    report = monitoring.usage_report(since, db, course)
    if fmt == Format.json:
        print_json(report.to_dict())
    else:
        print_rows(report.participants(), monitoring.USAGE_COLUMNS, fmt, title="GPU seat usage")
    if chart is not None:
        monitoring.write_chart(report, chart, force=force)
        typer.echo(f"chart written to {chart}", err=True)


def register(app: typer.Typer) -> None:
    """Add ``top``, ``monitor`` and ``usage``."""
    app.command("top")(top)
    app.command("monitor")(monitor)
    app.command("usage")(usage)
