"""What a GPU model's chips and servers give for a seat need: every viable (mode, profile) per chip, the
most seats one server gives, and why each other mode or profile is not chosen.

The planner prices servers with :func:`server_capacity`; :mod:`gpuseat.core.carve` lays a chosen option
out on a real server. Apart from the layouts, so a plan loads neither the inventory models nor the layout
models (start-up time, issue 39). Pure: the partition catalog and licences come in as values.
"""

# No ``from __future__ import annotations`` here: Pydantic would compile and evaluate every field's
# annotation string when these models are built, at every start of gpuseat (issue 39).
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from gpuseat.catalog import GpuModel
from gpuseat.catalog.licences import Licence
from gpuseat.catalog.partitions import Mode, ModeRule, PartitionCatalog
from gpuseat.core.needs import SeatNeed

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog

ISOLATION_LEVELS = ("dedicated", "partitioned", "shared")

_FROZEN = ConfigDict(frozen=True, defer_build=True)


class NotChosen(BaseModel):
    """A mode or profile not chosen, with the one-line reason (and the slices it would give, if viable)."""

    model_config = _FROZEN

    mode: str
    profile: str | None
    reason: str
    slices: int | None = None
    memory_gb: float | None = None


class Capacity(BaseModel):
    """What one server gives for a seat need: the planner prices this."""

    model_config = _FROZEN

    seats: int
    mode: str | None
    profile: str | None
    memory_gb: float
    licence: str | None
    rejected: tuple[tuple[str, str | None, str], ...]


class ChipOption(BaseModel):
    """A viable (mode, profile) on one chip: how many slices it gives and how much memory each."""

    model_config = _FROZEN

    mode: Mode
    profile: str | None
    per_chip: int = Field(gt=0)
    memory_gb: float
    licence: str | None
    rank: int
    chip_gb: float = Field(0, description="whole-chip memory, which shared modes split")

    def label(self) -> str:
        """``mig 1g.18gb`` / ``passthrough``."""
        return f"{self.mode} {self.profile}" if self.profile else self.mode

    def memory_for(self, slices: int, chips: int) -> float:
        """Memory per slice when ``slices`` are spread over ``chips`` (shared modes split the chip)."""
        if self.chip_gb:
            return round(self.chip_gb / math.ceil(slices / chips), 2)
        return self.memory_gb


# --- options per chip -----------------------------------------------------------------------------

OptionsFn = Callable[[GpuModel, SeatNeed, PartitionCatalog, ModeRule], tuple[list[ChipOption], list[NotChosen]]]


def gb(x: float) -> str:
    """``4 GB``: a memory size as the reasons print it."""
    return f"{x:g} GB"


def _too_small(mode: str, profile: str | None, what: str, need: SeatNeed) -> NotChosen:
    return NotChosen(mode=mode, profile=profile, reason=f"{what} < {gb(need.min_gpu_memory_gb)} asked")


def _passthrough(
    gpu: GpuModel, need: SeatNeed, cat: PartitionCatalog, rule: ModeRule
) -> tuple[list[ChipOption], list[NotChosen]]:
    if gpu.memory_gb < need.min_gpu_memory_gb:
        return [], [_too_small("passthrough", None, f"whole chip has {gb(gpu.memory_gb)}", need)]
    opt = ChipOption(
        mode="passthrough", profile=None, per_chip=1, memory_gb=gpu.memory_gb, licence=None, rank=rule.rank
    )
    return [opt], []


def _mig(
    gpu: GpuModel, need: SeatNeed, cat: PartitionCatalog, rule: ModeRule
) -> tuple[list[ChipOption], list[NotChosen]]:
    if not gpu.mig:
        why = f"{gpu.name} has no MIG (MIG needs Ampere or newer, compute capability ≥ 8.0)"
        return [], [NotChosen(mode="mig", profile=None, reason=why)]
    if gpu.id not in cat.mig_gpus:
        return [], [NotChosen(mode="mig", profile=None, reason=f"no MIG profile data for {gpu.id} in the catalog")]
    from gpuseat.core import mig  # here: a plan of GPUs without MIG does not load its placement models

    mig_gpu = cat.mig_gpus[gpu.id]
    options: list[ChipOption] = []
    rejected: list[NotChosen] = []
    for prof in cat.mig_profiles[gpu.id]:
        if prof.seat_gb < need.min_gpu_memory_gb:
            rejected.append(_too_small("mig", prof.name, f"{gb(prof.seat_gb)} per instance", need))
            continue
        options.append(
            ChipOption(
                mode="mig",
                profile=prof.name,
                per_chip=mig.max_uniform(mig_gpu, prof),
                memory_gb=prof.seat_gb,
                licence=None,
                rank=rule.rank,
            )
        )
    return options, rejected


