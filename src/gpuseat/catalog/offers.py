"""Offers: what a provider rents, at what price and under which billing rule.

Bundled offers live in ``data/offers.toml``; users add their own TOML file of the same shape, or
import SkyPilot ``vms.csv`` catalogs (:mod:`gpuseat.catalog.skypilot`). The optimizer receives the
loaded list and never reads files itself.
"""

from __future__ import annotations

import json
from datetime import date
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

from gpuseat.catalog import data_toml, find_gpu, gpu_models
from gpuseat.errors import InputError, did_you_mean
from gpuseat.files import read_toml, validate

Billing = Literal["per-second", "per-minute", "per-hour", "month-whole", "month-prorated"]
Kind = Literal["cloud", "bare-metal"]

INCREMENT_S: dict[str, int] = {"per-second": 1, "per-minute": 60, "per-hour": 3600}


class Offer(BaseModel):
    """One rentable unit: a cloud instance type in a region, or a bare-metal server.

    ``gpu_count`` counts GPU *chips* as the provider and ``nvidia-smi`` count them (a Tesla M60 board
    is 2 chips; AWS g6f.2xlarge is 0.25 of an L4). ``gpu_memory_gb`` is per chip (or per fraction).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9-]+:[A-Za-z0-9._:+@-]+$")
    provider: str
    kind: Kind
    instance_type: str
    region: str | None = None
    gpu: str
    gpu_count: float = Field(gt=0)
    gpu_memory_gb: float | None = Field(None, gt=0)
    vcpus: float = Field(ge=0)
    ram_gb: float = Field(ge=0)
    price_usd: float = Field(ge=0, description="per hour (hourly billing) or per month (monthly billing)")
    billing: Billing
    min_charge_s: int = Field(0, ge=0)
    days_per_month: int = Field(30, ge=28, le=31)
    setup_fee_usd: float = Field(0, ge=0)
    disk_usd_per_gb_month: float = Field(0, ge=0)
    egress_usd_per_gb: float = Field(0, ge=0)
    stoppable: bool = False
    available: int | None = Field(None, ge=0)
    note: str = ""
    source: str
    as_of: date

    @model_validator(mode="after")
    def _known_gpu(self, info: ValidationInfo) -> Offer:
        # A catalog being built passes its own GPU lookup as validation context (overlay GPUs count).
        lookup = (info.context or {}).get("find_gpu", find_gpu)
        if lookup(self.gpu) is None:
            raise ValueError(f"unknown GPU model '{self.gpu}'.{did_you_mean(self.gpu, gpu_models())}")
        return self

    @property
    def monthly(self) -> bool:
        """Whether the price is per month (bare-metal style)."""
        return self.billing.startswith("month")

    @property
    def memory_per_chip_gb(self) -> float:
        """GPU memory per chip, from the offer or else from the GPU model."""
        model = find_gpu(self.gpu)
        assert model is not None  # checked by the validator
        return self.gpu_memory_gb if self.gpu_memory_gb is not None else model.memory_gb


class ProviderRules(BaseModel):
    """Billing rules a provider applies, which SkyPilot's catalog does not carry."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    billing: Billing
    min_charge_s: int
    disk_usd_per_gb_month: float
    egress_usd_per_gb: float
    stoppable: bool
    support_min_usd_month: float = 0
    support_pct: float = 0
    support_source: str = ""
    source: str
    as_of: date


@cache
def provider_rules() -> dict[str, ProviderRules]:
    """Bundled billing rules by provider name."""
    return {p["name"]: ProviderRules.model_validate(p) for p in data_toml("providers.toml")["provider"]}


class OffersFile(BaseModel):
    """The shape of an offers TOML file (bundled or the user's)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    offer: list[Offer] = Field(default_factory=list)


@cache
def bundled_offers() -> tuple[Offer, ...]:
    """The offers shipped with gpuseat (2016 offers and dated current ones)."""
    return tuple(OffersFile.model_validate(data_toml("offers.toml")).offer)


def load_offers_file(path: Path) -> list[Offer]:
    """A user's offers TOML file; errors name the file and the field."""
    return validate(OffersFile, read_toml(path), where=str(path)).offer


def merge_offers(*groups: list[Offer] | tuple[Offer, ...]) -> list[Offer]:
    """Offers from several sources; a later source replaces an offer with the same id."""
    merged: dict[str, Offer] = {}
    for group in groups:
        for offer in group:
            merged[offer.id] = offer
    return list(merged.values())


def check_offer_ids(ids: list[str], offers: list[Offer], *, where: str) -> None:
    """Every id (or glob) in ``ids`` must match at least one offer."""
    from fnmatch import fnmatchcase

    known = [o.id for o in offers]
    for pattern in ids:
        if not any(fnmatchcase(k, pattern) for k in known):
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
    return json.dumps(str(value), ensure_ascii=False)


def offers_toml(offers: list[Offer]) -> str:
    """Offers as an offers TOML file that :func:`load_offers_file` reads back."""
    lines = ["# Offers written by gpuseat (offers import).", "schema_version = 1", ""]
    for offer in offers:
        lines.append("[[offer]]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in offer.model_dump(exclude_none=True).items()]
        lines.append("")
    return "\n".join(lines)
