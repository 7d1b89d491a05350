"""Billing arithmetic: what one unit of an offer costs over some time, as explainable line items.

Pure functions, also used for "cost so far" (pass the intervals up to now). Each cost is a :class:`Rate`
(exact USD for one unit plus the formula that gives it); the planner multiplies a rate by a count to get
a :class:`Line` whose formula reads like ``0.65 $/h × 24 h × 15 d × 16 seats = $3,744.00``.

Rules (docs/plan.md "Billing rules"):

* hourly offers bill each run (a merged interval) raised to the minimum charge and rounded up to the
  billing increment; an instance that is not stopped between sessions has one run, the whole span;
* hourly runs round up, or down where the provider bills only whole increments (Azure: full minutes);
* monthly offers bill calendar months (from the 1st; ``month_start = "anniversary"`` counts months from
  the first day): ``month-prorated`` charges days used / days in that month for every month touched,
  ``month-whole`` one full charge per month touched, ``month-first-prorated`` (IBM classic, OVH since
  2026-04) the days from the order day to the first month's end, then whole months;
* a sustained-use discount (GCP) charges each calendar month's hours by tiers of that month's length;
* per-hour fees (a public IPv4 address) are billed per seat while it runs;
* disks bill GB-months over the whole span, at the running rate while the instance runs and at the
  stopped rate otherwise; a month is 730 h or the real month (``disk_month``); sizes round up to the
  provider's disk tier.
"""

from __future__ import annotations

import calendar
import itertools
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import date, datetime, timedelta

from gpuseat.catalog.offers import INCREMENT_S, Offer
from gpuseat.catalog.rules import Rule
from gpuseat.core.intervals import Interval

HOURS_PER_MONTH = 730  # the hours-per-month convention most cloud storage prices use


def money(usd: float) -> str:
    """``3744`` → ``$3,744.00``, ``-3`` → ``-$3.00``: the one money format of plans, pages and reports."""
    return f"{'-' if usd < 0 else ''}${abs(usd):,.2f}"


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

    def to_dict(self) -> dict[str, object]:
        """JSON shape of a line: every field, in field order (the key order plans print)."""
        return asdict(self)


def line(rate: Rate, count: int, *, offer: str, group: str) -> Line:
    """``rate`` × ``count``, rounded to cents once, with its formula."""
    usd = round(rate.usd * count, 2)
    word = rate.per if count == 1 else f"{rate.per}s"
    return Line(offer, group, rate.item, count, usd, f"{rate.formula} × {count} {word} = {money(usd)}")


# ------------------------------------------------------------------------------------------ hourly


def billed_seconds(run_s: int, offer: Offer) -> int:
    """Seconds billed for one run: raised to the minimum charge, rounded up to the billing increment."""
    increment = INCREMENT_S[offer.billing]
    charged = max(run_s, offer.min_charge_s)
    if offer.rounding == "down":
        return charged // increment * increment
    return math.ceil(charged / increment) * increment


def billed_total(runs_s: Sequence[int], offer: Offer) -> int:
    """Seconds billed for all runs (lab sessions mostly share one length: each length is billed once)."""
    return sum(billed_seconds(r, offer) * k for r, k in Counter(runs_s).items())


def hourly_usd(price_usd_h: float, billed_s: float) -> float:
    """Rent for ``billed_s`` seconds at an hourly price."""
    return price_usd_h * billed_s / 3600


def seconds(runs: Sequence[Interval]) -> list[int]:
    """Length of each interval in whole seconds."""
    return [round((end - start).total_seconds()) for start, end in runs]


# ----------------------------------------------------------------------------------------- monthly


@dataclass(frozen=True)
class BillingMonth:
    """One billing month that a rental touches: its first day, its length and the days used in it."""

    start: date
    days: int
    used: int

    @property
    def label(self) -> str:
        """``Mar 2016`` (calendar) or ``25 Mar 2016`` (anniversary)."""
        return f"{self.start:%b %Y}" if self.start.day == 1 else f"{self.start:%d %b %Y}".lstrip("0")


