"""Partition knowledge as data: MIG profiles and placements, vGPU types, sharing modes.

Built by :func:`gpuseat.catalog.bundle.load_catalog` from ``catalog/data/{mig_profiles,vgpu_profiles,
sharing}.toml`` (plus a user overlay); carving receives the loaded value and never opens files itself.
"""

# No ``from __future__ import annotations`` here: Pydantic would compile and evaluate every field's
# annotation string when these models are built, at every start of gpuseat (issue 39).
from datetime import date
from typing import Any, Literal, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

Mode = Literal["passthrough", "mig", "vgpu", "mps", "timeslice"]
VgpuSeries = Literal["Q", "B", "A", "C"]

_ROW = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class MigGpu(BaseModel):
    """How a MIG-capable GPU model is sliced: memory slots, compute slots, PCI device ids."""

    model_config = _ROW

    gpu: str
    memory_slices: int = Field(gt=0)
    compute_slices: int = Field(gt=0)
    device_ids: tuple[str, ...] = Field(description="mig-parted device-filter ids, 0xDDDD10DE")
    inferred: bool = False
    source: str
    as_of: date


class MigProfile(BaseModel):
    """One GPU-instance profile: its memory slices, compute slices, valid starts and maximum count."""

    model_config = _ROW

    gpu: str
    name: str
    gi_id: int = Field(ge=0)
    memory_slices: int = Field(gt=0)
    compute_slices: int = Field(gt=0)
    starts: tuple[int, ...]
    max_count: int = Field(gt=0)
    memory_gb: float = Field(gt=0, description="the size in the profile name")
    usable_gb: float | None = Field(None, gt=0, description="what a real nvidia-smi -lgip printed (GiB)")
    usable_derived: bool = Field(False, description="usable_gb derived by the one rule (no -lgip print known)")
    copy_engines: int | None = Field(None, ge=0, description="copy engines of the GPU instance (-lgip CE column)")
    sms: int | None = Field(None, gt=0, description="SMs of the GPU instance as a real -lgip printed them")
    inferred: bool = False
    source: str
    as_of: date

    @property
    def media(self) -> bool:
        """A ``+me`` profile (with media extensions): at most one per GPU."""
        return self.name.endswith("+me")

    @property
    def seat_gb(self) -> float:
        """Memory a seat can count on: NVIDIA's -lgip figure (printed, or derived by :func:`usable_memory`)."""
        return self.usable_gb if self.usable_gb is not None else self.memory_gb


class VgpuGpu(BaseModel):
    """vGPU facts per GPU model: whether a chip may host vGPUs of different sizes at once."""

    model_config = _ROW

    gpu: str
    mixed_size: bool
    sriov: bool = Field(False, description="vGPUs live on SR-IOV virtual functions (Ampere and newer)")
    type_prefix: Literal["grid", "nvidia"] = Field(
        "grid", description="vSphere type names grid_m60-8q / nvidia_l40s-24c; Xen model names GRID … / NVIDIA …"
    )
    source: str
    as_of: date


class VgpuProfile(BaseModel):
    """One vGPU type (e.g. M60-8Q): framebuffer, how many fit one chip, CUDA, licence."""

    model_config = _ROW

    gpu: str
    name: str
    series: VgpuSeries
    framebuffer_mb: int = Field(gt=0)
    max_per_gpu: int = Field(gt=0)
    max_per_gpu_mixed: int | None = Field(None, gt=0)
    mdev_type: str | None = None
    cuda: bool
    cuda_note: str | None = None
    licence: str
    licence_name: str
    source: str
    as_of: date

    @property
    def memory_gb(self) -> float:
        """Framebuffer in GB (1024 MB each, as the vGPU tables count)."""
        return self.framebuffer_mb / 1024

    @model_validator(mode="after")
    def _note_when_no_cuda(self) -> Self:
        if not self.cuda and not self.cuda_note:
            raise ValueError(f"{self.name}: a profile without CUDA needs cuda_note saying why")
        return self


class VgpuBoard(BaseModel):
    """The physical GPU a vGPU type's board prefix stands for, where no type row of the catalog says it
    (``V100D`` in ``GRID V100D-8C`` is a Tesla V100 PCIe 32GB): how a guest names its physical GPU."""

    model_config = _ROW

    prefix: str = Field(pattern=r"^[A-Z][A-Z0-9]*$")
    gpu: str
    board: str = Field(description="the board as NVIDIA's vGPU tables name it")
    source: str
    as_of: date


class ModeRule(BaseModel):
    """A partition mode: its isolation rank and the limits that go with it."""

    model_config = _ROW

    mode: Mode
    rank: int = Field(ge=1, description="1 = most isolated")
    isolation: Literal["dedicated", "partitioned", "shared"]
    memory_isolation: str
    linux_only: bool
    max_replicas: int | None = Field(None, gt=0)
    pre_volta_max_replicas: int | None = Field(None, gt=0, description="client limit before Volta (CC < 7.0)")
    pre_volta_note: str | None = None
    on_mig: bool | None = None
    inferred: bool = False
    source: str
    as_of: date


