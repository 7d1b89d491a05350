"""The planner: the cheapest mix of offers that seats every participant, with every figure explained.

Formulation (solved with scipy's HiGHS MILP): for each participant group g and usable offer o,
integer ``x[g,o]`` units rented and ``z[g,o]`` seats used, minimising
``Σ unit_cost[g,o]·x + seat_cost[g,o]·z`` subject to ``Σ_o z[g,o] = count_g``,
``z[g,o] ≤ seats_per_unit[g,o]·x[g,o]`` and ``Σ_g x[g,o] ≤ available_o``.
Seats per unit come from the carve engine for bare-metal servers, and are 1 for a cloud instance.
Alternatives are the best plan that puts each group on one offer where it can; provider support plans
(a percentage of spend) are added after optimisation.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import cache
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from gpuseat.catalog import GpuModel, find_gpu
from gpuseat.catalog.licences import Licence, licences
from gpuseat.catalog.offers import Offer, ProviderRules
from gpuseat.core.carve import Capacity, server_capacity
from gpuseat.core.cost import (
    Line,
    Rate,
    billed_total,
    disk_rate,
    disk_usd,
    egress_rate,
    egress_usd,
    hourly_usd,
    line,
    money,
    num,
    term_count,
    usage_rate,
)
from gpuseat.core.course import Course, Group
from gpuseat.core.needs import SeatNeed
from gpuseat.errors import InputError

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog


@cache
def _bundled_catalog() -> Catalog:
    """Stop-gap until the planner receives the Catalog: carving takes it as an argument."""
    from gpuseat.catalog.bundle import load_catalog

    return load_catalog()


POOL_PER_GROUP = 64  # cheapest offers per group kept for the MILP (see _pool)
LENET_BASELINE_GPU = "K520"


@dataclass(frozen=True)
class Speed:
    """How long one GPU model takes for 10,000 LeNet iterations, and where that figure comes from."""

    gpu: str
    seconds_per_10k: float
    source: str


@dataclass(frozen=True)
class Fit:
    """How one offer serves one group: seats per unit and what a unit and a seat cost."""

    offer: Offer
    group: Group
    seats_per_unit: int
    mode: str
    profile: str | None
    unit_rates: tuple[Rate, ...]
    seat_rates: tuple[Rate, ...]
    notes: tuple[str, ...] = ()

    @property
    def unit_usd(self) -> float:
        """Cost of one unit (instance or server) for the whole course."""
        return sum(r.usd for r in self.unit_rates)

    @property
    def seat_usd(self) -> float:
        """Per-seat costs on top of the unit (disk, egress, seat licences)."""
        return sum(r.usd for r in self.seat_rates)

    def per_seat_bound(self) -> float:
        """Cost per seat when units are full: the ranking key for pruning."""
        return self.unit_usd / self.seats_per_unit + self.seat_usd


@dataclass
class Assignment:
    """Seats of one group placed on units of one offer."""

    fit: Fit
    units: int
    seats: int


@dataclass
class Option:
    """One way to seat the whole course, with its itemised cost."""

    assignments: list[Assignment]
    lines: list[Line]
    notes: list[str] = field(default_factory=list)

    @property
    def total_usd(self) -> float:
        """Sum of the line items."""
        return round(sum(ln.usd for ln in self.lines), 2)

    @property
    def offer_counts(self) -> dict[str, int]:
        """Units rented per offer id."""
        counts: dict[str, int] = defaultdict(int)
        for a in self.assignments:
            counts[a.fit.offer.id] += a.units
        return dict(counts)

    @property
    def seats(self) -> int:
        """Seats the rented units provide."""
        return sum(a.units * a.fit.seats_per_unit for a in self.assignments)

    @property
    def key(self) -> tuple[tuple[str, str, int], ...]:
        """Identity of the mix, to drop duplicate options."""
        return tuple(sorted((a.fit.group.name, a.fit.offer.id, a.units) for a in self.assignments))


class Rejection(NamedTuple):
    """An offer (or one of its partition profiles) that cannot seat a group, and why (a tuple: cheap to make)."""

    offer: str
    reason: str
    group: str | None = None
    profile: str | None = None


@dataclass
class Plan:
    """Options cheapest first, rejected offers and warnings."""

    course: Course
    options: list[Option]
    rejected: list[Rejection]
    warnings: list[str]
    speeds: dict[str, Speed]


# --------------------------------------------------------------------------------------- fitting


@dataclass
class _Context:
    """What every fit of one course shares, computed once: run lengths, and caches of rates and capacities."""

    course: Course
    period_days: int
    session_runs: list[int]
    usage: dict[str, tuple[Rate, tuple[str, ...]]] = field(default_factory=dict)
    capacity: dict[tuple[str, int, SeatNeed], Capacity] = field(default_factory=dict)
    data: dict[str, list[Rate]] = field(default_factory=dict)

    @classmethod
    def of(cls, course: Course) -> _Context:
        """The context of ``course``."""
        return cls(course, course.schedule.period_days, course.schedule.run_lengths_s())

    def billed_runs(self, offer: Offer) -> tuple[list[int], tuple[str, ...]]:
        """The runs ``offer`` is billed for: the sessions, or the whole period (noting why) when it keeps running."""
        always_on = self.course.schedule.always_on
        if always_on or (offer.stoppable and self.course.costs.stop_outside_sessions):
            return self.session_runs, ()
        why = "cannot be stopped" if not offer.stoppable else "is kept running (stop_outside_sessions = false)"
        return [self.period_days * 86400], (f"{offer.id} {why}: billed 24/7 for {self.period_days} d",)

    def usage_rate(self, offer: Offer) -> tuple[Rate, tuple[str, ...]]:
        """Rent for one unit of ``offer`` over the course, and notes on how it is billed (cached per offer)."""
        cached = self.usage.get(offer.id)
        if cached is None:
            runs, notes = self.billed_runs(offer)
            per = "seat" if offer.kind == "cloud" else "server"
            cached = self.usage[offer.id] = (usage_rate(offer, runs, self.period_days, per=per), notes)
        return cached

    def data_rates(self, offer: Offer) -> list[Rate]:
        """Disk kept for the whole course and egress, per seat (cached per offer)."""
        cached = self.data.get(offer.id)
        if cached is None:
            costs, cached = self.course.costs, []
            if costs.storage_gb_per_seat and offer.disk_usd_per_gb_month:
                cached.append(disk_rate(offer, costs.storage_gb_per_seat, self.period_days))
            if costs.egress_gb_per_seat and offer.egress_usd_per_gb:
                cached.append(egress_rate(offer, costs.egress_gb_per_seat))
            self.data[offer.id] = cached
        return cached

    def server_capacity(self, gpu: GpuModel, boards: int, need: SeatNeed) -> Capacity:
        """The carve engine's answer for one server, cached per (GPU, boards, need)."""
        key = (gpu.id, boards, need)
        if key not in self.capacity:
            self.capacity[key] = server_capacity(gpu, boards, need, _bundled_catalog())
        return self.capacity[key]


