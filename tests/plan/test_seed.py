"""The 2016 decision reproduced to the cent, and the planner's other promises, through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"

EXAMPLES = REPO / "examples"


def plan_json(cli, *args):
    r = cli("plan", *args, "--format", "json")
    assert r.code == 0, r.err
    return json.loads(r.out)


def totals(result):
    return {o["offers"][0]["offer"]: o["total_usd"] for o in result["options"] if len(o["offers"]) == 1}


def test_2016_options_to_the_cent(cli):
    """The 2016 course, ordered on Monday 6 June 2016 for 15 days (6-20 June), 16 seats:
    AWS 16 × g2.2xlarge: 0.65 $/h × 360 h × 16 = $3,744.00 (whole hours, the post's figure too);
    IBM's rule (first month prorated from the order day, a cancellation on 20 June charged in full):
    4 × 2,961.10 × 25/30 = 4 × 2,467.5833 = $9,870.33 (M60), 4 × 2,096.40 × 25/30 = $6,988.00 (K2);
    the post's half-month arithmetic: 4 × 2,961.10 / 2 = $5,922.20 and 4 × 2,096.40 / 2 = $4,192.80."""
    result = plan_json(cli, EXAMPLES / "course-2016.toml")
    t = totals(result)
    assert t["aws:g2.2xlarge"] == 3744.00
    assert t["ibm:bm-2xM60"] == round(4 * 2961.10 * 25 / 30, 2) == 9870.33
    assert t["ibm:bm-2xK2"] == round(4 * 2096.40 * 25 / 30, 2) == 6988.00
    published = {o["offers"][0]["offer"]: o["published"] for o in result["options"]}
    assert published["ibm:bm-2xM60"]["usd"] == 5922.20
    assert published["ibm:bm-2xK2"]["usd"] == 4192.80
    assert published["aws:g2.2xlarge"]["usd"] == 3744.00
    assert all(p["rule"] == "post-2016-arithmetic" for p in published.values())
    assert published["ibm:bm-2xM60"]["label"].startswith("the 2016 post's arithmetic")
    cheapest = result["options"][0]
    assert cheapest["offers"] == [{"offer": "aws:g2.2xlarge", "count": 16}]
    assert [o["total_usd"] for o in result["options"]] == sorted(o["total_usd"] for o in result["options"])


def test_m60_server_gives_four_seats_with_the_article_cpu_share(cli):
    result = plan_json(cli, EXAMPLES / "course-2016.toml")
    m60 = next(o for o in result["options"] if o["offers"][0]["offer"] == "ibm:bm-2xM60")
    assert m60["offers"][0]["count"] == 4
    assert m60["groups"][0]["seats_per_unit"] == 4
    assert any("12 vCPUs and 32 GB RAM per seat" in n for n in m60["notes"])


def test_explain_prints_formula_lines(cli):
    r = cli("plan", EXAMPLES / "course-2016.toml", "--explain")
    assert r.code == 0, r.err
    assert "0.65 $/h × 24 h × 15 d × 16 seats = $3,744.00" in r.out
    assert (
        "2,961.10 $/month × (25/30 d Jun 2016, from the order day to the month's end) × 4 servers = $9,870.33"
    ) in r.out
    assert ("the 2016 post's arithmetic: $5,922.20 (ibm:bm-2xM60: 2,961.10 $/month × (15/30 d Jun 2016) × 4)") in r.out
    plain = cli("plan", EXAMPLES / "course-2016.toml").out
    assert "Option 3, by the 2016 post's arithmetic: $5,922.20 (the provider's rule bills $9,870.33)" in plain
    assert "Option 2, by the 2016 post's arithmetic: $4,192.80 (the provider's rule bills $6,988.00)" in plain
    assert "Option 1, by the 2016 post's arithmetic: $3,744.00 (the same as the provider's rule)" in plain
    assert "All totals in USD, taxes not included." in plain
    assert "ibm:bm-2xM60: $2,961.10/month, as of 2016-06-01, 2016 course article" in plain


def test_profiles_passed_over_say_why_but_are_not_rejections(cli):
    result = plan_json(cli, EXAMPLES / "course-2016.toml")
    reasons = [r["reason"] for r in result["passed_over"] if r["offer"] == "ibm:bm-2xM60"]
    assert any(r.startswith("M60-4Q: no CUDA in Linux guests on Maxwell") for r in reasons)
    assert result["rejected"] == []  # every offer of the 2016 course seats the group


def test_performance_view_from_reference_results(cli):
    result = plan_json(cli, EXAMPLES / "course-2016.toml")
    m60 = next(o for o in result["options"] if o["offers"][0]["offer"] == "ibm:bm-2xM60")
    perf = m60["performance"][0]
    assert perf["time_saved"] == "24 h of K520 work takes 14.1 h on M60"
    assert perf["lenet_10k_seconds"] == 26.73
    assert perf["usd_per_seat_hour"] == round(9870.33 / (16 * 360), 4)


def test_lab_hours_stop_cloud_seats_but_bill_their_disks(cli):
    result = plan_json(cli, EXAMPLES / "course-lab-hours.toml")
    assert result["course"]["seat_hours_each"] == 80  # 10 weekdays × 8 h
    g4dn = next(o for o in result["options"] if any(x["offer"] == "aws:g4dn.xlarge" for x in o["offers"]))
    lines = {ln["item"]: ln for ln in g4dn["lines"] if ln["offer"] == "aws:g4dn.xlarge"}
    assert lines["instance hours"]["formula"] == "0.526 $/h × 8 h × 10 sessions × 14 seats = $589.12"
    # the 50 GB disk is billed from Monday 2 March 09:00 to Friday 13 March 17:00 (11 d 8 h = 272 h), while
    # the instance is stopped too, at EBS's real month (March: 744 h)
    assert lines["disk"]["usd"] == round(0.08 * 50 * 272 / 744 * 14, 2) == 20.47


def test_instances_that_cannot_stop_are_billed_around_the_clock(cli):
    result = plan_json(cli, EXAMPLES / "course-lab-hours.toml")
    lam = next(o for o in result["options"] if any(x["offer"] == "lambda:gpu_1x_rtx6000" for x in o["offers"]))
    line = next(ln for ln in lam["lines"] if ln["offer"] == "lambda:gpu_1x_rtx6000")
    # billed from the first session's start to the last one's end: 272 h, not 12 whole days
    assert line["formula"] == "0.69 $/h × 272 h × 14 seats = $2,627.52"
    assert any("cannot be stopped" in n for n in lam["notes"])


def test_groups_with_different_needs_get_different_offers(cli):
    result = plan_json(cli, EXAMPLES / "course-lab-hours.toml")
    best = result["options"][0]
    by_group = {g["group"]: g["offer"] for g in best["groups"]}
    assert by_group["instructors"] != by_group["students"]
    rejected_for_instructors = [r for r in result["rejected"] if "instructors" in r["groups"]]
    assert any("GB GPU memory < 40 GB needed" in r["reason"] for r in rejected_for_instructors)


def test_h200_mig_server_seats_fourteen(cli):
    result = plan_json(cli, EXAMPLES / "course-h200-mig.toml")
    best = result["options"][0]
    assert best["offers"] == [{"offer": "example:bm-2xH200", "count": 1}]
    assert best["groups"][0]["seats_per_unit"] == 14
    assert best["groups"][0]["mode"] == "mig"
    assert best["groups"][0]["profile"] == "1g.18gb"


def test_streaming_desktops_share_one_m60_server(cli):
    """The 2016 post's case: 16 non-CUDA Windows streams on one 2× M60 server instead of 16 instances."""
    result = plan_json(cli, EXAMPLES / "course-streaming-2016.toml")
    best = result["options"][0]
    assert best["offers"] == [{"offer": "ibm:bm-2xM60", "count": 1}]
    group = best["groups"][0]
    assert group["mode"] == "vgpu" and group["seats_per_unit"] == 16
    licence = next(ln for ln in best["lines"] if ln["item"].startswith("licence"))
    assert licence["count"] == 16 and licence["usd"] == 160.00  # vApps, 16 × $10 for one annual term
    # IBM's rule: 2,961.10 × 25/30 = 2,467.58 + 160.00; the post's half-month arithmetic: 1,480.55 + 160.00
    assert best["total_usd"] == round(2961.10 * 25 / 30 + 160, 2) == 2627.58
    assert best["published"]["usd"] == round(2961.10 / 2 + 160, 2) == 1640.55
    aws = result["options"][1]
    # 16 × g2.2xlarge with Windows: (0.65 + 0.046 × 8) $/h × 360 h × 16 = 3,744.00 + 2,119.68
    assert aws["offers"] == [{"offer": "aws:g2.2xlarge", "count": 16}] and aws["total_usd"] == 5863.68
    quoted = result["quoted"][0]
    assert quoted["usd"] == 1422.72
    text = cli("plan", EXAMPLES / "course-streaming-2016.toml").out
    for figure in ("$1,422.72", "more than $2,000 cheaper than", "$1,640.55", "$5,863.68", "$2,627.58"):
        assert figure in text
    assert "Where the differences come from" in text


def test_csv_has_numbers(cli):
    r = cli("plan", EXAMPLES / "course-2016.toml", "--format", "csv")
    assert r.code == 0
    lines = r.out.splitlines()
    assert lines[0] == "rank,offers,seats,total_usd,usd_per_seat_hour,over_budget"
    assert lines[1] == "1,16× aws:g2.2xlarge,16,3744.0,0.65,"
