"""Issue 38, items 10 and 11: the plan says what a budget-holder needs without --explain.

10: the default table flags each option's warnings (quota, seats that cannot be stopped, availability and
spend limits, storage and egress billed apart), each the short form of a line --explain prints.
11: -v lists the layouts passed over with reasons that agree with the layout note; --offer globs ignore
case; a requirement that misses a cheaper layout by a little says so, with the saving.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

LAB = 'start = 2026-03-02\nend = 2026-03-13\nhours = "09:00-17:00"'
ALWAYS = "start = 2026-03-02\ndays = 5"

A100_SERVER = """schema_version = 1
[[offer]]
id = "acme:bm-1xA100"
provider = "acme"
kind = "bare-metal"
instance_type = "1x A100 80GB"
gpu = "A100-80GB"
gpu_count = 1
vcpus = 32
ram_gb = 256
price_usd = 2000
billing = "month-whole"
{extra}
source = "test offer"
as_of = 2026-11-01
"""


def course(
    tmp_path: Path, offers: list[str], schedule: str, people: int = 16, needs: str = "", extra: str = ""
) -> Path:
    path = tmp_path / "course.toml"
    path.write_text(
        f'name = "lab"\nparticipants = {people}\noffers = {json.dumps(offers)}\n{extra}\n'
        f"[needs]\nmin_gpu_memory_gb = 12\n{needs}\n[schedule]\n{schedule}\n"
    )
    return path


def run(cli, *args: object):
    r = cli("plan", *args)
    assert r.code == 0, r.err
    return r


@pytest.fixture
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wide terminal: every table cell on one line, so a flag can be looked for whole."""
    monkeypatch.setenv("COLUMNS", "250")


def option_flags(cli, path: Path, *args: object) -> list[list[dict[str, str]]]:
    result = json.loads(run(cli, path, "--format", "json", *args).out)
    return [o["flags"] for o in result["options"]]


def assert_explained(cli, path: Path, *args: object) -> str:
    """Every flag of every option is the short form of one --explain line, printed with it."""
    explain = run(cli, path, "--explain", *args).out
    result = json.loads(run(cli, path, "--format", "json", *args).out)
    for option in result["options"]:
        for f in option["flags"]:
            assert f"  flag '{f['flag']}': {f['text']}" in explain, f
    return explain


# ---------------------------------------------------------------------------------------- item 10


def test_quota_the_account_does_not_have_is_a_flag(cli, tmp_path, wide):
    path = course(tmp_path, ["aws:g4dn.xlarge"], ALWAYS, people=200)
    table = run(cli, path).out
    assert "needs a quota request for 200 GPUs" in table
    explain = assert_explained(cli, path)
    assert "flag 'needs a quota request for 200 GPUs': 200 GPUs on aws: more than its default quota of about 8" in (
        explain
    )


def test_seats_that_cannot_be_stopped_are_flagged_billed_while_idle(cli, tmp_path, wide):
    path = course(tmp_path, ["lambda:gpu_1x_rtx6000"], LAB)
    assert "cannot be stopped, billed while idle" in run(cli, path).out
    explain = assert_explained(cli, path)
    assert (
        "flag 'cannot be stopped, billed while idle': lambda:gpu_1x_rtx6000 cannot be stopped: billed from the "
        "first session's start to the last one's end (272 h)"
    ) in explain
    # 24/7 nothing is idle: no flag
    always = course(tmp_path, ["lambda:gpu_1x_rtx6000"], ALWAYS)
    assert not any(f["kind"] == "idle" for flags in option_flags(cli, always) for f in flags)


def test_runpod_pods_of_one_type_in_one_region_state_the_documented_limits(cli, tmp_path, wide):
    """16 RunPod B200 pods: no count of stock is documented or bundled (say so), and 16 × $6.79/h = $108.64/h is
    over Runpod's documented default spend limit of $80/h."""
    path = course(tmp_path, ["runpod:1x_B200_SECURE"], LAB)
    table = run(cli, path).out
    assert "16 pods in US: stock unknown" in table
    assert "over runpod's $80/h spend limit" in table
    explain = assert_explained(cli, path)
    assert "no count is documented or bundled" in explain
    assert "this option runs $108.64/h at once, over the account's default spend limit of $80/h" in explain
    # 11 pods cost $74.69/h: under the limit, no spend flag
    small = course(tmp_path, ["runpod:1x_B200_SECURE"], LAB, people=11)
    assert not any(f["kind"] == "spend-limit" for flags in option_flags(cli, small) for f in flags)