class _Check(NamedTuple):
    """One thing a cloud instance must have to seat a participant: ``have`` (an offer attribute) ≥ ``least``.

    :func:`fit_offer` and the vectorised :class:`_Table` both read this one table, so they cannot disagree.
    """

    have: str
    least: Callable[[SeatNeed], float]
    why: str  # str.format template over have, least and gpu


_CLOUD_CHECKS = (
    _Check("memory_per_chip_gb", lambda n: n.min_gpu_memory_gb, "{have:g} GB GPU memory < {least:g} GB needed"),
    # gpu_count is always > 0, so a least of 0 lets any slice through
    _Check("gpu_count", lambda n: 1 if n.isolation == "dedicated" else 0,
           "{have:g} of a {gpu} is a shared slice, not a dedicated GPU"),
    _Check("vcpus", lambda n: n.min_vcpus, "{have:g} vCPUs < {least:g} needed"),
    _Check("ram_gb", lambda n: n.min_ram_gb, "{have:g} GB RAM < {least:g} GB needed"),
)


def _cloud_seats(offer: Offer, gpu: GpuModel, need: SeatNeed) -> tuple[int, str | None]:
    """Seats one cloud instance gives (1 or 0) and the reason when 0."""
    for check in _CLOUD_CHECKS:
        have, least = getattr(offer, check.have), check.least(need)
        if have < least:
            return 0, check.why.format(have=have, least=least, gpu=gpu.id)
    return 1, None


