"""Offers: what a provider rents, at what price and under which billing rule.

Bundled offers live in ``data/offers.toml``; users add their own TOML file of the same shape, or
import SkyPilot ``vms.csv`` catalogs (:mod:`gpuseat.catalog.skypilot`). The optimizer receives the
loaded list and never reads files itself.
"""

# No ``from __future__ import annotations`` here: Pydantic would compile and evaluate every field's
# annotation string when these models are built, at every start of gpuseat (issue 39).
from datetime import date
from fnmatch import fnmatchcase
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, ValidationInfo, model_validator

from gpuseat.catalog import data_toml, find_gpu, gpu_models
from gpuseat.core.needs import GuestOS
from gpuseat.errors import InputError, did_you_mean
from gpuseat.files import read_toml_model

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog

Billing = Literal["per-second", "per-minute", "per-hour", "month-whole", "month-prorated", "month-first-prorated"]
Rounding = Literal["up", "down"]
OfferKind = Literal["cloud", "bare-metal"]
MonthStart = Literal["calendar", "anniversary"]
DiskMonth = Literal["730h", "calendar"]
Usd = StrictFloat  # prices: strict (``true`` is not a price), finite and bounded below
MAX_USD = 1e9

INCREMENT_S: dict[str, int] = {"per-second": 1, "per-minute": 60, "per-hour": 3600}