#: vGPU series a Windows guest can use: Q (RTX vWS) and B (vPC) desktops have a display, A (vApps) serves
#: streamed applications from Windows Server (RDSH), as the 2016 course's 16 streams did.
WINDOWS_SERIES = frozenset({"Q", "B", "A"})
WINDOWS_C_REASON = (
    "C-series (compute) vGPUs run on Windows only with the TCC driver and no display; Windows seats get Q, B"
    " or A (vApps) types"
)


NOT_OFFERED = "not offered by the host now (its VFs' creatable_vgpu_types / mdev types)"


def listed(names: Sequence[str], most: int = 4) -> str:
    """``a, b, c, d … (12 in all)``: a short list of type names for a message."""
    shown = ", ".join(names[:most])
    return shown + (f" … ({len(names)} in all)" if len(names) > most else "") if names else "none"


def _vgpu(
    gpu: GpuModel, need: SeatNeed, cat: PartitionCatalog, rule: ModeRule
) -> tuple[list[ChipOption], list[NotChosen]]:
    if not gpu.vgpu:
        return [], [NotChosen(mode="vgpu", profile=None, reason=f"{gpu.name} has no NVIDIA vGPU support")]
    if gpu.id not in cat.vgpu_profiles:
        return [], [NotChosen(mode="vgpu", profile=None, reason=f"no vGPU type data for {gpu.id} in the catalog")]
    options: list[ChipOption] = []
    rejected: list[NotChosen] = []
    windows = need.guest_os == "windows"
    offered = cat.vgpu_offered.get(gpu.id)
    profiles = [p for p in cat.vgpu_profiles[gpu.id] if offered is None or p.name in offered]
    if offered is not None and not profiles:
        why = f"the host offers no vGPU type the catalog knows for {gpu.id} ({listed(offered)})"
        return [], [NotChosen(mode="vgpu", profile=None, reason=why)]
    if windows and not any(p.series in WINDOWS_SERIES for p in profiles):
        why = (
            f"NVIDIA offers only compute (C-series) vGPU types on {gpu.name}; a Windows seat needs a Q-series"
            " (RTX vWS), B-series (vPC) or A-series (vApps) type: use passthrough, or a GPU with Q/B/A types"
        )
        if offered is not None:
            why = (
                f"the host's VFs offer only C-series types ({listed(offered)}); a Windows seat needs a Q-series"
                " (RTX vWS), B-series (vPC) or A-series (vApps) type: change the VFs' vGPU types, or use passthrough"
            )
        return [], [NotChosen(mode="vgpu", profile=None, reason=why)]
    for prof in cat.vgpu_profiles[gpu.id]:
        if offered is not None and prof.name not in offered:
            rejected.append(NotChosen(mode="vgpu", profile=prof.name, reason=NOT_OFFERED))
        elif windows and prof.series not in WINDOWS_SERIES:
            rejected.append(NotChosen(mode="vgpu", profile=prof.name, reason=WINDOWS_C_REASON))
        elif need.cuda and not prof.cuda:
            rejected.append(NotChosen(mode="vgpu", profile=prof.name, reason=prof.cuda_note or "no CUDA"))
        elif prof.memory_gb < need.min_gpu_memory_gb:
            rejected.append(_too_small("vgpu", prof.name, f"{gb(prof.memory_gb)} framebuffer", need))
        else:
            options.append(
                ChipOption(
                    mode="vgpu",
                    profile=prof.name,
                    per_chip=prof.max_per_gpu,
                    memory_gb=prof.memory_gb,
                    licence=prof.licence,
                    rank=rule.rank,
                )
            )
    return options, rejected


def shared_replicas(gpu: GpuModel, rule: ModeRule) -> int:
    """Most MPS clients / time-slice replicas one chip takes: pre-Volta MPS allows 16 client contexts."""
    cap = rule.max_replicas or 1
    if rule.pre_volta_max_replicas is not None and float(gpu.compute_capability) < 7.0:
        cap = min(cap, rule.pre_volta_max_replicas)
    return cap


