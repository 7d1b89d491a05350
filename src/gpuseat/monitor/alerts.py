"""Alerts: seat idle > N hours, memory > 95 %, foreign process, GPU lost, and GPU health (issue 26): an Xid
error, new uncorrectable ECC errors or a row-remap failure/pending page retirement, thermal or power
throttling that lasts minutes — each once until it clears.

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

from gpuseat.readings import Alert, LeafReading, Snapshot

log = logging.getLogger("gpuseat.monitor")

IDLE, MEMORY, FOREIGN, GPU_LOST = "idle", "memory", "foreign", "gpu_lost"
XID, ECC, THERMAL, POWER = "xid", "ecc", "thermal_throttle", "power_throttle"


class AlertTracker:
    """Remembers which alerts are open so each is reported once, and clears them when they end."""

    def __init__(self, *, idle_hours: float = 24.0, memory_ratio: float = 0.95, throttle_minutes: float = 5.0) -> None:
        self.idle_s = idle_hours * 3600.0
        self.memory_ratio = memory_ratio
        self.throttle_s = throttle_minutes * 60.0
        self.open: dict[tuple[str, str], Alert] = {}
        self.idle_since: dict[str, float] = {}
        self.seen_gpus: dict[str, str] = {}
        self.ecc_base: dict[str, int] = {}  # uncorrected ECC errors when the GPU was first seen
        self.throttled_since: dict[tuple[str, str], float] = {}

    def _conditions(self, snapshot: Snapshot, states: Iterable[LeafReading]) -> dict[tuple[str, str], Alert]:
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
        found.update(self._health(snapshot, states))
        present = {g.uuid for g in snapshot.gpus if g.healthy}
        for g in snapshot.gpus:
            self.seen_gpus.setdefault(g.uuid, g.name or g.uuid)
        for uuid, name in self.seen_gpus.items():
            if uuid not in present:
                gpu = snapshot.gpu(uuid)
                why = gpu.error if gpu is not None and gpu.error else "no longer reported"
                found[(GPU_LOST, uuid)] = Alert(GPU_LOST, uuid, f"GPU {name} ({uuid}) lost: {why}", now)
        return found

    def _health(self, snapshot: Snapshot, states: Iterable[LeafReading]) -> dict[tuple[str, str], Alert]:
        """Xid, ECC and throttling conditions per GPU (the whole-GPU seat, when there is one, is named)."""
        from gpuseat.nvsmi_health import POWER_BITS, THERMAL_BITS

        now = snapshot.taken_at
        whole = {s.leaf.gpu.uuid: s.entry for s in states if s.leaf.mig is None and s.entry is not None}
        found: dict[tuple[str, str], Alert] = {}
        for g in snapshot.gpus:
            entry = whole.get(g.uuid)
            seat, who = (entry.seat, entry.participant) if entry else (None, None)
            name = f"GPU {g.index} {g.name or ''} ({g.uuid})".replace("  ", " ")
            if g.xid_last is not None:
                count = f", {g.xid_count} so far" if g.xid_count else ""
                found[(XID, g.uuid)] = Alert(XID, g.uuid, f"{name}: Xid {g.xid_last}{count}", now, True, seat, who)
            if g.ecc_dbe_volatile is not None:
                base = self.ecc_base.setdefault(g.uuid, g.ecc_dbe_volatile)
                if g.ecc_dbe_volatile > base:
                    new = g.ecc_dbe_volatile - base
                    found[(ECC, g.uuid)] = Alert(
                        ECC, g.uuid, f"{name}: {new} new uncorrectable ECC error(s)", now, True, seat, who
                    )
            if g.remapped_rows_failure or g.remapped_rows_pending or g.retired_pages_pending:
                what = (
                    "row remapping failed" if g.remapped_rows_failure else "a memory repair is pending (reset the GPU)"
                )
                found[(ECC, g.uuid)] = Alert(ECC, g.uuid, f"{name}: {what}", now, True, seat, who)
            reasons = g.clocks_event_reasons
            for kind, bits, label in ((THERMAL, THERMAL_BITS, "thermal"), (POWER, POWER_BITS, "power")):
                key = (kind, g.uuid)
                if reasons is not None and reasons & bits:
                    since = self.throttled_since.setdefault(key, now)
                    if now - since >= self.throttle_s:
                        minutes = (now - since) / 60
                        found[key] = Alert(
                            kind,
                            g.uuid,
                            f"{name}: {label} throttling for {minutes:.0f} min (clocks-event reasons 0x{reasons:x})",
                            now,
                            True,
                            seat,
                            who,
                        )
                else:
                    self.throttled_since.pop(key, None)
        return found

    def update(self, snapshot: Snapshot, states: Iterable[LeafReading]) -> list[Alert]:
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
            status: int = response.status  # urlopen's return is untyped (Any) in typeshed
            return 200 <= status < 300
    except (urllib.error.URLError, OSError, ValueError) as exc:
        log.warning("webhook %s failed: %s", url, exc)
        return False
