"""Alerts: seat idle > N hours, memory > 95 %, foreign process, GPU lost — each once until it clears.

:class:`AlertTracker` is pure state: feed it each tick's seat states and it returns the alerts
that were raised or cleared on that tick. :func:`post_webhook` sends one as JSON.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import asdict

from gpuseat.readings import Alert, SeatState, Snapshot

log = logging.getLogger("gpuseat.monitor")

IDLE, MEMORY, FOREIGN, GPU_LOST = "idle", "memory", "foreign", "gpu_lost"


class AlertTracker:
    """Remembers which alerts are open so each is reported once, and clears them when they end."""

    def __init__(self, *, idle_hours: float = 24.0, memory_ratio: float = 0.95) -> None:
        self.idle_s = idle_hours * 3600.0
        self.memory_ratio = memory_ratio
        self.open: dict[tuple[str, str], Alert] = {}
        self.idle_since: dict[str, float] = {}
        self.seen_gpus: dict[str, str] = {}

    def _conditions(self, snapshot: Snapshot, states: Iterable[SeatState]) -> dict[tuple[str, str], Alert]:
        now = snapshot.taken_at
        found: dict[tuple[str, str], Alert] = {}
        for s in states:
            seat = s.entry.seat if s.entry else None
            who = s.entry.participant if s.entry else None
            key = seat or s.leaf.uuid or s.leaf.label
            if s.entry is not None:
                since = now if s.active else self.idle_since.get(key, now)
                self.idle_since[key] = since
                if not s.active and now - since >= self.idle_s:
                    hours = (now - since) / 3600
                    found[(IDLE, key)] = Alert(IDLE, key, f"seat {seat} idle for {hours:.1f} h", now, True, seat, who)
            used, total = s.leaf.memory_used_mib, s.leaf.memory_total_mib
            if used is not None and total and used / total > self.memory_ratio:
                found[(MEMORY, key)] = Alert(
                    MEMORY,
                    key,
                    f"{key}: memory {used:.0f}/{total:.0f} MiB ({used / total:.0%})",
                    now,
                    True,
                    seat,
                    who,
                )
            for a in s.processes:
                if a.foreign:
                    fkey = f"{key}:{a.process.pid}"
                    found[(FOREIGN, fkey)] = Alert(
                        FOREIGN,
                        fkey,
                        f"pid {a.process.pid} of user {a.user} on seat {seat} of {who}",
                        now,
                        True,
                        seat,
                        who,
                    )
        present = {g.uuid for g in snapshot.gpus if g.healthy}
        for g in snapshot.gpus:
            self.seen_gpus.setdefault(g.uuid, g.name or g.uuid)
        for uuid, name in self.seen_gpus.items():
            if uuid not in present:
                gpu = snapshot.gpu(uuid)
                why = gpu.error if gpu is not None and gpu.error else "no longer reported"
                found[(GPU_LOST, uuid)] = Alert(GPU_LOST, uuid, f"GPU {name} ({uuid}) lost: {why}", now)
        return found

    def update(self, snapshot: Snapshot, states: Iterable[SeatState]) -> list[Alert]:
        """Alerts raised or cleared by this tick (an alert still open is not repeated)."""
        found = self._conditions(snapshot, states)
        events = [alert for k, alert in found.items() if k not in self.open]
        for k, alert in list(self.open.items()):
            if k not in found:
                events.append(
                    Alert(
                        alert.kind,
                        alert.key,
                        alert.message,
                        snapshot.taken_at,
                        False,
                        alert.seat,
                        alert.participant,
                    )
                )
                del self.open[k]
        for k, alert in found.items():
            self.open.setdefault(k, alert)
        return events


def post_webhook(url: str, alert: Alert, *, timeout_s: float = 5.0) -> bool:
    """POST the alert as JSON (``state`` = ``firing``/``resolved``); failures are logged, not raised."""
    payload = {**asdict(alert), "state": "firing" if alert.raised else "resolved"}
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return 200 <= response.status < 300
    except (urllib.error.URLError, OSError, ValueError) as exc:
        log.warning("webhook %s failed: %s", url, exc)
        return False
