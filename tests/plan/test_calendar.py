"""Calendar billing, through the real CLI, against figures worked out by hand in each test."""

from __future__ import annotations

import json
from datetime import date

from gpuseat.core.cost import BillingMonth, billing_months

M60_COURSE = """participants = 16
offers = ["ibm:bm-2xM60*"]
[needs]
min_gpu_memory_gb = 4
[schedule]
{schedule}
"""


def plan_json(cli, tmp_path, text, *args):
    path = tmp_path / "course.toml"
    path.write_text(text)
    r = cli("plan", path, "--format", "json", *args)
    assert r.code == 0, r.err
    return json.loads(r.out)


def totals(result):
    return {o["offers"][0]["offer"]: o["total_usd"] for o in result["options"] if len(o["offers"]) == 1}


def rent(result, offer):
    option = next(o for o in result["options"] if o["offers"][0]["offer"] == offer)
    return next(ln for ln in option["lines"] if ln["item"] == "server rent")


def test_billing_months_split_at_the_first():
    assert billing_months(date(2016, 3, 25), date(2016, 4, 8)) == [
        BillingMonth(date(2016, 3, 1), 31, 7),  # 25..31 March
        BillingMonth(date(2016, 4, 1), 30, 8),  # 1..8 April
    ]
    # counted from the first day: 25 March to 24 April is one month of 31 days
    assert billing_months(date(2016, 3, 25), date(2016, 4, 8), anniversary=True) == [
        BillingMonth(date(2016, 3, 25), 31, 15)
    ]


RULES = (("prorated", "month-prorated"), ("whole", "month-whole"), ("first", "month-first-prorated"))


def m60_offers(tmp_path, month_start: str = "calendar"):
    """One 2× M60 server at $2,961.10/month under each monthly rule (no provider rules: the billing field)."""
    path = tmp_path / "m60-offers.toml"
    path.write_text(
        "schema_version = 1\n"
        + "".join(
            f'[[offer]]\nid = "dc:m60:{suffix}"\nprovider = "dc"\nkind = "bare-metal"\ninstance_type = "2x M60"\n'
            f'gpu = "M60"\ngpu_count = 4\nvcpus = 48\nram_gb = 128\nprice_usd = 2961.10\nbilling = "{billing}"\n'
            f'month_start = "{month_start}"\ndisk_usd_per_gb_month = 0\nsource = "test"\nas_of = 2016-03-01\n'
            for suffix, billing in RULES
        )
    )
    return path


def dc_plan(cli, tmp_path, schedule, month_start="calendar"):
    text = M60_COURSE.format(schedule=schedule).replace('"ibm:bm-2xM60*"', '"dc:*"')
    return plan_json(cli, tmp_path, text, "--offers", m60_offers(tmp_path, month_start))


def test_whole_of_march_is_one_calendar_month(cli, tmp_path):
    """1-31 March 2016 on 4 servers at $2,961.10/month: prorated 31/31, whole-month and first-month-prorated
    (ordered on the 1st) all = 4 × 2,961.10."""
    result = dc_plan(cli, tmp_path, "start = 2016-03-01\nend = 2016-03-31")
    assert totals(result) == {"dc:m60:prorated": 11844.40, "dc:m60:whole": 11844.40, "dc:m60:first": 11844.40}
    assert rent(result, "dc:m60:prorated")["formula"] == (
        "2,961.10 $/month × (31/31 d Mar 2016) × 4 servers = $11,844.40"
    )


def test_february(cli, tmp_path):
    """1-14 February 2026 (28 days): prorated 14/28 → 4 × 2,961.10 / 2 = 5,922.20; whole month 11,844.40;
    first month prorated from the order day (the 1st: 28/28) and cancelled mid-month: 11,844.40.
    All of February 2016 (a leap year, 29 days) is one full month every way."""
    result = dc_plan(cli, tmp_path, "start = 2026-02-01\nend = 2026-02-14")
    assert totals(result) == {"dc:m60:prorated": 5922.20, "dc:m60:whole": 11844.40, "dc:m60:first": 11844.40}
    leap = dc_plan(cli, tmp_path, "start = 2016-02-01\ndays = 29")
    assert set(totals(leap).values()) == {11844.40}


def test_a_course_across_two_months(cli, tmp_path):
    """25 March - 8 April 2016 (15 days) touches two billing months:
    prorated 2,961.10 × (7/31 + 8/30) = 1,458.2623 per server → × 4 = $5,833.05;
    whole-month 2 × 2,961.10 × 4 = $23,688.80 (a 30-day month rule said one month);
    first month prorated (7 of March's 31 days from the order day) + April whole:
    2,961.10 × (7/31 + 1) = 3,629.7355 → × 4 = $14,518.94."""
    result = dc_plan(cli, tmp_path, "start = 2016-03-25\nend = 2016-04-08")
    assert totals(result) == {"dc:m60:prorated": 5833.05, "dc:m60:whole": 23688.80, "dc:m60:first": 14518.94}
    assert rent(result, "dc:m60:prorated")["formula"] == (
        "2,961.10 $/month × (7/31 d Mar 2016 + 8/30 d Apr 2016) × 4 servers = $5,833.05"
    )
    assert "2 billing months (Mar 2016, Apr 2016, charged whole)" in rent(result, "dc:m60:whole")["formula"]
    assert rent(result, "dc:m60:first")["formula"] == (
        "2,961.10 $/month × (7/31 d Mar 2016, from the order day to the month's end + 1 whole month to Apr 2016)"
        " × 4 servers = $14,518.94"
    )