def _licence_rates(lic: Licence, period_days: int, chips: int) -> tuple[list[Rate], list[Rate]]:
    terms = term_count(period_days, lic.term_days)
    flag = "" if lic.verified else ", unverified list price"
    formula = f"{num(lic.usd)} $/{lic.per}-term × {terms} term{'s' if terms != 1 else ''} ({lic.term_days} d{flag})"
    if lic.per == "gpu":
        return [Rate(f"licence {lic.id}", lic.usd * terms * chips, f"{formula} × {chips} GPUs", "server")], []
    return [], [Rate(f"licence {lic.id}", lic.usd * terms, formula, "seat")]


def fit_offer(offer: Offer, group: Group, need: SeatNeed, ctx: _Context) -> tuple[Fit | None, list[Rejection]]:
    """How ``offer`` serves ``group`` (whose need is ``need``): a :class:`Fit`, or None with the reasons."""
    gpu = find_gpu(offer.gpu)
    assert gpu is not None  # Offer validates its GPU
    period = ctx.period_days
    costs = ctx.course.costs
    rejections: list[Rejection] = []
    unit_rates: list[Rate] = []
    seat_rates: list[Rate] = []
    mode, profile = "instance", None
    if offer.kind == "cloud":
        seats, reason = _cloud_seats(offer, gpu, need)
        if reason:
            return None, [Rejection(offer.id, reason, group.name)]
        usage, billing_notes = ctx.usage_rate(offer)
        notes = list(billing_notes)
        unit_rates.append(usage)
    else:
        chips = offer.gpu_count
        if not float(chips / gpu.chips_per_board).is_integer():
            why = f"{chips:g} chips is not a whole number of {gpu.id} boards ({gpu.chips_per_board} chips each)"
            return None, [Rejection(offer.id, why, group.name)]
        capacity = ctx.server_capacity(gpu, int(chips // gpu.chips_per_board), need)
        for rej_mode, rej_profile, why in capacity.rejected:
            label = rej_profile or rej_mode
            rejections.append(Rejection(offer.id, f"{label}: {why}", group.name, rej_profile))
        seats = capacity.seats
        notes = []
        for have, least, what in ((offer.vcpus, group.min_vcpus, "vCPUs"), (offer.ram_gb, group.min_ram_gb, "GB RAM")):
            limit = math.floor(have / least) if least else seats
            if limit < seats:
                notes.append(f"{offer.id}: {num(have)} {what} allow only {limit} seats of the {seats} the GPUs give")
                seats = limit
        if seats <= 0:
            reasons = "; ".join(f"{p or m}: {w}" for m, p, w in capacity.rejected[:3]) or "no seat fits"
            return None, [*rejections, Rejection(offer.id, f"no seat fits: {reasons}", group.name)]
        mode, profile = capacity.mode or "passthrough", capacity.profile
        usage, billing_notes = ctx.usage_rate(offer)
        notes = [*billing_notes, *notes]
        unit_rates.append(usage)
        share = f"{offer.vcpus / seats:g} vCPUs and {offer.ram_gb / seats:.3g} GB RAM per seat"
        notes.append(f"{offer.id}: {seats} seats per server ({mode}{' ' + profile if profile else ''}), {share}")
        if costs.hypervisor_licence_usd_per_server:
            unit_rates.append(
                Rate("hypervisor licence", costs.hypervisor_licence_usd_per_server,
                     f"{num(costs.hypervisor_licence_usd_per_server)} $/server", "server")
            )
        if capacity.licence:
            lic = licences().get(capacity.licence)
            if lic is None:
                raise InputError(f"licence '{capacity.licence}' has no price", where="licences.toml")
            per_unit, per_seat = _licence_rates(lic, period, int(chips))
            unit_rates += per_unit
            seat_rates += per_seat
    if offer.setup_fee_usd:
        unit_rates.append(Rate("setup fee", offer.setup_fee_usd, f"{num(offer.setup_fee_usd)} $ setup", "server"))
    seat_rates += ctx.data_rates(offer)
    fit = Fit(offer, group, seats, mode, profile, tuple(unit_rates), tuple(seat_rates), tuple(notes))
    return fit, rejections


def _vectorised(offer: Offer) -> bool:
    """Whether :class:`_Table` checks and prices ``offer`` in bulk: cloud instances billed by the hour."""
    return offer.kind == "cloud" and not offer.monthly


@dataclass
class _Table:
    """The plan's offers as numpy columns, built once per plan.

    A large catalog is nearly all hourly cloud instances, and one of them costs the same per seat
    whatever the group, so they are checked and ranked for every group at once; :func:`fit_offer`
    makes a :class:`Fit` only for the few the MILP pool and the alternatives use. Other offers
    (bare-metal servers, monthly instances) go through :func:`fit_offer` right away.
    """

    offers: list[Offer]
    vectorised: np.ndarray  # bool per offer
    have: list[np.ndarray]  # per _CLOUD_CHECKS entry, each vectorised offer's value
    bound: np.ndarray  # per-seat bound of each vectorised offer
    id_rank: np.ndarray  # position of each offer's id in sorted order: the tie-break when ranking

    @classmethod
    def of(cls, offers: list[Offer], ctx: _Context) -> _Table:
        """Columns of ``offers``, priced for the course of ``ctx``."""
        n = len(offers)
        rows = [i for i, o in enumerate(offers) if _vectorised(o)]
        bulk = [offers[i] for i in rows]
        vectorised = np.zeros(n, dtype=bool)
        vectorised[rows] = True

        def column(values: Iterable[float]) -> np.ndarray:
            out = np.zeros(n)
            out[rows] = np.fromiter(values, dtype=float, count=len(bulk))
            return out

        totals: dict[tuple[str, int, bool], int] = {}  # billed seconds depend on nothing else

        def billed(offer: Offer) -> int:
            key = (offer.billing, offer.min_charge_s, offer.stoppable)
            if key not in totals:
                totals[key] = billed_total(ctx.billed_runs(offer)[0], offer)
            return totals[key]

        costs, period = ctx.course.costs, ctx.period_days
        unit = hourly_usd(column(o.price_usd for o in bulk), column(billed(o) for o in bulk))
        unit = unit + column(o.setup_fee_usd for o in bulk)
        # Fit.per_seat_bound with one seat per instance; an absent disk or egress rate is a 0 here
        seat = (disk_usd(column(o.disk_usd_per_gb_month for o in bulk), costs.storage_gb_per_seat, period)
                + egress_usd(column(o.egress_usd_per_gb for o in bulk), costs.egress_gb_per_seat))
        have = [column(getattr(o, check.have) for o in bulk) for check in _CLOUD_CHECKS]
        id_rank = np.empty(n, dtype=np.int64)
        id_rank[np.argsort(np.array([o.id for o in offers]), kind="stable")] = np.arange(n)
        return cls(offers, vectorised, have, unit + seat, id_rank)

    def fits(self, group: Group, ctx: _Context) -> tuple[_GroupFits, list[Rejection]]:
        """Which offers can seat ``group`` at what bound, and why the others cannot (in offer order)."""
        need = group.need
        why: dict[int, list[Rejection]] = {}
        usable = self.vectorised.copy()
        for check, have in zip(_CLOUD_CHECKS, self.have, strict=True):
            least = check.least(need)
            short = usable & (have < least)
            reasons: dict[tuple[float, str], str] = {}  # few distinct values: format each once
            for i in np.flatnonzero(short).tolist():
                offer = self.offers[i]
                key = (have[i], offer.gpu)
                if key not in reasons:
                    gpu = find_gpu(offer.gpu)
                    assert gpu is not None  # Offer validates its GPU
                    reasons[key] = check.why.format(have=getattr(offer, check.have), least=least, gpu=gpu.id)
                why[i] = [Rejection(offer.id, reasons[key], group.name)]
            usable &= ~short
        bound = np.where(usable, self.bound, np.inf)
        made: dict[int, Fit] = {}
        for i in np.flatnonzero(~self.vectorised).tolist():
            fit, rejections = fit_offer(self.offers[i], group, need, ctx)
            if rejections:
                why[i] = rejections
            if fit is not None:
                made[i], bound[i], usable[i] = fit, fit.per_seat_bound(), True
        rejected = [r for i in sorted(why) for r in why[i]]
        return _GroupFits(group, need, self, ctx, usable, bound, made), rejected


@dataclass
class _GroupFits:
    """How the plan's offers serve one group: usable or not and the per-seat bound of each, Fits on demand."""

    group: Group
    need: SeatNeed
    table: _Table
    ctx: _Context
    usable: np.ndarray  # bool per offer
    bound: np.ndarray  # Fit.per_seat_bound per usable offer
    made: dict[int, Fit]

    def fit(self, i: int) -> Fit | None:
        """The fit of offer ``i`` (None when it cannot seat the group); made once, when first asked for."""
        if not self.usable[i]:
            return None
        if i not in self.made:
            # its rejections, if any, were listed by _Table.fits
            fit, _ = fit_offer(self.table.offers[i], self.group, self.need, self.ctx)
            assert fit is not None  # _Table.fits applies the same checks
            self.made[i] = fit
        return self.made[i]

    def ranked(self) -> Iterator[Fit]:
        """Usable fits, cheapest per full seat first, ties by offer id."""
        rows = np.flatnonzero(self.usable)
        order = rows[np.lexsort((self.table.id_rank[rows], self.bound[rows]))]
        for i in order.tolist():
            fit = self.fit(i)
            assert fit is not None
            yield fit


# ------------------------------------------------------------------------------------- optimising


def _pool(ranked: Iterable[Fit], group: Group) -> list[Fit]:
    """The cheapest fits per seat (``ranked`` lists them cheapest first), plus more until their availability
    can seat the whole group.

    Keeping ``POOL_PER_GROUP`` candidates keeps the MILP small on 20,000-offer catalogs; an offer
    ranked lower per full seat can only win on a remainder, which the kept smaller offers cover.
    """
    pool: list[Fit] = []
    capacity = 0.0
    for fit in ranked:
        if len(pool) >= POOL_PER_GROUP and capacity >= group.count:
            break
        pool.append(fit)
        avail = fit.offer.available
        capacity += math.inf if avail is None else avail * fit.seats_per_unit
    return pool


def _solve(course: Course, allowed: dict[str, list[Fit]], must_use: str | None = None) -> list[Assignment] | None:
    """The MILP over the allowed fits of every group; None when infeasible."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import lil_matrix

    pairs = [fit for g in course.groups for fit in allowed[g.name]]
    n = len(pairs)
    if n == 0:
        return None
    # variables: x_0..x_{n-1} (units), z_0..z_{n-1} (seats)
    cost = np.array([f.unit_usd for f in pairs] + [f.seat_usd for f in pairs])
    offers = sorted({f.offer.id for f in pairs})
    limited = [o for o in offers if next(f for f in pairs if f.offer.id == o).offer.available is not None]
    rows = len(course.groups) + n + len(limited) + (1 if must_use else 0)
    a = lil_matrix((rows, 2 * n))
    lo, hi = np.zeros(rows), np.zeros(rows)
    r = 0
    for g in course.groups:
        for i, f in enumerate(pairs):
            if f.group.name == g.name:
                a[r, n + i] = 1
        lo[r] = hi[r] = g.count
        r += 1
    for i, f in enumerate(pairs):
        a[r, n + i], a[r, i] = 1, -f.seats_per_unit
        lo[r], hi[r] = -np.inf, 0
        r += 1
    for o in limited:
        for i, f in enumerate(pairs):
            if f.offer.id == o:
                a[r, i] = 1
                avail = f.offer.available
        lo[r], hi[r] = 0, avail
        r += 1
    if must_use:
        for i, f in enumerate(pairs):
            if f.offer.id == must_use:
                a[r, i] = 1
        lo[r], hi[r] = 1, np.inf
    upper = [math.ceil(f.group.count / f.seats_per_unit) for f in pairs] + [f.group.count for f in pairs]
    res = milp(
        cost,
        constraints=LinearConstraint(a.tocsr(), lo, hi),
        integrality=np.ones(2 * n),
        bounds=Bounds(np.zeros(2 * n), np.array(upper, dtype=float)),
    )
    if res.x is None:
        return None
    x = np.round(res.x).astype(int)
    return [Assignment(f, int(x[i]), int(x[n + i])) for i, f in enumerate(pairs) if x[i] > 0]


def _option(assignments: list[Assignment], providers: dict[str, ProviderRules], course: Course) -> Option:
    lines: list[Line] = []
    notes: list[str] = []
    for a in sorted(assignments, key=lambda a: (a.fit.group.name, a.fit.offer.id)):
        f = a.fit
        lines += [line(rate, a.units, offer=f.offer.id, group=f.group.name) for rate in f.unit_rates]
        lines += [line(rate, a.seats, offer=f.offer.id, group=f.group.name) for rate in f.seat_rates]
        notes += [n for n in f.notes if n not in notes]
        if a.seats < a.units * f.seats_per_unit:
            notes.append(f"{f.offer.id}: {a.units * f.seats_per_unit - a.seats} seat(s) left spare for {f.group.name}")
    if course.costs.support:
        lines += _support_lines(lines, providers, course)
    return Option(assignments, lines, notes)


def _support_lines(lines: list[Line], providers: dict[str, ProviderRules], course: Course) -> list[Line]:
    """Provider support plans: the greater of a monthly minimum and a share of the spend."""
    out = []
    months = max(1, math.ceil(course.schedule.period_days / 30))
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
        formula = (f"max({num(rules.support_min_usd_month)} $/month × {months} month(s), "
                   f"{num(rules.support_pct)} % × {money(usd)}) = {money(cost)}")
        out.append(Line(f"{provider}:support", "all", "support plan", 1, cost, formula))
    return out


def speeds_from(reference: list[Speed], recorded: list[Speed]) -> dict[str, Speed]:
    """Per GPU model, the recorded result if any (latest wins), else the shipped reference."""
    out = {s.gpu: s for s in reference}
    out.update({s.gpu: s for s in recorded})
    return out


def select_offers(offers: list[Offer], patterns: tuple[str, ...] | list[str]) -> list[Offer]:
    """Offers whose id matches any glob pattern (all offers when no pattern is given)."""
    if not patterns:
        return list(offers)
    return [o for o in offers if any(fnmatchcase(o.id, p) for p in patterns)]


def plan(
    course: Course,
    offers: list[Offer],
    *,
    providers: dict[str, ProviderRules],
    speeds: dict[str, Speed] | None = None,
    alternatives: int = 10,
    where: str = "course",
) -> Plan:
    """Price the course on ``offers``: the cheapest mix first, then ranked alternatives.

    ``where`` names the course in error messages (its file path, for the CLI).
    """
    rejected: list[Rejection] = []
    fits: dict[str, _GroupFits] = {}
    warnings: list[str] = []
    ctx = _Context.of(course)
    table = _Table.of(offers, ctx)
    for group in course.groups:
        fits[group.name], why = table.fits(group, ctx)
        rejected += why
        if not fits[group.name].usable.any():
            need = group.need
            raise InputError(
                f"no offer can seat group '{group.name}' (needs ≥ {num(need.min_gpu_memory_gb)} GB GPU memory, "
                f"{'CUDA' if need.cuda else 'no CUDA'}, {need.guest_os}, {need.isolation}); "
                f"{len(offers)} offers were considered",
                where=f"{where}: group '{group.name}'",
                fix="lower the needs, or add offers (--offers FILE) that meet them; see 'rejected' in --format json",
            )
    pools = {g.name: _pool(fits[g.name].ranked(), g) for g in course.groups}
    best = _solve(course, pools)
    if best is None:
        raise InputError(
            "the offers' availability limits cannot seat every participant",
            where=where,
            fix="raise 'available' on some offers or add offers",
        )
    options = [_option(best, providers, course)]
    seen = {options[0].key}
    for i in _alternative_offers(list(fits.values()), 4 * alternatives):
        if len(options) > alternatives:
            break
        allowed = {g.name: [f] if (f := fits[g.name].fit(i)) else pools[g.name] for g in course.groups}
        alt = _solve(course, allowed) or _solve(course, pools, must_use=offers[i].id)
        if alt is None:
            continue
        option = _option(alt, providers, course)
        if option.key not in seen:
            seen.add(option.key)
            options.append(option)
    options.sort(key=lambda o: o.total_usd)
    return Plan(course, options, _dedupe(rejected), warnings, speeds or {})


def _alternative_offers(fits: list[_GroupFits], count: int) -> list[int]:
    """The ``count`` offers to try each on its own: cheapest per seat in the last group they can seat,
    ties in the order the groups first list them."""
    if not count:
        return []
    usable = np.zeros_like(fits[0].usable)
    bound = np.full(len(usable), np.inf)
    first = np.zeros(len(usable), dtype=np.int64)
    for g, group_fits in reversed(list(enumerate(fits))):
        bound = np.where(usable | ~group_fits.usable, bound, group_fits.bound)
        first[group_fits.usable] = g
        usable |= group_fits.usable
    rows = np.flatnonzero(usable)
    order = rows[np.lexsort((rows, first[rows], bound[rows]))]
    return order[:count].tolist()


def _dedupe(rejected: list[Rejection]) -> list[Rejection]:
    seen: set[tuple[str, str]] = set()
    out = []
    for r in rejected:
        if (r.offer, r.reason) not in seen:
            seen.add((r.offer, r.reason))
            out.append(r)
    return out


# ------------------------------------------------------------------------------- performance view


def performance(option: Option, course: Course, speeds: dict[str, Speed]) -> list[dict[str, object]]:
    """Cost per seat-hour, per LeNet run, and time against the K520 baseline, per offer in the option."""
    hours = course.schedule.in_use_hours()
    baseline = speeds.get(LENET_BASELINE_GPU)
    out = []
    for offer_id in option.offer_counts:
        assigned = [a for a in option.assignments if a.fit.offer.id == offer_id]
        gpu = assigned[0].fit.offer.gpu
        seats = sum(a.seats for a in assigned)
        usd = sum(ln.usd for ln in option.lines if ln.offer == offer_id)
        per_seat_hour = usd / (seats * hours)
        row: dict[str, object] = {"offer": offer_id, "gpu": gpu, "usd_per_seat_hour": round(per_seat_hour, 4)}
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
