"""Facts `gpuseat doctor` needs: PCI ids of NVIDIA GPUs, MIG minimum drivers, BAR limits.

Loaded once from ``catalog/data/doctor.toml``; the checks receive the loaded :class:`DoctorCatalog`
as an argument so they stay pure.
"""

# No ``from __future__ import annotations`` here: Pydantic would compile and evaluate every field's
# annotation string when these models are built, at every start of gpuseat (issue 39).
from datetime import date
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gpuseat.catalog import GpuModel, data_toml, gpu_models


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    source: str
    as_of: date


class PciModel(_Row):
    """An NVIDIA PCI device id and the GPU model it is."""

    device: str = Field(pattern=r"^[0-9a-f]{4}$")
    name: str
    gpu: str


class MigMinimum(_Row):
    """The oldest NVIDIA driver that supports MIG on a GPU model."""

    gpu: str
    driver: str = Field(pattern=r"^\d+(\.\d+)+$")


class BarLimits(_Row):
    """BAR sizes above which passthrough needs 64-bit MMIO settings."""

    above_4g_bytes: int = Field(gt=0)
    total_mmio_warn_bytes: int = Field(gt=0)
    small_bars_bytes: int = Field(gt=0, description="BAR0 + BAR3 of a datacenter GPU, for estimates")


class PciClass(_Row):
    """A PCI base class code (first byte of ``class``) and its name."""

    code: str = Field(pattern=r"^[0-9a-f]{2}$")
    name: str


class DoctorCatalog(BaseModel):
    """Everything the doctor checks look up, keyed for direct access."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    pci: dict[str, PciModel]
    mig_min: dict[str, MigMinimum]
    bar: BarLimits
    pci_class: dict[str, PciClass]
    gpus: dict[str, GpuModel]

    def model_for(self, device_id: str) -> tuple[str, GpuModel | None]:
        """Display name and catalog model (None if unknown) of NVIDIA device ``device_id`` (4 hex digits)."""
        row = self.pci.get(device_id.lower())
        if row is None:
            return f"NVIDIA device 10de:{device_id.lower()}", None
        return row.name, self.gpus.get(row.gpu)

    def class_name(self, pci_class: str) -> str:
        """Human name of a ``0xCCSSPP`` class value (``class 0xCCSSPP`` when unknown)."""
        code = pci_class.lower().removeprefix("0x")[:2]
        row = self.pci_class.get(code)
        return row.name if row else f"class {pci_class}"


@cache
def doctor_catalog() -> DoctorCatalog:
    """The bundled doctor facts (``doctor.toml``) joined with the GPU models (``gpus.toml``)."""
    return build_doctor(data_toml("doctor.toml"), gpu_models())


def build_doctor(raw: dict[str, Any], models: dict[str, GpuModel]) -> DoctorCatalog:
    """Doctor facts from the parsed ``doctor.toml``, checked against the GPU models they name."""
    pci = {row["device"]: PciModel.model_validate(row) for row in raw["pci"]}
    for row in pci.values():
        if row.gpu not in models:
            raise ValueError(f"doctor.toml: pci {row.device} names unknown gpus.toml id {row.gpu!r}")
    return DoctorCatalog(
        pci=pci,
        mig_min={row["gpu"]: MigMinimum.model_validate(row) for row in raw["mig_min"]},
        bar=BarLimits.model_validate(raw["bar"]),
        pci_class={row["code"]: PciClass.model_validate(row) for row in raw["pci_class"]},
        gpus=models,
    )