def test_anniversary_months(cli, tmp_path):
    """The same course on an offer whose months run from the first day (25 March - 24 April, 31 days):
    prorated 15/31 × 2,961.10 × 4 = $5,731.16; whole-month one charge × 4 = $11,844.40."""
    offers = tmp_path / "anniversary.toml"
    offers.write_text(
        "schema_version = 1\n"
        + "".join(
            f'[[offer]]\nid = "dc:m60{suffix}"\nprovider = "dc"\nkind = "bare-metal"\ninstance_type = "2x M60"\n'
            f'gpu = "M60"\ngpu_count = 4\nvcpus = 48\nram_gb = 128\nprice_usd = 2961.10\nbilling = "{billing}"\n'
            f'month_start = "anniversary"\ndisk_usd_per_gb_month = 0\nsource = "test"\nas_of = 2016-03-01\n'
            for suffix, billing in (("", "month-prorated"), (":whole", "month-whole"))
        )
    )
    text = M60_COURSE.format(schedule="start = 2016-03-25\nend = 2016-04-08").replace('"ibm:bm-2xM60*"', '"dc:*"')
    result = plan_json(cli, tmp_path, text, "--offers", offers)
    assert totals(result) == {"dc:m60": 5731.16, "dc:m60:whole": 11844.40}


LAB = """participants = 2
offers = ["aws:g4dn.xlarge", "lambda:gpu_1x_rtx6000"]
[needs]
min_gpu_memory_gb = 16
[schedule]
{schedule}
[costs]
storage_gb_per_seat = 50
"""


def lines_of(result, offer):
    option = next(o for o in result["options"] if o["offers"][0]["offer"] == offer)
    return {ln["item"]: ln for ln in option["lines"]}, option["notes"]


def test_course_starting_on_a_saturday(cli, tmp_path):
    """Saturday 7 - Friday 13 March 2026, weekday sessions 09:00-17:00: the first session is Monday 9th 09:00,
    the last ends Friday 13th 17:00, 4 d 8 h = 104 h (not 7 × 24 = 168 h from Saturday 00:00).
    Lambda (cannot stop): 0.69 × 104 = 71.76 per seat. AWS: 5 sessions × 8 h × 0.526 = 21.04 per seat;
    its 50 GB EBS disk for the 104 h of a 744 h March: 0.08 × 50 × 104 / 744 = 0.5591 per seat."""
    text = LAB.format(schedule='start = 2026-03-07\nend = 2026-03-13\nhours = "09:00-17:00"')
    result = plan_json(cli, tmp_path, text)
    lam, notes = lines_of(result, "lambda:gpu_1x_rtx6000")
    assert lam["instance hours"]["formula"] == "0.69 $/h × 104 h × 2 seats = $143.52"
    assert any("billed from the first session's start to the last one's end (104 h)" in n for n in notes)
    aws, _ = lines_of(result, "aws:g4dn.xlarge")
    assert aws["instance hours"]["usd"] == 42.08
    assert aws["disk"]["usd"] == round(0.08 * 50 * 104 / 744 * 2, 2) == 1.12


def test_overlapping_and_duplicate_sessions_are_billed_once(cli, tmp_path):
    """09:00-12:00, 11:00-13:00 and 09:00-12:00 again on one day are one run of 09:00-13:00: 4 h × 0.526 = 2.104."""
    sessions = "\n".join(
        f'[[schedule.session]]\ndate = 2026-03-02\nhours = "{h}"' for h in ("09:00-12:00", "11:00-13:00", "09:00-12:00")
    )
    text = LAB.format(schedule="start = 2026-03-02\nend = 2026-03-02\n" + sessions).replace(
        "participants = 2", "participants = 1"
    )
    result = plan_json(cli, tmp_path, text)
    aws, _ = lines_of(result, "aws:g4dn.xlarge")
    assert aws["instance hours"]["formula"] == "0.526 $/h × 4 h × 1 seat = $2.10"
    assert result["course"]["seat_hours_each"] == 4


def test_sessions_across_midnight(cli, tmp_path):
    """18:00-02:00 Monday 2 - Friday 6 March 2026: five 8 h sessions (0.526 × 8 × 5 = 21.04 a seat), the last
    ending Saturday 02:00; Lambda, kept running, is billed Monday 18:00 - Saturday 02:00 = 104 h (71.76 a seat)."""
    text = LAB.format(schedule='start = 2026-03-02\nend = 2026-03-06\nhours = "18:00-02:00"')
    result = plan_json(cli, tmp_path, text)
    assert result["course"]["seat_hours_each"] == 40
    aws, _ = lines_of(result, "aws:g4dn.xlarge")
    assert aws["instance hours"]["formula"] == "0.526 $/h × 8 h × 5 sessions × 2 seats = $42.08"
    lam, _ = lines_of(result, "lambda:gpu_1x_rtx6000")
    assert lam["instance hours"]["usd"] == round(0.69 * 104 * 2, 2) == 143.52
