"""Fitting: how one offer serves one group of participants, and what a unit and a seat of it cost.

A :class:`Fit` says how many seats one unit (a cloud instance or a bare-metal server) gives a group and
lists its costs as :class:`~gpuseat.core.cost.Rate` values. Cloud instances give one seat when they
meet the need; servers give what the carver finds (:func:`gpuseat.core.capacity.server_capacity`),
limited by their CPUs and RAM. Everything the fitting reads comes in through :class:`PlanContext`:
the course, the catalog value and the course's intervals.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, NamedTuple

from gpuseat.catalog import GpuModel
from gpuseat.catalog.licences import Licence
from gpuseat.catalog.offers import Offer
from gpuseat.catalog.rules import Rule
from gpuseat.core.capacity import Capacity, ChipOption, NotChosen, chip_options, server_capacity
from gpuseat.core.cost import (
    Rate,
    billed_total,
    disk_rate,
    egress_rate,
    egress_usd,
    fee_rate,
    hourly_usd,
    num,
    seconds,
    sustained_use_rate,
    term_count,
    usage_rate,
    windows_rate,
)
from gpuseat.core.course import Course, Group
from gpuseat.core.intervals import Interval
from gpuseat.core.needs import SeatNeed
from gpuseat.errors import InputError

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog


class RejectedOffer(NamedTuple):
    """An offer that cannot seat a group, and why; ``detail`` marks a partition profile or mode the
    carver passed over on an offer that does seat the group (shown with ``--explain --verbose``)."""

    offer: str
    reason: str
    group: str | None = None
    profile: str | None = None
    detail: bool = False
    chosen: str | None = None  # for a detail: the layout it was passed over for (``mig 1g.18gb``)

    def to_dict(self) -> dict[str, object]:
        """JSON shape."""
        return self._asdict()


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
    passed_over: tuple[RejectedOffer, ...] = ()  # a server's other modes/profiles, each with why not this one

    @cached_property
    def unit_usd(self) -> float:
        """Cost of one unit (instance or server) for the whole course."""
        return sum(r.usd for r in self.unit_rates)

    @cached_property
    def seat_usd(self) -> float:
        """Per-seat costs on top of the unit (disk, egress, seat licences)."""
        return sum(r.usd for r in self.seat_rates)

    def per_seat_bound(self) -> float:
        """Cost per seat when units are full: the ranking key."""
        return self.unit_usd / self.seats_per_unit + self.seat_usd


@dataclass
class PlanContext:
    """What every fit of one course shares, computed once: intervals, the catalog, and caches."""

    course: Course
    catalog: Catalog
    runs: list[Interval]
    span: Interval
    usage: dict[str, tuple[Rate, tuple[str, ...]]] = field(default_factory=dict)
    capacity: dict[tuple[str, int, SeatNeed], Capacity] = field(default_factory=dict)
    variants: dict[tuple[str, int, SeatNeed], list[tuple[int, str, str | None, str | None]]] = field(
        default_factory=dict
    )
    data: dict[str, tuple[list[Rate], tuple[str, ...]]] = field(default_factory=dict)
    _billed: dict[tuple[str, int, str, bool], int] = field(default_factory=dict)
    _disk: dict[tuple[object, ...], float] = field(default_factory=dict)
    _needs: dict[str, SeatNeed] = field(default_factory=dict)
    _gpus: dict[str, GpuModel | None] = field(default_factory=dict)
    _effective: dict[str, Offer] = field(default_factory=dict)
    _fees: dict[tuple[tuple[str, ...], bool], list[Rate]] = field(default_factory=dict)
    _rules: dict[tuple[tuple[str, ...], str | None], list[Rule]] = field(default_factory=dict)
    _chips: dict[tuple[str, int, SeatNeed], tuple[list[ChipOption], list[NotChosen]]] = field(default_factory=dict)

    @classmethod
    def of(cls, course: Course, catalog: Catalog) -> PlanContext:
        """The context of ``course`` priced with ``catalog``."""
        return cls(course, catalog, course.schedule.intervals(), course.schedule.span())

    @cached_property
    def span_days(self) -> int:
        """Calendar days the span touches (licence terms cover these)."""
        first, last = self.course.schedule.span_days()
        return (last - first).days + 1

    def rules(self, offer: Offer, kind: str | None = None) -> list[Rule]:
        """The offer's billing rules in force for this course (of one ``kind`` if given), cached by rule ids."""
        if not offer.rules:
            return []
        key = (offer.rules, kind)
        cached = self._rules.get(key)
        if cached is None:
            day = self.course.schedule.start
            found = self.catalog.offer_rules(offer)
            cached = self._rules[key] = [r for r in found if r.applies(day) and (kind is None or r.kind == kind)]
        return cached

    def effective(self, offer: Offer) -> Offer:
        """``offer`` with the billing of a dated ``billing`` rule in force for this course (OVH's monthly
        proration from 2026-04-01); the offer itself when none changes it."""
        cached = self._effective.get(offer.id)
        if cached is None:
            cached = offer
            for rule in self.rules(offer, "billing"):
                if rule.since is not None:
                    update = {
                        "billing": rule.get("billing"),
                        "min_charge_s": rule.get("min_charge_s", 0),
                        "rounding": rule.get("rounding", "up"),
                    }
                    if any(getattr(offer, k) != v for k, v in update.items()):
                        cached = offer.model_copy(update=update)
            self._effective[offer.id] = cached
        return cached

    def fast(self, offer: Offer) -> bool:
        """Whether the table prices ``offer`` without a :class:`Fit` (see :func:`fast_path`): not when a
        sustained-use discount changes its rent (a dated billing rule is applied by :meth:`fast_bound`)."""
        return fast_path(self.effective(offer)) and not self.rules(offer, "sustained-use")

    def fee_rates(self, offer: Offer) -> list[Rate]:
        """Per-hour fees (public IPv4) for one seat of a cloud offer, over the hours it runs (cached by
        rule ids and whether the offer is stopped between sessions)."""
        if not offer.rules:
            return []
        key = (offer.rules, self.stopped_between_sessions(offer))
        cached = self._fees.get(key)
        if cached is None:
            fees = self.rules(offer, "hourly-fee")
            running = sum(seconds(self.billed_runs(offer)[0])) if fees else 0
            cached = self._fees[key] = [fee_rate(rule, running) for rule in fees]
        return cached

    def gpu(self, name: str) -> GpuModel | None:
        """The catalog's GPU model called ``name`` (looked up once per name)."""
        if name not in self._gpus:
            self._gpus[name] = self.catalog.find_gpu(name)
        return self._gpus[name]

    def server_variants(
        self, gpu: GpuModel, boards: int, need: SeatNeed
    ) -> list[tuple[int, str, str | None, str | None]]:
        """Per licence a server can run under (none included), the layout with the most seats:
        (seats, mode, profile, licence), cached per (GPU, boards, need)."""
        key = (gpu.id, boards, need)
        if key not in self.variants:
            options, _ = self.chip_options(gpu, need)
            chips = boards * gpu.chips_per_board
            best: dict[str | None, tuple[int, str, str | None, str | None]] = {}
            for o in sorted(options, key=lambda o: (-o.per_chip, o.rank)):
                best.setdefault(o.licence, (o.per_chip * chips, o.mode, o.profile, o.licence))
            self.variants[key] = list(best.values())
        return self.variants[key]

    def chip_options(self, gpu: GpuModel, need: SeatNeed) -> tuple[list[ChipOption], list[NotChosen]]:
        """The carver's viable (mode, profile) options per chip and why the others are not, cached."""
        key = (gpu.id, 0, need)
        cached = self._chips.get(key)
        if cached is None:
            cached = self._chips[key] = chip_options(gpu, need, self.catalog.partitions)
        return cached

    def need(self, group: Group) -> SeatNeed:
        """The seat need of ``group`` (made once per group)."""
        cached = self._needs.get(group.name)
        if cached is None:
            cached = self._needs[group.name] = group.need
        return cached

    def stopped_between_sessions(self, offer: Offer) -> bool:
        """Whether ``offer`` is billed only while seats are in use."""
        return offer.stoppable and self.course.costs.stop_outside_sessions

    def billed_runs(self, offer: Offer) -> tuple[list[Interval], tuple[str, ...]]:
        """The intervals ``offer`` is billed for: the sessions, or the span (noting why) when it keeps running."""
        if self.course.schedule.always_on or self.stopped_between_sessions(offer):
            return self.runs, ()
        why = "cannot be stopped" if not offer.stoppable else "is kept running (stop_outside_sessions = false)"
        hours = (self.span[1] - self.span[0]).total_seconds() / 3600
        return [self.span], (
            f"{offer.id} {why}: billed from the first session's start to the last one's end ({num(round(hours, 2))} h)",
        )

    def billed_seconds(self, offer: Offer) -> int:
        """Seconds an hourly offer is billed for this course."""
        return billed_total(seconds(self.billed_runs(offer)[0]), offer)

    def usage_rate(self, offer: Offer) -> tuple[Rate, tuple[str, ...]]:
        """Rent for one unit of ``offer`` over the course, and notes on how it is billed (cached per offer)."""
        cached = self.usage.get(offer.id)
        if cached is None:
            offer = self.effective(offer)
            runs, notes = self.billed_runs(offer)
            per = "seat" if offer.kind == "cloud" else "server"
            discount = self.rules(offer, "sustained-use")
            if discount and not offer.monthly:
                rate = sustained_use_rate(offer, runs, discount[0], per=per)
            else:
                rate = usage_rate(offer, runs, per=per)
            cached = self.usage[offer.id] = (rate, notes)
        return cached

    def data_rates(self, offer: Offer) -> tuple[list[Rate], tuple[str, ...]]:
        """Disk kept for the whole span and egress, per seat, and a note when the disk has no known price."""
        cached = self.data.get(offer.id)
        if cached is None:
            costs, rates = self.course.costs, []
            notes: tuple[str, ...] = ()
            if costs.storage_gb_per_seat:
                if offer.disk_usd_per_gb_month is None:
                    notes = (f"storage not priced for {offer.id}: its disk price is unknown",)
                elif offer.disk_usd_per_gb_month or offer.disk_stopped_usd_per_gb_month:
                    running = self.runs if self.stopped_between_sessions(offer) else [self.span]
                    rates.append(disk_rate(offer, costs.storage_gb_per_seat, running, self.span))
            if costs.egress_gb_per_seat and offer.egress_usd_per_gb:
                rates.append(egress_rate(offer, costs.egress_gb_per_seat))
            cached = self.data[offer.id] = (rates, notes)
        return cached

    def fast_bound(self, offer: Offer, windows: bool) -> float:
        """Cost per seat of an hourly cloud instance, computed without a :class:`Fit` but with the same
        functions in the same order, so it equals :meth:`Fit.per_seat_bound` exactly. ``offer`` is the
        :meth:`effective` offer (the table keeps them)."""
        stopped = self.stopped_between_sessions(offer)
        key = (offer.billing, offer.min_charge_s, offer.rounding, stopped)
        billed = self._billed.get(key)
        if billed is None:
            billed = self._billed[key] = self.billed_seconds(offer)
        unit = 0.0 + hourly_usd(offer.price_usd, billed)
        if offer.setup_fee_usd:
            unit += offer.setup_fee_usd
        seat = 0.0
        if windows and offer.windows_usd_per_vcpu_h:
            seat += hourly_usd(offer.windows_usd_per_vcpu_h * offer.vcpus, billed)
        if offer.rules:
            for rate in self.fee_rates(offer):
                seat += rate.usd
        costs = self.course.costs
        if (
            costs.storage_gb_per_seat
            and offer.disk_usd_per_gb_month is not None
            and (offer.disk_usd_per_gb_month or offer.disk_stopped_usd_per_gb_month)
        ):
            dkey = (
                offer.disk_usd_per_gb_month,
                offer.disk_stopped_usd_per_gb_month,
                offer.disk_month,
                offer.disk_tiers_gb,
                stopped,
            )
            disk = self._disk.get(dkey)
            if disk is None:
                disk = self._disk[dkey] = self.data_rates(offer)[0][0].usd
            seat += disk
        if costs.egress_gb_per_seat and offer.egress_usd_per_gb:
            seat += egress_usd(offer.egress_usd_per_gb, costs.egress_gb_per_seat)
        return unit / 1 + seat

    def server_capacity(self, gpu: GpuModel, boards: int, need: SeatNeed) -> Capacity:
        """The carver's answer for one server, cached per (GPU, boards, need)."""
        key = (gpu.id, boards, need)
        if key not in self.capacity:
            self.capacity[key] = server_capacity(gpu, boards, need, self.catalog)
        return self.capacity[key]


