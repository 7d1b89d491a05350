"""Billing rules as data: how a provider really bills, one dated, sourced row each (``data/rules.toml``).

An offer lists the ids of the rules it is billed under (``rules = [...]``; an offer that lists none takes
its provider's ``rules`` from ``providers.toml``). The rules are plain frozen dataclasses, validated once
here by hand (no model classes to build at start-up); the pure planner reads them from the
:class:`~gpuseat.catalog.bundle.Catalog` value.

Kinds (``kind``) and their fields:

* ``billing``: ``billing`` (a :data:`~gpuseat.catalog.offers.Billing` rule), ``min_charge_s``,
  ``rounding`` (``up``/``down``); replaces the offer's own billing fields for courses from ``since`` on.
* ``sustained-use``: ``tiers`` — ``[[up_to_fraction_of_month, rate], ...]`` applied per calendar month.
* ``hourly-fee``: ``item``, ``usd_per_h``, per seat while the instance runs.
* ``free-allowance``: ``item`` (``egress``), ``gb_per_month``, per account and month (after the mix).
* ``stop``: ``restart_guaranteed`` (bool), ``stopped_state``; a risk flag when seats are stopped.
* ``tax``: ``pct`` (or absent: varies by billing address), shown apart from the totals.
* ``as-published``: ``billing`` — a figure someone published with simpler arithmetic, shown beside
  the provider's rule (the 2016 post's half-month rent), never charged.
* ``exchange-rate``: ``currency`` (ISO code), ``usd_per_unit`` — an offer with ``currency = "EUR"`` and
  ``price`` gets ``price_usd`` from the dated rate (none is bundled: give one, with its source, in a
  ``--catalog`` folder's rules.toml).

Every rule carries ``source`` and ``as_of``; ``since`` (optional) is the first day it applies; an
``example`` table is a documented worked invoice that tests/catalog/test_golden_invoices.py reproduces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Any

KINDS = ("billing", "sustained-use", "hourly-fee", "free-allowance", "stop", "tax", "as-published", "exchange-rate")
BILLINGS = ("per-second", "per-minute", "per-hour", "month-whole", "month-prorated", "month-first-prorated")
_FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "billing": {"billing": str, "min_charge_s": int, "rounding": str},
    "sustained-use": {"tiers": list},
    "hourly-fee": {"item": str, "usd_per_h": (int, float)},
    "free-allowance": {"item": str, "gb_per_month": (int, float)},
    "stop": {"restart_guaranteed": bool, "stopped_state": str},
    "tax": {"pct": (int, float)},
    "as-published": {"billing": str},
    "exchange-rate": {"currency": str, "usd_per_unit": (int, float)},
}
_COMMON = {"id", "kind", "text", "source", "as_of", "since", "example"}


@dataclass(frozen=True)
class Rule:
    """One billing rule of one provider (module docstring), with where it comes from."""

    id: str
    kind: str
    text: str
    source: str
    as_of: date
    since: date | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    example: Mapping[str, Any] | None = None

    def get(self, name: str, default: Any = None) -> Any:
        """A kind-specific field (``tiers``, ``usd_per_h``, …)."""
        return self.params.get(name, default)

    def applies(self, day: date) -> bool:
        """Whether the rule is in force for a course starting on ``day``."""
        return self.since is None or day >= self.since

    def to_dict(self) -> dict[str, object]:
        """JSON shape (in a plan's ``prices``)."""
        return {"id": self.id, "kind": self.kind, "text": self.text, "source": self.source, "as_of": str(self.as_of)}


class RuleError(ValueError):
    """A malformed rule row; the message names the row and the field."""


def _rule(row: object, k: int) -> Rule:
    if not isinstance(row, dict):
        raise RuleError(f"rule[{k}]: must be a table")
    rid = row.get("id")
    where = f"rule '{rid}'" if isinstance(rid, str) else f"rule[{k}]"
    for name in ("id", "kind", "text", "source"):
        if not isinstance(row.get(name), str) or not row[name].strip():
            raise RuleError(f"{where}: field '{name}' must be a non-empty string")
    kind = row["kind"]
    if kind not in KINDS:
        raise RuleError(f"{where}: field 'kind' must be one of {', '.join(KINDS)}, got {kind!r}")
    for name in ("as_of", "since"):
        if name in row and not isinstance(row[name], date):
            raise RuleError(f"{where}: field '{name}' must be a date (e.g. 2026-11-09)")
    if "as_of" not in row:
        raise RuleError(f"{where}: field 'as_of' is missing (the date the source was read)")
    fields = _FIELDS[kind]
    params = {k2: v for k2, v in row.items() if k2 not in _COMMON}
    for name, value in params.items():
        want = fields.get(name)
        if want is None:
            raise RuleError(f"{where}: field '{name}' is not known for kind '{kind}' ({', '.join(fields)})")
        if not isinstance(value, want) or (isinstance(value, bool) and want is not bool):
            raise RuleError(f"{where}: field '{name}' has the wrong type")
    if "billing" in params and params["billing"] not in BILLINGS:
        raise RuleError(f"{where}: field 'billing' must be one of {', '.join(BILLINGS)}")
    if params.get("rounding", "up") not in ("up", "down"):
        raise RuleError(f"{where}: field 'rounding' must be 'up' or 'down'")
    if kind == "exchange-rate" and not (
        isinstance(params.get("currency"), str) and len(params["currency"]) == 3 and params.get("usd_per_unit", 0) > 0
    ):
        raise RuleError(f"{where}: an exchange rate needs 'currency' (e.g. EUR) and 'usd_per_unit' > 0")
    if kind == "sustained-use":
        tiers = params.get("tiers") or []
        ok = all(
            isinstance(t, list) and len(t) == 2 and all(isinstance(x, int | float) for x in t) and 0 < t[0] <= 1
            for t in tiers
        )
        if not tiers or not ok or tiers[-1][0] != 1 or [t[0] for t in tiers] != sorted(t[0] for t in tiers):
            raise RuleError(f"{where}: field 'tiers' must be [[fraction, rate], ...] rising to fraction 1")
    example = row.get("example")
    if example is not None and not isinstance(example, dict):
        raise RuleError(f"{where}: field 'example' must be a table")
    return Rule(str(rid), kind, row["text"], row["source"], row["as_of"], row.get("since"), params, example)


def build_rules(raw: Mapping[str, Any]) -> dict[str, Rule]:
    """The ``[[rule]]`` rows of a rules file, by id (validated once)."""
    out: dict[str, Rule] = {}
    for k, row in enumerate(raw.get("rule", [])):
        rule = _rule(row, k)
        out[rule.id] = rule
    return out
