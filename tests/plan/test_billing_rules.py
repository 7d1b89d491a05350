"""Concrete courses priced under the providers' documented rules, each total worked out by hand here."""

from __future__ import annotations

import json
from datetime import datetime

from gpuseat.core.course import Course

T4 = ["gcp:n1-standard-4+1xT4", "aws:g4dn.xlarge", "azure:Standard_NC4as_T4_v3"]


def course_file(tmp_path, offers, schedule, participants=16, extra=""):
    path = tmp_path / "course.toml"
    path.write_text(
        f"participants = {participants}\noffers = {json.dumps(offers)}\n{extra}\n"
        f"[needs]\nmin_gpu_memory_gb = 12\n[schedule]\n{schedule}\n"
    )
    return path


def plan_json(cli, path, *args):
    r = cli("plan", path, "--format", "json", *args)
    assert r.code == 0, r.err
    return json.loads(r.out)


def by_offer(result):
    return {o["offers"][0]["offer"]: o for o in result["options"] if len(o["offers"]) == 1}


def test_gcp_june_t4_with_sustained_use_is_cheapest(cli, tmp_path):
    """16 T4 seats 24/7 for June 2026 (30 days, 720 h, the whole billing month):
    GCP n1-standard-4 + T4 at $0.54/h: 0.54 × 720 × 16 = $6,220.80 list; GCP's sustained-use tiers charge
    the month's quarters at 100/80/60/40 %: 180 × (1 + 0.8 + 0.6 + 0.4) = 504 h → 0.54 × 504 × 16 = $4,354.56;
    AWS g4dn.xlarge: 0.526 × 720 × 16 = 6,059.52 + public IPv4 0.005 × 720 × 16 = 57.60 → $6,117.12;
    Azure NC4as_T4_v3: 0.526 × 720 × 16 = $6,059.52. With the discount GCP is first by $1,704.96."""
    result = plan_json(cli, course_file(tmp_path, T4, "start = 2026-06-01\nend = 2026-06-30"))
    t = {k: o["total_usd"] for k, o in by_offer(result).items()}
    assert t == {"gcp:n1-standard-4+1xT4": 4354.56, "azure:Standard_NC4as_T4_v3": 6059.52, "aws:g4dn.xlarge": 6117.12}
    assert result["options"][0]["offers"][0]["offer"] == "gcp:n1-standard-4+1xT4"
    assert round(t["azure:Standard_NC4as_T4_v3"] - t["gcp:n1-standard-4+1xT4"], 2) == 1704.96
    gcp = by_offer(result)["gcp:n1-standard-4+1xT4"]
    line = next(ln for ln in gcp["lines"] if ln["item"] == "instance hours")
    assert "504 h charged" in line["formula"] and "30.0% off" in line["formula"]


def test_gcp_june_without_the_discount_ranks_last(cli, tmp_path):
    """The same offer without the sustained-use rule (as gpuseat priced it before): 0.54 × 720 × 16 = $6,220.80,
    dearer than AWS ($6,117.12) and Azure ($6,059.52): $1,866.24 more than with the discount."""
    offers = tmp_path / "gcp-list.toml"
    offers.write_text(
        'schema_version = 1\n[[offer]]\nid = "gcp:n1-t4-list"\nprovider = "gcp"\nkind = "cloud"\n'
        'instance_type = "n1-t4-list"\nregion = "us-central1"\ngpu = "T4"\ngpu_count = 1\nvcpus = 4\nram_gb = 15\n'
        'price_usd = 0.54\nbilling = "per-second"\nrules = ["gcp-per-second"]\ndisk_usd_per_gb_month = 0.04\n'
        'egress_usd_per_gb = 0.12\nsource = "test copy without sustained use"\nas_of = 2026-11-09\n'
    )
    path = course_file(tmp_path, [*T4, "gcp:n1-t4-list"], "start = 2026-06-01\nend = 2026-06-30")
    t = {k: o["total_usd"] for k, o in by_offer(plan_json(cli, path, "--offers", offers)).items()}
    assert t["gcp:n1-t4-list"] == 6220.80
    assert max(t.values()) == 6220.80
    assert round(t["gcp:n1-t4-list"] - t["gcp:n1-standard-4+1xT4"], 2) == 1866.24


def test_fourteen_days_already_flip_the_winner(cli, tmp_path):
    """1-14 June 2026 24/7: 336 h of June's 720: tiers 180 h at 100 % + 156 h at 80 % = 304.8 h charged:
    0.54 × 304.8 × 16 = $2,633.47 < Azure 0.526 × 336 × 16 = $2,827.78."""
    result = plan_json(cli, course_file(tmp_path, T4, "start = 2026-06-01\ndays = 14"))
    t = {k: o["total_usd"] for k, o in by_offer(result).items()}
    assert t["gcp:n1-standard-4+1xT4"] == 2633.47
    assert t["azure:Standard_NC4as_T4_v3"] == 2827.78
    assert result["options"][0]["offers"][0]["offer"] == "gcp:n1-standard-4+1xT4"


