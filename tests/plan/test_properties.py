"""Property tests: billing math and the planner keep their promises for any input."""

from __future__ import annotations

import itertools
from datetime import date, datetime, time, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuseat.catalog.bundle import load_catalog
from gpuseat.core.cost import billed_seconds, billing_months, usage_rate
from gpuseat.core.course import Course, merge_intervals
from gpuseat.core.plan import plan, select_offers
from gpuseat.errors import InputError
from gpuseat.files import validate

CATALOG = load_catalog()
OFFERS = list(CATALOG.offers)
HOURLY = [o for o in OFFERS if not o.monthly]
MONTHLY = [o for o in OFFERS if o.monthly]
PATTERNS = ("aws:g2.2xlarge", "ibm:*", "aws:g4dn.xlarge", "runpod:*", "azure:Standard_NV6")


def course(participants: int, days: int, mem: float, hours: str | None = None) -> Course:
    schedule: dict[str, object] = {"start": date(2026, 2, 2), "days": days}
    if hours:
        schedule["hours"] = hours
    return Course.model_validate(
        {"participants": participants, "needs": {"min_gpu_memory_gb": mem}, "schedule": schedule}
    )


def best_total(c: Course) -> float:
    return plan(c, select_offers(OFFERS, PATTERNS), catalog=CATALOG, alternatives=0).options[0].total_usd


@given(run=st.integers(0, 10**7), offer=st.sampled_from(HOURLY))
def test_billing_rounds_to_the_increment_in_the_rules_direction(run, offer):
    """Up to the increment (never below the run), or down to whole increments where the provider says so
    (Azure bills full minutes), never below the minimum charge rounded the same way."""
    billed = billed_seconds(run, offer)
    step = {"per-second": 1, "per-minute": 60, "per-hour": 3600}[offer.billing]
    charged = max(run, offer.min_charge_s)
    assert billed % step == 0
    if offer.rounding == "up":
        assert billed >= run and billed >= offer.min_charge_s and billed - charged < step
    else:
        assert billed <= charged and charged - billed < step


@given(
    start=st.dates(date(2000, 1, 1), date(2040, 1, 1)),
    days=st.integers(1, 800),
    offer=st.sampled_from(MONTHLY),
    anniversary=st.booleans(),
)
def test_prorated_never_exceeds_whole_months(start, days, offer, anniversary):
    runs = [(datetime.combine(start, time()), datetime.combine(start + timedelta(days=days), time()))]
    rule = "anniversary" if anniversary else "calendar"
    prorated = usage_rate(
        offer.model_copy(update={"billing": "month-prorated", "month_start": rule}), runs, per="server"
    )
    whole = usage_rate(offer.model_copy(update={"billing": "month-whole", "month_start": rule}), runs, per="server")
    assert 0 <= round(prorated.usd, 2) <= round(whole.usd, 2)


@given(first=st.dates(date(2000, 1, 1), date(2040, 1, 1)), days=st.integers(1, 800), anniversary=st.booleans())
def test_billing_months_cover_every_day_once(first, days, anniversary):
    last = first + timedelta(days=days - 1)
    months = billing_months(first, last, anniversary=anniversary)
    assert sum(m.used for m in months) == days
    assert all(28 <= m.days <= 31 and 1 <= m.used <= m.days for m in months)
    assert months[0].start <= first and (anniversary or all(m.start.day == 1 for m in months))
    for a, b in itertools.pairwise(months):
        assert a.start + timedelta(days=a.days) == b.start


intervals = st.lists(
    st.tuples(st.integers(0, 500), st.integers(1, 60)).map(
        lambda t: (datetime(2026, 3, 1) + timedelta(hours=t[0]), datetime(2026, 3, 1) + timedelta(hours=t[0] + t[1]))
    ),
    min_size=1,
    max_size=12,
)


@given(raw=intervals)
def test_merged_intervals_cover_the_same_hours_once(raw):
    merged = merge_intervals(raw)
    hours = {
        h
        for a, b in raw
        for h in range(
            int((a - datetime(2026, 3, 1)).total_seconds()) // 3600,
            int((b - datetime(2026, 3, 1)).total_seconds()) // 3600,
        )
    }
    assert sum((b - a).total_seconds() for a, b in merged) == len(hours) * 3600
    assert all(a[1] < b[0] for a, b in itertools.pairwise(merged))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 40), days=st.integers(1, 45), mem=st.sampled_from([0, 4, 8, 16]), more=st.integers(1, 5))
def test_cost_positive_and_monotonic_in_participants_and_days(n, days, mem, more):
    base = best_total(course(n, days, mem))
    assert base > 0
    assert best_total(course(n + more, days, mem)) >= base
    assert best_total(course(n, days + more, mem)) >= base


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 20), days=st.integers(1, 20))
def test_lab_hours_never_cost_more_than_24_7(n, days):
    assert best_total(course(n, days, 4, hours="09:00-17:00")) <= best_total(course(n, days, 4))


toml_scalars = st.one_of(
    st.integers(-5, 50), st.floats(allow_nan=True), st.text(max_size=12), st.booleans(), st.dates()
)
course_like = st.fixed_dictionaries(
    {},
    optional={
        "participants": toml_scalars,
        "name": toml_scalars,
        "offers": st.lists(st.text(max_size=8), max_size=3),
        "needs": st.dictionaries(
            st.sampled_from(["min_gpu_memory_gb", "cuda", "guest_os", "isolation", "x"]), toml_scalars, max_size=3
        ),
        "schedule": st.dictionaries(
            st.sampled_from(["start", "end", "days", "hours", "weekdays"]), toml_scalars, max_size=4
        ),
        "group": st.lists(st.dictionaries(st.sampled_from(["name", "count", "cuda"]), toml_scalars), max_size=2),
    },
)


@settings(max_examples=300)
@given(data=course_like)
def test_course_parser_raises_only_input_errors(data):
    try:
        parsed = validate(Course, data, where="course.toml")
    except InputError as exc:
        assert exc.where and exc.where.startswith("course.toml")
        return
    assert parsed.participant_count > 0
    assert parsed.schedule.period_days >= 1


@settings(max_examples=200)
@given(body=st.text(max_size=300))
def test_skypilot_parser_raises_only_input_errors(tmp_path_factory, body):
    from gpuseat.catalog.skypilot import import_skypilot

    path = tmp_path_factory.mktemp("csv") / "vms.csv"
    path.write_text("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo\n" + body)
    try:
        result = import_skypilot(path, "aws", catalog=CATALOG, as_of=date(2026, 1, 1))
    except InputError:
        return
    assert all(o.price_usd > 0 for o in result.offers)