class CloudCheck(NamedTuple):
    """One thing a cloud instance must have to seat a participant: ``have`` (an offer attribute) ≥ ``least``."""

    have: str
    least: Callable[[SeatNeed], float]
    why: str  # str.format template over have, least and gpu


CLOUD_CHECKS = (
    CloudCheck("memory_per_chip_gb", lambda n: n.min_gpu_memory_gb, "{have:g} GB GPU memory < {least:g} GB needed"),
    # gpu_count is always > 0, so a least of 0 lets any slice through
    CloudCheck(
        "gpu_count",
        lambda n: 1 if n.isolation == "dedicated" else 0,
        "{have:g} of a {gpu} is a shared slice, not a dedicated GPU",
    ),
    CloudCheck("vcpus", lambda n: n.min_vcpus, "{have:g} vCPUs < {least:g} needed"),
    CloudCheck("ram_gb", lambda n: n.min_ram_gb, "{have:g} GB RAM < {least:g} GB needed"),
)


def guest_os_reason(offer: Offer, need: SeatNeed) -> str | None:
    """Why ``offer`` cannot run the guest OS ``need`` asks for (None when it can)."""
    if need.guest_os in offer.guest_os:
        return None
    return f"runs {' and '.join(sorted(offer.guest_os)).title()} guests only, not {need.guest_os.title()}"