def test_ovh_may_is_prorated_on_the_days_left(cli, tmp_path):
    """16 l4-90 monthly instances from 18 May 2026 to 31 May: OVH's rule since 2026-04-01 prorates the
    first month on the days left (18-31 May: 14 of 31): 730 × 14/31 × 16 = $5,274.84 (not 16 × 730 =
    $11,680.00). Before 2026-04-01 the same course is a whole month: 18-31 March 2026 → $11,680.00.
    Running on to 5 June adds June whole: 730 × (14/31 + 1) × 16 = $16,954.84."""
    may = by_offer(plan_json(cli, course_file(tmp_path, ["ovh:l4-90-monthly"], "start = 2026-05-18\nend = 2026-05-31")))
    assert may["ovh:l4-90-monthly"]["total_usd"] == round(730 * 14 / 31 * 16, 2) == 5274.84
    rules = may["ovh:l4-90-monthly"]["prices"][0]["rules"]
    assert rules[0]["id"] == "ovh-monthly-2026" and "ovhcloud" in rules[0]["source"].lower()
    march = by_offer(
        plan_json(cli, course_file(tmp_path, ["ovh:l4-90-monthly"], "start = 2026-03-18\nend = 2026-03-31"))
    )
    assert march["ovh:l4-90-monthly"]["total_usd"] == 11680.00
    june = by_offer(
        plan_json(cli, course_file(tmp_path, ["ovh:l4-90-monthly"], "start = 2026-05-18\nend = 2026-06-05"))
    )
    assert june["ovh:l4-90-monthly"]["total_usd"] == 16954.84


def test_runpod_stopped_every_night_is_flagged(cli, tmp_path):
    """Weekday lab 09:00-17:00: RunPod seats are stopped every night and their restart is not guaranteed;
    the same offer 24/7 is never stopped and carries no such flag. Azure seats get the deallocate note."""
    offers = ["runpod:1x_RTXA4000_SECURE", "azure:Standard_NC4as_T4_v3"]
    lab = 'start = 2026-03-02\nend = 2026-03-13\nhours = "09:00-17:00"'
    result = plan_json(cli, course_file(tmp_path, offers, lab, participants=14))
    runpod = by_offer(result)["runpod:1x_RTXA4000_SECURE"]
    assert result["options"][0] is not None and runpod["rank"] == 1
    assert any(r.startswith("restart not guaranteed: runpod:1x_RTXA4000_SECURE") for r in runpod["risks"])
    assert any("zero GPUs" in r for r in runpod["risks"])
    azure = by_offer(result)["azure:Standard_NC4as_T4_v3"]
    assert azure["risks"] == [] and any("Stopped (deallocated)" in n for n in azure["notes"])
    # 14 seats × 10 sessions × 8 h at $0.25 = $280.00
    assert runpod["total_usd"] == 280.00
    text = cli("plan", course_file(tmp_path, offers, lab, participants=14)).out
    assert "restart risk" in text and "Risk (option 1): restart not guaranteed" in text
    always = plan_json(cli, course_file(tmp_path, offers, "start = 2026-03-02\ndays = 5", participants=14))
    assert all(o["risks"] == [] for o in always["options"])


def test_aws_ipv4_fee_and_free_egress(cli, tmp_path):
    """4 g4dn seats 24/7 for 2 days in 2026 with 30 GB egress each: instance 0.526 × 48 × 4 = 100.99;
    public IPv4 0.005 × 48 × 4 = 0.96; egress 30 × 0.09 × 4 = 10.80; AWS's 100 GB/month free covers
    100 of the 120 GB: -9.00. Total 100.99 + 0.96 + 10.80 - 9.00 = $103.75. In 2016 neither rule applied."""
    path = course_file(tmp_path, ["aws:g4dn.xlarge"], "start = 2026-03-02\ndays = 2", participants=4, extra="")
    path.write_text(path.read_text() + "[costs]\negress_gb_per_seat = 30\n")
    best = plan_json(cli, path)["options"][0]
    items = {ln["item"]: ln["usd"] for ln in best["lines"]}
    assert items == {"instance hours": 100.99, "public IPv4": 0.96, "egress": 10.80, "egress free allowance": -9.00}
    assert best["total_usd"] == 103.75
    old = tmp_path / "old.toml"
    old.write_text(
        path.read_text()
        .replace("2026-03-02", "2016-03-01")
        .replace("aws:g4dn.xlarge", "aws:g2.2xlarge")
        .replace("min_gpu_memory_gb = 12", "min_gpu_memory_gb = 4")
    )
    items = {ln["item"] for ln in plan_json(cli, old)["options"][0]["lines"]}
    assert "public IPv4" not in items and "egress free allowance" not in items


