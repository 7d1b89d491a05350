"""Every billing rule with a documented worked example reproduces it to the cent through the engine the
planner uses, and the catalog lints its rules: each offer's rules exist and carry source and as_of."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from pathlib import Path

import pytest

from gpuseat.catalog.bundle import load_catalog
from gpuseat.catalog.offers import Offer
from gpuseat.catalog.rules import Rule, build_rules
from gpuseat.core.cost import (
    billed_total,
    fee_rate,
    hourly_usd,
    monthly_rate,
    published_rate,
    sustained_use_rate,
    tiered_hours,
)
from gpuseat.errors import InputError

CATALOG = load_catalog()
EXAMPLES = [r for r in CATALOG.rules.values() if r.example is not None]


def offer(rule: Rule, **fields: object) -> Offer:
    """A test offer billed under ``rule`` (its billing fields set by the rule when it is a billing rule)."""
    base: dict[str, object] = {
        "id": "t:x",
        "provider": "t",
        "kind": "cloud",
        "instance_type": "x",
        "gpu": "T4",
        "gpu_count": 1,
        "vcpus": 4,
        "ram_gb": 16,
        "price_usd": 1.0,
        "billing": "per-second",
        "source": "test",
        "as_of": date(2026, 1, 1),
    }
    if rule.kind in ("billing", "as-published"):
        base |= {"billing": rule.get("billing"), "min_charge_s": rule.get("min_charge_s", 0)}
        base["rounding"] = rule.get("rounding", "up")
    return Offer.model_validate(base | fields, context={"find_gpu": CATALOG.find_gpu})


def day_span(first: date, last: date) -> list[tuple[datetime, datetime]]:
    return [(datetime.combine(first, time()), datetime.combine(last + timedelta(days=1), time()))]


def test_there_are_worked_examples_for_the_rules_the_issue_names():
    ids = {r.id for r in EXAMPLES}
    for rid in ("ibm-classic-monthly", "ovh-monthly-2026", "gcp-sud-n1", "aws-ec2-per-second", "azure-per-minute"):
        assert rid in ids


@pytest.mark.parametrize("rule", EXAMPLES, ids=[r.id for r in EXAMPLES])
def test_golden_invoice(rule: Rule):
    """The provider's own example (rule.example), computed by the same functions as a plan."""
    ex = rule.example
    assert ex is not None and ex.get("text")
    if rule.kind == "billing" and "runs_s" in ex:
        o = offer(rule, price_usd=ex["price_usd_h"])
        billed = billed_total(ex["runs_s"], o)
        assert billed == ex["expect_billed_s"]
        assert round(hourly_usd(o.price_usd, billed), 2) == ex["expect_usd"]
    elif rule.kind in ("billing", "as-published") and "first" in ex:
        o = offer(rule, kind="bare-metal", price_usd=ex["price_usd_month"])
        rate = (
            published_rate(o, day_span(ex["first"], ex["last"]), per="server")
            if rule.kind == "as-published"
            else (monthly_rate(o, ex["first"], ex["last"], per="server"))
        )
        assert round(rate.usd, 2) == ex["expect_usd"]
    elif rule.kind == "sustained-use":
        month: date = ex["month"]
        o = offer(rule, price_usd=ex["price_usd_h"])
        for hours, expect in zip(ex["hours"], ex["expect_usd"], strict=True):
            start = datetime.combine(month, time())
            rate = sustained_use_rate(o, [(start, start + timedelta(hours=hours))], rule, per="seat")
            assert round(rate.usd, 2) == expect, hours
    elif rule.kind == "hourly-fee":
        assert round(fee_rate(rule, int(ex["hours"] * 3600)).usd, 2) == ex["expect_usd"]
    elif rule.kind == "free-allowance":
        free = min(ex["gb"], rule.get("gb_per_month") * ex["months"])
        assert round((ex["gb"] - free) * ex["usd_per_gb"], 2) == ex["expect_usd"]
    else:
        raise AssertionError(f"no golden check for an example of kind {rule.kind}")


def test_gcp_table_effective_discounts():
    """GCP's own statement: 50 % of a month is 10 % off, 75 % is 20 % off, a full month 30 % off."""
    tiers = CATALOG.rules["gcp-sud-n1"].get("tiers")
    for used, off in ((0.25, 0.0), (0.5, 0.10), (0.75, 0.20), (1.0, 0.30)):
        assert tiered_hours(used * 720, 720, tiers) == pytest.approx(used * 720 * (1 - off))


