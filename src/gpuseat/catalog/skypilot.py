"""Import SkyPilot catalog files (``catalogs/v7|v8/<cloud>/vms.csv``) as gpuseat offers.

Quirks handled (pricing.md §1.2–1.4): columns are read by header name because their order differs per
cloud; GCP lists GPUs as separate rows with an empty ``InstanceType`` whose price adds to the host row;
AWS ``GpuInfo`` memory is in MiB (RunPod writes GB in the same field); ``AcceleratorCount`` may be
fractional; rows with an empty or zero ``Price`` are skipped with a warning, never priced at $0.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from gpuseat.catalog.offers import Offer
from gpuseat.errors import InputError, did_you_mean
from gpuseat.files import stream_csv
from gpuseat.pysource import python_literal

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog

REQUIRED = ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "Price", "Region")
#: Known catalog errors corrected on import (pricing.md §1.4).
GPU_COUNT_FIXES = {("azure", "Standard_ND96isr_H100_v5"): 8.0}
_INSTANCE_TYPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+@-]*$")
_REGION = re.compile(r"^[A-Za-z0-9._-]+$")
#: A CSV memory figure this close to the GPU catalog's is the same memory, rounded (22,888 MiB = 24 GB).
MEMORY_TOLERANCE = 0.1

# GCP machine families with GPUs built in (GCP docs "GPU machine types"): host type prefix → (GPU model id,
# {host type: GPU count}). A2/A3/A4/G2 hosts take only these; every other GPU goes on an N1 host.
GCP_BUILT_IN: dict[str, tuple[str, dict[str, int]]] = {
    "a2-highgpu-": ("A100-40GB", {"a2-highgpu-1g": 1, "a2-highgpu-2g": 2, "a2-highgpu-4g": 4, "a2-highgpu-8g": 8}),
    "a2-megagpu-": ("A100-40GB", {"a2-megagpu-16g": 16}),
    "a2-ultragpu-": ("A100-80GB", {"a2-ultragpu-1g": 1, "a2-ultragpu-2g": 2, "a2-ultragpu-4g": 4, "a2-ultragpu-8g": 8}),
    "a3-ultragpu-": ("H200-141GB", {"a3-ultragpu-8g": 8}),
    "a3-": (
        "H100-80GB",
        {
            "a3-highgpu-1g": 1,
            "a3-highgpu-2g": 2,
            "a3-highgpu-4g": 4,
            "a3-highgpu-8g": 8,
            "a3-megagpu-8g": 8,
            "a3-edgegpu-8g": 8,
        },
    ),
    "a4-highgpu-": ("B200", {"a4-highgpu-8g": 8}),
    "g2-standard-": (
        "L4",
        {
            "g2-standard-4": 1,
            "g2-standard-8": 1,
            "g2-standard-12": 1,
            "g2-standard-16": 1,
            "g2-standard-32": 1,
            "g2-standard-24": 2,
            "g2-standard-48": 4,
            "g2-standard-96": 8,
        },
    ),
}
#: GPUs that attach to N1 hosts, and the most vCPUs an N1 host may have per GPU count (GCP docs).
GCP_N1_MAX_VCPUS: dict[str, dict[int, int]] = {
    "T4": {1: 48, 2: 48, 4: 96},
    "P4": {1: 24, 2: 48, 4: 96},
    "V100": {1: 12, 2: 24, 4: 48, 8: 96},
    "P100": {1: 16, 2: 32, 4: 64},
}
GCP_SOURCE = "GCP docs 'GPU machine types' (A2/A3/A4/G2 built in; T4/P4/V100/P100 on N1 with vCPU limits)"


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
        if not value.isascii() or "_" in value:  # float() also reads ١٢, １２ and 1_2 as 12
            raise ValueError(value)
        number = float(value)
    except ValueError:
        raise InputError(f"{column} is not a number: {value!r}", where=where, fix=f"give {column} a number") from None
    if not math.isfinite(number) or number < 0:
        raise InputError(f"{column} must be a finite number ≥ 0, got {value!r}", where=where, fix="correct it")
    return number


@functools.lru_cache(maxsize=4096)
def _gpu_memory_gb(gpu_info: str, provider: str) -> float | None:
    """Per-GPU memory from a ``GpuInfo`` literal; None when the field has no memory (Azure).

    Cached: a catalog repeats the same few hundred literals over every region and zone, and
    parsing each literal is most of an import's time.
    """
    if not gpu_info.startswith("{"):
        return None
    try:
        info = python_literal(gpu_info)  # tried again past python/cpython#106905
        size = info["Gpus"][0]["MemoryInfo"]["SizeInMiB"]
    except (ValueError, SyntaxError, KeyError, IndexError, TypeError):
        return None
    if not isinstance(size, int | float) or size <= 0:
        return None
    if provider == "runpod":  # RunPod writes GB into the SizeInMiB field
        return float(size)
    return round(size / 1024, 2)


#: Rows a catalog may have: SkyPilot's own run to tens of thousands; the import streams the file (memory
#: stays flat, docs/results.md), so the cap only stops a runaway file.
MAX_CATALOG_ROWS = 5_000_000
#: Skipped rows named one by one in the warnings; the rest are counted in one line.
MAX_ROW_WARNINGS = 200


def _check_name(
    value: str, pattern: re.Pattern[str], seen: set[str], column: str, where: str, what: str, fix: str
) -> None:
    """Refuse a name cell that is not ``what``; each distinct value is checked once (a catalog repeats it
    on thousands of rows)."""
    if value and value not in seen:
        if not pattern.fullmatch(value):
            raise InputError(f"{column} {value!r} is not {what}", where=f"{where}: column {column}", fix=fix)
        seen.add(value)


def _read_rows(path: Path, provider: str) -> Iterator[_Row]:
    """The catalog's rows, parsed and checked one at a time as the file is read."""
    header, rows = stream_csv(path, max_rows=MAX_CATALOG_ROWS)
    missing = [c for c in REQUIRED if c not in header]  # refused at the first row (no rows: said below)
    col = {name: header.index(name) for name in reversed(header)}  # the first of a repeated name, as DictReader
    i_type, i_acc, i_count, i_cpus, i_mem, i_price, i_region = (col.get(c, 0) for c in REQUIRED)
    i_zone, i_info = col.get("AvailabilityZone"), col.get("GpuInfo")
    good_types: set[str] = set()  # names already checked (a catalog repeats a few hundred of them)
    good_regions: set[str] = set()
    numbers: dict[tuple[str, str], float | None] = {}  # (column, text) → value, for the same reason
    seen = False

    def number(value: str, where: str, column: str) -> float | None:
        key = (column, value)
        if key not in numbers:
            if len(numbers) > 100_000:
                numbers.clear()
            numbers[key] = _number(value, where=where, column=column, allow_empty=True)
        return numbers[key]

    for line, raw in rows:
        if missing:
            raise InputError(
                f"not a SkyPilot vms.csv: missing column(s) {', '.join(missing)}",
                where=str(path),
                fix="give a SkyPilot catalog file (catalogs/v7 or v8/<cloud>/vms.csv)",
            )
        seen = True
        instance_type, region = raw[i_type].strip(), raw[i_region].strip()
        where = f"{path}:{line}"
        _check_name(
            instance_type,
            _INSTANCE_TYPE,
            good_types,
            "InstanceType",
            where,
            "an instance type name (letters, digits, . _ - : + @)",
            "correct the instance type (no spaces)",
        )
        _check_name(
            region,
            _REGION,
            good_regions,
            "Region",
            where,
            "a region name",
            "correct the region (letters, digits, . _ -)",
        )
        yield _Row(
            line=line,
            instance_type=instance_type,
            accelerator=raw[i_acc].strip(),
            count=number(raw[i_count].strip(), where, "AcceleratorCount") or 0.0,
            vcpus=number(raw[i_cpus].strip(), where, "vCPUs") or 0.0,
            ram_gb=number(raw[i_mem].strip(), where, "MemoryGiB") or 0.0,
            price=number(raw[i_price].strip(), where, "Price"),
            region=region,
            zone=raw[i_zone].strip() if i_zone is not None else "",
            gpu_mem_gb=_gpu_memory_gb(raw[i_info].strip(), provider) if i_info is not None else None,
        )
    if not seen:
        raise InputError(
            f"not a SkyPilot vms.csv: no rows under a header with the columns {', '.join(REQUIRED)}",
            where=str(path),
            fix="give a SkyPilot catalog file (catalogs/v7 or v8/<cloud>/vms.csv)",
        )