def test_region_geography_keeps_azure_eastus_and_runpod_us(cli, tmp_path):
    """--region us maps each provider's names (Azure eastus, RunPod US, AWS us-east-1); the glob us-* keeps
    only names that start with us-, and the plan says what it dropped and that 'us' would keep them."""
    offers = ["azure:Standard_NC4as_T4_v3", "runpod:1x_RTXA4000_SECURE", "aws:g4dn.xlarge", "ovh:l4-90"]
    path = course_file(tmp_path, offers, "start = 2026-03-02\ndays = 2", participants=2)
    us = plan_json(cli, path, "--region", "us")
    used = {x["offer"] for o in us["options"] for x in o["offers"]}
    assert {"azure:Standard_NC4as_T4_v3", "runpod:1x_RTXA4000_SECURE", "aws:g4dn.xlarge"} <= used
    assert "ovh:l4-90" not in used
    assert us["filters"][0]["dropped"] == 1 and us["filters"][0]["examples"] == ["ovh (eu)"]
    glob = plan_json(cli, path, "--region", "us-*")
    used = {x["offer"] for o in glob["options"] for x in o["offers"]}
    assert used == {"aws:g4dn.xlarge"}
    report = glob["filters"][0]
    assert report["dropped"] == 3 and "azure (eastus)" in report["examples"] and "runpod (US)" in report["examples"]
    assert "--region us also keeps" in report["hint"]
    text = cli("plan", path, "--region", "us-*").out
    assert "Filter --region us-*: dropped 3 offer(s)" in text and "azure (eastus)" in text


def test_gpu_globs_find_gcp_a2_machines(cli, tmp_path):
    """gpu = ["A100*"] in the course file: every provider's A100s, GCP's a2-highgpu-1g included."""
    path = tmp_path / "a100.toml"
    path.write_text('gpu = ["A100*"]\nparticipants = 2\n[schedule]\nstart = 2026-03-02\ndays = 1\n')
    result = plan_json(cli, path)
    used = {x["offer"] for o in result["options"] for x in o["offers"]}
    assert "gcp:a2-highgpu-1g" in used
    assert all(x.split(":")[0] in {"aws", "gcp", "azure", "lambda", "runpod"} for x in used)
    assert result["filters"][0]["filter"] == "gpu = ['A100*']" and result["filters"][0]["dropped"] > 0
    path.write_text(path.read_text().replace('"A100*"', '"Z900*"'))
    r = cli("plan", path)
    assert r.code == 2 and "no GPU model matches 'Z900*'" in r.err and "field 'gpu'" in r.err


def test_group_labels_in_lines_and_per_seat_hour(cli):
    from pathlib import Path

    lab = Path(__file__).resolve().parents[2] / "examples" / "course-lab-hours.toml"
    text = cli("plan", lab, "--explain").out
    assert "[students] instance hours" in text and "[instructors] instance hours" in text
    assert "speed [students]" in text and "speed [instructors]" in text
    best = plan_json(cli, lab)["options"][0]
    assert sorted(g for p in best["performance"] for g in p["groups"]) == ["instructors", "students"]


def test_access_window_prices_cloud_seats_for_the_window():
    """Lab sessions Mon-Fri 09:00-17:00 and access 08:00-22:00 every day, 2-8 March 2026 (7 days): seats
    are open 14 h a day (the sessions lie inside the window): 98 h; outside it they are stopped."""
    course = Course.model_validate(
        {
            "participants": 2,
            "schedule": {"start": "2026-03-02", "end": "2026-03-08", "hours": "09:00-17:00", "access": "08:00-22:00"},
        }
    )
    s = course.schedule
    assert len(s.session_intervals()) == 5 and s.in_use_hours() == 98
    assert s.open_at(datetime(2026, 3, 7, 12, 0)) == (datetime(2026, 3, 7, 8), datetime(2026, 3, 7, 22))
    assert s.open_at(datetime(2026, 3, 7, 23, 0)) is None
    always = course.model_copy(update={"schedule": s.model_copy(update={"access": "24/7"})})
    assert always.schedule.in_use_hours() == 7 * 24 and len(always.schedule.access_intervals()) == 1


def test_access_window_in_a_plan(cli, tmp_path):
    """The same course on aws:g4dn.xlarge: 7 windows of 14 h = 98 h × 0.526 × 2 = $103.10, plus IPv4
    0.005 × 98 × 2 = $0.98."""
    path = course_file(
        tmp_path,
        ["aws:g4dn.xlarge"],
        'start = 2026-03-02\nend = 2026-03-08\nhours = "09:00-17:00"\naccess = "08:00-22:00"',
        participants=2,
    )
    best = plan_json(cli, path)["options"][0]
    items = {ln["item"]: ln["usd"] for ln in best["lines"]}
    assert items == {"instance hours": 103.10, "public IPv4": 0.98}
    path.write_text(path.read_text().replace('"08:00-22:00"', '"8-22"'))
    r = cli("plan", path)
    assert r.code == 2 and "access must be" in r.err


