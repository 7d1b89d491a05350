"""The planner: the cheapest mix of offers that seats every participant, distinct alternatives, and
``--why OFFER``. Pure: the course, the offers, the catalog and the speeds all come in as arguments."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from gpuseat.catalog.offers import Offer, ProviderRules
from gpuseat.core.cost import Line, billing_months, line, money, num
from gpuseat.core.course import Course
from gpuseat.core.plan.fit import Fit, PlanContext, RejectedOffer
from gpuseat.core.plan.perf import Speed
from gpuseat.core.plan.result import Plan, PlanOption, WhyAnswer
from gpuseat.core.plan.solve import Allocation, solve, tighten
from gpuseat.core.plan.table import GroupFits, OfferTable
from gpuseat.errors import Infeasible, InputError, NoOfferFits, did_you_mean

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog

#: An offer priced more than this many days before the course starts is flagged as stale.
STALE_DAYS = 365


def select_offers(offers: Sequence[Offer], patterns: Sequence[str] = (), regions: Sequence[str] = ()) -> list[Offer]:
    """Offers whose id matches any glob in ``patterns`` and whose region matches any glob in ``regions``
    (no patterns: every offer; no regions: every region)."""
    return [
        o
        for o in offers
        if (not patterns or any(fnmatchcase(o.id, p) for p in patterns))
        and (not regions or any(fnmatchcase(o.region or "", r) for r in regions))
    ]


def plan(
    course: Course,
    offers: Sequence[Offer],
    *,
    catalog: Catalog,
    speeds: dict[str, Speed] | None = None,
    speeds_note: str = "shipped reference results only",
    alternatives: int = 10,
    budget_usd: float | None = None,
    why: str | None = None,
    where: str = "course",
    exhaustive: bool = False,
) -> Plan:
    """Price the course on ``offers``: the cheapest mix first, then distinct alternatives.

    ``where`` names the course in error messages (its file path, for the CLI). ``exhaustive`` solves
    over every fitting offer instead of the pruned candidates (same optimum, slower: for checks).
    """
    offers = list(offers)
    ctx = PlanContext.of(course, catalog)
    table = OfferTable.of(offers, ctx)
    rejected: list[RejectedOffer] = []
    fits: dict[str, GroupFits] = {}
    for group in course.groups:
        fits[group.name], why_not = table.fits(group, ctx)
        rejected += why_not
        if not fits[group.name].bound:
            need = group.need
            common = Counter(r.reason for r in why_not if not r.detail).most_common(3)
            reasons = "; ".join(f"{reason} ({n} offer{'s' if n != 1 else ''})" for reason, n in common)
            raise NoOfferFits(
                f"no offer can seat group '{group.name}' (needs ≥ {num(need.min_gpu_memory_gb)} GB GPU memory, "
                f"{need.guest_os}, {need.isolation}); {len(offers)} offers were considered"
                + (f": {reasons}" if reasons else ""),
                where=f"{where}: group '{group.name}'",
                fix="lower the needs, or add offers (--offers FILE) that meet them; see 'rejected' in --format json",
            )
    n = course.participant_count
    if exhaustive:
        pools = {g.name: [f for i in fits[g.name].bound for f in fits[g.name].layouts(i)] for g in course.groups}
    else:
        pools = tighten(course, {g.name: fits[g.name].candidates(n) for g in course.groups})
    best = solve(course, pools)
    if best is None:
        raise Infeasible(
            "the offers' availability limits cannot seat every participant",
            where=where,
            fix="raise 'available' on some offers or add offers",
        )
    providers = catalog.providers
    options = [_option(best, providers, ctx)]
    seen = {options[0].key}
    for i in _alternative_offers(table, fits) if alternatives else []:
        if len(options) > alternatives:
            break
        alt = _forced(course, fits, pools, i)
        if alt is None:
            continue
        option = _option(alt, providers, ctx)
        if option.key not in seen:
            seen.add(option.key)
            options.append(option)
    options.sort(key=lambda o: o.total_usd)
    regions = _same_price_regions(table, fits, {a.fit.offer.id for o in options for a in o.allocations})
    for option in options:
        option.also_in = sorted({r for a in option.allocations for r in regions.get(a.fit.offer.id, [])})
    by_id = {o.id: o for o in offers}
    answer = _why(why, course, fits, pools, options[0], providers, ctx, by_id, rejected) if why else None
    return Plan(
        course,
        options,
        _dedupe(rejected),
        [],
        speeds or {},
        by_id,
        speeds_note=speeds_note,
        budget_usd=budget_usd,
        why=answer,
    )


def _forced(course: Course, fits: dict[str, GroupFits], pools: dict[str, list[Fit]], i: int) -> list[Allocation] | None:
    """The best mix that puts every group offer ``i`` can seat on offer ``i`` (or, when its availability
    is too small for that, that uses it at least once)."""
    allowed = {g.name: fits[g.name].layouts(i) or pools[g.name] for g in course.groups}
    found = solve(course, allowed)
    if found is not None:
        return found
    widened = {
        g.name: pools[g.name] + [f for f in fits[g.name].layouts(i) if f not in pools[g.name]] for g in course.groups
    }
    offer_id = next(f.offer.id for g in course.groups if (f := fits[g.name].fit(i)))
    return solve(course, widened, must_use=offer_id)


def _alternative_offers(table: OfferTable, fits: dict[str, GroupFits]) -> list[int]:
    """One offer per instance family (provider, instance type, billing), the cheapest per seat of it,
    cheapest families first: the alternatives are distinct mixes, not one mix region by region."""
    bound: dict[int, float] = {}
    for group_fits in fits.values():
        for i, b in group_fits.bound.items():
            if b < bound.get(i, math.inf):
                bound[i] = b
    best: dict[tuple[str, str, str], int] = {}
    rank = table.id_rank
    for i, b in bound.items():
        fam = table.families[i]
        j = best.get(fam)
        if j is None or (b, rank[i]) < (bound[j], rank[j]):
            best[fam] = i
    return sorted(best.values(), key=lambda i: (bound[i], rank[i]))


def _same_price_regions(table: OfferTable, fits: dict[str, GroupFits], used: set[str]) -> dict[str, list[str]]:
    """For each offer in ``used``, the other regions where the same instance family costs the same per seat
    for some group."""
    ids = {table.offers[i].id: i for gf in fits.values() for i in gf.bound if table.offers[i].id in used}
    wanted = {table.families[i] for i in ids.values()}
    members: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for i, fam in enumerate(table.families):
        if fam in wanted:
            members[fam].append(i)
    out: dict[str, list[str]] = {}
    for offer_id, i in ids.items():
        regions = set()
        for group_fits in fits.values():
            b = group_fits.bound.get(i)
            if b is None:
                continue
            for j in members[table.families[i]]:
                other = group_fits.bound.get(j)
                if j != i and other is not None and abs(other - b) < 1e-6:
                    regions.add(table.offers[j].region or "")
        out[offer_id] = sorted(regions - {table.offers[i].region or ""})
    return out


def _option(allocations: list[Allocation], providers: Mapping[str, ProviderRules], ctx: PlanContext) -> PlanOption:
    course = ctx.course
    lines: list[Line] = []
    notes: list[str] = []
    gpus: dict[str, float] = defaultdict(float)
    for a in sorted(allocations, key=lambda a: (a.fit.group.name, a.fit.offer.id)):
        f = a.fit
        lines += [line(rate, a.units, offer=f.offer.id, group=f.group.name) for rate in f.unit_rates]
        lines += [line(rate, a.seats, offer=f.offer.id, group=f.group.name) for rate in f.seat_rates]
        notes += [n for n in f.notes if n not in notes]
        if a.seats < a.units * f.seats_per_unit:
            notes.append(f"{f.offer.id}: {a.units * f.seats_per_unit - a.seats} seat(s) left spare for {f.group.name}")
        age = (course.schedule.start - f.offer.as_of).days
        if age > STALE_DAYS:
            stale = f"{f.offer.id}: price as of {f.offer.as_of}, {age // 365} year(s) before the course: historical"
            if stale not in notes:
                notes.append(stale)
        gpus[f.offer.provider] += a.units * f.offer.gpu_count
    rules = providers
    for provider, count in sorted(gpus.items()):
        quota = rules[provider].default_gpu_quota if provider in rules else None
        if quota is not None and count > quota:
            notes.append(
                f"{num(count)} GPUs on {provider}: more than its default quota of about {quota}; "
                "request a quota increase weeks ahead"
            )
    if course.costs.support:
        lines += _support_lines(lines, rules, ctx)
    return PlanOption(allocations, lines, notes)


def _support_lines(lines: list[Line], providers: Mapping[str, ProviderRules], ctx: PlanContext) -> list[Line]:
    """Provider support plans: the greater of a monthly minimum and a share of the spend."""
    out = []
    first, last = ctx.course.schedule.span_days()
    months = len(billing_months(first, last))
    spend: dict[str, float] = defaultdict(float)
    for ln in lines:
        spend[ln.offer.split(":", 1)[0]] += ln.usd
    for provider, usd in sorted(spend.items()):
        rules = providers.get(provider)
        if rules is None or not (rules.support_min_usd_month or rules.support_pct):
            continue
        floor = rules.support_min_usd_month * months
        share = usd * rules.support_pct / 100
        cost = round(max(floor, share), 2)
        formula = (
            f"max({num(rules.support_min_usd_month)} $/month × {months} month(s), "
            f"{num(rules.support_pct)} % × {money(usd)}) = {money(cost)}"
        )
        out.append(Line(f"{provider}:support", "all", "support plan", 1, cost, formula))
    return out


def _why(
    offer_id: str,
    course: Course,
    fits: dict[str, GroupFits],
    pools: dict[str, list[Fit]],
    best: PlanOption,
    providers: Mapping[str, ProviderRules],
    ctx: PlanContext,
    offers: dict[str, Offer],
    rejected: list[RejectedOffer],
) -> WhyAnswer:
    """Price ``offer_id`` for this course and say why it is not the first option."""
    if offer_id not in offers:
        raise InputError(
            f"unknown offer id '{offer_id}'.{did_you_mean(offer_id, offers)}",
            where="--why",
            fix="give an offer id from 'gpuseat offers list' (after --offer/--region filters)",
        )
    index = list(offers).index(offer_id)
    cannot = [f"cannot seat group '{r.group}': {r.reason}" for r in rejected if r.offer == offer_id and not r.detail]
    if all(fits[g.name].fit(index) is None for g in course.groups):
        return WhyAnswer(offer_id, None, cannot or ["it seats no group of this course"])
    found = _forced(course, fits, pools, index)
    if found is None:
        return WhyAnswer(offer_id, None, [*cannot, "its availability cannot seat the groups it fits"])
    option = _option(found, providers, ctx)
    reasons = list(cannot)
    gap = round(option.total_usd - best.total_usd, 2)
    if gap <= 0:
        reasons.append(f"it is in the first option: {money(option.total_usd)} for the whole course")
        return WhyAnswer(offer_id, option, reasons)
    reasons.append(
        f"with it the course costs {money(option.total_usd)}, {money(gap)} "
        f"({gap / best.total_usd:.0%}) more than option 1 ({money(best.total_usd)})"
    )
    mine = next(a for a in option.allocations if a.fit.offer.id == offer_id)
    top = min(best.allocations, key=lambda a: a.fit.per_seat_bound())
    reasons.append(
        f"per seat when its units are full: {money(mine.fit.per_seat_bound())} on {offer_id} "
        f"({mine.fit.seats_per_unit} seat(s) per unit) vs {money(top.fit.per_seat_bound())} on {top.fit.offer.id}"
    )
    if mine.seats < mine.units * mine.fit.seats_per_unit:
        reasons.append(f"{mine.units * mine.fit.seats_per_unit - mine.seats} of its seats would stay empty")
    offer = mine.fit.offer
    if offer.billing == "month-whole":
        first, last = course.schedule.span_days()
        months = len(billing_months(first, last, anniversary=offer.month_start == "anniversary"))
        days = (last - first).days + 1
        reasons.append(f"it bills whole months: {months} full month(s) for {days} day(s) of use")
    elif not offer.monthly and not course.schedule.always_on and not ctx.stopped_between_sessions(offer):
        reasons.append("it is not stopped between sessions: billed from the first session's start to the last end")
    return WhyAnswer(offer_id, option, reasons)


def _dedupe(rejected: list[RejectedOffer]) -> list[RejectedOffer]:
    return list(dict.fromkeys(rejected))
