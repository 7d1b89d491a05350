"""Course usage from the one-minute aggregates: GPU-hours, peak memory and idle time per participant.

A *GPU-hour* here is one hour during which the participant's seat device (a whole GPU or one MIG
instance) was in use — a process held it or its utilisation was above zero. Idle time is the
sampled time it was not. The chart is a self-contained HTML file with an inline SVG drawn by
:mod:`gpuseat.core.charts` (the portal's charts): in-use hours per participant per hour of the course.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpuseat.readings import UsageRow

UNASSIGNED = "(unassigned)"


@dataclass(frozen=True, slots=True)
class ParticipantUsage:
    """Totals for one participant over the report period."""

    participant: str
    seats: tuple[str, ...]
    gpu_hours: float
    idle_hours: float
    peak_memory_mib: int | None


@dataclass(slots=True)
class _Totals:
    seats: set[str] = field(default_factory=set)
    active: float = 0.0
    idle: float = 0.0
    peak: int | None = None


def summarize(rows: Iterable[UsageRow]) -> list[ParticipantUsage]:
    """Totals per participant, sorted by GPU-hours (largest first)."""
    acc: dict[str, _Totals] = {}
    for r in rows:
        if r.samples <= 0:
            continue
        who = r.participant or UNASSIGNED
        t = acc.setdefault(who, _Totals())
        if r.seat:
            t.seats.add(r.seat)
        share = r.active_samples / r.samples
        t.active += share / 60.0
        t.idle += (1.0 - share) / 60.0
        if r.memory_max_mib is not None:
            t.peak = r.memory_max_mib if t.peak is None else max(t.peak, r.memory_max_mib)
    out = [ParticipantUsage(who, tuple(sorted(t.seats)), t.active, t.idle, t.peak) for who, t in acc.items()]
    return sorted(out, key=lambda u: (-u.gpu_hours, u.participant))


def hourly(rows: Iterable[UsageRow]) -> tuple[list[int], dict[str, list[float]]]:
    """In-use hours per participant for each hour (Unix hour numbers, contiguous)."""
    per: dict[str, dict[int, float]] = {}
    hours: set[int] = set()
    for r in rows:
        if r.samples <= 0:
            continue
        hour = r.minute // 60
        hours.add(hour)
        who = per.setdefault(r.participant or UNASSIGNED, {})
        who[hour] = who.get(hour, 0.0) + r.active_samples / r.samples / 60.0
    if not hours:
        return [], {}
    axis = list(range(min(hours), max(hours) + 1))
    return axis, {who: [vals.get(h, 0.0) for h in axis] for who, vals in sorted(per.items())}


def chart_html(rows: Iterable[UsageRow], *, title: str = "GPU seat usage", width: int = 900, height: int = 360) -> str:
    """A self-contained HTML page with an SVG line chart of in-use hours per participant per hour."""
    import datetime as dt

    from gpuseat.core.charts import lines

    axis, series = hourly(rows)

    def label(hour: int) -> str:
        return dt.datetime.fromtimestamp(hour * 3600, dt.UTC).strftime("%Y-%m-%d %H:00Z")

    svg = lines(
        [(who, [(float(h), v) for h, v in zip(axis, values, strict=True)]) for who, values in series.items()],
        title=title,
        kind="usage",
        unit=" h",
        x_labels=(label(axis[0]), label(axis[-1])) if axis else ("", ""),
        width=width,
        height=height,
        series_attr="participant",
    )
    return (
        '<!DOCTYPE html>\n<!-- written by gpuseat usage -->\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title></head>\n<body>\n<h1>{html.escape(title)}</h1>\n"
        "<p>In-use hours per participant per hour (a seat device held by a process or busy).</p>\n"
        f"{svg}\n</body></html>\n"
    )
