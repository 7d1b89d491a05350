"""CLI for ``gpuseat top``, ``gpuseat monitor`` and ``gpuseat usage``: parse flags, call the library, print.

Heavy imports (SQLAlchemy, prometheus-client, pynvml) happen inside the command functions.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gpuseat.cli._output import FORMAT_OPTION, Format, print_csv, print_json, print_table
from gpuseat.errors import InputError

if TYPE_CHECKING:
    from gpuseat.monitor.attribution import SeatMap
    from gpuseat.monitor.runner import Tick
    from gpuseat.monitor.sampler import Sampler

FROM_XML = typer.Option(None, "--from-xml", help="Read a saved 'nvidia-smi -q -x' file instead of NVML.")
FROM_CSV = typer.Option(
    None, "--from-csv", help="Read a saved 'nvidia-smi --query-gpu=... --format=csv' file."
)
APPS = typer.Option(None, "--apps", help="With --from-csv: a '--query-compute-apps=... --format=csv' file.")
LISTING = typer.Option(None, "--list", help="A saved 'nvidia-smi -L' (adds MIG profiles and UUIDs).")
SSH = typer.Option(None, "--ssh", help="Sample HOST by running nvidia-smi over SSH.")
REPLAY = typer.Option(None, "--replay", help="Play back a recorded JSON Lines snapshot file.")
SEATS = typer.Option(
    None, "--seats", help="Seat mapping file (TOML or CSV): seat → device UUID → participant."
)
DB = typer.Option(None, "--db", help="Database URL (default: GPUSEAT_DB_URL or SQLite in the data dir).")
ONCE = typer.Option(False, "--once", help="Take one sample, print it and exit.")
CHART = typer.Option(None, "--chart", help="Write an HTML/SVG chart of usage over time.")

PROCESS_COLUMNS = ("pid", "gpu_uuid", "mig_uuid", "used_memory_mib", "user", "seat", "participant", "foreign")


def _sampler(
    from_xml: Path | None,
    from_csv: Path | None,
    apps: Path | None,
    listing: Path | None,
    ssh: str | None,
    replay: Path | None,
) -> Sampler:
    from gpuseat.files import read_text
    from gpuseat.monitor import nvidia_smi
    from gpuseat.monitor.sampler import StaticSampler

    chosen = [
        name
        for name, v in (
            ("--from-xml", from_xml),
            ("--from-csv", from_csv),
            ("--ssh", ssh),
            ("--replay", replay),
        )
        if v
    ]
    if len(chosen) > 1:
        raise InputError(f"{' and '.join(chosen)} both given", where="options", fix="choose one data source")
    if apps and not from_csv:
        raise InputError("--apps needs --from-csv", where="--apps", fix="add --from-csv GPU_CSV")
    host = "capture"
    if from_xml:
        snap = nvidia_smi.parse_xml(read_text(from_xml), host=host, where=str(from_xml))
    elif from_csv:
        snap = nvidia_smi.parse_query_gpu_csv(read_text(from_csv), host=host, where=str(from_csv))
        if apps:
            from dataclasses import replace

            snap = replace(
                snap, processes=nvidia_smi.parse_compute_apps_csv(read_text(apps), where=str(apps))
            )
    elif ssh:
        return nvidia_smi.SmiSampler(ssh)
    elif replay:
        from gpuseat.monitor.replay import ReplaySampler, read_replay

        return ReplaySampler(read_replay(replay))
    else:
        from gpuseat.monitor.nvml import NvmlSampler

        return NvmlSampler()
    if listing:
        snap = nvidia_smi.merge_list(snap, nvidia_smi.parse_list(read_text(listing)))
    return StaticSampler(snap)


def _seat_map(seats: Path | None, db: str | None, *, write: bool) -> SeatMap:
    """Seats from the file (imported into the database when ``write``), else from the database."""
    from gpuseat.monitor.attribution import SeatMap
    from gpuseat.monitor.seats import read_seats

    if seats is not None:
        entries = read_seats(seats)
        if not write:
            return SeatMap(entries)
    elif not _db_exists(db):
        return SeatMap()
    from gpuseat.db.store import Store

    store = Store(db)
    try:
        if seats is not None:
            store.import_seats(entries)
        return store.seat_map()
    finally:
        store.close()


def _db_exists(db: str | None) -> bool:
    from gpuseat.db import resolve_url

    url = resolve_url(db)
    return not url.startswith("sqlite:///") or Path(url.removeprefix("sqlite:///")).exists()


def _print_tick(tick: Tick, fmt: Format) -> None:
    from gpuseat.monitor.model import to_contract
    from gpuseat.monitor.view import COLUMNS, seat_rows

    if fmt == Format.json:
        print_json(to_contract(tick.snapshot, tick.attributed))
    elif fmt == Format.csv:
        print_csv(to_contract(tick.snapshot, tick.attributed)["processes"], PROCESS_COLUMNS)
    else:
        print_table(seat_rows(tick.states), COLUMNS, title=f"gpuseat top — {tick.snapshot.host}")


def _parse_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"{listen!r} is not HOST:PORT", where="--listen", fix="e.g. --listen 127.0.0.1:9400")
    return host or "0.0.0.0", int(port)


def top(
    from_xml: Path | None = FROM_XML,
    from_csv: Path | None = FROM_CSV,
    apps: Path | None = APPS,
    listing: Path | None = LISTING,
    ssh: str | None = SSH,
    replay: Path | None = REPLAY,
    seats: Path | None = SEATS,
    db: str | None = DB,
    once: bool = ONCE,
    interval: float = typer.Option(1.0, "--interval", min=0.1, help="Seconds between refreshes."),
    fmt: Format = FORMAT_OPTION,
) -> None:
    """Live seat-centric view: participant, seat, GPU/MIG, memory, utilisation, processes, idle time."""
    from gpuseat.monitor.alerts import AlertTracker
    from gpuseat.monitor.runner import Monitor

    monitor = Monitor(
        _sampler(from_xml, from_csv, apps, listing, ssh, replay), _seat_map(seats, db, write=False)
    )
    if once:
        _print_tick(monitor.tick(), fmt)
        monitor.close()
        return
    from rich.live import Live

    from gpuseat.monitor.view import rich_table, seat_rows

    tracker = AlertTracker()
    monitor.install_signal_handlers()
    with Live(auto_refresh=False) as live:

        def show(tick: Tick) -> None:
            tracker.update(tick.snapshot, tick.states)
            rows = seat_rows(tick.states, tracker.idle_since, tick.snapshot.taken_at)
            stamp = time.strftime("%H:%M:%S", time.localtime(tick.snapshot.taken_at))
            live.update(rich_table(rows, f"gpuseat top — {tick.snapshot.host} — {stamp}"), refresh=True)

        monitor.run(interval, on_tick=show)
    monitor.close()


def monitor(
    from_xml: Path | None = FROM_XML,
    from_csv: Path | None = FROM_CSV,
    apps: Path | None = APPS,
    listing: Path | None = LISTING,
    ssh: str | None = SSH,
    replay: Path | None = REPLAY,
    seats: Path | None = SEATS,
    db: str | None = DB,
    once: bool = ONCE,
    interval: float = typer.Option(5.0, "--interval", min=0.1, help="Seconds between samples."),
    listen: str | None = typer.Option(None, "--listen", help="Serve Prometheus /metrics on HOST:PORT."),
    webhook: str | None = typer.Option(None, "--webhook", help="POST each alert as JSON to this URL."),
    idle_hours: float = typer.Option(
        24.0, "--idle-hours", min=0, help="Alert when a seat is idle this long."
    ),
    ticks: int | None = typer.Option(None, "--ticks", min=1, help="Stop after this many samples."),
    fmt: Format = FORMAT_OPTION,
) -> None:
    """Sample on an interval into the course database, with alerts and Prometheus metrics."""
    from gpuseat.monitor.alerts import AlertTracker, post_webhook
    from gpuseat.monitor.runner import Monitor

    sampler = _sampler(from_xml, from_csv, apps, listing, ssh, replay)
    if once:
        runner = Monitor(sampler, _seat_map(seats, db, write=False))
        _print_tick(runner.tick(), fmt)
        runner.close()
        return
    import logging

    from gpuseat.db.store import Store
    from gpuseat.monitor.prometheus import SeatCollector, serve

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    seat_map = _seat_map(seats, db, write=True)
    collector = SeatCollector()
    runner = Monitor(
        sampler,
        seat_map,
        store=Store(db),
        alerts=AlertTracker(idle_hours=idle_hours),
        collector=collector,
        on_alert=(lambda alert: post_webhook(webhook, alert)) if webhook else None,
    )
    server = serve(collector, *_parse_listen(listen)) if listen else None
    runner.install_signal_handlers()
    try:
        done = runner.run(interval, ticks=ticks)
    finally:
        if server is not None:
            server.shutdown()
        runner.close()
    typer.echo(f"monitor stopped after {done} samples", err=True)


def _parse_since(since: str | None) -> float | None:
    if since is None:
        return None
    import datetime as dt
    import re

    if m := re.fullmatch(r"(\d+(?:\.\d+)?)([dhm])", since.strip()):
        seconds = float(m.group(1)) * {"d": 86400, "h": 3600, "m": 60}[m.group(2)]
        return time.time() - seconds
    try:
        when = dt.datetime.fromisoformat(since)
    except ValueError:
        raise InputError(
            f"{since!r} is not a date", where="--since", fix="use 2026-03-01, 2026-03-01T09:00 or 7d/12h/30m"
        ) from None
    return (when if when.tzinfo else when.astimezone()).timestamp()


def usage(
    since: str | None = typer.Option(None, "--since", help="Start: ISO date/time, or 7d / 12h / 30m ago."),
    chart: Path | None = CHART,
    db: str | None = DB,
    fmt: Format = FORMAT_OPTION,
) -> None:
    """GPU-hours, peak memory and idle time per participant, from the course database."""
    from gpuseat.db.store import Store
    from gpuseat.monitor.usage import chart_html, summarize

    start = _parse_since(since)
    store = Store(db)
    try:
        rows = store.usage_rows(start)
    finally:
        store.close()
    report: list[dict[str, Any]] = [
        {
            "participant": u.participant,
            "seats": ",".join(u.seats),
            "gpu_hours": round(u.gpu_hours, 3),
            "idle_hours": round(u.idle_hours, 3),
            "peak_memory_mib": u.peak_memory_mib,
        }
        for u in summarize(rows)
    ]
    columns = ("participant", "seats", "gpu_hours", "idle_hours", "peak_memory_mib")
    if fmt == Format.json:
        print_json(report)
    elif fmt == Format.csv:
        print_csv(report, columns)
    else:
        print_table(report, columns, title="GPU seat usage")
    if chart is not None:
        chart.write_text(chart_html(rows), encoding="utf-8")
        typer.echo(f"chart written to {chart}", err=True)


def register(app: typer.Typer) -> None:
    """Add ``top``, ``monitor`` and ``usage``."""
    app.command("top")(top)
    app.command("monitor")(monitor)
    app.command("usage")(usage)
