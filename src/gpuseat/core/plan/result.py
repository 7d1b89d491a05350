"""What a plan returns: options cheapest first, the offers that cannot seat a group, warnings, and one
``to_dict()`` that is exactly ``gpuseat plan --format json`` (docs/plan.md "JSON contract")."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from gpuseat.catalog.offers import Offer
from gpuseat.core.cost import Line
from gpuseat.core.course import Course
from gpuseat.core.plan.fit import RejectedOffer
from gpuseat.core.plan.perf import Speed, performance
from gpuseat.core.plan.solve import Allocation

SCHEMA_VERSION = 1


def family(offer: Offer) -> tuple[str, str, str]:
    """The same instance type anywhere: (provider, instance type, billing rule)."""
    return (offer.provider, offer.instance_type, offer.billing)


@dataclass
class PlanOption:
    """One way to seat the whole course, with its itemised cost."""

    allocations: list[Allocation]
    lines: list[Line]
    notes: list[str] = field(default_factory=list)
    also_in: list[str] = field(default_factory=list)  # other regions where the same mix costs the same
    prices: list[dict[str, Any]] = field(default_factory=list)  # each offer's price, date, source and rules
    risks: list[str] = field(default_factory=list)  # restart not guaranteed, spot
    taxes: list[dict[str, Any]] = field(default_factory=list)  # taxes a provider adds, not in the total
    published: dict[str, Any] | None = None  # the same mix by a publication's simpler arithmetic
    flags: list[dict[str, str]] = field(default_factory=list)  # {kind, flag, text}: the table's short warnings

    @property
    def total_usd(self) -> float:
        """Sum of the line items."""
        return round(sum(ln.usd for ln in self.lines), 2)

    @property
    def offer_counts(self) -> dict[str, int]:
        """Units rented per offer id."""
        counts: dict[str, int] = defaultdict(int)
        for a in self.allocations:
            counts[a.fit.offer.id] += a.units
        return dict(counts)

    @property
    def seats(self) -> int:
        """Seats the rented units provide."""
        return sum(a.units * a.fit.seats_per_unit for a in self.allocations)

    @property
    def key(self) -> tuple[tuple[str, str, str, str, int], ...]:
        """Identity of the mix wherever it runs: the same instance types in another region are the same mix."""
        return tuple(sorted((a.fit.group.name, *family(a.fit.offer), a.units) for a in self.allocations))

    def to_dict(self, rank: int, course: Course, speeds: dict[str, Speed], budget: float | None) -> dict[str, Any]:
        """JSON shape of one option."""
        out: dict[str, Any] = {
            "rank": rank,
            "offers": [{"offer": o, "count": n} for o, n in sorted(self.offer_counts.items())],
            "seats": self.seats,
            "total_usd": self.total_usd,
        }
        if budget is not None:
            out["over_budget"] = self.total_usd > budget
        out |= {
            "also_in_regions": self.also_in,
            "lines": [ln.to_dict() for ln in self.lines],
            "groups": [
                {
                    "group": a.fit.group.name,
                    "offer": a.fit.offer.id,
                    "units": a.units,
                    "seats": a.seats,
                    "seats_per_unit": a.fit.seats_per_unit,
                    "mode": a.fit.mode,
                    "profile": a.fit.profile,
                }
                for a in self.allocations
            ],
            "notes": self.notes,
            "performance": performance(self, course.schedule.in_use_hours(), speeds),
            "currency": "USD",
            "tax_included": False,
            "taxes": self.taxes,
            "risks": self.risks,
            "flags": self.flags,
            "prices": self.prices,
            "published": self.published,
        }
        return out


@dataclass
class WhyAnswer:
    """``plan --why OFFER``: that offer priced for this course, and why it is not the first option."""

    offer: str
    option: PlanOption | None
    reasons: list[str]

    def to_dict(self, course: Course, speeds: dict[str, Speed]) -> dict[str, Any]:
        """JSON shape."""
        return {
            "offer": self.offer,
            "option": self.option.to_dict(0, course, speeds, None) if self.option else None,
            "reasons": self.reasons,
        }


def fold_rejections(rejected: list[RejectedOffer], offers: dict[str, Offer]) -> list[dict[str, Any]]:
    """One entry per offer and reason: groups merged, and an offer's twins (the same instance under
    another billing rule, e.g. a ``:whole-month`` copy) folded into it."""
    out: dict[tuple[object, str], dict[str, Any]] = {}
    for r in rejected:
        if r.detail:
            continue
        offer = offers.get(r.offer)
        twin = offer.twin_key if offer else r.offer
        entry = out.setdefault((twin, r.reason), {"offer": r.offer, "twins": [], "reason": r.reason, "groups": []})
        if r.offer != entry["offer"] and r.offer not in entry["twins"]:
            entry["twins"].append(r.offer)
        if r.group and r.group not in entry["groups"]:
            entry["groups"].append(r.group)
    return list(out.values())


@dataclass
class Plan:
    """Options cheapest first, rejected offers and warnings, and how speeds were chosen."""

    course: Course
    options: list[PlanOption]
    rejected: list[RejectedOffer]
    warnings: list[str]
    speeds: dict[str, Speed]
    offers: dict[str, Offer]
    speeds_note: str = "shipped reference results only"
    budget_usd: float | None = None
    why: WhyAnswer | None = None
    filters: list[dict[str, Any]] = field(default_factory=list)
    passed_over: list[RejectedOffer] | None = None  # None: the detail entries of ``rejected``
    hints: list[dict[str, Any]] = field(default_factory=list)  # a requirement that misses a cheaper layout

    def quoted(self) -> list[dict[str, Any]]:
        """The course's quoted figures, each beside gpuseat's own for the same offer."""
        out = []
        for q in self.course.quoted:
            mine = [o for o in self.options if q.offer and list(o.offer_counts) == [q.offer]]
            text = f"{q.what}: ${q.usd:,.2f} ({q.source})"
            if mine:
                o = mine[0]
                text += f"; gpuseat: ${o.total_usd:,.2f} by the provider's rule"
                if o.published and abs(o.published["usd"] - o.total_usd) >= 0.005:
                    text += f", ${o.published['usd']:,.2f} by the same arithmetic as the post"
            if q.difference:
                text += f". {q.difference}"
            out.append({"what": q.what, "usd": q.usd, "source": q.source, "offer": q.offer, "text": text})
        return out

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract of ``gpuseat plan --format json``."""
        course = self.course
        out: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "currency": "USD",
            "course": {
                "name": course.name,
                "participants": course.participant_count,
                "period_days": course.schedule.period_days,
                "seat_hours_each": round(course.schedule.in_use_hours(), 4),
                "access": course.schedule.access,
                "gpu": list(course.gpu),
                "groups": [{"name": g.name, "count": g.count, **g.need.model_dump()} for g in course.groups],
            },
            "offers_considered": len(self.offers),
            "budget_usd": self.budget_usd,
            "speeds": self.speeds_note,
            "options": [o.to_dict(i + 1, course, self.speeds, self.budget_usd) for i, o in enumerate(self.options)],
            "rejected": fold_rejections(self.rejected, self.offers),
            "passed_over": [
                r.to_dict() for r in (self.rejected if self.passed_over is None else self.passed_over) if r.detail
            ],
            "warnings": self.warnings,
            "hints": self.hints,
            "filters": self.filters,
            "quoted": self.quoted(),
        }
        if self.why is not None:
            out["why"] = self.why.to_dict(course, self.speeds)
        return out
