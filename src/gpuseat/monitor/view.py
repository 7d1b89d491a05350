"""The seat-centric view of ``gpuseat top``: one row per seat-sized device, as rows or a Rich table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuseat.readings import LeafReading

MONITOR_TABLE_COLUMNS = ("seat", "participant", "device", "memory", "util", "processes", "idle")


def _fmt_mib(v: float | None) -> str:
    return "?" if v is None else f"{v / 1024:.1f}G" if v >= 1024 else f"{v:.0f}M"


def bar(used: float | None, total: float | None, width: int = 10) -> str:
    """``████░░░░░░ 1.2G/9.6G``; unknown memory shows as ``?`` instead of a bar."""
    if used is None or not total:
        return f"{'?'.center(width)} {_fmt_mib(used)}/{_fmt_mib(total)}"
    filled = min(width, round(width * used / total))
    return f"{'█' * filled}{'░' * (width - filled)} {_fmt_mib(used)}/{_fmt_mib(total)}"


def _idle(seconds: float | None) -> str:
    if seconds is None:
        return ""
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours}h{rest // 60:02d}m"


def seat_rows(
    states: Sequence[LeafReading], idle_since: Mapping[str, float] | None = None, now: float = 0.0
) -> list[dict[str, Any]]:
    """Plain rows (for table and CSV output) sorted by seat, unassigned devices last."""
    rows = []
    for s in states:
        leaf = s.leaf
        device = f"GPU {leaf.gpu.index}" + (
            f" MIG {leaf.mig.profile or '?'} gi{leaf.mig.gpu_instance_id}" if leaf.mig else ""
        )
        key = s.entry.seat if s.entry else None
        since = (idle_since or {}).get(key) if key and not s.active else None
        util = leaf.utilization_gpu
        procs = " ".join(f"{a.process.pid}:{a.user or '?'}{'!' if a.foreign else ''}" for a in s.processes)
        rows.append(
            {
                "seat": key,
                "participant": s.entry.participant if s.entry else None,
                "device": device + ("" if leaf.gpu.healthy else " UNHEALTHY"),
                "memory": bar(leaf.memory_used_mib, leaf.memory_total_mib),
                "util": "n/a" if util is None else f"{util:.0f}%",
                "processes": procs,
                "idle": _idle(now - since) if since is not None else "",
            }
        )
    return sorted(rows, key=lambda r: (r["seat"] is None, r["seat"] or "", r["device"]))


def rich_table(rows: Sequence[Mapping[str, Any]], title: str) -> Any:
    """A Rich table of :func:`seat_rows` (foreign processes are marked ``!`` and shown red)."""
    from rich.table import Table

    from gpuseat.safe_text import clean

    table = Table(title=clean(title, one_line=True))
    for col in MONITOR_TABLE_COLUMNS:
        table.add_column(col)
    for row in rows:
        style = "red" if "!" in (row["processes"] or "") else None
        table.add_row(*("" if row[c] is None else clean(str(row[c])) for c in MONITOR_TABLE_COLUMNS), style=style)
    return table
