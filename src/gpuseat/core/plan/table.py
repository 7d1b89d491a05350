"""The offer table: every offer checked and priced for every group once, then pruned without losing the optimum.

A large catalog is nearly all hourly cloud instances; one of them costs the same per seat whatever the
group (a Windows licence aside), so the table prices each once and makes a :class:`Fit` only for the
offers the solver or the alternatives use. Other offers (bare-metal servers, monthly instances) are
fitted right away.

Pruning (:meth:`GroupFits.candidates`) keeps every offer that can be part of an optimal mix. Let ``N``
be the number of participants of the whole course. Call an optimal mix *canonical* if it rents no
empty unit (dropping one never costs more) — so it rents at most ``N`` units in all, across all groups
and offers — and if no move below makes it cheaper or earlier in a fixed order of the offers.

* **One-seat offers** (a unit seats one participant, so ``k`` seats cost ``k × p``): sort a group's
  one-seat offers by ``(p, id)``. If the group uses offer ``o`` while some offer ``o'`` before it has a
  unit to spare, moving the seat to ``o'`` costs no more; so in a canonical mix every offer before
  ``o`` is full. Those full offers hold units of the canonical mix, at most ``N - 1`` of them besides
  ``o``'s. Hence once the offers before ``o`` can rent ``N`` units together, ``o`` is never used: the
  table keeps the prefix up to that point (with unlimited offers: up to the first one).
* **Multi-seat offers** (servers): ``o*`` *dominates* ``o`` for a group when it seats at least as many
  per unit and placing ``k`` seats on one unit of it costs no more for every ``k`` from 1 to ``o``'s
  seats (linear in ``k``: check ``k = 1`` and ``k = s``), ties broken by id. Moving the seats of one
  unit of ``o`` to a spare unit of ``o*`` costs no more, so in a canonical mix ``o`` is used only
  when all its dominators are full; if they can rent ``N`` units together, ``o`` is never used.

Availability is shared by all groups (the counts are over all groups' units), so both rules hold with
it; the property test in tests/plan compares the pruned and the unpruned solver on random instances.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpuseat.catalog.offers import Offer
from gpuseat.core.course import Group
from gpuseat.core.plan.fit import (
    Fit,
    PlanContext,
    RejectedOffer,
    cloud_reason,
    fit_offer,
    fit_variants,
)


@dataclass
class OfferTable:
    """The plan's offers with the per-seat price of each fast-path offer, built once per plan."""

    offers: list[Offer]
    fast: list[bool]
    id_rank: list[int]  # position of each offer's id in sorted order: the tie-break
    families: list[tuple[str, str, str]]  # (provider, instance type, billing) of each offer
    effective: list[Offer]  # each offer with the dated billing rules in force for the course applied

    @classmethod
    def of(cls, offers: list[Offer], ctx: PlanContext) -> OfferTable:
        """The table of ``offers`` priced for the course of ``ctx``."""
        fast = [ctx.fast(o) for o in offers]
        effective = [ctx.effective(o) for o in offers]
        order = sorted(range(len(offers)), key=lambda i: offers[i].id)
        rank = [0] * len(offers)
        for r, i in enumerate(order):
            rank[i] = r
        return cls(offers, fast, rank, [(o.provider, o.instance_type, o.billing) for o in offers], effective)

    def fits(self, group: Group, ctx: PlanContext) -> tuple[GroupFits, list[RejectedOffer]]:
        """Which offers can seat ``group`` at what cost, and why the others cannot (in offer order)."""
        need = ctx.need(group)
        rejected: list[RejectedOffer] = []
        bound: dict[int, float] = {}
        made: dict[int, Fit] = {}
        variants: dict[int, list[Fit]] = {}
        reasons: dict[tuple[str, float, float, float, float, tuple[str, ...]], str | None] = {}
        windows = need.guest_os == "windows"
        for i, offer in enumerate(self.offers):
            if self.fast[i]:
                key = (offer.gpu, offer.memory_per_chip_gb, offer.gpu_count, offer.vcpus, offer.ram_gb, offer.guest_os)
                if key not in reasons:
                    reasons[key] = cloud_reason(offer, need)
                reason = reasons[key]
                if reason:
                    rejected.append(RejectedOffer(offer.id, reason, group.name))
                else:
                    bound[i] = ctx.fast_bound(self.effective[i], windows)
                continue
            found, why = fit_variants(offer, group, ctx)
            rejected += why
            if found:
                made[i] = found[0]
                bound[i] = found[0].per_seat_bound()
                if len(found) > 1:
                    variants[i] = found[1:]
        return GroupFits(group, self, ctx, bound, made, variants), rejected


