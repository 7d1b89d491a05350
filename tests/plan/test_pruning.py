"""The pruned candidate set never loses the optimum: pruned solve == unpruned MILP, and the two cases from
issue 10 that the old 64-per-group pool got wrong."""

from __future__ import annotations

import importlib
import json
from datetime import date

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuseat.catalog.bundle import load_catalog
from gpuseat.catalog.offers import Offer
from gpuseat.core.cost import Rate
from gpuseat.core.course import Course
from gpuseat.core.plan import Fit, plan
from gpuseat.core.plan.solve import _milp, solve
from gpuseat.core.plan.table import prune

CATALOG = load_catalog()


def offer(i: int, available: int | None) -> Offer:
    return Offer.model_validate(
        {
            "id": f"p:o-{i:02d}",
            "provider": "p",
            "kind": "bare-metal",
            "instance_type": f"o-{i}",
            "gpu": "L4",
            "gpu_count": 1,
            "vcpus": 4,
            "ram_gb": 16,
            "price_usd": 1,
            "billing": "per-hour",
            "available": available,
            "source": "test",
            "as_of": date(2026, 1, 1),
        },
        context={"find_gpu": CATALOG.find_gpu},
    )


@st.composite
def instances(draw: st.DrawFn) -> tuple[Course, dict[str, list[tuple[Fit, int]]]]:
    counts = draw(st.lists(st.integers(1, 25), min_size=1, max_size=3))
    course = Course.model_validate(
        {
            "schedule": {"start": date(2026, 3, 2), "days": 1},
            "group": [{"name": f"g{k}", "count": c} for k, c in enumerate(counts)],
        }
    )
    n_offers = draw(st.integers(1, 14))
    offers = [offer(i, draw(st.sampled_from([None, None, 1, 1, 2, 3, 5]))) for i in range(n_offers)]
    fits: dict[str, list[tuple[Fit, int]]] = {g.name: [] for g in course.groups}
    for i, o in enumerate(offers):
        seats = draw(st.sampled_from([1, 1, 1, 2, 4, 7, 14]))
        unit = draw(st.sampled_from([0.0, 10.0, 25.0, 40.0, 100.0, 130.0]))
        for g in course.groups:
            if not draw(st.booleans()) and any(fits.values()):
                continue
            seat = draw(st.sampled_from([0.0, 0.0, 1.5, 6.0]))  # e.g. a licence that only this group pays
            fit = Fit(
                o, g, seats, "test", None, (Rate("unit", unit, "u", "server"),), (Rate("seat", seat, "s", "seat"),)
            )
            fits[g.name].append((fit, i))
    return course, fits


def cost(allocations) -> float:
    return round(sum(a.units * a.fit.unit_usd + a.seats * a.fit.seat_usd for a in allocations), 6)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instance=instances())
def test_pruned_equals_unpruned_milp(instance):
    course, fits = instance
    everything = {g.name: [f for f, _ in fits[g.name]] for g in course.groups}
    exact = _milp(course, [f for g in course.groups for f in everything[g.name]], None)
    pruned = solve(course, {name: prune(pairs, course.participant_count) for name, pairs in fits.items()})
    if exact is None:  # availability cannot seat everyone: the pruned set cannot either
        assert pruned is None
        return
    assert pruned is not None
    assert abs(cost(pruned) - cost(exact)) < 1e-6
    for g in course.groups:
        assert sum(a.seats for a in pruned if a.fit.group.name == g.name) == g.count
    used: dict[str, int] = {}
    for a in pruned:
        used[a.fit.offer.id] = used.get(a.fit.offer.id, 0) + a.units
        assert a.seats <= a.units * a.fit.seats_per_unit
    for a in pruned:
        if a.fit.offer.available is not None:
            assert used[a.fit.offer.id] <= a.fit.offer.available