def _add_months(day: date, months: int, anchor_day: int) -> date:
    y, m = divmod(day.month - 1 + months, 12)
    year, month = day.year + y, m + 1
    return date(year, month, min(anchor_day, calendar.monthrange(year, month)[1]))


def billing_months(first: date, last: date, *, anniversary: bool = False) -> list[BillingMonth]:
    """Every billing month from ``first`` to ``last`` (inclusive days): calendar months from the 1st, or
    months counted from ``first`` when ``anniversary``."""
    anchor = first.day if anniversary else 1
    start = first if anniversary else first.replace(day=1)
    out = []
    k = 0
    while start <= last:
        k += 1
        nxt = _add_months(first if anniversary else first.replace(day=1), k, anchor)
        used = (min(last, nxt - timedelta(days=1)) - max(first, start)).days + 1
        out.append(BillingMonth(start, (nxt - start).days, used))
        start = nxt
    return out


def _months_words(months: list[BillingMonth]) -> str:
    shown = ", ".join(m.label for m in months[:3])
    return shown + (f", … {months[-1].label}" if len(months) > 3 else "")


def monthly_rate(offer: Offer, first: date, last: date, *, per: str) -> Rate:
    """Rent of one unit of a monthly offer used from ``first`` to ``last`` (inclusive days)."""
    months = billing_months(first, last, anniversary=offer.month_start == "anniversary")
    price = f"{num(offer.price_usd)} $/month"
    if offer.billing == "month-first-prorated" and months:
        head = months[0]
        left = head.days - (first - head.start).days
        whole = len(months) - 1
        usd = offer.price_usd * (left / head.days + whole)
        parts = f"{left}/{head.days} d {head.label}, from the order day to the month's end"
        if whole:
            parts += f" + {whole} whole month{'s' if whole != 1 else ''} to {months[-1].label}"
        return Rate("server rent", usd, f"{price} × ({parts})", per)
    if offer.billing == "month-whole":
        n = len(months)
        formula = f"{price} × {n} billing month{'s' if n != 1 else ''} ({_months_words(months)}, charged whole)"
        return Rate("server rent", offer.price_usd * n, formula, per)
    usd = offer.price_usd * sum(m.used / m.days for m in months)
    parts = " + ".join(f"{m.used}/{m.days} d {m.label}" for m in months[:3])
    if len(months) > 3:
        parts = f"{sum(m.used for m in months)} d over {len(months)} months"
    return Rate("server rent", usd, f"{price} × ({parts})", per)


def usage_rate(offer: Offer, runs: Sequence[Interval], *, per: str) -> Rate:
    """What one unit of ``offer`` costs when it runs during ``runs`` (merged intervals, in order).

    Hourly offers bill each run; monthly offers bill the days from the first run's start to the last
    run's end.
    """
    if offer.monthly:
        first, last = runs[0][0].date(), (runs[-1][1] - timedelta(microseconds=1)).date()
        return monthly_rate(offer, first, last, per=per)
    runs_s = seconds(runs)
    billed = billed_total(runs_s, offer)
    item = "instance hours" if offer.kind == "cloud" else "server hours"
    return Rate(item, hourly_usd(offer.price_usd, billed), lambda: _hourly_formula(offer, runs_s, billed), per)


def _billing_words(offer: Offer) -> str:
    rule = offer.billing
    return f"{rule}, {offer.min_charge_s} s minimum" if offer.min_charge_s else rule


def _hourly_formula(offer: Offer, runs_s: list[int], billed: int, price_usd: float | None = None) -> str:
    """``0.65 $/h × 24 h × 15 d``, or the billed hours and the rule that rounds them."""
    price = f"{num(offer.price_usd if price_usd is None else price_usd)} $/h"
    lengths = Counter(runs_s)
    unrounded = billed == sum(runs_s)
    if len(runs_s) == 1 and unrounded:
        if runs_s[0] % 86400 == 0:
            return f"{price} × 24 h × {runs_s[0] // 86400} d"
        return f"{price} × {num(round(runs_s[0] / 3600, 4))} h"
    if len(lengths) == 1 and unrounded:
        return f"{price} × {num(runs_s[0] / 3600)} h × {len(runs_s)} sessions"
    rule = "by the hour of use" if offer.monthly else _billing_words(offer)
    words = f"{len(runs_s)} run{'s' if len(runs_s) != 1 else ''}, {rule}"
    return f"{price} × {num(round(billed / 3600, 4))} h billed ({words})"


