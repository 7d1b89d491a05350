"""Monitoring as a service: what ``top``, ``monitor`` and ``usage`` do, for the CLI, the portal and hooks.

The CLI only parses flags and prints; everything else is here: choosing the sampler for a data
source, the seat map (from a seats file and/or the course database), one snapshot for
``--once``, the monitor loop with its database, alerts and Prometheus endpoint, and the usage report.
Each result has one :meth:`to_dict`, which is exactly what ``--format json`` prints.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuseat.errors import InputError
from gpuseat.readings import SCHEMA_VERSION, Attributed, LeafReading, SeatMap, Snapshot

if TYPE_CHECKING:
    from gpuseat.monitor.runner import Tick
    from gpuseat.monitor.sampler import Sampler
    from gpuseat.readings import UsageRow

log = logging.getLogger("gpuseat.monitor")

#: How many bytes of a replay file are read (a day of 5-second ticks of 64 GPUs is ~1 GB; split it).
MAX_REPLAY_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Source:
    """Where readings come from: a saved capture, a host over SSH, a replay file, or NVML (nothing given)."""

    from_xml: Path | None = None
    from_csv: Path | None = None
    apps: Path | None = None
    listing: Path | None = None
    ssh: str | None = None
    replay: Path | None = None
    probe: Path | None = None  # a `gpuseat probe` bundle
    table: Path | None = None  # plain `nvidia-smi` print (MIG devices and processes with GI/CI ids)
    kernel_log: Path | None = None  # dmesg / journalctl -k text with NVRM Xid lines

    def check(self) -> None:
        """One source at most; ``--apps`` only with ``--from-csv``; a host that cannot become an option."""
        chosen = [
            name
            for name, v in (
                ("--from-xml", self.from_xml),
                ("--from-csv", self.from_csv),
                ("--ssh", self.ssh),
                ("--replay", self.replay),
                ("--from-probe", self.probe),
            )
            if v
        ]
        if len(chosen) > 1:
            raise InputError(f"{' and '.join(chosen)} both given", where="options", fix="choose one data source")
        if self.apps and not self.from_csv:
            raise InputError("--apps needs --from-csv", where="apps", fix="add --from-csv GPU_CSV")
        if self.ssh is not None:
            from gpuseat.core.hosts import ssh_target

            ssh_target(self.ssh)


def open_sampler(source: Source) -> Sampler:
    """The sampler for ``source`` (captures are parsed now, so a bad file fails before anything runs)."""
    from gpuseat import nvsmi
    from gpuseat.core.listing import parse_list
    from gpuseat.files import read_text
    from gpuseat.monitor.sampler import StaticSampler

    source.check()
    host = "capture"
    if source.from_xml:
        text = read_text(source.from_xml, max_bytes=nvsmi.MAX_XML_BYTES)
        snap = nvsmi.parse_xml(text, host=host, where=str(source.from_xml))
    elif source.from_csv:
        text = read_text(source.from_csv, max_bytes=nvsmi.MAX_CSV_BYTES)
        snap = nvsmi.parse_query_gpu_csv(text, host=host, where=str(source.from_csv))
        if source.apps:
            apps = read_text(source.apps, max_bytes=nvsmi.MAX_CSV_BYTES)
            snap = replace(snap, processes=nvsmi.parse_compute_apps_csv(apps, where=str(source.apps)))
    elif source.probe:
        from gpuseat.services import probe

        bundle = probe.read_bundle(source.probe)
        snap = probe.snapshot(bundle)
        xid = bundle.text(probe.XID_FILE)
        if xid and not source.kernel_log:
            snap = nvsmi_health_apply(snap, xid)
    elif source.ssh:
        from gpuseat.monitor.nvidia_smi import SmiSampler

        return SmiSampler(source.ssh)
    elif source.replay:
        from gpuseat.monitor.replay import ReplaySampler, read_replay

        return ReplaySampler(read_replay(source.replay, max_bytes=MAX_REPLAY_BYTES))
    else:
        from gpuseat.monitor.nvml import NvmlSampler

        return NvmlSampler()
    if source.listing:
        listing = read_text(source.listing, max_bytes=nvsmi.MAX_LIST_BYTES)
        snap = nvsmi.merge_list(snap, parse_list(listing))
    if source.table:
        from gpuseat.nvsmi_text import merge_table

        snap = merge_table(snap, read_text(source.table, max_bytes=nvsmi.MAX_LIST_BYTES))
    if source.kernel_log:
        snap = nvsmi_health_apply(snap, read_text(source.kernel_log, max_bytes=nvsmi.MAX_CSV_BYTES))
    if any(m.profile is None for g in snap.gpus for m in g.mig):
        from gpuseat.catalog.bundle import load_catalog

        snap = nvsmi.name_mig_profiles(snap, load_catalog())
    return StaticSampler(snap)


def nvsmi_health_apply(snap: Snapshot, kernel_log: str) -> Snapshot:
    """The snapshot with each GPU's last Xid and Xid count from kernel-log lines (matched by PCI bus)."""
    from gpuseat.nvsmi_health import bus_key, parse_xid_log

    events = parse_xid_log(kernel_log)
    gpus = []
    for gpu in snap.gpus:
        mine = [e for e in events if bus_key(e.pci) == bus_key(gpu.pci_bus_id)]
        gpus.append(replace(gpu, xid_last=mine[-1].xid, xid_count=len(mine)) if mine else gpu)
    return replace(snap, gpus=tuple(gpus))