def test_azure_six_minutes_forty_five_is_six_minutes():
    rule = CATALOG.rules["azure-per-minute"]
    o = offer(rule, price_usd=0.526)
    assert billed_total([6 * 60 + 45], o) == 360
    assert billed_total([59], o) == 0  # no whole minute: nothing billed (a minimum would be a rule of its own)


def test_every_offer_s_rules_carry_source_and_as_of():
    """The catalog lint: every offer cites rules, they exist, carry a source and a date, and an offer's
    billing fields agree with the billing rule it cites (where the rule has no start date)."""
    for o in CATALOG.offers:
        rules = CATALOG.offer_rules(o)
        assert o.rules and len(rules) == len(o.rules), o.id
        assert any(r.kind == "billing" for r in rules), f"{o.id}: no billing rule"
        for r in rules:
            assert r.source.strip() and isinstance(r.as_of, date), (o.id, r.id)
            if r.kind == "billing" and r.since is None:
                assert (o.billing, o.min_charge_s, o.rounding) == (
                    r.get("billing"),
                    r.get("min_charge_s", 0),
                    r.get("rounding", "up"),
                ), (o.id, r.id)
        assert o.source.strip() and isinstance(o.as_of, date)
    for name, p in CATALOG.providers.items():
        assert all(r in CATALOG.rules for r in p.rules), name
        assert p.regions, f"{name}: no geography mapping"


def test_rules_without_source_or_date_are_refused(tmp_path: Path):
    with pytest.raises(ValueError, match="field 'source'"):
        build_rules({"rule": [{"id": "x", "kind": "tax", "text": "t", "as_of": date(2026, 1, 1)}]})
    with pytest.raises(ValueError, match="'as_of' is missing"):
        build_rules({"rule": [{"id": "x", "kind": "tax", "text": "t", "source": "s"}]})
    (tmp_path / "rules.toml").write_text(
        '[[rule]]\nid = "gcp-sud-n1"\nkind = "sustained-use"\ntiers = [[0.5, 1.0]]\ntext = "t"\nsource = "s"\n'
        "as_of = 2026-01-01\n"
    )
    with pytest.raises(InputError) as err:
        load_catalog(tmp_path)
    assert "rules.toml" in str(err.value.where) and "tiers" in err.value.message


def test_an_offer_citing_an_unknown_rule_is_refused(tmp_path: Path):
    (tmp_path / "offers.toml").write_text(
        '[[offer]]\nid = "lab:x"\nprovider = "lab"\nkind = "cloud"\ninstance_type = "x"\ngpu = "T4"\n'
        'gpu_count = 1\nvcpus = 4\nram_gb = 16\nprice_usd = 1.0\nbilling = "per-second"\nrules = ["gcp-sud"]\n'
        'source = "t"\nas_of = 2026-01-01\n'
    )
    with pytest.raises(InputError, match="unknown billing rule 'gcp-sud'"):
        load_catalog(tmp_path)


def test_an_offer_priced_in_euros_needs_a_dated_rate(tmp_path: Path):
    """A Hetzner-style €184/month server: with an exchange-rate rule (1 EUR = 1.10 USD, test rate) its
    price_usd is 202.40 and the rate rule, with its source and date, is among its rules; without a rate
    the offer is refused with what to add."""
    offer_row = (
        '[[offer]]\nid = "hz:gex44"\nprovider = "hz"\nkind = "bare-metal"\ninstance_type = "GEX44"\ngpu = "L4"\n'
        'gpu_count = 1\nvcpus = 14\nram_gb = 64\ncurrency = "EUR"\nprice = 184\n'
        'billing = "month-whole"\nrules = ["ovh-dedicated-monthly"]\nsource = "test"\nas_of = 2026-01-11\n'
    )
    (tmp_path / "offers.toml").write_text(offer_row)
    with pytest.raises(InputError, match="no exchange rate for EUR"):
        load_catalog(tmp_path)
    (tmp_path / "rules.toml").write_text(
        '[[rule]]\nid = "test-eur"\nkind = "exchange-rate"\ncurrency = "EUR"\nusd_per_unit = 1.10\n'
        'text = "test rate"\nsource = "test: a reference rate"\nas_of = 2026-11-30\n'
    )
    catalog = load_catalog(tmp_path)
    hz = next(o for o in catalog.offers if o.id == "hz:gex44")
    assert hz.price_usd == 202.40 and hz.price == 184 and hz.currency == "EUR"
    assert [r.id for r in catalog.offer_rules(hz)] == ["ovh-dedicated-monthly", "test-eur"]