def test_a_bundled_availability_limit_is_stated(cli, tmp_path, wide):
    (tmp_path / "a100.toml").write_text(A100_SERVER.format(extra="available = 3"))
    path = course(tmp_path, ["acme:*"], ALWAYS, people=6, extra='offers_files = ["a100.toml"]')
    table = run(cli, path).out
    assert "2 of 3 available" in table
    explain = assert_explained(cli, path)
    assert "acme:bm-1xA100: 2 of the 3 unit(s) available: the offer's 'available' limit" in explain


def test_storage_and_egress_billed_apart_are_flagged(cli, tmp_path, wide):
    """OVH: the flavour's disk is in the price, more storage is a volume billed apart (not priced): flagged;
    AWS: EBS and egress are priced apart and in the total: the flag gives the amount."""
    costs = "[costs]\nstorage_gb_per_seat = 50\negress_gb_per_seat = 5"
    ovh = tmp_path / "ovh"
    ovh.mkdir()
    path = course(ovh, ["ovh:l4-90"], ALWAYS, people=4)
    path.write_text(path.read_text() + costs + "\n")
    assert "extra storage billed apart" in run(cli, path).out
    explain = assert_explained(cli, path)
    assert "ovh:l4-90: the flavour's local disk is in the instance price; more storage is an additional volume" in (
        explain
    )
    path = course(tmp_path, ["aws:g4dn.xlarge"], ALWAYS, people=4)
    path.write_text(path.read_text() + costs + "\n")
    flags = option_flags(cli, path)[0]
    storage = next(f for f in flags if f["kind"] == "storage")
    assert storage["flag"].startswith("incl. $") and storage["flag"].endswith(" storage/egress")
    assert "aws:g4dn.xlarge disk: " in storage["text"] and "aws:g4dn.xlarge egress: " in storage["text"]
    assert storage["flag"] in run(cli, path).out
    assert_explained(cli, path)


def test_provider_limits_carry_a_source_and_a_date():
    from gpuseat.catalog.offers import provider_rules

    for rules in provider_rules().values():
        for name in ("spend_limit", "stock", "storage"):
            value = getattr(rules, f"{name}_usd_per_h" if name == "spend_limit" else f"{name}_note")
            if value:
                assert getattr(rules, f"{name}_source"), (rules.name, name)
                assert rules.limits_as_of is not None, rules.name


# ---------------------------------------------------------------------------------------- item 11


def test_verbose_passed_over_reasons_agree_with_the_layout_note(cli, tmp_path):
    """2 participants needing 20 GB on one A100 80GB: the plan rents MIG 3g.40gb (2 seats, no licence), as
    its note says. -v (with or without --explain) must not list 3g.40gb as passed over "for fewer seats than
    vGPU A100D-20C" (what it said before), and every reason is given against the layout the note names."""
    (tmp_path / "a100.toml").write_text(A100_SERVER.format(extra=""))
    path = course(
        tmp_path, ["acme:*"], ALWAYS, people=2, needs="min_gpu_memory_gb = 20", extra='offers_files = ["a100.toml"]'
    )
    path.write_text(path.read_text().replace("min_gpu_memory_gb = 12\n", ""))
    result = json.loads(run(cli, path, "--format", "json").out)
    used = {(g["offer"], g["mode"], g["profile"]) for o in result["options"] for g in o["groups"]}
    assert ("acme:bm-1xA100", "mig", "3g.40gb") in used
    note = "acme:bm-1xA100: 2 seats per server (mig 3g.40gb)"
    assert any(n.startswith(note) for n in result["options"][0]["notes"])
    for r in result["passed_over"]:
        assert r["chosen"] == "mig 3g.40gb"
        assert not r["reason"].startswith("3g.40gb:"), r
    verbose = run(cli, path, "-v").out
    assert "acme:bm-1xA100, seated with mig 3g.40gb:" in verbose
    assert "    A100D-20C: 4 seats of 20 GB; mig 3g.40gb costs less for this course" in verbose
    assert "    passthrough: 1 seat of 80 GB; fewer than the 2 of mig 3g.40gb" in verbose
    assert "3g.40gb: 2 seats" not in verbose
    assert verbose.count("Passed over") == 1
    assert "seated with mig 3g.40gb:" in run(cli, path, "--explain", "-v").out


