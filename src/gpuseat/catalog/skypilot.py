"""Import SkyPilot catalog files (``catalogs/v7|v8/<cloud>/vms.csv``) as gpuseat offers.

Quirks handled (pricing.md §1.2–1.4): columns are read by header name because their order differs per
cloud; GCP lists GPUs as separate rows with an empty ``InstanceType`` whose price adds to the host row;
AWS ``GpuInfo`` memory is in MiB (RunPod writes GB in the same field); ``AcceleratorCount`` may be
fractional; rows with an empty or zero ``Price`` are skipped with a warning, never priced at $0.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path

from gpuseat.catalog import find_gpu
from gpuseat.catalog.offers import Offer, provider_rules
from gpuseat.errors import InputError, did_you_mean
from gpuseat.files import read_csv

REQUIRED = ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "Price", "Region")
GCP_ATTACHABLE_HOST_PREFIX = "n1-"
#: Known catalog errors corrected on import (pricing.md §1.4).
GPU_COUNT_FIXES = {("azure", "Standard_ND96isr_H100_v5"): 8.0}


@dataclass
class ImportResult:
    """Offers read from one file, and what was skipped and why."""

    offers: list[Offer] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Row:
    line: int
    instance_type: str
    accelerator: str
    count: float
    vcpus: float
    ram_gb: float
    price: float | None
    region: str
    zone: str
    gpu_mem_gb: float | None


def _number(value: str, *, where: str, column: str, allow_empty: bool = False) -> float | None:
    if value == "":
        if allow_empty:
            return None
        raise InputError(f"empty {column}", where=where, fix=f"give {column} a number")
    try:
        number = float(value)
    except ValueError:
        raise InputError(f"{column} is not a number: {value!r}", where=where, fix=f"give {column} a number") from None
    if not math.isfinite(number) or number < 0:
        raise InputError(f"{column} must be a finite number ≥ 0, got {value!r}", where=where, fix="correct it")
    return number


def _gpu_memory_gb(gpu_info: str, provider: str) -> float | None:
    """Per-GPU memory from a ``GpuInfo`` literal; None when the field has no memory (Azure)."""
    if not gpu_info.startswith("{"):
        return None
    try:
        info = ast.literal_eval(gpu_info)
        size = info["Gpus"][0]["MemoryInfo"]["SizeInMiB"]
    except (ValueError, SyntaxError, KeyError, IndexError, TypeError):
        return None
    if not isinstance(size, int | float) or size <= 0:
        return None
    if provider == "runpod":  # RunPod writes GB into the SizeInMiB field
        return float(size)
    return round(size / 1024, 2)


def _read_rows(path: Path, provider: str) -> list[_Row]:
    rows: list[_Row] = []
    header_checked = False
    for line, raw in read_csv(path):
        where = f"{path}:{line}"
        if not header_checked:
            missing = [c for c in REQUIRED if c not in raw]
            if missing:
                raise InputError(
                    f"not a SkyPilot vms.csv: missing column(s) {', '.join(missing)}",
                    where=str(path),
                    fix="give a SkyPilot catalog file (catalogs/v7 or v8/<cloud>/vms.csv)",
                )
            header_checked = True
        count = _number(raw["AcceleratorCount"], where=where, column="AcceleratorCount", allow_empty=True)
        rows.append(
            _Row(
                line=line,
                instance_type=raw["InstanceType"],
                accelerator=raw["AcceleratorName"],
                count=count or 0.0,
                vcpus=_number(raw["vCPUs"], where=where, column="vCPUs", allow_empty=True) or 0.0,
                ram_gb=_number(raw["MemoryGiB"], where=where, column="MemoryGiB", allow_empty=True) or 0.0,
                price=_number(raw["Price"], where=where, column="Price", allow_empty=True),
                region=raw["Region"],
                zone=raw.get("AvailabilityZone", ""),
                gpu_mem_gb=_gpu_memory_gb(raw.get("GpuInfo", ""), provider),
            )
        )
    return rows


def _offer_id(provider: str, instance_type: str, region: str) -> str:
    return f"{provider}:{instance_type}@{region}"


def import_skypilot(path: Path, provider: str, *, as_of: date) -> ImportResult:
    """Offers from a SkyPilot ``vms.csv``: one per instance type and region, at the cheapest zone."""
    rules = provider_rules().get(provider)
    if rules is None:
        raise InputError(
            f"unknown provider '{provider}'.{did_you_mean(provider, provider_rules())}",
            where="--provider",
            fix=f"use one of: {', '.join(provider_rules())}",
        )
    rows = _read_rows(path, provider)
    result = ImportResult()
    gpu_rows = [r for r in rows if not r.instance_type]
    candidates: list[tuple[_Row, float, str]] = []  # (row, total price, instance type label)
    for row in rows:
        if not row.instance_type:
            continue
        if not row.price:
            result.warnings.append(f"{path}:{row.line}: {row.instance_type} in {row.region} has no price; skipped")
            continue
        if provider == "gcp":
            candidates.extend(_gcp_totals(row, gpu_rows))
        elif row.accelerator:
            candidates.append((row, row.price, row.instance_type))
    best: dict[tuple[str, str], tuple[_Row, float, str]] = {}
    for row, price, label in candidates:
        key = (label, row.region)
        if key not in best or price < best[key][1]:
            best[key] = (row, price, label)
    unknown: set[str] = set()
    for row, price, label in best.values():
        model = find_gpu(row.accelerator)
        if model is None:
            unknown.add(row.accelerator)
            continue
        count = GPU_COUNT_FIXES.get((provider, row.instance_type), row.count)
        result.offers.append(
            Offer(
                id=_offer_id(provider, label, row.region),
                provider=provider,
                kind="cloud",
                instance_type=label,
                region=row.region,
                gpu=model.id,
                gpu_count=count,
                gpu_memory_gb=row.gpu_mem_gb if row.gpu_mem_gb else model.memory_gb * min(count, 1.0),
                vcpus=row.vcpus,
                ram_gb=row.ram_gb,
                price_usd=round(price, 6),
                billing=rules.billing,
                min_charge_s=rules.min_charge_s,
                disk_usd_per_gb_month=rules.disk_usd_per_gb_month,
                egress_usd_per_gb=rules.egress_usd_per_gb,
                stoppable=rules.stoppable,
                source=f"SkyPilot catalog {path.name} line {row.line}; billing: {rules.source}",
                as_of=as_of,
            )
        )
    for name in sorted(unknown):
        result.warnings.append(f"{path}: accelerator '{name}' is not in gpuseat's GPU catalog; its rows skipped")
    result.offers.sort(key=lambda o: (o.instance_type, o.region or ""))
    return result


def _gcp_totals(host: _Row, gpu_rows: list[_Row]) -> list[tuple[_Row, float, str]]:
    """GCP prices: host row + the attachable GPU row of the same zone (skypilot-catalog issue #31)."""
    assert host.price is not None
    same_zone = [g for g in gpu_rows if g.region == host.region and g.zone == host.zone and g.price]
    if host.accelerator:  # a2/a3/g2: GPUs built in, priced on their own row
        for g in same_zone:
            if g.accelerator == host.accelerator and g.count == host.count:
                assert g.price is not None
                merged = replace(host, gpu_mem_gb=host.gpu_mem_gb or g.gpu_mem_gb)
                return [(merged, host.price + g.price, host.instance_type)]
        return []
    if not host.instance_type.startswith(GCP_ATTACHABLE_HOST_PREFIX):
        return []
    out = []
    for g in same_zone:
        assert g.price is not None
        label = f"{host.instance_type}+{g.count:g}x{g.accelerator}"
        combo = replace(host, accelerator=g.accelerator, count=g.count, price=host.price + g.price,
                        gpu_mem_gb=g.gpu_mem_gb)
        out.append((combo, host.price + g.price, label))
    return out