class Offer(BaseModel):
    """One rentable unit: a cloud instance type in a region, or a bare-metal server.

    ``gpu_count`` counts GPU *chips* as the provider and ``nvidia-smi`` count them (a Tesla M60 board
    is 2 chips; AWS g6f.2xlarge is 0.25 of an L4). ``gpu_memory_gb`` is per chip (or per fraction).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    id: str = Field(pattern=r"^[a-z0-9-]+:[A-Za-z0-9._:+@-]+$", max_length=200)
    provider: str = Field(pattern=r"^[a-z0-9-]+$", max_length=50)
    kind: OfferKind
    instance_type: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._:+@()/-]*$", max_length=100)
    region: str | None = Field(None, pattern=r"^[A-Za-z0-9._-]+$", max_length=50)
    gpu: str
    gpu_count: StrictFloat = Field(gt=0, le=1024)
    gpu_memory_gb: StrictFloat | None = Field(None, gt=0, le=10_000)
    vcpus: StrictFloat = Field(ge=0, le=100_000)
    ram_gb: StrictFloat = Field(ge=0, le=1e6)
    price_usd: Usd = Field(ge=0, le=MAX_USD, description="per hour (hourly billing) or per month (monthly billing)")
    currency: str = Field("USD", pattern=r"^[A-Z]{3}$", description="the currency the provider prices in")
    price: Usd | None = Field(None, ge=0, le=MAX_USD, description="the price in ``currency`` (not USD)")
    billing: Billing
    min_charge_s: StrictInt = Field(0, ge=0, le=31 * 86400)
    rounding: Rounding = "up"
    rules: tuple[str, ...] = Field((), max_length=20, description="ids of billing rules (rules.toml)")
    month_start: MonthStart = "calendar"
    setup_fee_usd: Usd = Field(0, ge=0, le=MAX_USD)
    disk_usd_per_gb_month: Usd | None = Field(None, ge=0, le=1000, description="None: not known (a plan says so)")
    disk_stopped_usd_per_gb_month: Usd | None = Field(None, ge=0, le=1000)
    disk_month: DiskMonth = "730h"
    disk_tiers_gb: tuple[StrictFloat, ...] = ()
    egress_usd_per_gb: Usd = Field(0, ge=0, le=1000)
    guest_os: tuple[GuestOS, ...] = Field(("linux", "windows"), min_length=1)
    windows_usd_per_vcpu_h: Usd | None = Field(None, ge=0, le=100)
    stoppable: StrictBool = False
    available: StrictInt | None = Field(None, ge=0, le=1_000_000)
    note: str = ""
    source: str
    as_of: date

    @model_validator(mode="before")
    @classmethod
    def _known_gpu(cls, data: object, info: ValidationInfo) -> object:
        """Resolve ``gpu`` to the catalog's id and fill the per-chip memory from the GPU catalog.

        A catalog being built passes its own GPU lookup as validation context (overlay GPUs count), so
        the planner never has to look a GPU up again.
        """
        if not isinstance(data, dict) or not isinstance(data.get("gpu"), str):
            return data
        context = info.context or {}
        data = _with_rules(data, context)
        lookup = context.get("find_gpu", find_gpu)
        model = lookup(data["gpu"])
        if model is None:
            names = context.get("gpu_names") or gpu_models()
            raise ValueError(f"unknown GPU model '{data['gpu']}'.{did_you_mean(data['gpu'], names)}")
        out = dict(data)
        out["gpu"] = model.id
        if out.get("gpu_memory_gb") is None:
            out["gpu_memory_gb"] = float(model.memory_gb)
        return out

    @property
    def spot(self) -> bool:
        """Whether the price is a spot/interruptible one (an id or instance type that says so)."""
        return "spot" in self.id.lower()

    @property
    def monthly(self) -> bool:
        """Whether the price is per month (bare-metal style)."""
        return self.billing.startswith("month")

    @property
    def memory_per_chip_gb(self) -> float:
        """GPU memory per chip (filled from the GPU catalog at load when the offer does not give it)."""
        return self.gpu_memory_gb or 0.0

    @property
    def twin_key(self) -> tuple[str, str, str | None]:
        """What identifies the rented thing: the same instance under another id or billing rule is a twin."""
        return (self.provider, self.instance_type, self.region)


def _with_rules(data: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
    """Fill ``rules`` from the provider's defaults when the offer gives none, check every id exists, and
    let a ``billing`` rule in force at any date (no ``since``) set the offer's billing fields: the rule
    row, with its source, is then the one place the billing is written. What a list of rule ids implies
    is worked out once per list (a 150,000-row import repeats a handful of lists)."""
    known = context.get("rules")
    if known is None:
        return data
    out = dict(data)
    if "rules" not in out:
        base, by_type = context.get("provider_rules", {}).get(out.get("provider"), ((), {}))
        if by_type:
            kind = str(out.get("instance_type", ""))
            base = (*base, *(r for glob, ids in by_type.items() if fnmatchcase(kind, glob) for r in ids))
        out["rules"] = tuple(base)
    ids = out["rules"]
    if not isinstance(ids, list | tuple) or not all(isinstance(i, str) for i in ids):
        return out  # the field validator names the problem
    currency = out.get("currency", "USD")
    if currency != "USD" and isinstance(currency, str):
        rates = [r for r in known.values() if r.kind == "exchange-rate" and r.get("currency") == currency]
        chosen = [r for r in rates if r.id in ids] or rates
        if not chosen:
            raise ValueError(
                f"no exchange rate for {currency}: add an exchange-rate rule (currency, usd_per_unit, source, "
                "as_of) to a --catalog folder's rules.toml"
            )
        if not isinstance(out.get("price"), int | float) or isinstance(out.get("price"), bool):
            raise ValueError(f"an offer priced in {currency} gives 'price' (in {currency}); price_usd is derived")
        out["price_usd"] = round(float(out["price"]) * float(chosen[0].get("usd_per_unit")), 6)
        if chosen[0].id not in ids:
            ids = out["rules"] = (*ids, chosen[0].id)
    memo = context.setdefault("_billing_memo", {})
    key = tuple(ids)
    billing = memo.get(key)
    if billing is None:
        billing = {}
        for rid in ids:
            rule = known.get(rid)
            if rule is None:
                raise ValueError(f"unknown billing rule '{rid}'.{did_you_mean(rid, known)}")
            if rule.kind == "billing" and rule.since is None:
                billing = {
                    "billing": rule.get("billing"),
                    "min_charge_s": rule.get("min_charge_s", 0),
                    "rounding": rule.get("rounding", "up"),
                }
        memo[key] = billing
    out.update(billing)
    return out


#: The :class:`ProviderRules` fields an imported offer takes over, under the same names on :class:`Offer`.
_OFFER_FIELDS_FROM_RULES = (
    "billing",
    "min_charge_s",
    "disk_usd_per_gb_month",
    "disk_stopped_usd_per_gb_month",
    "disk_month",
    "disk_tiers_gb",
    "egress_usd_per_gb",
    "stoppable",
    "guest_os",
    "windows_usd_per_vcpu_h",
)


class ProviderRules(BaseModel):
    """Billing rules a provider applies, which SkyPilot's catalog does not carry."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    name: str
    billing: Billing
    min_charge_s: int
    disk_usd_per_gb_month: float | None = None
    disk_stopped_usd_per_gb_month: float | None = None
    disk_month: DiskMonth = "730h"
    disk_tiers_gb: tuple[float, ...] = ()
    disk_source: str = ""
    egress_usd_per_gb: float
    stoppable: bool
    guest_os: tuple[GuestOS, ...] = ("linux", "windows")
    windows_usd_per_vcpu_h: float | None = None
    windows_source: str = ""
    default_gpu_quota: int | None = None
    quota_source: str = ""
    # account and availability limits a plan flags (each with its source; dated by limits_as_of)
    spend_limit_usd_per_h: float | None = None
    spend_limit_source: str = ""
    stock_note: str = ""
    stock_source: str = ""
    storage_note: str = ""
    storage_source: str = ""
    limits_as_of: date | None = None
    support_min_usd_month: float = 0
    support_pct: float = 0
    support_source: str = ""
    rules: tuple[str, ...] = ()
    type_rules: dict[str, tuple[str, ...]] = Field(default_factory=dict)  # instance-type glob → more rules
    regions: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    regions_source: str = ""
    skypilot: bool = True  # whether `gpuseat offers import` reads this provider's SkyPilot catalog
    source: str
    as_of: date

    def offer_fields(self) -> dict[str, object]:
        """The fields an offer imported for this provider takes from its rules (same names on both)."""
        return {name: getattr(self, name) for name in _OFFER_FIELDS_FROM_RULES}