class PartitionCatalog(BaseModel):
    """Everything the carve engine knows about partitioning, keyed by GPU model id."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    mig_gpus: dict[str, MigGpu]
    mig_profiles: dict[str, tuple[MigProfile, ...]]
    vgpu_gpus: dict[str, VgpuGpu]
    vgpu_profiles: dict[str, tuple[VgpuProfile, ...]]
    modes: tuple[ModeRule, ...]
    #: GPU model id → the vGPU type names the host offers now (a probe's ``creatable_vgpu_types`` or mdev
    #: types); a model absent here was not probed, and every catalog type counts as offered.
    vgpu_offered: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    vgpu_boards: tuple[VgpuBoard, ...] = ()

    def mode(self, name: str) -> ModeRule:
        """The rule of one mode."""
        return next(m for m in self.modes if m.mode == name)


_Row = TypeVar("_Row", MigProfile, VgpuProfile)


def _group(rows: list[_Row]) -> dict[str, tuple[_Row, ...]]:
    out: dict[str, list[_Row]] = {}
    for row in rows:
        out.setdefault(row.gpu, []).append(row)
    return {k: tuple(v) for k, v in out.items()}


#: The one rule for seat memory (issue 26): a profile's usable memory is what ``nvidia-smi mig -lgip`` prints.
#: Where no print is known it is derived from real ``-lgip`` prints: the GPU's whole-GPU figure (printed, or
#: the name's size × 93.12/94, the H100 NVL's whole-GPU ratio) × the share of it that a placement of that many
#: memory slices got on a real GPU with the same slice grid (H100 NVL for 8 slices, A30 for 4, RTX PRO 6000 for
#: its 12 placement units), scaled down from this GPU's own printed figure of the next larger size when it has one.
#: Figures in GiB, from tests/fixtures (SOURCES.md).
WHOLE_RATIO = 93.12 / 94
SLICE_SHARE: dict[int, dict[int, float]] = {
    8: {1: 10.75 / 93.12, 2: 21.62 / 93.12, 4: 46.38 / 93.12, 8: 1.0},
    4: {1: 5.81 / 23.50, 2: 11.69 / 23.50, 4: 1.0},
    12: {3: 23.62 / 95.12, 6: 47.38 / 95.12, 12: 1.0},
}


def usable_memory(gpu: MigGpu, profiles: tuple[MigProfile, ...]) -> tuple[MigProfile, ...]:
    """``profiles`` with every ``usable_gb`` filled by the one rule (printed figures are kept as they are)."""
    by_size = {p.memory_slices: p.usable_gb for p in profiles if p.usable_gb is not None and not p.usable_derived}
    whole = by_size.get(gpu.memory_slices)
    if whole is None:
        full = max(profiles, key=lambda p: p.memory_slices)
        whole = full.memory_gb * WHOLE_RATIO
    share = SLICE_SHARE.get(gpu.memory_slices, {})
    out = []
    for p in profiles:
        if p.usable_gb is not None:
            out.append(p)
        elif p.memory_slices in by_size:  # a +me/+gfx variant of a printed profile: same memory
            out.append(p.model_copy(update={"usable_gb": by_size[p.memory_slices]}))
        else:
            part = share.get(p.memory_slices, p.memory_slices / gpu.memory_slices)
            value = whole * part
            known = [k for k in by_size if k in share and k > p.memory_slices]
            if known:  # scale down from this GPU's own printed figure of the next larger placement size
                near = min(known)
                value = by_size[near] * part / share[near]
            value = min(value, p.memory_gb * WHOLE_RATIO)
            out.append(p.model_copy(update={"usable_gb": round(value, 2), "usable_derived": True}))
    return tuple(out)


def build_partitions(mig: dict[str, Any], vgpu: dict[str, Any], sharing: dict[str, Any]) -> PartitionCatalog:
    """A partition catalog from the parsed ``mig_profiles``, ``vgpu_profiles`` and ``sharing`` tables."""
    mig_gpus = {row["gpu"]: MigGpu.model_validate(row) for row in mig["gpu"]}
    grouped = _group([MigProfile.model_validate(row) for row in mig["profile"]])
    return PartitionCatalog(
        mig_gpus=mig_gpus,
        mig_profiles={k: usable_memory(mig_gpus[k], v) if k in mig_gpus else v for k, v in grouped.items()},
        vgpu_gpus={row["gpu"]: VgpuGpu.model_validate(row) for row in vgpu["gpu"]},
        vgpu_profiles=_group([VgpuProfile.model_validate(row) for row in vgpu["profile"]]),
        modes=tuple(sorted((ModeRule.model_validate(row) for row in sharing["mode"]), key=lambda m: m.rank)),
        vgpu_boards=tuple(VgpuBoard.model_validate(row) for row in vgpu.get("board", [])),
    )
