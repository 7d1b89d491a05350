"""The performance view: cost per seat-hour and per LeNet run, and time against the 2016 K520 baseline.

Speeds come in as an argument (the shipped reference results plus, where the caller passes them, the
results ``gpuseat bench`` recorded), so a plan does not depend on the machine it is computed on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuseat.core.plan.result import PlanOption

LENET_BASELINE_GPU = "K520"


@dataclass(frozen=True)
class Speed:
    """How long one GPU model takes for 10,000 LeNet iterations, and where that figure comes from."""

    gpu: str
    seconds_per_10k: float
    source: str


def speeds_from(reference: Iterable[Speed], recorded: Iterable[Speed] = ()) -> dict[str, Speed]:
    """Per GPU model, the recorded result if any (the last one given wins), else the shipped reference."""
    out = {s.gpu: s for s in reference}
    out.update({s.gpu: s for s in recorded})
    return out


def performance(option: PlanOption, seat_hours: float, speeds: dict[str, Speed]) -> list[dict[str, object]]:
    """Per offer in ``option``: cost per seat-hour, per LeNet run, and time against the K520 baseline."""
    baseline = speeds.get(LENET_BASELINE_GPU)
    out = []
    for offer_id in option.offer_counts:
        allocated = [a for a in option.allocations if a.fit.offer.id == offer_id]
        gpu = allocated[0].fit.offer.gpu
        seats = sum(a.seats for a in allocated)
        usd = sum(ln.usd for ln in option.lines if ln.offer == offer_id)
        per_seat_hour = usd / (seats * seat_hours) if seats and seat_hours else 0.0
        groups = sorted({a.fit.group.name for a in allocated})
        row: dict[str, object] = {
            "offer": offer_id,
            "groups": groups,
            "gpu": gpu,
            "usd_per_seat_hour": round(per_seat_hour, 4),
        }
        speed = speeds.get(gpu)
        if speed is None:
            row["note"] = f"no LeNet result for {gpu}: run 'gpuseat bench' on one to compare"
        else:
            row["lenet_10k_seconds"] = speed.seconds_per_10k
            row["speed_source"] = speed.source
            row["usd_per_lenet_run"] = round(per_seat_hour * speed.seconds_per_10k / 3600, 6)
            if baseline is not None:
                factor = speed.seconds_per_10k / baseline.seconds_per_10k
                row["k520_day_takes_h"] = round(24 * factor, 1)
                row["time_saved"] = f"24 h of {baseline.gpu} work takes {24 * factor:.1f} h on {gpu}"
        out.append(row)
    return out
