"""Cost so far: a chosen plan option's lines billed up to a moment of the course (pure).

Each line of the plan is re-priced with :mod:`gpuseat.core.cost` for the part of the schedule that has
happened (the billed intervals cut at that moment): hourly offers bill the runs begun, with the offer's
minimum charge and increment; monthly rent bills the billing months touched; disks bill the hours kept;
licences and setup fees are bought up front; egress and support accrue with the in-use hours. At the course's
end the sum equals the plan's total, which a test checks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpuseat.core.cost import disk_rate, seconds, usage_rate, windows_rate
from gpuseat.core.course import Course
from gpuseat.core.intervals import Interval
from gpuseat.core.plan.fit import PlanContext

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog

UP_FRONT = ("licence", "setup fee", "hypervisor licence")


@dataclass(frozen=True, slots=True)
class LineSpend:
    """One plan line: planned for the whole course, and billed up to ``at``."""

    offer: str
    item: str
    count: int
    planned_usd: float
    to_date_usd: float


@dataclass(frozen=True, slots=True)
class Spend:
    """A plan option's cost at one moment: billed so far, planned in total."""

    at: datetime
    lines: tuple[LineSpend, ...]

    @property
    def to_date_usd(self) -> float:
        """Billed so far."""
        return round(sum(ln.to_date_usd for ln in self.lines), 2)

    @property
    def planned_usd(self) -> float:
        """The plan's total for the whole course."""
        return round(sum(ln.planned_usd for ln in self.lines), 2)

    def to_dict(self) -> dict[str, Any]:
        """JSON shape (USD)."""
        return {
            "at": self.at.isoformat(),
            "currency": "USD",
            "to_date_usd": self.to_date_usd,
            "planned_usd": self.planned_usd,
            "lines": [
                {
                    "offer": ln.offer,
                    "item": ln.item,
                    "count": ln.count,
                    "planned_usd": ln.planned_usd,
                    "to_date_usd": ln.to_date_usd,
                }
                for ln in self.lines
            ],
        }


def _naive_utc(at: datetime) -> datetime:
    """The schedule's intervals are naive UTC datetimes."""
    return at.astimezone(UTC).replace(tzinfo=None) if at.tzinfo else at


def clip(runs: Sequence[Interval], at: datetime) -> list[Interval]:
    """The parts of ``runs`` before ``at`` (a run under way is cut at ``at``)."""
    at = _naive_utc(at)
    return [(a, min(b, at)) for a, b in runs if a < at]


def spend(course: Course, option: Mapping[str, Any], catalog: Catalog, at: datetime) -> Spend:
    """The option's lines (as ``plan --format json`` writes them) billed up to ``at``.

    The intervals each offer is billed for come from the planner's own :class:`PlanContext` (sessions,
    or the whole span for an instance that keeps running), cut at ``at``.
    """
    ctx = PlanContext.of(course, catalog)
    offers = {o.id: o for o in catalog.offers}
    now = _naive_utc(at)
    total = sum(seconds(ctx.runs))
    share = sum(seconds(clip(ctx.runs, now))) / total if total else 0.0
    span_so_far = (ctx.span[0], min(ctx.span[1], now))
    out = []
    for ln in option.get("lines", ()):
        planned, count, item = float(ln["usd"]), int(ln["count"]), str(ln["item"])
        offer = offers.get(str(ln["offer"]))
        so_far = 0.0
        if now <= ctx.span[0]:
            pass
        elif item.startswith(UP_FRONT):
            so_far = planned
        elif offer is not None and item in ("instance hours", "server hours", "server rent"):
            runs = clip(ctx.billed_runs(offer)[0], now)
            per = "seat" if offer.kind == "cloud" else "server"
            so_far = usage_rate(offer, runs, per=per).usd * count if runs else 0.0
        elif offer is not None and item == "Windows licence":
            runs = clip(ctx.billed_runs(offer)[0], now)
            so_far = windows_rate(offer, runs).usd * count if runs else 0.0
        elif offer is not None and item == "disk":
            running = ctx.runs if ctx.stopped_between_sessions(offer) else [ctx.span]
            gb = course.costs.storage_gb_per_seat
            so_far = disk_rate(offer, gb, clip(running, now), span_so_far).usd * count
        else:  # egress, support, offers not in the catalog: in step with the hours used
            so_far = planned * share
        out.append(LineSpend(str(ln["offer"]), item, count, planned, round(so_far, 2)))
    return Spend(at, tuple(out))


def spend_curve(
    course: Course, option: Mapping[str, Any], catalog: Catalog, *, points: int = 60
) -> Sequence[tuple[datetime, float]]:
    """Billed-so-far at evenly spaced moments from the course's start to its end (for the chart)."""
    begin, end = (t.replace(tzinfo=UTC) for t in course.schedule.span())
    step = (end - begin) / points
    return [(begin + step * i, spend(course, option, catalog, begin + step * i).to_date_usd) for i in range(points + 1)]