class _Warnings:
    """Skipped rows, each named up to :data:`MAX_ROW_WARNINGS`, then counted (a broken 1M-row file would
    otherwise keep a million messages)."""

    def __init__(self, path: Path) -> None:
        self.path, self.more = path, 0
        self.lines: list[str] = []

    def add(self, message: str) -> None:
        if len(self.lines) < MAX_ROW_WARNINGS:
            self.lines.append(message)
        else:
            self.more += 1

    def done(self) -> list[str]:
        more = [f"{self.path}: {self.more:,} more rows skipped for the reasons above"] if self.more else []
        return [*self.lines, *more]


def import_skypilot(path: Path, provider: str, *, catalog: Catalog, as_of: date) -> ImportResult:
    """Offers from a SkyPilot ``vms.csv``: one per instance type and region, at the cheapest zone.

    The file is read as a stream, keeping only the cheapest row per (instance type, region) so far
    (the first one of equal prices); GCP's GPU rows are read in a first pass (a host row may come
    before the GPU rows of its zone).
    """
    rules = catalog.providers.get(provider)
    importable = [name for name, p in catalog.providers.items() if p.skypilot]
    if rules is None or not rules.skypilot:
        raise InputError(
            f"unknown provider '{provider}'.{did_you_mean(provider, importable)}",
            where="--provider",
            fix=f"use one of: {', '.join(importable)}",
        )
    context = catalog.offer_context()
    result = ImportResult()
    warnings = _Warnings(path)
    best: dict[tuple[str, str], tuple[_Row, float, str]] = {}

    def consider(row: _Row, price: float, label: str) -> None:
        key = (label, row.region)
        found = best.get(key)
        if found is None or price < found[1]:
            best[key] = (row, price, label)

    gpu_rows: dict[tuple[str, str], list[_Row]] = {}  # GCP: (region, zone) → the GPU rows with a price
    if provider == "gcp":
        for row in _read_rows(path, provider):
            if not row.instance_type and row.price:
                gpu_rows.setdefault((row.region, row.zone), []).append(row)
    for row in _read_rows(path, provider):
        if not row.instance_type:
            continue
        if not row.price:
            if row.accelerator or provider == "gcp":
                warnings.add(f"{path}:{row.line}: {row.instance_type} in {row.region} has no price; skipped")
            continue
        if provider == "gcp":
            for candidate in _gcp_totals(row, gpu_rows.get((row.region, row.zone), []), catalog):
                consider(*candidate)
        elif row.accelerator and row.count <= 0:
            warnings.add(f"{path}:{row.line}: {row.instance_type} lists {row.accelerator} × 0; skipped")
        elif row.accelerator:
            consider(row, row.price, row.instance_type)
    result.warnings = warnings.done()
    unknown: set[str] = set()
    # every offer sets the same fields: one shared set of their names instead of a 2 kB set per offer
    # (100,000 offers: about 220 MB less; the models are frozen, so nothing changes the set)
    fields_set: set[str] | None = None
    for row, price, label in best.values():
        model = catalog.find_gpu(row.accelerator)
        if model is None:
            unknown.add(row.accelerator)
            continue
        count = GPU_COUNT_FIXES.get((provider, row.instance_type), row.count)
        memory = row.gpu_mem_gb
        if not memory or (count >= 1 and abs(memory - model.memory_gb) <= MEMORY_TOLERANCE * model.memory_gb):
            memory = model.memory_gb * min(count, 1.0)
        source = f"SkyPilot catalog {path.name} line {row.line}; billing: {rules.source}"
        if provider == "gcp":
            source += f"; host + GPU rows of the same zone, {GCP_SOURCE}"
        fields = {
            "id": f"{provider}:{label}@{row.region}",
            "provider": provider,
            "kind": "cloud",
            "instance_type": label,
            "region": row.region,
            "gpu": model.id,
            "gpu_count": count,
            "gpu_memory_gb": memory,
            "vcpus": row.vcpus,
            "ram_gb": row.ram_gb,
            "price_usd": round(price, 6),
            **rules.offer_fields(),
            "source": source,
            "as_of": as_of,
        }
        try:
            offer = Offer.model_validate(fields, context=context)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or "row"
            raise InputError(
                f"{field}: {err['msg']}", where=f"{path}:{row.line}", fix="correct this row of the catalog file"
            ) from None
        if fields_set is None or fields_set != offer.__pydantic_fields_set__:
            fields_set = offer.__pydantic_fields_set__
        else:
            object.__setattr__(offer, "__pydantic_fields_set__", fields_set)
        result.offers.append(offer)
    for name in sorted(unknown):
        result.warnings.append(f"{path}: accelerator '{name}' is not in gpuseat's GPU catalog; its rows skipped")
    result.offers.sort(key=lambda o: (o.instance_type, o.region or ""))
    return result


