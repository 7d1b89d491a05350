"""Guest OS, Windows licences and the provider rules in the data, against figures worked out by hand."""

from __future__ import annotations

import json

from gpuseat.catalog.bundle import load_catalog

COURSE = """participants = {n}
offers = [{offers}]
[needs]
min_gpu_memory_gb = 16
guest_os = "{os}"
[schedule]
{schedule}
[costs]
storage_gb_per_seat = {gb}
"""
DAY = "start = 2026-03-02\ndays = 1"
LAB_WEEK = 'start = 2026-03-02\nend = 2026-03-06\nhours = "09:00-17:00"'  # Mon-Fri: 40 h in a 104 h span


def plan_json(cli, tmp_path, offers, *, n=1, os="linux", schedule=DAY, gb=0, extra=()):
    path = tmp_path / "course.toml"
    quoted = ", ".join(f'"{o}"' for o in offers)
    path.write_text(COURSE.format(n=n, offers=quoted, os=os, schedule=schedule, gb=gb))
    r = cli("plan", path, "--format", "json", *extra)
    assert r.code == 0, r.err
    return json.loads(r.out)


def option_for(result, offer):
    return next(o for o in result["options"] if any(x["offer"] == offer for x in o["offers"]))


def lines(option, offer):
    return {ln["item"]: ln for ln in option["lines"] if ln["offer"] == offer}


def test_windows_seats_skip_container_clouds_and_pay_the_licence(cli, tmp_path):
    """One Windows seat for a day: RunPod and Lambda run Linux only; AWS g4dn.xlarge costs 0.526 × 24 = 12.62
    plus the Windows licence 0.046 $/vCPU-h × 4 vCPUs × 24 h = 4.42 plus its public IPv4 address
    0.005 $/h × 24 h = 0.12 (charged since 2024-02-01)."""
    offers = ["aws:g4dn.xlarge", "runpod:1x_RTXA4000_SECURE", "lambda:gpu_1x_rtx6000"]
    result = plan_json(cli, tmp_path, offers, os="windows")
    rejected = {r["offer"]: r["reason"] for r in result["rejected"]}
    assert rejected == {
        "runpod:1x_RTXA4000_SECURE": "runs Linux guests only, not Windows",
        "lambda:gpu_1x_rtx6000": "runs Linux guests only, not Windows",
    }
    best = result["options"][0]
    items = lines(best, "aws:g4dn.xlarge")
    assert items["instance hours"]["usd"] == 12.62
    assert items["Windows licence"]["usd"] == 4.42
    assert items["public IPv4"]["usd"] == 0.12
    assert best["total_usd"] == 17.16
    linux = plan_json(cli, tmp_path, offers)
    assert linux["rejected"] == [] and linux["options"][0]["offers"][0]["offer"] == "runpod:1x_RTXA4000_SECURE"


def test_runpod_disk_costs_more_while_stopped(cli, tmp_path):
    """50 GB on RunPod over a Mon-Fri 09:00-17:00 week: 40 h running at 0.10 and 64 h stopped at 0.20 $/GB-month
    (730 h months): 50 × (0.10 × 40 + 0.20 × 64) / 730 = 1.15; the pod itself 0.25 × 40 = 10.00."""
    result = plan_json(cli, tmp_path, ["runpod:1x_RTXA4000_SECURE"], schedule=LAB_WEEK, gb=50)
    items = lines(result["options"][0], "runpod:1x_RTXA4000_SECURE")
    assert items["disk"]["usd"] == round(50 * (0.10 * 40 + 0.20 * 64) / 730, 2) == 1.15
    assert items["instance hours"]["usd"] == 10.00
    assert "50 GB × 40 h running + 0.20 $/GB-month × 64 h stopped (month = 730 h)" in items["disk"]["formula"]


def test_ovh_hourly_instances_bill_until_deleted(cli, tmp_path):
    """OVH bills an hourly instance while it exists: the whole 104 h span of the lab week, 1.00 × 104 = 104.00."""
    result = plan_json(cli, tmp_path, ["ovh:l4-90"], schedule=LAB_WEEK)
    best = result["options"][0]
    assert lines(best, "ovh:l4-90")["instance hours"]["usd"] == 104.00
    assert any("ovh:l4-90 cannot be stopped" in n for n in best["notes"])