def windows_rate(offer: Offer, runs: Sequence[Interval]) -> Rate:
    """The Windows licence a cloud provider adds per vCPU-hour, billed like the instance (by the hour of
    use for a monthly instance)."""
    rate = offer.windows_usd_per_vcpu_h or 0.0
    runs_s = seconds(runs)
    billed = sum(runs_s) if offer.monthly else billed_total(runs_s, offer)
    per_h = rate * offer.vcpus
    return Rate(
        "Windows licence",
        hourly_usd(per_h, billed),
        lambda: f"{num(rate)} $/vCPU-h × {num(offer.vcpus)} vCPUs = " + _hourly_formula(offer, runs_s, billed, per_h),
        "seat",
    )


# -------------------------------------------------------------------------------------------- disk


def disk_size_gb(offer: Offer, gb: float) -> float:
    """The size billed: ``gb`` raised to the provider's next disk tier (Azure managed disks), if any."""
    for tier in offer.disk_tiers_gb:
        if gb <= tier:
            return tier
    return gb


def _month_hours(start: datetime, end: datetime, real_month: bool) -> list[tuple[float, float]]:
    """(hours, hours in that month) for each month ``[start, end)`` touches (730 h months unless real)."""
    if not real_month:
        return [((end - start).total_seconds() / 3600, float(HOURS_PER_MONTH))]
    out: list[tuple[float, float]] = []
    cur = start
    while cur < end:
        nxt = datetime.combine(_add_months(cur.date().replace(day=1), 1, 1), datetime.min.time())
        piece = min(end, nxt)
        days = calendar.monthrange(cur.year, cur.month)[1]
        out.append(((piece - cur).total_seconds() / 3600, float(days * 24)))
        cur = piece
    return out


def disk_rate(offer: Offer, gb: float, running: Sequence[Interval], span: Interval) -> Rate:
    """Disk kept for a seat over ``span``: billed at the running rate during ``running`` and at the
    stopped rate (the running rate unless the offer gives one) for the rest of the span."""
    size = disk_size_gb(offer, gb)
    run_rate = offer.disk_usd_per_gb_month or 0.0
    stop_rate = run_rate if offer.disk_stopped_usd_per_gb_month is None else offer.disk_stopped_usd_per_gb_month
    real = offer.disk_month == "calendar"
    gaps = [(a[1], b[0]) for a, b in itertools.pairwise(running)]
    edges = [(span[0], running[0][0]), (running[-1][1], span[1])] if running else [span]
    stopped = [(a, b) for a, b in [*edges, *gaps] if b > a]
    usd = run_h = stop_h = 0.0
    for is_running, rate, pieces in ((True, run_rate, running), (False, stop_rate, stopped)):
        for a, b in pieces:
            for hours, month_h in _month_hours(a, b, real):
                usd += rate * size * hours / month_h
                if is_running:
                    run_h += hours
                else:
                    stop_h += hours
    month = "real month" if real else f"{HOURS_PER_MONTH} h"
    tier = f" ({num(gb)} GB → {num(size)} GB tier)" if size != gb else ""

    def formula() -> str:
        if stop_rate == run_rate:
            hours = num(round(run_h + stop_h, 2))
            return f"{num(run_rate)} $/GB-month × {num(size)} GB{tier} × {hours} h (month = {month})"
        parts = [f"{num(run_rate)} $/GB-month × {num(size)} GB{tier} × {num(round(run_h, 2))} h running"]
        if stop_h:
            parts.append(f"{num(stop_rate)} $/GB-month × {num(round(stop_h, 2))} h stopped")
        return " + ".join(parts) + f" (month = {month})"

    return Rate("disk", usd, formula, "seat")


def egress_usd(usd_per_gb: float, gb: float) -> float:
    """Internet egress per seat."""
    return usd_per_gb * gb


