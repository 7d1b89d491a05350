"""The solver: the cheapest allocation of every group's seats to units of the allowed offers.

For each group ``g`` and allowed fit ``o``: integer ``x[g,o]`` units rented and ``z[g,o]`` seats used,
minimising ``Σ unit_usd·x + seat_usd·z`` subject to ``Σ_o z[g,o] = count_g``,
``z[g,o] ≤ seats_per_unit·x[g,o]`` and ``Σ_g x[g,o] ≤ available_o``.

When no allowed offer has an availability limit the groups do not interact, and each group is an exact
dynamic programme over seat counts (:func:`_group_dp`): no solver is imported, which keeps ``gpuseat
plan`` fast to start. With availability limits the MILP goes to HiGHS through ``highspy`` (imported
only then), with a zero optimality gap.
"""

from __future__ import annotations

import math
import os
import sys
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from gpuseat.core.course import Course
from gpuseat.core.plan.fit import Fit

if TYPE_CHECKING:
    from collections.abc import Callable

    import highspy

_EPS = 1e-9


@dataclass
class Allocation:
    """Seats of one group placed on units of one offer."""

    fit: Fit
    units: int
    seats: int


def solve(course: Course, allowed: dict[str, list[Fit]], must_use: str | None = None) -> list[Allocation] | None:
    """The cheapest allocation over the allowed fits of every group; None when none exists."""
    pairs = [fit for g in course.groups for fit in allowed[g.name]]
    if not pairs:
        return None
    if must_use is None and all(f.offer.available is None for f in pairs):
        out: list[Allocation] = []
        for g in course.groups:
            found = _group_dp(allowed[g.name], g.count)
            if found is None:
                return None
            out += found
        return out
    return _milp(course, pairs, must_use)


def _group_dp(fits: list[Fit], count: int) -> list[Allocation] | None:
    """Exact cheapest way to seat ``count`` participants on unlimited units of ``fits``.

    ``best[k]`` = cheapest way to seat ``k``; the last unit rented holds ``j`` seats (1 ≤ j ≤ its seats),
    so ``best[k] = min over fits, j of best[k-j] + unit + seat·j``. For one fit that is a sliding-window
    minimum of ``best[i] - seat·i`` over ``i`` in ``[k - s, k - 1]``, kept in a deque: O(count × fits).
    """
    if not fits:
        return None
    best = [0.0] + [math.inf] * count
    choice: list[tuple[int, int]] = [(-1, 0)] * (count + 1)
    windows: list[deque[tuple[int, float]]] = [deque() for _ in fits]
    for k in range(1, count + 1):
        for f, (fit, window) in enumerate(zip(fits, windows, strict=True)):
            seat = fit.seat_usd
            value = best[k - 1] - seat * (k - 1)
            while window and window[-1][1] >= value - _EPS:
                window.pop()
            window.append((k - 1, value))
            while window[0][0] < k - fit.seats_per_unit:
                window.popleft()
            i, low = window[0]
            cost = low + seat * k + fit.unit_usd
            if cost < best[k] - _EPS:
                best[k] = cost
                choice[k] = (f, k - i)
    units = [0] * len(fits)
    seats = [0] * len(fits)
    k = count
    while k > 0:
        f, j = choice[k]
        units[f] += 1
        seats[f] += j
        k -= j
    return [Allocation(fit, units[f], seats[f]) for f, fit in enumerate(fits) if units[f]]


#: Above this many (group, offer) pairs with availability limits, :func:`tighten` prunes before the MILP.
TIGHTEN_ABOVE = 150
#: Multi-seat fits per group in the small MILP that gives :func:`tighten` its upper bound.
BOUND_POOL = 24


def tighten(course: Course, allowed: dict[str, list[Fit]]) -> dict[str, list[Fit]]:
    """Drop the fits that no optimal allocation uses, by reduced-cost fixing (exact, from LP duality).

    ``UB`` is the cost of a feasible allocation (the MILP over a small sub-pool). The LP relaxation over
    all fits has optimum ``z`` and, for a unit variable at zero, reduced cost ``r``: every allocation that
    rents a unit of that fit costs at least ``z + r``. When ``z + r > UB`` (beyond a tolerance), no
    optimal allocation rents it, so it is dropped; this holds for all dropped fits at once.
    """
    pairs = [f for g in course.groups for f in allowed[g.name]]
    if len(pairs) <= TIGHTEN_ABOVE or all(f.offer.available is None for f in pairs):
        return allowed
    small = {}
    for g in course.groups:
        fits = allowed[g.name]
        multi = sorted((f for f in fits if f.seats_per_unit > 1), key=lambda f: f.per_seat_bound())
        small[g.name] = [f for f in fits if f.seats_per_unit == 1] + multi[:BOUND_POOL]
    found = _milp(course, [f for g in course.groups for f in small[g.name]], None)
    if found is None:
        return allowed
    upper = sum(a.units * a.fit.unit_usd + a.seats * a.fit.seat_usd for a in found)
    relaxed = _run(course, pairs, None, integer=False)
    if relaxed is None:
        return allowed
    value, x, reduced = relaxed
    tol = 1e-6 * max(1.0, abs(upper))
    keep = {id(f) for i, f in enumerate(pairs) if x[i] > 1e-9 or value + reduced[i] <= upper + tol}
    return {g.name: [f for f in allowed[g.name] if id(f) in keep] for g in course.groups}


