"""The planner, split by job: :mod:`.fit` (how one offer serves one group), :mod:`.table` (every offer
priced once, pruned without losing the optimum), :mod:`.solve` (exact DP, or the MILP with HiGHS),
:mod:`.perf` (the performance view), :mod:`.result` (the result types and their JSON) and
:mod:`.planner` (the cheapest mix, alternatives, ``--why``)."""

from gpuseat.core.plan.fit import Fit, PlanContext, RejectedOffer, fit_offer
from gpuseat.core.plan.perf import LENET_BASELINE_GPU, Speed, performance, speeds_from
from gpuseat.core.plan.planner import apply_filters, plan, region_matches, select_offers
from gpuseat.core.plan.result import SCHEMA_VERSION, Plan, PlanOption, WhyAnswer
from gpuseat.core.plan.solve import Allocation, solve

__all__ = [
    "LENET_BASELINE_GPU",
    "SCHEMA_VERSION",
    "Allocation",
    "Fit",
    "Plan",
    "PlanContext",
    "PlanOption",
    "RejectedOffer",
    "Speed",
    "WhyAnswer",
    "apply_filters",
    "fit_offer",
    "performance",
    "plan",
    "region_matches",
    "select_offers",
    "solve",
    "speeds_from",
]
