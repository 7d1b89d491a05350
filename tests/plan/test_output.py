"""What `gpuseat plan` prints: one screen for the 2016 course, one JSON serialiser, --why, --region, --budget,
distinct alternatives and rejections folded per offer."""

from __future__ import annotations

import json
from pathlib import Path

from gpuseat.catalog.bundle import load_catalog
from gpuseat.services.planning import plan_course, recorded_speeds

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
COURSE_2016 = EXAMPLES / "course-2016.toml"


def test_explain_fits_on_one_screen(cli):
    r = cli("plan", COURSE_2016, "--explain")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert len(lines) <= 40, r.out
    assert "Rejected" not in r.out  # every offer of the 2016 course seats the group: nothing to reject
    assert "Speeds: shipped reference results only" in r.out
    verbose = cli("plan", COURSE_2016, "--explain", "--verbose").out
    assert "Passed over on servers that seat the group" in verbose and "M60-4Q" in verbose


def test_to_dict_is_the_json_output(cli):
    r = cli("plan", EXAMPLES / "course-lab-hours.toml", "--format", "json")
    assert r.code == 0, r.err
    printed = json.loads(r.out)
    result = plan_course(EXAMPLES / "course-lab-hours.toml", load_catalog(), recorded=recorded_speeds())
    assert json.loads(json.dumps(result.to_dict(), default=str)) == printed
    assert printed["schema_version"] == 1 and printed["currency"] == "USD"
    assert "Infinity" not in r.out and "NaN" not in r.out


def test_why_prices_an_offer_and_says_why_it_is_not_first(cli):
    """Under IBM's rule the M60 servers cost 4 × 2,961.10 × 25/30 = $9,870.33 for the 2016 course (ordered on
    6 June): $6,126.33 (164 %) more than 16 g2.2xlarge; per seat 2,467.58 / 4 = $616.90."""
    r = cli("plan", COURSE_2016, "--why", "ibm:bm-2xM60", "--format", "json")
    assert r.code == 0, r.err
    why = json.loads(r.out)["why"]
    assert why["option"]["total_usd"] == 9870.33
    assert "with it the course costs $9,870.33, $6,126.33 (164%) more than option 1 ($3,744.00)" in why["reasons"]
    assert any(
        reason.startswith("per seat when its units are full: $616.90 on ibm:bm-2xM60") for reason in why["reasons"]
    )
    assert (
        "its first month is billed from the order day to the month's end: 25 of June's 30 days, "
        "for 15 day(s) of use" in why["reasons"]
    )
    first = json.loads(cli("plan", COURSE_2016, "--why", "aws:g2.2xlarge", "--format", "json").out)["why"]
    assert first["reasons"] == ["it is in the first option: $3,744.00 for the whole course"]
    text = cli("plan", COURSE_2016, "--why", "ibm:bm-2xM60").out
    assert "Why not ibm:bm-2xM60:" in text
    bad = cli("plan", COURSE_2016, "--why", "ibm:bm-2xM61")
    assert bad.code == 2 and "unknown offer id 'ibm:bm-2xM61'. Did you mean ibm:bm-2xM60" in bad.err


def test_region_filter_and_budget(cli):
    lab = EXAMPLES / "course-lab-hours.toml"
    r = cli("plan", lab, "--region", "us-*", "--format", "json")
    assert r.code == 0, r.err
    regions = {o.region for o in load_catalog().offers}
    used = {x["offer"] for o in json.loads(r.out)["options"] for x in o["offers"]}
    by_id = {o.id: o for o in load_catalog().offers}
    assert used and all(by_id[u].region.startswith("us-") for u in used)
    assert "eastus" in regions  # an Azure region that the glob leaves out
    r = cli("plan", lab, "--region", "mars-1")
    assert r.code == 2 and "--region" in r.err
    result = json.loads(cli("plan", COURSE_2016, "--budget", "4000", "--format", "json").out)
    assert [o["over_budget"] for o in result["options"]] == [o["total_usd"] > 4000 for o in result["options"]]
    assert result["options"][0]["over_budget"] is False and result["options"][-1]["over_budget"] is True
    assert "Over the budget of $4,000.00: options 2, 3" in cli("plan", COURSE_2016, "--budget", "4000").out
    for bad in ("inf", "-5", "nan"):
        r = cli("plan", COURSE_2016, "--budget", bad)
        assert r.code == 2 and "Traceback" not in r.err