def seat_map(seats: Path | None, db: str | None, *, write: bool, course: str | None = None) -> SeatMap:
    """Seats from the file (imported into the database when ``write``), else from an existing database.

    ``course`` limits the map to one course of the store; a seats file is imported into it (default
    ``default``) through the course store's facade, with events (see :mod:`gpuseat.store.seatfile`).
    """
    from gpuseat.monitor.seats import read_seats

    if seats is not None:
        entries = read_seats(seats)
        if not write:
            return SeatMap(entries)
    elif not _db_exists(db) and course is None:
        return SeatMap()
    from gpuseat.store import open_store
    from gpuseat.store.monitor import DEFAULT_COURSE

    key = course or (DEFAULT_COURSE if seats is not None else None)
    with open_store(db, create=write) as store:
        monitor = store.monitor.of_course(key)
        if seats is not None:
            monitor.import_seats(entries)
        return monitor.seat_map()


def _db_exists(db: str | None) -> bool:
    from gpuseat.db import resolve_url

    url = resolve_url(db)
    return not url.startswith("sqlite:///") or Path(url.removeprefix("sqlite:///")).exists()


# -- one snapshot (top --once, monitor --once) ------------------------------------------------------


@dataclass(frozen=True)
class TickView:
    """One snapshot with its attribution and seat states: what ``top``/``monitor --once`` print."""

    snapshot: Snapshot
    attributed: tuple[Attributed, ...]
    states: tuple[LeafReading, ...]

    def to_dict(self) -> dict[str, Any]:
        """Every field the sampler read (null when unknown), the attribution and the seats."""
        snap = self.snapshot
        return {
            "schema_version": SCHEMA_VERSION,
            "host": snap.host,
            "taken_at": snap.taken_at,
            "gpus": [asdict(g) for g in snap.gpus],
            "processes": [
                {
                    **{k: v for k, v in asdict(a.process).items() if k != "user"},
                    "user": a.user,
                    "seat": a.seat,
                    "participant": a.participant,
                    "foreign": a.foreign,
                }
                for a in self.attributed
            ],
            "seats": [
                {
                    "course": s.entry.course if s.entry else None,  # seat keys are unique only within a course
                    "seat": s.entry.seat if s.entry else None,
                    "participant": s.entry.participant if s.entry else None,
                    "device": s.leaf.uuid,
                    "gpu_uuid": s.leaf.gpu.uuid,
                    "profile": s.leaf.mig.profile if s.leaf.mig else None,
                    "memory_used_mib": s.leaf.memory_used_mib,
                    "memory_total_mib": s.leaf.memory_total_mib,
                    "memory_free_mib": s.leaf.memory_free_mib,
                    "utilization_gpu": s.leaf.utilization_gpu,
                    "processes": len(s.processes),
                    "active": s.active,
                }
                for s in self.states
            ],
        }


