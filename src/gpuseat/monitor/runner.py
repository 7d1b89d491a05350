"""The monitor loop: sample → attribute → alerts → store → metrics, on an interval, until SIGTERM.

Faults never stop sampling: a GPU whose NVML queries fail is reported unhealthy by the sampler;
a failing database write is retried on the next ticks (the rows wait in a bounded queue); a
failing webhook is logged. SIGTERM or SIGINT ends the loop after the current tick.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuseat.monitor.alerts import Alert, AlertTracker
from gpuseat.monitor.attribution import SeatMap, SeatState, attribute, proc_users, seat_states
from gpuseat.monitor.model import Attributed, Snapshot

if TYPE_CHECKING:
    from gpuseat.db.store import Store
    from gpuseat.monitor.prometheus import SeatCollector
    from gpuseat.monitor.sampler import Sampler

log = logging.getLogger("gpuseat.monitor")


@dataclass
class Tick:
    """What one tick produced."""

    snapshot: Snapshot
    attributed: list[Attributed]
    states: list[SeatState]
    alerts: list[Alert] = field(default_factory=list)
    stored: bool = False


def observe(
    snapshot: Snapshot,
    seats: SeatMap,
    *,
    proc_root: Path = Path("/proc"),
    users: dict[int, str | None] | None = None,
) -> tuple[list[Attributed], list[SeatState]]:
    """Attribution of one snapshot: users from ``proc_root`` unless ``users`` is given."""
    if users is None:
        users = proc_users((p.pid for p in snapshot.processes), proc_root)
    attributed = attribute(snapshot, seats, users)
    return attributed, seat_states(snapshot, seats, attributed)


class Monitor:
    """Runs ticks; every collaborator except the sampler is optional."""

    def __init__(
        self,
        sampler: Sampler,
        seats: SeatMap,
        *,
        store: Store | None = None,
        alerts: AlertTracker | None = None,
        collector: SeatCollector | None = None,
        on_alert: Callable[[Alert], Any] | None = None,
        proc_root: Path = Path("/proc"),
        max_pending: int = 10_000,
    ) -> None:
        self.sampler = sampler
        self.seats = seats
        self.store = store
        self.alerts = alerts
        self.collector = collector
        self.on_alert = on_alert
        self.proc_root = proc_root
        self.pending: deque[tuple[str, float, list[SeatState]] | Alert] = deque(maxlen=max_pending)
        self.stop_event = threading.Event()
        self.write_failures = 0

    def tick(self) -> Tick:
        """One sample, attributed, checked for alerts, stored and published."""
        snapshot = self.sampler.sample()
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
            self.pending.append((snapshot.host, snapshot.taken_at, states))
            self.pending.extend(tick.alerts)
            tick.stored = self.flush()
        return tick

    def flush(self, attempts: int = 2) -> bool:
        """Write queued rows in order; on failure keep them for the next tick (never raises)."""
        assert self.store is not None
        while self.pending:
            item = self.pending[0]
            for attempt in range(attempts):
                try:
                    if isinstance(item, Alert):
                        self.store.record_alert(item)
                    else:
                        self.store.write(*item)
                    break
                except Exception as exc:  # any driver error: the DB may be locked, full or down
                    self.write_failures += 1
                    log.warning("database write failed (attempt %d): %s", attempt + 1, exc)
                    time.sleep(0.05 * (attempt + 1))
            else:
                return False
            self.pending.popleft()
        return True

    def run(
        self, interval_s: float, *, ticks: int | None = None, on_tick: Callable[[Tick], Any] | None = None
    ) -> int:
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
        if self.store is not None:
            self.flush()
            self.store.close()
        self.sampler.close()