@cache
def provider_rules() -> dict[str, ProviderRules]:
    """Bundled billing rules by provider name."""
    return {p["name"]: ProviderRules.model_validate(p) for p in data_toml("providers.toml")["provider"]}


class OffersFile(BaseModel):
    """The shape of an offers TOML file (bundled or the user's)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    schema_version: Literal[1] = 1
    offer: list[Offer] = Field(default_factory=list)


@cache
def bundled_offers() -> tuple[Offer, ...]:
    """The offers shipped with gpuseat (2016 offers and dated current ones)."""
    return tuple(OffersFile.model_validate(data_toml("offers.toml")).offer)


def load_offers_file(path: Path, catalog: "Catalog | None" = None) -> list[Offer]:
    """A user's offers TOML file, its GPUs looked up in ``catalog``; errors name the file, line and field."""
    context = catalog.offer_context() if catalog is not None else None
    return read_toml_model(OffersFile, path, context=context).offer


def merge_offers(*groups: list[Offer] | tuple[Offer, ...]) -> list[Offer]:
    """Offers from several sources; a later source replaces an offer with the same id, or the same
    instance (provider, instance type, region) under the same billing rule (an imported copy of a
    bundled offer replaces it instead of being ranked twice)."""
    merged: dict[object, Offer] = {}
    by_id: dict[str, object] = {}
    for group in groups:
        for offer in group:
            key = (*offer.twin_key, offer.billing)
            old = by_id.pop(offer.id, None)
            if old is not None:
                merged.pop(old, None)
            if key in merged:
                by_id.pop(merged[key].id, None)
            merged[key] = offer
            by_id[offer.id] = key
    return list(merged.values())


def check_offer_ids(ids: list[str], offers: list[Offer], *, where: str) -> None:
    """Every id (or glob) in ``ids`` must match at least one offer (case ignored, as the plan selects)."""
    known = [o.id for o in offers]
    lowered = [k.lower() for k in known]
    for pattern in ids:
        if not any(fnmatchcase(k, pattern.lower()) for k in lowered):
            raise InputError(
                f"unknown offer id '{pattern}'.{did_you_mean(pattern, known)}",
                where=where,
                fix="list offer ids with 'gpuseat offers list', or add the offer in an offers file",
            )


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    import json  # here: only writing an offers file needs it

    return json.dumps(str(value), ensure_ascii=False)


#: the first line of an offers file gpuseat writes (``offers import --out`` replaces such a file unasked)
OFFERS_HEADER = "# Offers written by gpuseat (offers import)."


def offers_toml(offers: list[Offer]) -> str:
    """Offers as an offers TOML file that :func:`load_offers_file` reads back."""
    lines = [OFFERS_HEADER, "schema_version = 1", ""]
    for offer in offers:
        lines.append("[[offer]]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in offer.model_dump(exclude_none=True).items()]
        lines.append("")
    return "\n".join(lines)