def _shared(
    gpu: GpuModel, need: SeatNeed, cat: PartitionCatalog, rule: ModeRule
) -> tuple[list[ChipOption], list[NotChosen]]:
    cap = shared_replicas(gpu, rule)
    replicas = min(cap, int(gpu.memory_gb // need.min_gpu_memory_gb)) if need.min_gpu_memory_gb else cap
    if replicas < 1:
        return [], [_too_small(rule.mode, None, f"whole chip has {gb(gpu.memory_gb)}", need)]
    share = round(gpu.memory_gb / replicas, 2)
    opt = ChipOption(
        mode=rule.mode,
        profile=None,
        per_chip=replicas,
        memory_gb=share,
        licence=None,
        rank=rule.rank,
        chip_gb=gpu.memory_gb,
    )
    return [opt], []


_OPTIONS: dict[str, OptionsFn] = {
    "passthrough": _passthrough,
    "mig": _mig,
    "vgpu": _vgpu,
    "mps": _shared,
    "timeslice": _shared,
}


def chip_options(
    gpu: GpuModel, need: SeatNeed, partitions: PartitionCatalog
) -> tuple[list[ChipOption], list[NotChosen]]:
    """Every viable (mode, profile) on one chip of ``gpu`` for ``need``, and why the others are not."""
    allowed = ISOLATION_LEVELS.index(need.isolation)
    options: list[ChipOption] = []
    rejected: list[NotChosen] = []
    for rule in partitions.modes:
        if ISOLATION_LEVELS.index(rule.isolation) > allowed:
            why = f"isolation '{need.isolation}' excludes it ({rule.memory_isolation})"
            rejected.append(NotChosen(mode=rule.mode, profile=None, reason=why))
        elif rule.linux_only and need.guest_os != "linux":
            rejected.append(NotChosen(mode=rule.mode, profile=None, reason="Linux guests only"))
        else:
            opts, rej = _OPTIONS[rule.mode](gpu, need, partitions, rule)
            options += opts
            rejected += rej
    return options, rejected


def _licence_usd(opt: ChipOption, chips: int, licences: Mapping[str, Licence]) -> float:
    """List price of the licences one server needs with ``opt`` (0 without a licence)."""
    if opt.licence is None:
        return 0.0
    lic = licences.get(opt.licence)
    if lic is None:
        return math.inf
    return lic.usd * (chips if lic.per == "gpu" else opt.per_chip * chips)


def most_key(opt: ChipOption, chips: int, licences: Mapping[str, Licence]) -> tuple[Any, ...]:
    """Order for "most slices": more slices, then more isolated, no/cheaper licence, more memory."""
    return (
        -opt.per_chip * chips,
        opt.rank,
        opt.licence is not None,
        _licence_usd(opt, chips, licences),
        -opt.memory_gb,
    )


def isolated_key(opt: ChipOption, chips: int, slices: int, licences: Mapping[str, Licence]) -> tuple[Any, ...]:
    """Order for "most isolated that seats N": rank, no/cheaper licence, then more memory per slice."""
    return (
        opt.rank,
        opt.licence is not None,
        _licence_usd(opt, chips, licences),
        -opt.memory_for(slices, chips),
    )


def why_not(opt: ChipOption, chosen: ChipOption, chips: int, slices: int, licences: Mapping[str, Licence]) -> NotChosen:
    """Why ``opt`` lost to ``chosen`` (one line), with what it would give."""
    own = opt.per_chip * chips
    memory = opt.memory_for(own, chips)
    if own < slices:
        why = f"fewer than the {slices} of {chosen.label()}"
    elif opt.rank > chosen.rank:
        why = f"{chosen.label()} is more isolated"
    elif opt.rank < chosen.rank:
        why = f"{chosen.label()} gives more seats"
    elif (opt.licence is not None) > (chosen.licence is not None):
        why = f"needs a licence ({opt.licence}); {chosen.label()} gives as many seats"
    elif _licence_usd(opt, chips, licences) > _licence_usd(chosen, chips, licences):
        why = f"its licence ({opt.licence}) costs more than {chosen.label()}'s for as many seats"
    else:
        why = f"{chosen.label()} gives more memory per seat"
    reason = f"{own} seats of {gb(memory)}; {why}"
    return NotChosen(mode=opt.mode, profile=opt.profile, reason=reason, slices=own, memory_gb=memory)


def server_capacity(gpu: GpuModel, boards: int, need: SeatNeed, catalog: "Catalog") -> Capacity:
    """Most seats one server of ``boards`` × ``gpu`` gives with ≥ ``need.min_gpu_memory_gb`` each.

    Ties go to the more isolated mode (passthrough first), then to no licence or the cheaper licence,
    then to more memory.
    """
    chips = boards * gpu.chips_per_board
    options, rejected = chip_options(gpu, need, catalog.partitions)
    if not options or chips == 0:
        reasons = tuple((r.mode, r.profile, r.reason) for r in rejected)
        return Capacity(seats=0, mode=None, profile=None, memory_gb=0, licence=None, rejected=reasons)
    best = min(options, key=lambda o: most_key(o, chips, catalog.licences))
    seats = best.per_chip * chips
    lost = [why_not(o, best, chips, seats, catalog.licences) for o in options if o is not best]
    return Capacity(
        seats=seats,
        mode=best.mode,
        profile=best.profile,
        memory_gb=best.memory_gb,
        licence=best.licence,
        rejected=tuple((r.mode, r.profile, r.reason) for r in [*lost, *rejected]),
    )