_BANNER_SHOWN = False


def _highs() -> highspy.Highs:
    """A silent HiGHS instance (HiGHS prints a banner on stdout when the first one is made: not into JSON)."""
    global _BANNER_SHOWN
    import highspy

    # highspy's Highs.__init__ lacks a return annotation (untyped to mypy): called through its precise type
    make = cast("Callable[[], highspy.Highs]", highspy.Highs)
    if _BANNER_SHOWN:
        h = make()
    else:
        sys.stdout.flush()
        saved, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 1)
            h = make()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            os.close(devnull)
        _BANNER_SHOWN = True
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    return h


def _run(
    course: Course, pairs: list[Fit], must_use: str | None, *, integer: bool
) -> tuple[float, list[float], list[float]] | None:
    """Solve the model of the module docstring (or its LP relaxation): (optimum, values, reduced costs of
    the unit variables), None when infeasible."""
    import highspy
    import numpy as np

    n = len(pairs)
    rows: list[tuple[list[int], list[float], float, float]] = []
    for g in course.groups:
        idx = [n + i for i, f in enumerate(pairs) if f.group.name == g.name]
        rows.append((idx, [1.0] * len(idx), g.count, g.count))
    for i, f in enumerate(pairs):
        rows.append(([n + i, i], [1.0, -float(f.seats_per_unit)], -math.inf, 0.0))
    by_offer: dict[str, list[int]] = {}
    for i, f in enumerate(pairs):
        by_offer.setdefault(f.offer.id, []).append(i)
    for offer_id, idx in sorted(by_offer.items()):
        avail = pairs[idx[0]].offer.available
        if avail is not None:
            rows.append((idx, [1.0] * len(idx), 0.0, float(avail)))
        if offer_id == must_use:
            rows.append((idx, [1.0] * len(idx), 1.0, math.inf))
    if must_use is not None and must_use not in by_offer:
        return None
    inf = highspy.kHighsInf
    lp = highspy.HighsLp()
    lp.num_col_ = 2 * n
    lp.num_row_ = len(rows)
    lp.col_cost_ = np.array([f.unit_usd for f in pairs] + [f.seat_usd for f in pairs], dtype=float)
    lp.col_lower_ = np.zeros(2 * n)
    upper = [math.ceil(f.group.count / f.seats_per_unit) for f in pairs] + [f.group.count for f in pairs]
    lp.col_upper_ = np.array(upper, dtype=float)
    lp.row_lower_ = np.array([-inf if lo == -math.inf else lo for _, _, lo, _ in rows], dtype=float)
    lp.row_upper_ = np.array([inf if hi == math.inf else hi for _, _, _, hi in rows], dtype=float)
    starts, index, value = [0], [], []
    for idx, vals, _, _ in rows:
        index += idx
        value += vals
        starts.append(len(index))
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.array(starts, dtype=np.int32)
    lp.a_matrix_.index_ = np.array(index, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(value, dtype=float)
    if integer:
        lp.integrality_ = [highspy.HighsVarType.kInteger] * (2 * n)
    h = _highs()
    if integer:
        h.setOptionValue("mip_rel_gap", 0.0)
        h.setOptionValue("mip_abs_gap", 1e-7)
    h.passModel(lp)
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    solution = h.getSolution()
    reduced = [] if integer else list(solution.col_dual)[:n]
    return h.getInfo().objective_function_value, list(solution.col_value), reduced


def _milp(course: Course, pairs: list[Fit], must_use: str | None) -> list[Allocation] | None:
    """The MILP of the module docstring, solved exactly by HiGHS."""
    found = _run(course, pairs, must_use, integer=True)
    if found is None:
        return None
    n = len(pairs)
    x = [round(v) for v in found[1]]
    return [Allocation(f, x[i], x[n + i]) for i, f in enumerate(pairs) if x[i] > 0]
