"""Small server-side SVG charts: bars, cumulative lines, a heat map — no plotting library, no JS.

Pages and the course report embed these inline. Every style is an SVG presentation attribute (no
``style=`` and no ``<style>``), so the portal's Content-Security-Policy (``style-src 'self'``) lets
them render. Every text is XML-escaped. Each chart has a ``<title>`` and ``class="chart"``, and each
mark a ``data-*`` value, so tests and screen readers can read them back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
FONT = 'font-family="sans-serif" font-size="11"'


@dataclass(frozen=True, slots=True)
class Bar:
    """One bar: its label, value and an optional colour (e.g. references in grey)."""

    label: str
    value: float
    color: str = PALETTE[0]
    note: str = ""


CHAR_W = 6.6  # width of one character of FONT (11 px sans-serif), generous


def _finite(v: float) -> float:
    return v if math.isfinite(v) else 0.0


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if float(v).is_integer():  # counts stay counts: "3", never "3.00"
        return f"{int(v):,}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2g}" if abs(v) < 1 else f"{v:.2f}"


def _open(width: int, height: int, title: str, kind: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart={quoteattr(kind)} '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
        f"<title>{escape(title)}</title>",
    ]


def empty(title: str, kind: str, message: str = "no data yet", *, width: int = 480, height: int = 60) -> str:
    """A chart frame that says there is nothing to draw (so a section never silently vanishes)."""
    parts = _open(width, height, title, kind)
    parts.append(f'<text x="10" y="{height // 2}" {FONT} fill="#555" data-empty="1">{escape(message)}</text>')
    return "\n".join([*parts, "</svg>"])


def bars(items: Sequence[Bar], *, title: str, kind: str, unit: str = "", width: int = 640, bar_h: int = 18) -> str:
    """Horizontal bars, one per item, with its value written at the end."""
    if not items:
        return empty(title, kind)
    label_w = min(260, 12 + 7 * max(len(b.label) for b in items))
    plot_w = width - label_w - 90
    top = max((_finite(b.value) for b in items), default=0.0) or 1.0
    height = 16 + len(items) * (bar_h + 6)
    parts = _open(width, height, title, kind)
    for i, b in enumerate(items):
        y = 8 + i * (bar_h + 6)
        w = max(1.0, plot_w * _finite(b.value) / top) if b.value > 0 else 0.0
        value = f"{_fmt(b.value)}{unit}" + (f" {b.note}" if b.note else "")
        parts += [
            f'<text x="{label_w - 6}" y="{y + bar_h - 5}" text-anchor="end" {FONT}>{escape(b.label)}</text>',
            f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h}" fill={quoteattr(b.color)} '
            f"data-label={quoteattr(b.label)} data-value={quoteattr(repr(float(b.value)))}/>",
            f'<text x="{label_w + w + 4:.1f}" y="{y + bar_h - 5}" {FONT}>{escape(value)}</text>',
        ]
    return "\n".join([*parts, "</svg>"])


def columns(
    counts: Sequence[tuple[str, float]],
    *,
    title: str,
    kind: str,
    colors: Sequence[str] | None = None,
    width: int = 420,
    height: int = 180,
) -> str:
    """Vertical columns (a distribution): one per label, the count above it."""
    if not counts or not any(v for _, v in counts):
        return empty(title, kind, "no answers yet")
    pad_b, pad_t = 22, 16
    slot = (width - 20) / len(counts)
    top = max(_finite(v) for _, v in counts) or 1.0
    parts = _open(width, height, title, kind)
    for i, (label, v) in enumerate(counts):
        h = (height - pad_b - pad_t) * _finite(v) / top
        x = 10 + i * slot
        color = colors[i] if colors else PALETTE[0]
        fits = max(1, int((slot - 4) / CHAR_W))  # labels never run into their neighbours: cut, full text on hover
        shown = label if len(label) <= fits else label[: max(1, fits - 1)] + "…"
        parts += [
            f'<rect x="{x + 2:.1f}" y="{height - pad_b - h:.1f}" width="{slot - 4:.1f}" height="{h:.1f}" '
            f"fill={quoteattr(color)} data-label={quoteattr(label)} data-value={quoteattr(repr(float(v)))}/>",
            f'<text x="{x + slot / 2:.1f}" y="{height - 8}" text-anchor="middle" {FONT}>'
            f"<title>{escape(label)}</title>{escape(shown)}</text>",
        ]
        if v:
            parts.append(
                f'<text x="{x + slot / 2:.1f}" y="{height - pad_b - h - 3:.1f}" text-anchor="middle" {FONT}>'
                f"{escape(_fmt(v))}</text>"
            )
    return "\n".join([*parts, "</svg>"])


def lines(
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    *,
    title: str,
    kind: str,
    x_labels: tuple[str, str] = ("", ""),
    unit: str = "",
    marker: float | None = None,
    width: int = 640,
    height: int = 240,
    series_attr: str = "series",
) -> str:
    """Line series over a shared x range (e.g. cost to date vs plan); ``marker`` draws a vertical 'now'.

    Each line carries ``data-<series_attr>="<name>"`` (e.g. ``data-participant`` on the usage chart).
    """
    series = [(name, [(x, y) for x, y in s if math.isfinite(x) and math.isfinite(y)]) for name, s in series]
    pts = [p for _, s in series for p in s]
    if not pts:
        return empty(title, kind)
    pad_l, pad_r, pad_t, pad_b = 70, 150, 12, 26
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    top = max(_finite(p[1]) for p in pts) or 1.0
    span = (x1 - x0) or 1.0
    pw, ph = width - pad_l - pad_r, height - pad_t - pad_b

    def sx(x: float) -> float:
        return pad_l + pw * (x - x0) / span

    def sy(y: float) -> float:
        return pad_t + ph * (1 - _finite(y) / top)

    parts = _open(width, height, title, kind)
    parts += [
        f'<line x1="{pad_l}" y1="{pad_t + ph}" x2="{pad_l + pw}" y2="{pad_t + ph}" stroke="#333"/>',
        f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{pad_t + ph}" stroke="#333"/>',
        f'<text x="{pad_l - 6}" y="{pad_t + 9}" text-anchor="end" {FONT}>{escape(_fmt(top) + unit)}</text>',
        f'<text x="{pad_l - 6}" y="{pad_t + ph}" text-anchor="end" {FONT}>0</text>',
        f'<text x="{pad_l}" y="{height - 8}" {FONT}>{escape(x_labels[0])}</text>',
        f'<text x="{pad_l + pw}" y="{height - 8}" text-anchor="end" {FONT}>{escape(x_labels[1])}</text>',
    ]
    if marker is not None and x0 <= marker <= x1:
        mx = sx(marker)
        parts.append(
            f'<line x1="{mx:.1f}" y1="{pad_t}" x2="{mx:.1f}" y2="{pad_t + ph}" stroke="#999" '
            'stroke-dasharray="4 3" data-marker="now"/>'
        )
    for k, (name, s) in enumerate(series):
        color = PALETTE[k % len(PALETTE)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s)
        last = s[-1][1] if s else 0.0
        parts += [
            f'<polyline class="series" fill="none" stroke="{color}" stroke-width="2" points="{path}" '
            f"data-{series_attr}={quoteattr(name)} data-last={quoteattr(repr(float(last)))}/>",
            f'<rect x="{width - pad_r + 10}" y="{pad_t + 16 * k}" width="10" height="10" fill="{color}"/>',
            f'<text x="{width - pad_r + 26}" y="{pad_t + 16 * k + 9}" {FONT}>{escape(name)}</text>',
        ]
    return "\n".join([*parts, "</svg>"])


def heatmap(
    rows: Sequence[str],
    cols: Sequence[str],
    values: dict[tuple[int, int], float],
    *,
    title: str,
    kind: str,
    cell: int = 22,
) -> str:
    """A grid of shares 0–1 (e.g. utilisation per seat per day): darker = more in use, blank = no data."""
    if not rows or not cols:
        return empty(title, kind)
    label_w = min(220, 12 + 7 * max(len(r) for r in rows))
    width = label_w + cell * len(cols) + 10
    height = 34 + cell * len(rows)
    parts = _open(width, height, title, kind)
    step = max(1, math.ceil(len(cols) / max(1, (width - label_w) // 60)))
    for j, c in enumerate(cols):
        if j % step == 0:
            parts.append(f'<text x="{label_w + j * cell}" y="12" {FONT}>{escape(c)}</text>')
    for i, r in enumerate(rows):
        y = 20 + i * cell
        parts.append(f'<text x="{label_w - 6}" y="{y + cell - 7}" text-anchor="end" {FONT}>{escape(r)}</text>')
        for j in range(len(cols)):
            v = values.get((i, j))
            if v is None:
                fill = "#f3f3f3"
            else:
                v = min(1.0, max(0.0, _finite(v)))
                shade = round(235 - 200 * v)
                fill = f"rgb({shade},{round(245 - 120 * v)},{255 - round(60 * v)})"
            shown = "" if v is None else f"{v:.3f}"
            parts.append(
                f'<rect x="{label_w + j * cell}" y="{y}" width="{cell - 2}" height="{cell - 2}" fill="{fill}" '
                f'data-row={quoteattr(r)} data-col={quoteattr(cols[j])} data-value="{shown}"/>'
            )
    return "\n".join([*parts, "</svg>"])