def _gcp_totals(host: _Row, gpu_rows: list[_Row], catalog: Catalog) -> list[tuple[_Row, float, str]]:
    """GCP offers of one host row: host price + the price of the GPU row of the same zone that this
    machine family can take (skypilot-catalog issue #31; families in :data:`GCP_BUILT_IN`)."""
    assert host.price is not None
    same_zone = gpu_rows  # the GPU rows of the host's region and zone that have a price

    def model_id(name: str) -> str | None:
        model = catalog.find_gpu(name)
        return model.id if model else None

    for prefix, (gpu_id, counts) in GCP_BUILT_IN.items():
        if host.instance_type.startswith(prefix):
            count = counts.get(host.instance_type)
            if count is None:
                return []
            for g in same_zone:
                if model_id(g.accelerator) == gpu_id and g.count == count:
                    assert g.price is not None
                    merged = replace(host, accelerator=g.accelerator, count=g.count, gpu_mem_gb=g.gpu_mem_gb)
                    return [(merged, host.price + g.price, host.instance_type)]
            return []
    if not host.instance_type.startswith("n1-"):
        return []
    out = []
    for g in same_zone:
        gpu = model_id(g.accelerator)
        limits = GCP_N1_MAX_VCPUS.get(gpu or "", {})
        if int(g.count) != g.count or host.vcpus > limits.get(int(g.count), -1):
            continue
        assert g.price is not None
        label = f"{host.instance_type}+{g.count:g}x{g.accelerator}"
        combo = replace(
            host, accelerator=g.accelerator, count=g.count, price=host.price + g.price, gpu_mem_gb=g.gpu_mem_gb
        )
        out.append((combo, host.price + g.price, label))
    return out