def test_euro_offer_shows_its_price_and_the_dated_rate(cli, tmp_path):
    """A €184/month one-GPU server, one dedicated seat each for 2 participants: 2 servers for 10 days of March
    2026, one whole (anniversary) month: 2 × 184 × 1.10 = $404.80; the plan prints the euro price and the rate's
    date."""
    cat = tmp_path / "cat"
    cat.mkdir()
    (cat / "rules.toml").write_text(
        '[[rule]]\nid = "test-eur"\nkind = "exchange-rate"\ncurrency = "EUR"\nusd_per_unit = 1.10\n'
        'text = "test rate"\nsource = "test: a reference rate"\nas_of = 2026-11-30\n'
    )
    offers = tmp_path / "eur.toml"
    offers.write_text(
        'schema_version = 1\n[[offer]]\nid = "hz:gex44"\nprovider = "hz"\nkind = "bare-metal"\n'
        'instance_type = "GEX44"\ngpu = "L4"\ngpu_count = 1\nvcpus = 14\nram_gb = 64\ncurrency = "EUR"\n'
        'price = 184\nbilling = "month-whole"\nmonth_start = "anniversary"\nrules = ["ovh-dedicated-monthly"]\n'
        'disk_usd_per_gb_month = 0\nsource = "test"\nas_of = 2026-01-11\n'
    )
    path = course_file(tmp_path, ["hz:*"], "start = 2026-03-02\ndays = 10", participants=2)
    path.write_text(
        path.read_text().replace("min_gpu_memory_gb = 12", 'min_gpu_memory_gb = 12\nisolation = "dedicated"')
    )
    result = plan_json(cli, path, "--catalog", cat, "--offers", offers)
    best = result["options"][0]
    assert best["total_usd"] == 404.80
    price = best["prices"][0]
    assert (price["currency"], price["price"], price["price_usd"]) == ("EUR", 184, 202.4)
    text = cli("plan", path, "--catalog", cat, "--offers", offers).out
    assert "hz:gex44: $202.40/month (= 184.00 EUR, rate of 2026-11-30), as of 2026-01-11" in text


def test_quoted_text_and_group_names_reach_the_terminal_cleaned(cli, tmp_path):
    """A course file's quoted figure and group name carrying an escape sequence print without raw controls."""
    path = tmp_path / "c.toml"
    evil = "\u001b]0;pwned\u0007\u001b[2J"
    path.write_text(
        f'offers = ["aws:g4dn.xlarge"]\n[[group]]\nname = {json.dumps("a" + evil)}\ncount = 1\n'
        f'[[group]]\nname = "b"\ncount = 1\n[schedule]\nstart = 2026-03-02\ndays = 1\n'
        f'[[quoted]]\nwhat = {json.dumps("a post" + evil)}\nusd = 10.0\nsource = "x"\n'
    )
    for args in ((), ("--explain",), ("--why", "aws:g4dn.xlarge")):
        r = cli("plan", path, *args)
        assert r.code == 0, r.err
        assert "\u001b" not in r.out and "\u0007" not in r.out
    assert "Quoted: a post" in cli("plan", path).out


def test_an_access_window_without_sessions(cli, tmp_path):
    """Only an access window (08:00-22:00, 2-3 March 2026): seats open 2 × 14 h = 28 h. A stoppable AWS seat
    is billed those 28 h (0.526 × 28 = $14.73 + IPv4 $0.14); a Lambda seat cannot stop and runs from the first
    window's start to the last one's end, 2 March 08:00 - 3 March 22:00 = 38 h (0.69 × 38 = $26.22)."""
    path = course_file(
        tmp_path,
        ["aws:g4dn.xlarge", "lambda:gpu_1x_rtx6000"],
        'start = 2026-03-02\nend = 2026-03-03\naccess = "08:00-22:00"',
        participants=1,
    )
    result = plan_json(cli, path)
    assert result["course"]["seat_hours_each"] == 28 and result["course"]["access"] == "08:00-22:00"
    t = {k: o["total_usd"] for k, o in by_offer(result).items()}
    assert t == {"aws:g4dn.xlarge": 14.87, "lambda:gpu_1x_rtx6000": 26.22}
    path.write_text(path.read_text().replace('access = "08:00-22:00"', 'access = "08:00-22:00"\naccess_weekdays = []'))
    r = cli("plan", path)
    assert r.code == 2 and "opens on no day" in r.err