@dataclass
class GroupFits:
    """How the plan's offers serve one group: the per-seat bound of each usable offer, Fits on demand."""

    group: Group
    table: OfferTable
    ctx: PlanContext
    bound: dict[int, float]  # offer index → cost per seat when its units are full
    made: dict[int, Fit] = field(default_factory=dict)
    variants: dict[int, list[Fit]] = field(default_factory=dict)  # a server's other layouts (other licences)

    def fit(self, i: int) -> Fit | None:
        """The fit of offer ``i`` (None when it cannot seat the group); made once, when first asked for."""
        if i not in self.bound:
            return None
        if i not in self.made:
            fit, _ = fit_offer(self.table.offers[i], self.group, self.ctx)
            assert fit is not None  # the table applied the same checks
            self.made[i] = fit
        return self.made[i]

    def layouts(self, i: int) -> list[Fit]:
        """Every fit of offer ``i``: the one with most seats, then a server's layouts under other licences."""
        fit = self.fit(i)
        return [fit, *self.variants.get(i, ())] if fit is not None else []

    def ranked(self) -> list[int]:
        """Usable offers, cheapest per full seat first, ties by offer id."""
        rank = self.table.id_rank
        return sorted(self.bound, key=lambda i: (self.bound[i], rank[i]))

    def candidates(self, participants: int) -> list[Fit]:
        """The offers that can be part of an optimal mix for a course of ``participants`` (module docstring)."""
        offers, rank = self.table.offers, self.table.id_rank
        single: list[tuple[float, int, int]] = []  # (cost per seat, id rank, index)
        multi: list[tuple[Fit, int]] = []  # (fit, id rank)
        for i, b in self.bound.items():
            if i in self.made and (self.made[i].seats_per_unit > 1 or i in self.variants):
                multi += [(f, rank[i]) for f in (self.made[i], *self.variants.get(i, ()))]
            else:
                single.append((b, rank[i], i))
        kept = [self.fit(i) for i in _prefix(single, [offers[i].available for _, _, i in single], participants)]
        return [f for f in kept if f is not None] + _undominated(multi, participants)


def prune(fits: list[tuple[Fit, int]], participants: int) -> list[Fit]:
    """:meth:`GroupFits.candidates` on ready-made ``(fit, id rank)`` pairs of one group."""
    single = [(f.per_seat_bound(), r, k) for k, (f, r) in enumerate(fits) if f.seats_per_unit == 1]
    multi = [(f, r) for f, r in fits if f.seats_per_unit > 1]
    avail = [fits[k][0].offer.available for _, _, k in single]
    return [fits[k][0] for k in _prefix(single, avail, participants)] + _undominated(multi, participants)


def _prefix(single: list[tuple[float, int, int]], available: list[int | None], participants: int) -> list[int]:
    """One-seat offers cheapest first (ties by id), up to where the offers before can rent ``participants``
    units together."""
    avail = {k: a for (_, _, k), a in zip(single, available, strict=True)}
    out: list[int] = []
    before = 0.0
    for _, _, k in sorted(single):
        if before >= participants:
            break
        out.append(k)
        a = avail[k]
        before += math.inf if a is None else a
    return out


def _undominated(fits: list[tuple[Fit, int]], participants: int) -> list[Fit]:
    """Multi-seat fits whose dominators cannot rent ``participants`` units together.

    ``a`` dominates ``b`` when it seats at least as many per unit and placing 1 or ``b``'s ``s`` seats on
    one unit of it costs no more (the cost is linear in between), ties broken by more seats, then by id.
    For each seat count ``s``, the fits with at least ``s`` seats are ordered by (cost of one seat, cost
    of ``s`` seats, more seats, id); ``a`` dominates ``b`` exactly when it comes earlier and costs no more
    for ``s`` seats, which a Fenwick tree over the ``s``-seat costs sums in O(n log n).
    """
    rows = [(f.unit_usd + f.seat_usd, f.seats_per_unit, f.unit_usd, f.seat_usd, rank, f) for f, rank in fits]
    out: list[Fit] = []
    for size in sorted({r[1] for r in rows}):
        eligible = [r for r in rows if r[1] >= size]
        keyed = sorted(
            ((one, unit + seat * size, -s, rank, r) for r in eligible for one, s, unit, seat, rank, _ in [r]),
            key=lambda k: k[:4],
        )
        values = sorted({k[1] for k in keyed})
        where = {v: i + 1 for i, v in enumerate(values)}
        tree = [0.0] * (len(values) + 1)
        for _one, full, neg_s, _rank, r in keyed:
            cover, i = 0.0, where[full]
            while i > 0:
                cover += tree[i]
                i -= i & -i
            if -neg_s == size and cover < participants:
                out.append(r[5])
            avail = r[5].offer.available
            weight = math.inf if avail is None else float(avail)
            i = where[full]
            while i <= len(values):
                tree[i] += weight
                i += i & -i
    return out