def cloud_reason(offer: Offer, need: SeatNeed) -> str | None:
    """Why a cloud instance cannot seat ``need`` (None when it can)."""
    reason = guest_os_reason(offer, need)
    if reason:
        return reason
    for check in CLOUD_CHECKS:
        have, least = getattr(offer, check.have), check.least(need)
        if have < least:
            return check.why.format(have=have, least=least, gpu=offer.gpu)
    return None


def _licence_rates(lic: Licence, days: int, chips: int) -> tuple[list[Rate], list[Rate]]:
    terms = term_count(days, lic.term_days)
    flag = "" if lic.verified else ", unverified list price"
    formula = f"{num(lic.usd)} $/{lic.per}-term × {terms} term{'s' if terms != 1 else ''} ({lic.term_days} d{flag})"
    if lic.per == "gpu":
        return [Rate(f"licence {lic.id}", lic.usd * terms * chips, f"{formula} × {chips} GPUs", "server")], []
    return [], [Rate(f"licence {lic.id}", lic.usd * terms, formula, "seat")]


def fit_offer(offer: Offer, group: Group, ctx: PlanContext) -> tuple[Fit | None, list[RejectedOffer]]:
    """How ``offer`` serves ``group``: its :class:`Fit` with the most seats, or None with the reasons."""
    fits, rejections = fit_variants(offer, group, ctx)
    return (fits[0] if fits else None), rejections