def view(tick: Tick) -> TickView:
    """The printable view of one monitor tick."""
    return TickView(tick.snapshot, tuple(tick.attributed), tuple(tick.states))


def snapshot_once(
    source: Source, seats: Path | None = None, db: str | None = None, course: str | None = None
) -> TickView:
    """One sample, attributed to seats (of ``course`` when given); writes nothing."""
    from gpuseat.monitor.runner import Monitor

    monitor = Monitor(open_sampler(source), seat_map(seats, db, write=False, course=course))
    try:
        return view(monitor.tick())
    finally:
        monitor.close()


# -- the monitor loop -----------------------------------------------------------------------------


@dataclass
class MonitorRun:
    """What a monitor run did: ticks taken, samples stored, rows dropped, database write failures."""

    ticks: int = 0
    stored: int = 0
    dropped: int = 0
    write_failures: int = 0
    listen: str | None = None
    alerts: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"schema_version": SCHEMA_VERSION, **asdict(self)}

    @property
    def ok(self) -> bool:
        """False when ticks were taken but none was stored (the database never accepted a sample)."""
        return self.ticks == 0 or self.stored > 0


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9400`` for IPv6) → (host, port); the host defaults to all addresses."""
    from gpuseat.core.hosts import tcp_port

    host, _, port = listen.rpartition(":")
    if not port:
        raise InputError(f"{listen!r} is not HOST:PORT", where="listen", fix="e.g. --listen 127.0.0.1:9400")
    number = tcp_port(port, "--listen")
    host = host.strip("[]")
    if host and not re.fullmatch(r"[A-Za-z0-9.:-]+", host):
        raise InputError(f"{host!r} is not an address", where="listen", fix="e.g. --listen 127.0.0.1:9400")
    return host or "0.0.0.0", number


def run_monitor(
    source: Source,
    *,
    seats: Path | None = None,
    db: str | None = None,
    interval_s: float = 5.0,
    ticks: int | None = None,
    listen: str | None = None,
    webhook: str | None = None,
    idle_hours: float = 24.0,
    metrics_names: str = "dcgm",
    on_tick: Callable[[Tick], Any] | None = None,
    signals: bool = True,
    course: str | None = None,
) -> MonitorRun:
    """Sample every ``interval_s`` into the course database, with alerts and ``/metrics``, until stopped."""
    from gpuseat.monitor.alerts import AlertTracker
    from gpuseat.monitor.prometheus import SeatCollector, serve
    from gpuseat.monitor.runner import Monitor
    from gpuseat.monitor.webhook import WebhookSender
    from gpuseat.store import open_monitor
    from gpuseat.store.monitor import DEFAULT_COURSE
    from gpuseat.urls import http_url

    if webhook is not None:
        http_url(webhook, where="--webhook")  # refused now, not at the first alert hours later
    address = parse_listen(listen) if listen else None
    collector = SeatCollector(metrics_names)
    sampler = open_sampler(source)
    seat_map_ = seat_map(seats, db, write=True, course=course)
    store = open_monitor(db, course=course or (DEFAULT_COURSE if seats is not None else None))
    sender = WebhookSender(webhook) if webhook else None
    monitor = Monitor(
        sampler,
        seat_map_,
        store=store,
        alerts=AlertTracker(idle_hours=idle_hours),
        collector=collector,
        on_alert=sender.submit if sender is not None else None,
        background=True,  # a slow or locked database never delays a tick
        reload_seats=store.seats_if_changed,
    )
    server = None
    try:
        server = serve(collector, *address) if address else None
        if signals:
            monitor.install_signal_handlers()
        done = monitor.run(interval_s, ticks=ticks, on_tick=on_tick)
    finally:
        if server is not None:
            server.shutdown()
        monitor.close()
        if sender is not None:
            sender.close()
    bound = f"{address[0]}:{server.server_port}" if server is not None and address else None
    return MonitorRun(done, monitor.samples_stored, monitor.dropped, monitor.write_failures, bound)


# -- usage ----------------------------------------------------------------------------------------


def parse_since(since: str | None, *, now: float | None = None) -> float | None:
    """``7d``/``12h``/``30m`` ago, or an ISO date/time → Unix seconds; anything else is an InputError."""
    if since is None:
        return None
    now = time.time() if now is None else now
    if m := re.fullmatch(r"([0-9]{1,6}(?:\.[0-9]{1,3})?)([dhm])", since.strip()):  # not \d: "١٢h" was 12h
        return now - float(m.group(1)) * {"d": 86400, "h": 3600, "m": 60}[m.group(2)]
    try:
        when = dt.datetime.fromisoformat(since.strip())
        return (when if when.tzinfo else when.astimezone()).timestamp()
    except (ValueError, OverflowError, OSError):
        raise InputError(
            f"{since!r} is not a date", where="since", fix="use 2026-03-01, 2026-03-01T09:00 or 7d/12h/30m"
        ) from None


@dataclass(frozen=True)
class UsageReport:
    """GPU-hours, idle hours and peak memory per participant, with the minute rows behind them."""

    since: float | None
    rows: tuple[UsageRow, ...]

    def participants(self) -> list[dict[str, Any]]:
        """One row per participant (largest GPU-hours first)."""
        from gpuseat.monitor.usage import summarize

        return [
            {
                "participant": u.participant,
                "seats": ",".join(u.seats),
                "gpu_hours": round(u.gpu_hours, 3),
                "idle_hours": round(u.idle_hours, 3),
                "peak_memory_mib": u.peak_memory_mib,
            }
            for u in summarize(self.rows)
        ]

    def to_dict(self) -> dict[str, Any]:
        """JSON form (what ``usage --format json`` prints)."""
        return {"schema_version": SCHEMA_VERSION, "since": self.since, "participants": self.participants()}


USAGE_COLUMNS = ("participant", "seats", "gpu_hours", "idle_hours", "peak_memory_mib")


def usage_report(since: str | None = None, db: str | None = None, course: str | None = None) -> UsageReport:
    """The usage report from the course database (which must exist: nothing is created), of one course or all."""
    from gpuseat.store import open_store

    start = parse_since(since)
    with open_store(db) as store:
        return UsageReport(start, tuple(store.monitor.usage_rows(start, course=course)))


def write_chart(report: UsageReport, path: Path, *, force: bool = False) -> None:
    """The HTML usage chart at ``path``; an existing file gpuseat did not write needs ``force``."""
    from gpuseat.files import check_target
    from gpuseat.monitor.usage import chart_html

    check_target(path, where=f"--chart {path}")  # a FIFO or device: refused before anything opens it
    if path.is_dir():
        raise InputError("is a directory", where=f"--chart {path}", fix="give a file name such as usage.html")
    if not path.parent.is_dir():
        raise InputError("its folder does not exist", where=f"--chart {path}", fix="create the folder first")
    if path.is_symlink() or (path.exists() and not force and "written by gpuseat usage" not in _head(path)):
        raise InputError(
            "exists and was not written by gpuseat", where=f"--chart {path}", fix="choose another name or add --force"
        )
    from gpuseat.files import write_file

    write_file(path, chart_html(list(report.rows)), where=f"--chart {path}")


def _head(path: Path) -> str:
    try:
        with path.open("rb") as fh:
            return fh.read(512).decode("utf-8", "replace")
    except OSError:
        return ""
