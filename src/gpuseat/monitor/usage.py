"""Course usage from the one-minute aggregates: GPU-hours, peak memory and idle time per participant.

A *GPU-hour* here is one hour during which the participant's seat device (a whole GPU or one MIG
instance) was in use — a process held it or its utilisation was above zero. Idle time is the
sampled time it was not. The chart is a self-contained HTML file with an inline SVG (no plotting
library): in-use hours per participant per hour of the course.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from dataclasses import dataclass

from gpuseat.readings import UsageRow

UNASSIGNED = "(unassigned)"
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)


@dataclass(frozen=True, slots=True)
class ParticipantUsage:
    """Totals for one participant over the report period."""

    participant: str
    seats: tuple[str, ...]
    gpu_hours: float
    idle_hours: float
    peak_memory_mib: int | None


def summarize(rows: Iterable[UsageRow]) -> list[ParticipantUsage]:
    """Totals per participant, sorted by GPU-hours (largest first)."""
    acc: dict[str, list] = {}
    for r in rows:
        if r.samples <= 0:
            continue
        who = r.participant or UNASSIGNED
        seats, active, idle, peak = acc.setdefault(who, [set(), 0.0, 0.0, None])
        if r.seat:
            seats.add(r.seat)
        share = r.active_samples / r.samples
        acc[who][1] = active + share / 60.0
        acc[who][2] = idle + (1.0 - share) / 60.0
        if r.memory_max_mib is not None:
            acc[who][3] = r.memory_max_mib if peak is None else max(peak, r.memory_max_mib)
    out = [ParticipantUsage(who, tuple(sorted(v[0])), v[1], v[2], v[3]) for who, v in acc.items()]
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

    axis, series = hourly(rows)
    pad_l, pad_r, pad_t, pad_b = 50, 160, 30, 40
    plot_w, plot_h = width - pad_l - pad_r, height - pad_t - pad_b
    n = max(len(axis) - 1, 1)
    top = max((max(v) for v in series.values()), default=1.0) or 1.0

    def x(i: int) -> float:
        return pad_l + plot_w * i / n

    def y(v: float) -> float:
        return pad_t + plot_h * (1 - v / top)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">',
        f"<title>{html.escape(title)}</title>",
        f'<line x1="{pad_l}" y1="{pad_t + plot_h}" x2="{pad_l + plot_w}" y2="{pad_t + plot_h}" stroke="#333"/>',
        f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{pad_t + plot_h}" stroke="#333"/>',
        f'<text x="{pad_l - 8}" y="{pad_t + 4}" text-anchor="end" font-size="11">{top:.2f} h</text>',
        f'<text x="{pad_l - 8}" y="{pad_t + plot_h}" text-anchor="end" font-size="11">0</text>',
    ]
    if axis:
        for i in (0, len(axis) - 1):
            label = dt.datetime.fromtimestamp(axis[i] * 3600, dt.UTC).strftime("%Y-%m-%d %H:00Z")
            parts.append(f'<text x="{x(i):.1f}" y="{height - 12}" text-anchor="middle" font-size="11">{label}</text>')
    for k, (who, values) in enumerate(series.items()):
        color = PALETTE[k % len(PALETTE)]
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
        parts.append(
            f'<polyline class="series" data-participant="{html.escape(who)}" fill="none" stroke="{color}" '
            f'stroke-width="1.5" points="{points}"/>'
        )
        ly = pad_t + 14 * k
        parts.append(f'<rect x="{width - pad_r + 10}" y="{ly - 8}" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{width - pad_r + 26}" y="{ly + 1}" font-size="11">{html.escape(who)}</text>')
    parts.append("</svg>")
    svg = "\n".join(parts)
    return (
        '<!DOCTYPE html>\n<!-- written by gpuseat usage -->\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title></head>\n<body>\n<h1>{html.escape(title)}</h1>\n"
        "<p>In-use hours per participant per hour (a seat device held by a process or busy).</p>\n"
        f"{svg}\n</body></html>\n"
    )