def test_a_server_its_cpus_limit_takes_the_layout_with_most_memory_for_those_seats(cli, tmp_path):
    """64 vCPUs at 8 per seat allow 8 seats of the 14 MIG 1g.18gb slices two H200s give: 8 × 1g.35gb give
    the same 8 seats at the same price with twice the memory; the note, the layout and -v agree."""
    offers = (Path(__file__).resolve().parents[2] / "examples" / "offers-h200.toml").read_text()
    (tmp_path / "offers-h200.toml").write_text(offers)
    path = course(
        tmp_path,
        ["example:*"],
        ALWAYS,
        people=8,
        needs="min_vcpus = 8\nisolation = 'partitioned'",
        extra='offers_files = ["offers-h200.toml"]',
    )
    path.write_text(path.read_text().replace("min_gpu_memory_gb = 12", "min_gpu_memory_gb = 16"))
    result = json.loads(run(cli, path, "--format", "json").out)
    best = result["options"][0]
    assert best["total_usd"] == 9250.00  # 9,000 rent + 250 setup: as with 1g.18gb
    assert best["groups"][0]["profile"] == "1g.35gb" and best["groups"][0]["seats_per_unit"] == 8
    verbose = run(cli, path, "-v").out
    assert "1g.18gb: 8 seats of 16 GB; mig 1g.35gb gives as many seats with at least as much memory" in verbose


def test_offer_globs_ignore_case(cli, tmp_path):
    path = course(tmp_path, [], LAB, people=4)
    path.write_text(path.read_text().replace("offers = []\n", ""))
    lower = json.loads(run(cli, path, "--offer", "runpod:*", "--format", "json").out)
    mixed = json.loads(run(cli, path, "--offer", "RunPod:*", "--format", "json").out)
    assert mixed["options"] == lower["options"] and mixed["options"]
    assert {x["offer"].split(":")[0] for o in mixed["options"] for x in o["offers"]} == {"runpod"}
    assert json.loads(run(cli, path, "--offer", "AWS:G4DN.*", "--format", "json").out)["options"][0]["offers"] == [
        {"offer": "aws:g4dn.xlarge", "count": 4}
    ]
    # the course file's globs too, and --why
    glob = course(tmp_path, ["RUNPOD:1x_rtxa4000_*"], LAB, people=4)
    result = json.loads(run(cli, glob, "--why", "RunPod:1x_RTXA4000_SECURE", "--format", "json").out)
    assert result["options"][0]["offers"][0]["offer"] == "runpod:1x_RTXA4000_SECURE"
    assert result["why"]["offer"] == "runpod:1x_RTXA4000_SECURE"
    bad = cli("plan", path, "--offer", "RunPodd:*")
    assert bad.code == 2 and "unknown offer id 'RunPodd:*'" in bad.err and "Traceback" not in bad.err + bad.out


def test_a_requirement_that_misses_a_cheaper_layout_by_a_little_says_so(cli, tmp_path):
    """8 participants asking 20 GB on A100 80GB servers at $2,000 a month: MIG 1g.20gb slices hold 19.5 GB
    (NVIDIA's figure), so each server gives 2 × 3g.40gb without a licence: 4 servers, $8,000. Asking ≤ 19.5 GB
    allows 4 × 1g.20gb per server: 2 servers, $4,000, saving $4,000.00."""
    (tmp_path / "a100.toml").write_text(A100_SERVER.format(extra=""))
    path = course(tmp_path, ["acme:*"], ALWAYS, people=8, extra='offers_files = ["a100.toml"]')
    path.write_text(path.read_text().replace("min_gpu_memory_gb = 12", "min_gpu_memory_gb = 20"))
    out = run(cli, path).out
    assert (
        "Hint: asking ≤ 19.5 GB of GPU memory (not 20 GB) would allow 2× acme:bm-1xA100 (mig 1g.20gb, 4 seats each), "
        "saving $4,000.00 ($4,000.00 instead of $8,000.00)"
    ) in out
    result = json.loads(run(cli, path, "--format", "json").out)
    assert result["options"][0]["total_usd"] == 8000.00  # the plan itself is unchanged
    (hint,) = result["hints"]
    assert hint["value"] == 19.5 and hint["asked"] == 20 and hint["saving_usd"] == 4000.00
    # far from any cheaper layout (asking 30 GB: 3g.40gb is what it gets anyway): no hint
    path.write_text(path.read_text().replace("min_gpu_memory_gb = 20", "min_gpu_memory_gb = 30"))
    assert json.loads(run(cli, path, "--format", "json").out)["hints"] == []


def test_the_table_fits_80_columns_and_keeps_the_flags(cli, monkeypatch):
    """Two groups with long offer ids: at 80 columns "per seat-hour" goes before the flags do."""
    monkeypatch.setenv("COLUMNS", "80")
    out = run(cli, Path(__file__).resolve().parents[2] / "examples" / "course-lab-hours.toml").out
    table = out.split("All totals in USD")[0].splitlines()
    assert all(len(line) <= 80 for line in table), "\n".join(table)
    assert "flags" in table[2] and "per seat-hour" not in table[2]
    assert "restart risk" in out and "16 pods in US:" in out