def fit_variants(offer: Offer, group: Group, ctx: PlanContext) -> tuple[list[Fit], list[RejectedOffer]]:
    """Every way ``offer`` can serve ``group`` that may be part of a cheapest mix, most seats first.

    A cloud instance has one. A server has one per licence it can run under (none, a vGPU edition, …),
    each with the most seats the carver finds under that licence: for two participants, two passthrough
    seats without a licence can beat twelve vGPU seats that need one. Within one licence more seats
    always cost no more, so the other layouts are never needed.
    """
    need = ctx.need(group)
    if offer.kind == "cloud":
        reason = cloud_reason(offer, need)
        if reason:
            return [], [RejectedOffer(offer.id, reason, group.name)]
        usage, billing_notes = ctx.usage_rate(offer)
        notes = list(billing_notes)
        seat_rates: list[Rate] = []
        if need.guest_os == "windows":
            if offer.windows_usd_per_vcpu_h is None:
                notes.append(f"Windows licence not priced for {offer.id}")
            elif offer.windows_usd_per_vcpu_h:
                seat_rates.append(windows_rate(ctx.effective(offer), ctx.billed_runs(offer)[0]))
        seat_rates += ctx.fee_rates(offer)
        instance = Fit(offer, group, 1, "instance", None, (usage,), tuple(seat_rates), tuple(notes))
        return [_finish(instance, ctx)], []
    reason = guest_os_reason(offer, need)
    if reason:
        return [], [RejectedOffer(offer.id, reason, group.name)]
    gpu = ctx.gpu(offer.gpu)
    if gpu is None:
        return [], [RejectedOffer(offer.id, f"GPU model '{offer.gpu}' is not in the catalog", group.name)]
    chips = offer.gpu_count
    if not float(chips / gpu.chips_per_board).is_integer():
        why = f"{chips:g} chips is not a whole number of {gpu.id} boards ({gpu.chips_per_board} chips each)"
        return [], [RejectedOffer(offer.id, why, group.name)]
    boards = int(chips // gpu.chips_per_board)
    capacity = ctx.server_capacity(gpu, boards, need)
    layouts = [(capacity.seats, capacity.mode, capacity.profile, capacity.licence)]
    layouts += [v for v in ctx.server_variants(gpu, boards, need) if v[3] != capacity.licence]
    options, not_viable = ctx.chip_options(gpu, need)
    n_chips = boards * gpu.chips_per_board
    limit = _host_limit(offer, group)
    fits: list[Fit] = []
    for seats, mode, profile, licence in layouts:
        if limit is not None and 0 < limit < seats:
            mode, profile = _most_isolated(options, licence, limit, n_chips, mode, profile)
        fit = _server_fit(offer, group, ctx, seats, mode or "passthrough", profile, licence)
        if isinstance(fit, str):
            if not fits and licence == capacity.licence:
                reasons = "; ".join(f"{p or m}: {w}" for m, p, w in capacity.rejected[:2]) or "no seat fits"
                return [], [RejectedOffer(offer.id, f"no seat fits ({fit or reasons})", group.name)]
            continue
        passed = _passed_over(fit, licence, options, not_viable, n_chips, limit)
        fits.append(replace(fit, passed_over=passed))
    return fits, list(fits[0].passed_over) if fits else []


def _host_limit(offer: Offer, group: Group) -> int | None:
    """Seats the server's CPUs and RAM allow (None: no limit asked)."""
    limits = [
        math.floor(have / least)
        for have, least in ((offer.vcpus, group.min_vcpus), (offer.ram_gb, group.min_ram_gb))
        if least
    ]
    return min(limits) if limits else None


def _label(mode: str, profile: str | None) -> str:
    return f"{mode} {profile}" if profile else mode


def _most_isolated(
    options: list[ChipOption], licence: str | None, limit: int, chips: int, mode: str | None, profile: str | None
) -> tuple[str | None, str | None]:
    """When the CPUs or RAM allow fewer seats than the GPUs give, the layout under the same licence that
    still gives them, most isolated and with the most memory per seat (the same seats at the same price)."""
    able = [o for o in options if o.licence == licence and o.per_chip * chips >= limit]
    if not able:
        return mode, profile
    best = min(able, key=lambda o: (o.rank, -o.memory_for(limit, chips)))
    return best.mode, best.profile


def _passed_over(
    fit: Fit,
    licence: str | None,
    options: list[ChipOption],
    not_viable: list[NotChosen],
    chips: int,
    limit: int | None,
) -> tuple[RejectedOffer, ...]:
    """Every other mode and profile of the server, each with why ``fit``'s layout was taken instead: the
    reasons agree with the layout the plan prints (``N seats per server (mode profile)``)."""
    chosen = _label(fit.mode, fit.profile)
    seats = fit.seats_per_unit
    mine = next((o for o in options if (o.mode, o.profile) == (fit.mode, fit.profile)), None)
    out: list[RejectedOffer] = []
    for o in options:
        if o is mine:
            continue
        got = o.per_chip * chips if limit is None else min(o.per_chip * chips, limit)
        what = f"{got} seat{'s' if got != 1 else ''} of {o.memory_for(got, chips):g} GB"
        rank = mine.rank if mine else o.rank
        if got < seats:
            why = f"fewer than the {seats} of {chosen}"
        elif got > seats or o.licence != licence:
            extra = f" (it needs no licence; {o.licence} does)" if licence is None and o.licence else ""
            why = f"{chosen} costs less for this course{extra}"
        elif o.rank > rank:
            why = f"{chosen} is more isolated"
        else:
            why = f"{chosen} gives as many seats with at least as much memory"
        reason = f"{o.profile or o.mode}: {what}; {why}"
        out.append(RejectedOffer(fit.offer.id, reason, fit.group.name, o.profile, True, chosen))
    for r in not_viable:
        reason = f"{r.profile or r.mode}: {r.reason}"
        out.append(RejectedOffer(fit.offer.id, reason, fit.group.name, r.profile, True, chosen))
    return tuple(out)


def _server_fit(
    offer: Offer,
    group: Group,
    ctx: PlanContext,
    seats: int,
    mode: str,
    profile: str | None,
    licence: str | None,
) -> Fit | str:
    """The fit of one server layout, limited by the server's CPUs and RAM; the reason (maybe "") when no
    seat fits."""
    notes: list[str] = []
    for have, least, what in ((offer.vcpus, group.min_vcpus, "vCPUs"), (offer.ram_gb, group.min_ram_gb, "GB RAM")):
        limit = math.floor(have / least) if least else seats
        if limit < seats:
            notes.append(f"{offer.id}: {num(have)} {what} allow only {limit} seats of the {seats} the GPUs give")
            seats = limit
    if seats <= 0:
        return notes[-1].split(": ", 1)[1] if notes else ""
    usage, billing_notes = ctx.usage_rate(offer)
    notes = [*billing_notes, *notes]
    unit_rates = [usage]
    seat_rates: list[Rate] = []
    share = f"{offer.vcpus / seats:g} vCPUs and {offer.ram_gb / seats:.3g} GB RAM per seat"
    notes.append(f"{offer.id}: {seats} seats per server ({mode}{' ' + profile if profile else ''}), {share}")
    if ctx.need(group).guest_os == "windows":
        notes.append(f"Windows guest licences on {offer.id} are not priced")
    hypervisor = ctx.course.costs.hypervisor_licence_usd_per_server
    if hypervisor:
        unit_rates.append(Rate("hypervisor licence", hypervisor, f"{num(hypervisor)} $/server", "server"))
    if licence:
        lic = ctx.catalog.licences.get(licence)
        if lic is None:
            raise InputError(
                f"licence '{licence}' has no price",
                where="licences.toml",
                fix="add the licence to licences.toml (or a --catalog folder)",
            )
        per_unit, per_seat = _licence_rates(lic, ctx.span_days, int(offer.gpu_count))
        unit_rates += per_unit
        seat_rates += per_seat
    fit = Fit(offer, group, seats, mode, profile, tuple(unit_rates), tuple(seat_rates), tuple(notes))
    return _finish(fit, ctx)


def _finish(fit: Fit, ctx: PlanContext) -> Fit:
    """``fit`` with what every fit carries added: the setup fee, disk and egress."""
    offer, unit_rates = fit.offer, fit.unit_rates
    if offer.setup_fee_usd:
        unit_rates += (Rate("setup fee", offer.setup_fee_usd, f"{num(offer.setup_fee_usd)} $ setup", "server"),)
    data, data_notes = ctx.data_rates(offer)
    return replace(fit, unit_rates=unit_rates, seat_rates=(*fit.seat_rates, *data), notes=(*fit.notes, *data_notes))


def fast_path(offer: Offer) -> bool:
    """Whether the table checks and prices ``offer`` without making a :class:`Fit`: hourly cloud instances,
    whose seat costs the same for every group (a Windows licence aside)."""
    return offer.kind == "cloud" and not offer.monthly