def test_azure_disks_bill_by_size_tier(cli, tmp_path):
    """50 GB on Azure is the 64 GiB tier: 0.05 × 64 × 104 h / 730 h = 0.46 for the lab week."""
    result = plan_json(cli, tmp_path, ["azure:Standard_NC4as_T4_v3"], schedule=LAB_WEEK, gb=50)
    disk = lines(result["options"][0], "azure:Standard_NC4as_T4_v3")["disk"]
    assert disk["usd"] == round(0.05 * 64 * 104 / 730, 2) == 0.46
    assert "(50 GB → 64 GB tier)" in disk["formula"]


def test_unknown_storage_price_is_a_note_not_zero(cli, tmp_path):
    offers = tmp_path / "offers.toml"
    offers.write_text(
        'schema_version = 1\n[[offer]]\nid = "x:gpu"\nprovider = "x"\nkind = "cloud"\ninstance_type = "gpu"\n'
        'gpu = "L4"\ngpu_count = 1\nvcpus = 8\nram_gb = 32\nprice_usd = 1\nbilling = "per-hour"\n'
        'source = "test"\nas_of = 2026-01-01\n'
    )
    result = plan_json(cli, tmp_path, ["x:*"], gb=20, extra=("--offers", offers))
    best = result["options"][0]
    assert "storage not priced for x:gpu: its disk price is unknown" in best["notes"]
    assert "disk" not in lines(best, "x:gpu")


def test_old_prices_are_flagged_historical(cli, tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('participants = 1\noffers = ["aws:g2.2xlarge"]\n[schedule]\nstart = 2026-03-02\ndays = 1\n')
    r = cli("plan", path, "--format", "json")
    notes = json.loads(r.out)["options"][0]["notes"]
    assert "aws:g2.2xlarge: price as of 2016-06-01, 9 year(s) before the course: historical" in notes


def test_offer_memory_filled_from_the_gpu_catalog_at_load():
    catalog = load_catalog()
    m60 = next(o for o in catalog.offers if o.id == "ibm:bm-2xM60")
    assert m60.gpu_memory_gb == 8 and m60.memory_per_chip_gb == 8  # not given in offers.toml: the M60 chip's


def test_every_bundled_offer_and_provider_has_a_source():
    catalog = load_catalog()
    assert all(o.source and o.as_of for o in catalog.offers)
    for rules in catalog.providers.values():
        assert rules.source and rules.as_of
        if rules.windows_usd_per_vcpu_h:
            assert rules.windows_source
        if rules.disk_usd_per_gb_month:
            assert rules.disk_source
    assert {"P4", "P100"} <= set(catalog.gpus)


def test_catalog_overlay_adds_offers_to_plan_and_list(cli, tmp_path):
    """A 2× L4 server of our own at $300 for March, for 2 participants: two passthrough seats cost $300. The
    carver's most-seats layout (12 vGPU L4-4C seats) would add a $4,500 × 2 GPU licence ($9,300): the
    planner prices each licence's layout and keeps the cheapest."""
    overlay = tmp_path / "catalog"
    overlay.mkdir()
    (overlay / "offers.toml").write_text(
        'schema_version = 1\n[[offer]]\nid = "lab:srv"\nprovider = "lab"\nkind = "bare-metal"\n'
        'instance_type = "our server"\ngpu = "L4"\ngpu_count = 2\nvcpus = 32\nram_gb = 128\nprice_usd = 300\n'
        'billing = "month-whole"\ndisk_usd_per_gb_month = 0\nsource = "our invoice"\nas_of = 2026-02-01\n'
    )
    course = tmp_path / "c.toml"
    course.write_text('participants = 2\noffers = ["lab:*"]\n[schedule]\nstart = 2026-03-02\ndays = 5\n')
    r = cli("plan", course, "--catalog", overlay, "--format", "json")
    assert r.code == 0, r.err
    best = json.loads(r.out)["options"][0]
    assert best["offers"] == [{"offer": "lab:srv", "count": 1}] and best["total_usd"] == 300.00
    assert cli("plan", course).code == 2  # without the overlay the id is unknown
    listed = json.loads(cli("offers", "list", "--catalog", overlay, "--format", "json").out)
    assert any(row["offer"] == "lab:srv" for row in listed)
