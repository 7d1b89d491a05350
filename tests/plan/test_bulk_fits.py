"""The offer table checks and prices hourly cloud offers without making Fits; it must agree with fit_offer."""

from __future__ import annotations

from datetime import date

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuseat.catalog.bundle import load_catalog
from gpuseat.catalog.offers import Offer
from gpuseat.core.course import Course, Group
from gpuseat.core.plan import Fit, PlanContext, fit_offer
from gpuseat.core.plan.table import OfferTable

CATALOG = load_catalog()
GPUS = sorted(CATALOG.gpus)
# chosen so that the checks' thresholds are hit exactly as well as missed
SIZES = [0, 0.25, 1, 2, 4, 8, 12, 15, 16, 24, 32, 40, 48, 80]


@st.composite
def offers(draw: st.DrawFn, i: int) -> Offer:
    kind = draw(st.sampled_from(["cloud", "cloud", "cloud", "bare-metal"]))
    billing = draw(st.sampled_from(["per-second", "per-minute", "per-hour", "month-whole", "month-prorated"]))
    return Offer.model_validate(
        dict(
            id=f"p{draw(st.integers(0, 3))}:o-{i}",
            provider="p",
            kind=kind,
            instance_type=f"o-{i}",
            gpu=draw(st.sampled_from(GPUS)),
            gpu_count=draw(st.sampled_from([0.25, 0.5, 1, 2, 4, 8])),
            gpu_memory_gb=draw(st.one_of(st.none(), st.sampled_from(SIZES[1:]))),
            vcpus=draw(st.sampled_from(SIZES)),
            ram_gb=draw(st.sampled_from(SIZES)),
            # few distinct prices, so that ties in the per-seat bound are broken by offer id
            price_usd=draw(st.sampled_from([0, 0.35, 0.9, 1.1, 2.4, 2500.0])),
            billing=billing,
            min_charge_s=draw(st.sampled_from([0, 60, 600, 4000])),
            setup_fee_usd=draw(st.sampled_from([0, 99])),
            disk_usd_per_gb_month=draw(st.sampled_from([None, 0, 0.08, 0.1])),
            disk_stopped_usd_per_gb_month=draw(st.sampled_from([None, 0.2])),
            disk_month=draw(st.sampled_from(["730h", "calendar"])),
            guest_os=draw(st.sampled_from([("linux",), ("linux", "windows")])),
            windows_usd_per_vcpu_h=draw(st.sampled_from([None, 0, 0.046])),
            egress_usd_per_gb=draw(st.sampled_from([0, 0.09])),
            stoppable=draw(st.booleans()),
            available=draw(st.sampled_from([None, 1, 20])),
            source="test",
            as_of=date(2026, 1, 1),
        ),
        context={"find_gpu": CATALOG.find_gpu},
    )


groups = st.builds(
    Group,
    name=st.sampled_from(["a", "b"]),
    count=st.integers(1, 50),
    min_gpu_memory_gb=st.sampled_from(SIZES),
    min_vcpus=st.sampled_from(SIZES),
    min_ram_gb=st.sampled_from(SIZES),
    isolation=st.sampled_from(["dedicated", "partitioned", "shared"]),
    guest_os=st.sampled_from(["linux", "windows"]),
)


@st.composite
def courses(draw: st.DrawFn) -> Course:
    schedule: dict[str, object] = {"start": date(2026, 3, 2), "days": draw(st.integers(1, 40))}
    if draw(st.booleans()):
        schedule["hours"] = draw(st.sampled_from(["09:00-17:00", "09:00-09:30", "08:15-17:50"]))
    costs = {
        "storage_gb_per_seat": draw(st.sampled_from([0, 50, 37.5])),
        "egress_gb_per_seat": draw(st.sampled_from([0, 5])),
        "stop_outside_sessions": draw(st.booleans()),
    }
    return Course.model_validate({"schedule": schedule, "group": [draw(groups)], "costs": costs})


def shape(fit: Fit | None) -> tuple[object, ...]:
    """A fit's content, with formulas as text (a Rate may hold a function that formats it)."""
    assert fit is not None
    rates = [(r.item, r.usd, r.formula, r.per) for r in (*fit.unit_rates, *fit.seat_rates)]
    return fit.offer, fit.group, fit.seats_per_unit, fit.mode, fit.profile, rates, fit.notes


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(course=courses(), data=st.data())
def test_table_agrees_with_fit_offer(course, data):
    catalog = [data.draw(offers(i)) for i in range(data.draw(st.integers(1, 25)))]
    group = course.groups[0]
    ctx = PlanContext.of(course, CATALOG)
    fits, rejected = OfferTable.of(catalog, ctx).fits(group, ctx)

    one_by_one = [fit_offer(offer, group, PlanContext.of(course, CATALOG)) for offer in catalog]
    assert rejected == [r for _, why in one_by_one for r in why]
    for i, (fit, _) in enumerate(one_by_one):
        assert (i in fits.bound) == (fit is not None)
        if fit is not None:
            assert fits.bound[i] == fit.per_seat_bound()  # exactly: the bound ranks the candidates
            assert shape(fits.fit(i)) == shape(fit)
    ranked = sorted((f.per_seat_bound(), f.offer.id) for f, _ in one_by_one if f is not None)
    assert [catalog[i].id for i in fits.ranked()] == [offer_id for _, offer_id in ranked]
