"""The monitor loop: sample → attribute → alerts → store → metrics, on an interval, until SIGTERM.

Faults never stop sampling: a GPU whose NVML queries fail is reported unhealthy by the sampler;
a failing database write is retried on the next ticks (the rows wait in a bounded queue) while the
database is down or another process holds its write lock (a flush stops at the first such failure: each
later row would wait out the busy timeout too), and a row that fails while later rows are stored is
dropped after a few tries, so one bad row never blocks the rest; rows the queue had no room for, or
still queued when the monitor stops, are counted as dropped and logged; a failing webhook is logged.

With ``background=True`` (what ``gpuseat monitor`` uses) one writer thread does the database work:
the tick only queues its rows and wakes the writer, so a slow or locked database never delays
sampling, alerts or ``/metrics``. The writer handles the same queue with the same rules, one pass per
tick; :meth:`Monitor.close` lets it finish what is queued. A ``kill -9`` loses what is still queued,
which is the tick in flight as long as the writer keeps up (it writes far more rows a second than a
tick makes: see ``benchmarks/bench_monitor.py``). SIGTERM or SIGINT ends the loop after
the current tick. The monitor reaches the database only through :class:`~gpuseat.readings.SampleStore`.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuseat.monitor.alerts import AlertTracker
from gpuseat.monitor.attribution import observe_seats, proc_users
from gpuseat.readings import Alert, Attributed, LeafReading, SampleStore, SeatMap, Snapshot

if TYPE_CHECKING:
    from gpuseat.monitor.prometheus import SeatCollector
    from gpuseat.monitor.sampler import Sampler

log = logging.getLogger("gpuseat.monitor")


@dataclass
class _Pending:
    """A row waiting for the database, with how often writing it failed."""

    row: tuple[str, float, list[LeafReading]] | Alert
    attempts: int = 0

    def describe(self) -> str:
        """A short description for the log."""
        if isinstance(self.row, Alert):
            return f"alert {self.row.kind} {self.row.key}"
        return f"sample of {self.row[0]} at {self.row[1]:.0f}"


@dataclass
class Tick:
    """What one tick produced."""

    snapshot: Snapshot
    attributed: list[Attributed]
    states: list[LeafReading]
    alerts: list[Alert] = field(default_factory=list)
    stored: bool = False


def observe(
    snapshot: Snapshot,
    seats: SeatMap,
    *,
    proc_root: Path = Path("/proc"),
    users: dict[int, str | None] | None = None,
) -> tuple[list[Attributed], list[LeafReading]]:
    """Attribution of one snapshot: users from ``proc_root`` unless ``users`` is given.

    ``/proc`` is read only for a local snapshot: pids of a remote host or a replayed capture are not
    this machine's (their users come with the snapshot, from the remote ``ps``, or stay unknown).
    """
    if users is None:
        pids = (p.pid for p in snapshot.processes if p.user is None)
        users = proc_users(pids, proc_root) if snapshot.local else {}
    return observe_seats(snapshot, seats, users)


class Monitor:
    """Runs ticks; every collaborator except the sampler is optional."""

    def __init__(
        self,
        sampler: Sampler,
        seats: SeatMap,
        *,
        store: SampleStore | None = None,
        alerts: AlertTracker | None = None,
        collector: SeatCollector | None = None,
        on_alert: Callable[[Alert], Any] | None = None,
        proc_root: Path = Path("/proc"),
        max_pending: int = 10_000,
        max_attempts: int = 3,
        background: bool = False,
        reload_seats: Callable[[], SeatMap | None] | None = None,
    ) -> None:
        self.sampler = sampler
        self.seats = seats
        self.reload_seats = reload_seats  # the seat map again when the course changed (None: unchanged)
        self.store = store
        self.alerts = alerts
        self.collector = collector
        self.on_alert = on_alert
        self.proc_root = proc_root
        self.pending: deque[_Pending] = deque(maxlen=max_pending)
        self.stop_event = threading.Event()
        self.write_failures = 0
        self.samples_stored = 0
        self.dropped = 0
        self.max_attempts = max_attempts
        self.store_seconds: deque[float] = deque(maxlen=1000)  # time of each flush (benchmarks, logs)
        self._wake = threading.Condition()
        self._queued = 0  # ticks queued for the writer thread so far
        self._handled = 0  # of which the writer has flushed
        self._closing = False
        self._writer: threading.Thread | None = None
        if background and store is not None:
            self._writer = threading.Thread(target=self._write_loop, name="gpuseat-store-writer", daemon=True)
            self._writer.start()

    def tick(self) -> Tick:
        """One sample, attributed, checked for alerts, stored and published."""
        snapshot = self.sampler.sample()
        if self.reload_seats is not None:  # a move, a release or a removed seat while the monitor runs
            try:
                self.seats = self.reload_seats() or self.seats
            except Exception as exc:  # the database is down: attribute by the seats last read
                log.warning("could not read the seats again: %s", str(exc).splitlines()[0])
        attributed, states = observe(snapshot, self.seats, proc_root=self.proc_root)
        tick = Tick(snapshot, attributed, states)
        if self.alerts is not None:
            tick.alerts = self.alerts.update(snapshot, states)
            for alert in tick.alerts:
                log.warning("alert %s: %s", "raised" if alert.raised else "cleared", alert.message)
                if self.on_alert is not None:
                    self.on_alert(alert)
        if self.collector is not None:
            self.collector.update(snapshot, states)
        if self.store is not None:
            rows = [_Pending((snapshot.host, snapshot.taken_at, states))]
            rows.extend(_Pending(a) for a in tick.alerts)
            if self._writer is not None:  # the writer thread stores them; tick.stored stays False
                with self._wake:
                    self._overflow(self.pending, rows)
                    self.pending.extend(rows)
                    self._queued += 1
                    self._wake.notify()
            else:
                self._overflow(self.pending, rows)
                self.pending.extend(rows)
                tick.stored = self._timed_flush()
        return tick

    def _timed_flush(self) -> bool:
        started = time.perf_counter()
        done = self.flush()
        self.store_seconds.append(time.perf_counter() - started)
        return done

    def _write_loop(self) -> None:
        """The writer thread: one :meth:`flush` of everything queued per tick, until :meth:`close`."""
        seen = 0
        while True:
            with self._wake:
                while self._queued == seen and not self._closing:
                    self._wake.wait()
                seen, closing = self._queued, self._closing
            self._timed_flush()
            with self._wake:
                self._handled = seen
                self._wake.notify_all()
            if closing:
                return

    def wait_written(self, timeout_s: float | None = None) -> bool:
        """Wait until the writer thread has handled every queued tick (benchmarks, tests); True if so."""
        with self._wake:
            return self._writer is None or self._wake.wait_for(
                lambda: self._handled >= self._queued or self._writer is None or not self._writer.is_alive(),
                timeout_s,
            )

    def flush(self) -> bool:
        """Write queued rows in order; True when the queue is empty afterwards (never raises).

        While every write fails (the database is down or locked) the rows stay queued. A row that
        fails while others are stored is dropped after ``max_attempts`` tries, with an error logged.
        Rows queued by a tick while this runs (writer thread) wait for the next flush, after the
        rows kept for a retry, so the order of rows is kept.
        """
        with self._wake:
            batch = list(self.pending)
            self.pending.clear()
        kept = self._write_rows(batch)
        with self._wake:
            if kept:
                self._overflow(kept, self.pending)
                retry: deque[_Pending] = deque(kept, maxlen=self.pending.maxlen)
                retry.extend(self.pending)  # a full queue drops its oldest rows, as before
                self.pending = retry
            return not self.pending

    def _write_rows(self, batch: list[_Pending]) -> list[_Pending]:
        """Write ``batch`` in order; the rows to try again on the next flush."""
        assert self.store is not None
        failed: list[_Pending] = []
        stored_any = False
        for n, item in enumerate(batch):
            try:
                if isinstance(item.row, Alert):
                    self.store.record_alert(item.row)
                else:
                    self.store.write(*item.row)
                    self.samples_stored += 1
                stored_any = True
            except Exception as exc:  # any driver error: the DB may be locked, full, down, or the row bad
                self.write_failures += 1
                item.attempts += 1
                log.warning("database write failed (attempt %d): %s", item.attempts, str(exc).splitlines()[0])
                failed.append(item)
                if not stored_any and _unavailable(exc):  # locked or down: the rest would each wait as long
                    return failed + batch[n + 1 :]
        kept = []
        for item in failed:
            if stored_any and item.attempts >= self.max_attempts:
                self.dropped += 1
                log.error("dropped a row after %d failed writes: %s", item.attempts, item.describe())
            else:
                kept.append(item)
        return kept

    def _overflow(self, older: Sequence[_Pending], newer: Sequence[_Pending]) -> None:
        """Count as dropped the oldest rows that a full queue loses when ``older`` then ``newer`` go into it."""
        over = len(older) + len(newer) - (self.pending.maxlen or len(older) + len(newer))
        if over > 0:
            lost = [*older, *newer][:over]
            self.dropped += sum(not isinstance(p.row, Alert) for p in lost)
            log.error("the write queue is full (the database is locked or down): dropped its %d oldest rows", over)

    def _give_up(self) -> None:
        """At the end: rows the database never took (it stayed locked or down) are counted as dropped and
        said in one line; they were lost without a word."""
        samples = sum(not isinstance(p.row, Alert) for p in self.pending)
        if self.pending:
            self.dropped += samples
            log.error(
                "%d samples and %d alerts were not written: the database stayed locked or down (see above)",
                samples,
                len(self.pending) - samples,
            )
            self.pending.clear()

    def run(self, interval_s: float, *, ticks: int | None = None, on_tick: Callable[[Tick], Any] | None = None) -> int:
        """Tick every ``interval_s`` until stopped (SIGTERM/SIGINT, :meth:`stop`, or ``ticks`` done)."""
        done = 0
        while not self.stop_event.is_set() and (ticks is None or done < ticks):
            started = time.monotonic()
            tick = self.tick()
            done += 1
            if on_tick is not None:
                on_tick(tick)
            if ticks is not None and done >= ticks:
                break
            self.stop_event.wait(max(0.0, interval_s - (time.monotonic() - started)))
        return done

    def stop(self, *_args: Any) -> None:
        """Ask the loop to end after the current tick (also the SIGTERM handler)."""
        self.stop_event.set()

    def install_signal_handlers(self) -> None:
        """End cleanly on SIGTERM and SIGINT (main thread only)."""
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    def close(self) -> None:
        """Flush what is queued, then release sampler and store."""
        writer, self._writer = self._writer, None
        if writer is not None:
            with self._wake:
                self._closing = True
                self._wake.notify()
            writer.join()  # its last pass writes what is queued
        if self.store is not None:
            if writer is None:
                self.flush()
            self._give_up()
            self.store.close()
        self.sampler.close()


def _unavailable(exc: Exception) -> bool:
    """True when ``exc`` says the database cannot be written now (another process held its lock past the busy
    timeout, the disk is full or read-only: the store's own errors), not that one row is bad: every other row
    would fail the same way."""
    from gpuseat.errors import StoreError

    return isinstance(exc, StoreError)