def offers_file(tmp_path, rows: list[dict[str, object]]) -> object:
    lines = ["schema_version = 1"]
    for row in rows:
        lines.append("[[offer]]")
        lines += [f"{k} = {json.dumps(v) if not isinstance(v, date) else v.isoformat()}" for k, v in row.items()]
    path = tmp_path / "offers.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_seventy_servers_and_one_cloud_offer(cli, tmp_path):
    """16 seats: one 14-seat server ($9,000 for September) + 2 cloud seats (25 d × 24 h × $1.10 = $660 each)
    = $10,320, not two servers ($18,000). The old pool kept the 64 cheapest per seat (the servers, $642.86 a
    seat when full) and lost the cloud offer ($660 a seat)."""
    servers = [
        {
            "id": f"dc:srv-{i:02d}",
            "provider": "dc",
            "kind": "bare-metal",
            "instance_type": f"srv-{i:02d}",
            "region": "eu",
            "gpu": "H200",
            "gpu_count": 2,
            "vcpus": 64,
            "ram_gb": 512,
            "price_usd": 9000,
            "billing": "month-whole",
            "disk_usd_per_gb_month": 0,
            "available": 1,
            "source": "test",
            "as_of": "2026-08-01",
        }
        for i in range(70)
    ]
    cloud = {
        "id": "cl:l4",
        "provider": "cl",
        "kind": "cloud",
        "instance_type": "l4",
        "region": "eu",
        "gpu": "L4",
        "gpu_count": 1,
        "vcpus": 8,
        "ram_gb": 32,
        "price_usd": 1.10,
        "billing": "per-hour",
        "disk_usd_per_gb_month": 0,
        "source": "test",
        "as_of": "2026-08-01",
    }
    path = offers_file(tmp_path, [*servers, cloud])
    course = tmp_path / "course.toml"
    course.write_text(
        'participants = 16\noffers = ["dc:*", "cl:*"]\n[needs]\nmin_gpu_memory_gb = 16\n'
        "[schedule]\nstart = 2026-09-01\ndays = 25\n"
    )
    r = cli("plan", course, "--offers", path, "--format", "json")
    assert r.code == 0, r.err
    best = json.loads(r.out)["options"][0]
    assert best["total_usd"] == 9000 + 2 * 25 * 24 * 1.10 == 10320.00
    counts = {x["offer"]: x["count"] for x in best["offers"]}
    assert counts.pop("cl:l4") == 2
    assert list(counts.values()) == [1] and next(iter(counts)).startswith("dc:srv-")  # any one of the equal servers


def test_shared_availability_is_not_falsely_infeasible(cli, tmp_path):
    """Two groups of 100 over 100 regional offers with 3 units each: the cheapest 200 seats are offers
    0..65 full (198) and 2 on offer 66, at (1 + 0.01 k) $/h for 24 h:
    24 × (3 × Σ_{k<66} (1 + 0.01 k) + 2 × 1.66) = 24 × (3 × 87.45 + 3.32) = $6,376.08."""
    rows = [
        {
            "id": f"r:gpu@region-{k:02d}",
            "provider": "r",
            "kind": "cloud",
            "instance_type": "gpu",
            "region": f"region-{k:02d}",
            "gpu": "L4",
            "gpu_count": 1,
            "vcpus": 8,
            "ram_gb": 32,
            "price_usd": round(1 + 0.01 * k, 2),
            "billing": "per-hour",
            "disk_usd_per_gb_month": 0,
            "available": 3,
            "source": "test",
            "as_of": "2026-08-01",
        }
        for k in range(100)
    ]
    path = offers_file(tmp_path, rows)
    course = tmp_path / "course.toml"
    course.write_text(
        'offers = ["r:*"]\n[[group]]\nname = "a"\ncount = 100\n[[group]]\nname = "b"\ncount = 100\n'
        "[schedule]\nstart = 2026-09-01\ndays = 1\n"
    )
    r = cli("plan", course, "--offers", path, "--format", "json", "--alternatives", "2")
    assert r.code == 0, r.err
    best = json.loads(r.out)["options"][0]
    assert best["total_usd"] == 6376.08
    assert best["seats"] == 200


def test_real_offers_pruned_equal_exhaustive():
    """Through plan() with the bundled 2016 and lab offers: the same optimum with and without pruning."""
    course = Course.model_validate(
        {
            "group": [
                {"name": "a", "count": 9, "min_gpu_memory_gb": 4},
                {"name": "b", "count": 5, "min_gpu_memory_gb": 12},
            ],
            "schedule": {"start": date(2026, 3, 2), "end": date(2026, 3, 13), "hours": "09:00-17:00"},
            "costs": {"storage_gb_per_seat": 20},
        }
    )
    offers = [o.model_copy(update={"available": 2}) if o.kind == "bare-metal" else o for o in CATALOG.offers]
    fast = plan(course, offers, catalog=CATALOG, alternatives=0)
    full = plan(course, offers, catalog=CATALOG, alternatives=0, exhaustive=True)
    assert fast.options[0].total_usd == full.options[0].total_usd


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instance=instances())
def test_reduced_cost_fixing_keeps_the_optimum(instance):
    """tighten() (LP reduced-cost fixing) run on every instance, with a deliberately poor upper bound."""
    solve_module = importlib.import_module("gpuseat.core.plan.solve")
    course, fits = instance
    everything = {g.name: [f for f, _ in fits[g.name]] for g in course.groups}
    exact = _milp(course, [f for g in course.groups for f in everything[g.name]], None)
    saved = solve_module.TIGHTEN_ABOVE, solve_module.BOUND_POOL
    solve_module.TIGHTEN_ABOVE, solve_module.BOUND_POOL = 0, 1
    try:
        tightened = solve_module.tighten(course, everything)
    finally:
        solve_module.TIGHTEN_ABOVE, solve_module.BOUND_POOL = saved
    found = solve(course, tightened)
    if exact is None:
        assert found is None
        return
    assert found is not None and abs(cost(found) - cost(exact)) < 1e-6