def test_rejections_fold_twins_and_list_only_offers_that_cannot_seat(cli, tmp_path):
    """10 GB dedicated GPUs: the M60 (8 GB chips) cannot seat anyone, whichever way it is billed: one line."""
    twins = tmp_path / "twins.toml"
    row = (
        '[[offer]]\nid = "dc:m60{suffix}"\nprovider = "dc"\nkind = "bare-metal"\ninstance_type = "2x M60"\n'
        'gpu = "M60"\ngpu_count = 4\nvcpus = 48\nram_gb = 128\nprice_usd = 2961.10\nbilling = "{billing}"\n'
        'disk_usd_per_gb_month = 0\nsource = "test"\nas_of = 2016-03-01\n'
    )
    twins.write_text(
        "schema_version = 1\n"
        + row.format(suffix="", billing="month-prorated")
        + row.format(suffix=":whole-month", billing="month-whole")
    )
    course = tmp_path / "c.toml"
    course.write_text(
        COURSE_2016.read_text()
        .replace("min_gpu_memory_gb = 4", "min_gpu_memory_gb = 10")
        .replace(
            'offers = ["aws:g2.2xlarge", "ibm:bm-2xM60*", "ibm:bm-2xK2*"]',
            'offers = ["dc:m60*", "aws:g4dn.xlarge"]',
        )
    )
    r = cli("plan", course, "--offers", twins, "--format", "json")
    assert r.code == 0, r.err
    rejected = json.loads(r.out)["rejected"]
    assert len(rejected) == 1
    assert rejected[0]["offer"] == "dc:m60" and rejected[0]["twins"] == ["dc:m60:whole-month"]
    text = cli("plan", course, "--offers", twins, "--explain").out
    assert "dc:m60 (+1 twin): no seat fits" in text


def test_alternatives_are_distinct_mixes_with_their_regions(cli, tmp_path):
    """Five instance types in 20 regions at one price each: five options, one per type, each naming the
    19 other regions where it costs the same."""
    rows = []
    for t, price in enumerate([0.5, 0.6, 0.7, 0.8, 0.9]):
        for k in range(20):
            rows.append(
                f'[[offer]]\nid = "x:type-{t}@r-{k:02d}"\nprovider = "x"\nkind = "cloud"\ninstance_type = "type-{t}"\n'
                f'region = "r-{k:02d}"\ngpu = "L4"\ngpu_count = 1\nvcpus = 8\nram_gb = 32\nprice_usd = {price}\n'
                f'billing = "per-hour"\ndisk_usd_per_gb_month = 0\nsource = "test"\nas_of = 2026-01-01\n'
            )
    offers = tmp_path / "offers.toml"
    offers.write_text("schema_version = 1\n" + "".join(rows))
    course = tmp_path / "c.toml"
    course.write_text('participants = 3\noffers = ["x:*"]\n[schedule]\nstart = 2026-03-02\ndays = 1\n')
    result = json.loads(cli("plan", course, "--offers", offers, "--format", "json").out)
    types = [o["offers"][0]["offer"].split("@")[0] for o in result["options"]]
    assert types == [f"x:type-{t}" for t in range(5)]
    assert all(len(o["also_in_regions"]) == 19 for o in result["options"])
    assert [o["total_usd"] for o in result["options"]] == [round(p * 24 * 3, 2) for p in (0.5, 0.6, 0.7, 0.8, 0.9)]


def test_many_rejections_read_as_one_line_per_reason(cli, tmp_path):
    """100 offers that cannot seat the 30 GB group for the same reason: one text line, all 100 in the JSON."""
    rows = [
        f'[[offer]]\nid = "x:l4@r-{k:03d}"\nprovider = "x"\nkind = "cloud"\ninstance_type = "l4"\nregion = "r-{k:03d}"\n'
        f'gpu = "L4"\ngpu_count = 1\nvcpus = 8\nram_gb = 32\nprice_usd = 0.5\nbilling = "per-hour"\n'
        f'disk_usd_per_gb_month = 0\nsource = "test"\nas_of = 2026-01-01\n'
        for k in range(100)
    ]
    rows.append(
        '[[offer]]\nid = "x:a100"\nprovider = "x"\nkind = "cloud"\ninstance_type = "a100"\nregion = "r-000"\n'
        'gpu = "A100-80GB"\ngpu_count = 1\nvcpus = 8\nram_gb = 64\nprice_usd = 2\nbilling = "per-hour"\n'
        'disk_usd_per_gb_month = 0\nsource = "test"\nas_of = 2026-01-01\n'
    )
    offers = tmp_path / "offers.toml"
    offers.write_text("schema_version = 1\n" + "".join(rows))
    course = tmp_path / "c.toml"
    course.write_text(
        'offers = ["x:*"]\n[[group]]\nname = "small"\ncount = 20\n[[group]]\nname = "big"\ncount = 1\n'
        "min_gpu_memory_gb = 30\n[schedule]\nstart = 2026-03-02\ndays = 1\n"
    )
    r = cli("plan", course, "--offers", offers, "--explain")
    assert r.code == 0, r.err
    rejected = r.out.split("Rejected (cannot seat a group):\n", 1)[1].splitlines()
    assert rejected == [
        "  x:l4@r-000, x:l4@r-001, x:l4@r-002, x:l4@r-003 and 96 more: 24 GB GPU memory < 30 GB needed [big]"
    ]
    result = json.loads(cli("plan", course, "--offers", offers, "--format", "json").out)
    assert len(result["rejected"]) == 100
    assert result["options"][0]["also_in_regions"] == [f"r-{k:03d}" for k in range(1, 100)]