def egress_rate(offer: Offer, gb: float) -> Rate:
    """Internet egress per seat."""
    formula = f"{num(offer.egress_usd_per_gb or 0)} $/GB × {num(gb)} GB"
    return Rate("egress", egress_usd(offer.egress_usd_per_gb or 0.0, gb), formula, "seat")


def term_count(days: int, term_days: int) -> int:
    """Licence terms needed to cover ``days`` (a short course still buys one whole term)."""
    return max(1, math.ceil(days / term_days))


# ------------------------------------------------------------------------------------- rule engine


def tiered_hours(hours: float, month_hours: float, tiers: Sequence[Sequence[float]]) -> float:
    """Hours charged for ``hours`` of use in a month of ``month_hours`` under sustained-use ``tiers``
    (``[[fraction of the month, rate], ...]``): each slice of the month is charged at its rate."""
    charged, below = 0.0, 0.0
    for fraction, rate in tiers:
        cap = fraction * month_hours
        if hours > below:
            charged += (min(hours, cap) - below) * rate
        below = cap
    return charged


def month_pieces(runs: Sequence[Interval]) -> list[tuple[date, float, float]]:
    """(first day of the calendar month, hours used in it, hours in that month) for every month ``runs`` touch."""
    used: dict[date, float] = {}
    for start, end in runs:
        cur = start
        while cur < end:
            first = cur.date().replace(day=1)
            nxt = datetime.combine(_add_months(first, 1, 1), datetime.min.time())
            piece = min(end, nxt)
            used[first] = used.get(first, 0.0) + (piece - cur).total_seconds() / 3600
            cur = piece
    return [(m, h, calendar.monthrange(m.year, m.month)[1] * 24.0) for m, h in sorted(used.items())]


def sustained_use_rate(offer: Offer, runs: Sequence[Interval], rule: Rule, *, per: str) -> Rate:
    """Rent of one hourly unit with a sustained-use discount: every calendar month's hours charged by
    ``rule``'s tiers; what the minimum charge and rounding add is charged at the full rate."""
    tiers = rule.get("tiers")
    runs_s = seconds(runs)
    pieces = month_pieces(runs)
    charged_h = sum(tiered_hours(h, mh, tiers) for _, h, mh in pieces)
    extra_s = billed_total(runs_s, offer) - sum(runs_s)
    usd = offer.price_usd * (charged_h + extra_s / 3600)

    def formula() -> str:
        used = " + ".join(f"{num(round(h, 2))} h of {num(mh)} h {m:%b %Y}" for m, h, mh in pieces[:3])
        more = f" (+{len(pieces) - 3} months)" if len(pieces) > 3 else ""
        used_h = sum(h for _, h, _ in pieces)
        off = 1 - charged_h / used_h if used_h else 0.0
        return (
            f"{num(offer.price_usd)} $/h × {num(round(charged_h + extra_s / 3600, 4))} h charged "
            f"({used}{more}; sustained-use tiers {rule.id}: {off:.1%} off)"
        )

    return Rate("instance hours", usd, formula, per)


def fee_rate(rule: Rule, running_s: int) -> Rate:
    """A per-hour fee (public IPv4) for one seat while it runs."""
    usd_h = float(rule.get("usd_per_h"))
    hours = running_s / 3600
    return Rate(
        str(rule.get("item")), usd_h * hours, f"{num(usd_h)} $/h × {num(round(hours, 4))} h ({rule.id})", "seat"
    )


def published_rate(offer: Offer, runs: Sequence[Interval], *, per: str) -> Rate:
    """One unit's rent by simple arithmetic, as a publication computed it: monthly rent prorated by the
    days used, hours at the list price without rounding or minimum."""
    if offer.monthly:
        first, last = runs[0][0].date(), (runs[-1][1] - timedelta(microseconds=1)).date()
        return monthly_rate(offer.model_copy(update={"billing": "month-prorated"}), first, last, per=per)
    total = sum(seconds(runs))
    return Rate("rent", hourly_usd(offer.price_usd, total), f"{num(offer.price_usd)} $/h × {num(total / 3600)} h", per)