SERVER_GPUS = [("M60", 4), ("A100-80GB", 4), ("H200-141GB", 2), ("L4", 2), ("L40S", 4), ("A30", 2), ("K2", 4)]
CLOUD = [o for o in CATALOG.offers if o.kind == "cloud"]


@st.composite
def real_plans(draw: st.DrawFn) -> tuple[Course, list[Offer]]:
    groups = [
        {
            "name": f"g{k}",
            "count": draw(st.integers(1, 30)),
            "min_gpu_memory_gb": draw(st.sampled_from([0, 4, 8, 16])),
            "isolation": draw(st.sampled_from(["dedicated", "partitioned", "shared"])),
            "guest_os": draw(st.sampled_from(["linux", "linux", "windows"])),
        }
        for k in range(draw(st.integers(1, 3)))
    ]
    # start dates on both sides of the dated rules (OVH monthly proration from 2026-04-01, AWS IPv4 from 2024)
    start = draw(st.sampled_from([date(2026, 3, 2), date(2026, 5, 18), date(2016, 6, 6), date(2026, 6, 1)]))
    schedule = {"start": start, "days": draw(st.integers(1, 40))}
    if draw(st.booleans()):
        schedule["hours"] = "09:00-17:00"
        if draw(st.booleans()):
            schedule["access"] = draw(st.sampled_from(["24/7", "08:00-22:00"]))
    costs = {"storage_gb_per_seat": 20, "egress_gb_per_seat": draw(st.sampled_from([0, 5, 40]))}
    course = Course.model_validate({"group": groups, "schedule": schedule, "costs": costs})
    offers = [
        o.model_copy(update={"available": draw(st.sampled_from([None, 1, 2, 5]))})
        for o in draw(st.lists(st.sampled_from(CLOUD), max_size=8, unique_by=lambda o: o.id))
    ]
    for k in range(draw(st.integers(0, 8))):
        gpu, chips = draw(st.sampled_from(SERVER_GPUS))
        offers.append(Offer.model_validate(
            {"id": f"dc:srv-{k}", "provider": "dc", "kind": "bare-metal", "instance_type": f"srv-{k}", "gpu": gpu,
             "gpu_count": chips, "vcpus": 64, "ram_gb": 512, "price_usd": draw(st.sampled_from([300, 1500, 4000, 9000])),
             "billing": draw(st.sampled_from(["month-whole", "month-prorated", "month-first-prorated", "per-hour"])),
             "rules": draw(st.sampled_from([(), ("ibm-classic-monthly",), ("ovh-monthly-2026",),
                                            ("ovh-dedicated-monthly",), ("post-2016-arithmetic",)])),
             "disk_usd_per_gb_month": 0, "available": draw(st.sampled_from([None, 1, 2])),
             "source": "test", "as_of": date(2026, 1, 1)},
            context=CATALOG.offer_context()))  # fmt: skip
    return course, offers


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=real_plans())
def test_plan_equals_exhaustive_on_real_offers(case):
    """Through plan(): real cloud offers and servers carved by the carver (MIG, vGPU with licences,
    passthrough), Windows and Linux groups, shared availability, and the billing rules of rules.toml (the
    catalog's cloud offers with their provider rules: GCP sustained use, AWS IPv4 fees and free egress,
    Azure whole minutes, OVH's dated monthly proration; servers under IBM's and OVH's monthly rules),
    courses on both sides of the rules' start dates, with and without an access window:
    pruned == every fitting offer."""
    from gpuseat.errors import Infeasible, NoOfferFits

    course, offers = case
    try:
        full = plan(course, offers, catalog=CATALOG, alternatives=0, exhaustive=True)
    except (NoOfferFits, Infeasible) as exc:
        try:
            plan(course, offers, catalog=CATALOG, alternatives=0)
        except type(exc):
            return
        raise AssertionError("the pruned plan found a mix the exhaustive one did not") from None
    fast = plan(course, offers, catalog=CATALOG, alternatives=0)
    # exact costs: two optimal mixes may split seats differently and round their lines a cent apart
    assert abs(cost(fast.options[0].allocations) - cost(full.options[0].allocations)) < 1e-6
