"""Billing arithmetic: how much one unit of an offer costs over a course, as explainable line items.

Pure functions. Each cost is a :class:`Rate` (exact USD for one unit plus the formula that gives it);
the planner multiplies a rate by a count to get a :class:`Line` whose formula reads like
``0.65 $/h × 24 h × 15 d × 16 seats = $3,744.00``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from gpuseat.catalog.offers import INCREMENT_S, Offer

HOURS_PER_MONTH = 730  # the hours-per-month convention cloud storage prices use

# A price for one offer, or a numpy column of prices for many: the planner prices a whole catalog at once
# with the same functions that price one offer, so the two cannot disagree.
Amount = TypeVar("Amount", float, np.ndarray)


def money(usd: float) -> str:
    """``3744`` → ``$3,744.00``."""
    return f"${usd:,.2f}"


def num(x: float) -> str:
    """A price or quantity without trailing zeros: ``0.65``, ``2,961.1`` → ``2,961.10`` for money-like values."""
    if float(x).is_integer():
        return f"{int(x):,}"
    text = f"{x:,.6f}".rstrip("0")
    decimals = len(text.split(".")[1])
    return f"{x:,.2f}" if decimals < 2 else text


@dataclass(frozen=True)
class Rate:
    """The exact cost of one unit (a seat, a server, a GPU) and the formula that gives it.

    ``text`` may be a function that builds the formula: planning over many thousand offers then only
    formats the formulas of the offers that end up in a plan.
    """

    item: str
    usd: float
    text: str | Callable[[], str]
    per: str  # what one unit is: "seat", "server"

    @property
    def formula(self) -> str:
        """The formula, e.g. ``0.65 $/h × 24 h × 15 d``."""
        return self.text if isinstance(self.text, str) else self.text()


@dataclass(frozen=True)
class Line:
    """One itemised cost in a plan."""

    offer: str
    group: str
    item: str
    count: int
    usd: float
    formula: str

    def as_dict(self) -> dict[str, object]:
        """JSON shape of a line."""
        return {
            "offer": self.offer,
            "group": self.group,
            "item": self.item,
            "count": self.count,
            "usd": self.usd,
            "formula": self.formula,
        }


def line(rate: Rate, count: int, *, offer: str, group: str) -> Line:
    """``rate`` × ``count``, rounded to cents once, with its formula."""
    usd = round(rate.usd * count, 2)
    word = rate.per if count == 1 else f"{rate.per}s"
    return Line(offer, group, rate.item, count, usd, f"{rate.formula} × {count} {word} = {money(usd)}")


def billed_seconds(run_s: int, offer: Offer) -> int:
    """Seconds billed for one run: raised to the minimum charge, rounded up to the billing increment."""
    increment = INCREMENT_S[offer.billing]
    charged = max(run_s, offer.min_charge_s)
    return math.ceil(charged / increment) * increment


def billed_total(runs_s: list[int], offer: Offer) -> int:
    """Seconds billed for all runs (lab sessions mostly share one length: each length is billed once)."""
    return sum(billed_seconds(r, offer) * k for r, k in Counter(runs_s).items())


def hourly_usd(price_usd_h: Amount, billed_s: Amount | int) -> Amount:
    """Rent for ``billed_s`` seconds at an hourly price."""
    return price_usd_h * billed_s / 3600


def disk_usd(usd_per_gb_month: Amount, gb: float, period_days: int) -> Amount:
    """Disk kept for a seat over the whole course, billed even while the instance is stopped."""
    return usd_per_gb_month * gb * (period_days * 24) / HOURS_PER_MONTH


def egress_usd(usd_per_gb: Amount, gb: float) -> Amount:
    """Internet egress per seat."""
    return usd_per_gb * gb


def _billing_words(offer: Offer) -> str:
    rule = offer.billing
    return f"{rule}, {offer.min_charge_s} s minimum" if offer.min_charge_s else rule


def usage_rate(offer: Offer, runs_s: list[int], period_days: int, *, per: str) -> Rate:
    """What one unit of ``offer`` costs for the course's runs (hourly) or period (monthly)."""
    if offer.monthly:
        months = period_days / offer.days_per_month
        price = f"{num(offer.price_usd)} $/month"
        if offer.billing == "month-whole":
            whole = math.ceil(months)
            formula = f"{price} × {whole} month{'s' if whole != 1 else ''} (whole months: {period_days} d)"
            return Rate("server rent", offer.price_usd * whole, formula, per)
        formula = f"{price} × {period_days} d / {offer.days_per_month} d"
        return Rate("server rent", offer.price_usd * period_days / offer.days_per_month, formula, per)
    billed = billed_total(runs_s, offer)
    item = "instance hours" if offer.kind == "cloud" else "server hours"
    return Rate(item, hourly_usd(offer.price_usd, billed), lambda: _hourly_formula(offer, runs_s, billed), per)


def _hourly_formula(offer: Offer, runs_s: list[int], billed: int) -> str:
    price = f"{num(offer.price_usd)} $/h"
    lengths = Counter(runs_s)
    unrounded = billed == sum(runs_s)
    if len(runs_s) == 1 and unrounded and runs_s[0] % 86400 == 0:
        return f"{price} × 24 h × {runs_s[0] // 86400} d"
    if len(lengths) == 1 and unrounded:
        return f"{price} × {num(runs_s[0] / 3600)} h × {len(runs_s)} sessions"
    words = f"{len(runs_s)} run{'s' if len(runs_s) != 1 else ''}, {_billing_words(offer)}"
    return f"{price} × {num(round(billed / 3600, 4))} h billed ({words})"


def disk_rate(offer: Offer, gb: float, period_days: int) -> Rate:
    """Disk kept for a seat over the whole course, billed even while the instance is stopped."""
    hours = period_days * 24
    return Rate(
        "disk",
        disk_usd(offer.disk_usd_per_gb_month, gb, period_days),
        lambda: f"{num(offer.disk_usd_per_gb_month)} $/GB-month × {num(gb)} GB × {hours} h / {HOURS_PER_MONTH} h",
        "seat",
    )


def egress_rate(offer: Offer, gb: float) -> Rate:
    """Internet egress per seat."""
    formula = f"{num(offer.egress_usd_per_gb)} $/GB × {num(gb)} GB"
    return Rate("egress", egress_usd(offer.egress_usd_per_gb, gb), formula, "seat")


def term_count(period_days: int, term_days: int) -> int:
    """Licence terms needed to cover the course (a short course still buys one whole term)."""
    return max(1, math.ceil(period_days / term_days))
