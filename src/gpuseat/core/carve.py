"""Carving: how many slices of what a server gives, and the exact layout of N slices.

Pure: it takes a :class:`~gpuseat.core.inventory.Server`, a :class:`~gpuseat.core.needs.SeatNeed` and
the :class:`~gpuseat.catalog.bundle.Catalog` (passed in, never loaded here), and returns values. A
*slice* is one carved unit (a whole chip, a MIG instance, a vGPU, an MPS/time-slice share); the
*layout* is all of them. Every mode or profile not chosen comes back with a one-line reason, so users
learn *why* (e.g. "no CUDA in Linux guests on Maxwell"). MIG placement lives in :mod:`gpuseat.core.mig`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpuseat.catalog import GpuModel
from gpuseat.catalog.licences import Licence
from gpuseat.catalog.partitions import MigProfile, Mode, ModeRule, PartitionCatalog, VgpuProfile
from gpuseat.core import mig
from gpuseat.core.inventory import Chip, Server
from gpuseat.core.mig import Placement
from gpuseat.core.needs import SeatNeed
from gpuseat.errors import InputError, did_you_mean

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog

SCHEMA_VERSION = 1
ISOLATION_LEVELS = ("dedicated", "partitioned", "shared")
MODES: tuple[Mode, ...] = ("passthrough", "mig", "vgpu", "mps", "timeslice")

_FROZEN = ConfigDict(frozen=True, defer_build=True)

__all__ = [
    "Capacity",
    "CarveRequest",
    "ChipOption",
    "Layout",
    "NotChosen",
    "Placement",
    "Slice",
    "carve",
    "chip_options",
    "server_capacity",
]


class Slice(BaseModel):
    """One carved unit of the server: what one participant's seat will get."""

    model_config = _FROZEN

    name: str = Field(description="seat-01, seat-02, … in GPU and placement order")
    gpu_index: int
    pci: str | None
    uuid: str | None
    mode: Mode
    profile: str | None
    placement: Placement | None
    memory_gb: float
    licence: str | None = None
    replicas: int | None = Field(None, description="slices sharing this chip (time-slicing / MPS)")


class NotChosen(BaseModel):
    """A mode or profile not chosen, with the one-line reason (and the slices it would give, if viable)."""

    model_config = _FROZEN

    mode: str
    profile: str | None
    reason: str
    slices: int | None = None
    memory_gb: float | None = None


class Layout(BaseModel):
    """The carve result: the slices and the explained alternatives."""

    model_config = _FROZEN

    server: Server
    mode: Mode
    slices: tuple[Slice, ...]
    not_chosen: tuple[NotChosen, ...] = ()
    notes: tuple[str, ...] = Field((), description="caveats of the chosen mode on this GPU")

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract of ``gpuseat carve --format json`` (docs/carve.md)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "server": self.server.name,
            "gpu": self.server.gpu.id,
            "chips": [
                {"index": c.index, "board": c.board, "pci": c.pci, "uuid": c.uuid, "bars_mib": list(c.bars_mib)}
                for c in self.server.chips
            ],
            "mode": self.mode,
            "notes": list(self.notes),
            "slices": [
                {
                    "name": s.name,
                    "gpu_index": s.gpu_index,
                    "pci": s.pci,
                    "uuid": s.uuid,
                    "mode": s.mode,
                    "profile": s.profile,
                    "placement": s.placement.model_dump() if s.placement else None,
                    "memory_gb": s.memory_gb,
                    "licence": s.licence,
                    "replicas": s.replicas,
                }
                for s in self.slices
            ],
            "alternatives": [r.model_dump() for r in self.not_chosen if r.slices is not None],
            "rejected": [
                {"mode": r.mode, "profile": r.profile, "reason": r.reason} for r in self.not_chosen if r.slices is None
            ],
        }


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


class CarveRequest(BaseModel):
    """What ``gpuseat carve`` was asked for."""

    model_config = _FROZEN

    seats: int | None = Field(None, gt=0, le=100_000)
    mode: Mode | Literal["auto"] = "auto"
    need: SeatNeed = SeatNeed(isolation="shared")
    profiles: tuple[str, ...] = ()
    by_chip: dict[int, tuple[str, ...]] | None = None


# --- options per chip -----------------------------------------------------------------------------

OptionsFn = Callable[[GpuModel, SeatNeed, PartitionCatalog, ModeRule], tuple[list[ChipOption], list[NotChosen]]]


def _gb(x: float) -> str:
    return f"{x:g} GB"


def _too_small(mode: str, profile: str | None, what: str, need: SeatNeed) -> NotChosen:
    return NotChosen(mode=mode, profile=profile, reason=f"{what} < {_gb(need.min_gpu_memory_gb)} asked")


def _passthrough(
    gpu: GpuModel, need: SeatNeed, cat: PartitionCatalog, rule: ModeRule
) -> tuple[list[ChipOption], list[NotChosen]]:
    if gpu.memory_gb < need.min_gpu_memory_gb:
        return [], [_too_small("passthrough", None, f"whole chip has {_gb(gpu.memory_gb)}", need)]
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
    mig_gpu = cat.mig_gpus[gpu.id]
    options: list[ChipOption] = []
    rejected: list[NotChosen] = []
    for prof in cat.mig_profiles[gpu.id]:
        if prof.seat_gb < need.min_gpu_memory_gb:
            rejected.append(_too_small("mig", prof.name, f"{_gb(prof.seat_gb)} per instance", need))
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


def _listed(names: Sequence[str], most: int = 4) -> str:
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
        why = f"the host offers no vGPU type the catalog knows for {gpu.id} ({_listed(offered)})"
        return [], [NotChosen(mode="vgpu", profile=None, reason=why)]
    if windows and not any(p.series in WINDOWS_SERIES for p in profiles):
        why = (
            f"NVIDIA offers only compute (C-series) vGPU types on {gpu.name}; a Windows seat needs a Q-series"
            " (RTX vWS), B-series (vPC) or A-series (vApps) type: use passthrough, or a GPU with Q/B/A types"
        )
        if offered is not None:
            why = (
                f"the host's VFs offer only C-series types ({_listed(offered)}); a Windows seat needs a Q-series"
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
            rejected.append(_too_small("vgpu", prof.name, f"{_gb(prof.memory_gb)} framebuffer", need))
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
        return [], [_too_small(rule.mode, None, f"whole chip has {_gb(gpu.memory_gb)}", need)]
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


def _most_key(opt: ChipOption, chips: int, licences: Mapping[str, Licence]) -> tuple[Any, ...]:
    """Order for "most slices": more slices, then more isolated, no/cheaper licence, more memory."""
    return (
        -opt.per_chip * chips,
        opt.rank,
        opt.licence is not None,
        _licence_usd(opt, chips, licences),
        -opt.memory_gb,
    )


def _isolated_key(opt: ChipOption, chips: int, slices: int, licences: Mapping[str, Licence]) -> tuple[Any, ...]:
    """Order for "most isolated that seats N": rank, no/cheaper licence, then more memory per slice."""
    return (
        opt.rank,
        opt.licence is not None,
        _licence_usd(opt, chips, licences),
        -opt.memory_for(slices, chips),
    )


def _explain(
    opt: ChipOption, chosen: ChipOption, chips: int, slices: int, licences: Mapping[str, Licence]
) -> NotChosen:
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
    reason = f"{own} seats of {_gb(memory)}; {why}"
    return NotChosen(mode=opt.mode, profile=opt.profile, reason=reason, slices=own, memory_gb=memory)


def server_capacity(gpu: GpuModel, boards: int, need: SeatNeed, catalog: Catalog) -> Capacity:
    """Most seats one server of ``boards`` × ``gpu`` gives with ≥ ``need.min_gpu_memory_gb`` each.

    Ties go to the more isolated mode (passthrough first), then to no licence or the cheaper licence,
    then to more memory.
    """
    chips = boards * gpu.chips_per_board
    options, rejected = chip_options(gpu, need, catalog.partitions)
    if not options or chips == 0:
        reasons = tuple((r.mode, r.profile, r.reason) for r in rejected)
        return Capacity(seats=0, mode=None, profile=None, memory_gb=0, licence=None, rejected=reasons)
    best = min(options, key=lambda o: _most_key(o, chips, catalog.licences))
    seats = best.per_chip * chips
    lost = [_explain(o, best, chips, seats, catalog.licences) for o in options if o is not best]
    return Capacity(
        seats=seats,
        mode=best.mode,
        profile=best.profile,
        memory_gb=best.memory_gb,
        licence=best.licence,
        rejected=tuple((r.mode, r.profile, r.reason) for r in [*lost, *rejected]),
    )


# --- layouts ----------------------------------------------------------------------------------------


def _slice_names(n: int) -> list[str]:
    width = max(2, len(str(n)))
    return [f"seat-{i:0{width}d}" for i in range(1, n + 1)]


def _spread(slices: int, per_chip: int, chips: int) -> list[int]:
    """Slices per chip, as even as possible (lower indices first)."""
    base, extra = divmod(slices, chips)
    counts = [min(per_chip, base + (i < extra)) for i in range(chips)]
    short = slices - sum(counts)
    for i in range(chips):
        take = min(short, per_chip - counts[i])
        counts[i] += take
        short -= take
    return counts


def _slice(
    chip: Chip,
    mode: Mode,
    profile: str | None,
    placement: Placement | None,
    memory: float,
    licence: str | None,
    replicas: int | None = None,
) -> Slice:
    return Slice(
        name="",
        gpu_index=chip.index,
        pci=chip.pci,
        uuid=chip.uuid,
        mode=mode,
        profile=profile,
        placement=placement,
        memory_gb=memory,
        licence=licence,
        replicas=replicas,
    )


def _uniform_slices(server: Server, opt: ChipOption, count: int, cat: PartitionCatalog) -> list[Slice]:
    counts = _spread(count, opt.per_chip, len(server.chips))
    memory = opt.memory_for(count, len(server.chips))
    out: list[Slice] = []
    for chip, n in zip(server.chips, counts, strict=True):
        if n == 0:
            continue
        placements: list[Placement | None] = [None] * n
        if opt.mode == "mig":
            prof = _mig_profile(server.gpu, opt.profile or "", cat)
            starts = mig.place(cat.mig_gpus[server.gpu.id], [prof] * n) or ()
            placements = [Placement(start=s, size=prof.memory_slices) for s in sorted(starts)]
        shared = n if opt.mode in ("mps", "timeslice") else None
        out += [_slice(chip, opt.mode, opt.profile, p, memory, opt.licence, shared) for p in placements]
    return out


def _numbered(slices: list[Slice]) -> tuple[Slice, ...]:
    ordered = sorted(slices, key=lambda s: (s.gpu_index, s.placement.start if s.placement else 0))
    names = _slice_names(len(ordered))
    return tuple(s.model_copy(update={"name": n}) for s, n in zip(ordered, names, strict=True))


def _mig_profile(gpu: GpuModel, name: str, cat: PartitionCatalog) -> MigProfile:
    profiles = {p.name: p for p in cat.mig_profiles.get(gpu.id, ())}
    if name not in profiles:
        raise InputError(
            f"unknown MIG profile '{name}' for {gpu.id}.{did_you_mean(name, profiles)}",
            where="--profile",
            fix=f"use one of: {', '.join(profiles) or 'none (no MIG on this GPU)'}",
        )
    return profiles[name]


def _no_fit(what: str, server: Server, fix: str) -> InputError:
    what = f"impossible placement: {what} do not fit {len(server.chips)} × {server.gpu.id}"
    return InputError(what, where="--profile", fix=fix)


def _mig_slices(server: Server, by_chip: dict[int, list[MigProfile]], cat: PartitionCatalog, where: str) -> list[Slice]:
    mig_gpu = cat.mig_gpus[server.gpu.id]
    out: list[Slice] = []
    for index, profiles in sorted(by_chip.items()):
        starts = mig.place(mig_gpu, profiles)
        if starts is None:
            names = ", ".join(p.name for p in profiles)
            why = mig.rule_break(mig_gpu, profiles) or "no placement keeps the memory slices apart"
            raise InputError(
                f"impossible MIG layout on GPU {index}: {names} ({why})",
                where=where,
                fix="drop or shrink an instance; `gpuseat carve --mode mig` lists what fits",
            )
        chip = server.chips[index]
        out += [
            _slice(chip, "mig", p.name, Placement(start=s, size=p.memory_slices), p.seat_gb, None)
            for p, s in zip(profiles, starts, strict=True)
        ]
    return out


def _pack_mig(server: Server, names: Sequence[str], cat: PartitionCatalog) -> dict[int, list[MigProfile]]:
    """The instances spread over the chips by an exact search (any order of ``names`` gives the same answer)."""
    profiles = [_mig_profile(server.gpu, n, cat) for n in names]
    packed = mig.pack(cat.mig_gpus[server.gpu.id], profiles, len(server.chips))
    if packed is None and len(server.chips) == 1:
        why = mig.rule_break(cat.mig_gpus[server.gpu.id], profiles) or "no placement keeps the memory slices apart"
        raise _no_fit(f"MIG instances {', '.join(names)} ({why})", server, "drop or shrink an instance")
    if packed is None:
        raise _no_fit(f"MIG instances {', '.join(names)}", server, "ask for fewer or smaller instances, or add GPUs")
    return {c.index: ps for c, ps in zip(server.chips, packed, strict=True) if ps}


def vgpu_chip_fits(profiles: Sequence[VgpuProfile], mixed_size: bool, chip_gb: float) -> bool:
    """Whether these vGPUs may share one chip: one type unless mixed-size mode, maxima, framebuffer."""
    counts = Counter(p.name for p in profiles)
    if len(counts) > 1 and not mixed_size:
        return False
    limit = {p.name: (p.max_per_gpu if len(counts) == 1 else (p.max_per_gpu_mixed or 0)) for p in profiles}
    framebuffer = sum(p.framebuffer_mb for p in profiles)
    return all(counts[n] <= limit[n] for n in counts) and framebuffer <= chip_gb * 1024


def _vgpu_slices(server: Server, names: Sequence[str], need: SeatNeed, cat: PartitionCatalog) -> list[Slice]:
    known = {p.name: p for p in cat.vgpu_profiles.get(server.gpu.id, ())}
    mixed = cat.vgpu_gpus[server.gpu.id].mixed_size if server.gpu.id in cat.vgpu_gpus else False
    profiles = []
    for name in names:
        if name not in known:
            raise InputError(
                f"unknown vGPU type '{name}' for {server.gpu.id}.{did_you_mean(name, known)}",
                where="--profile",
                fix=f"use one of: {', '.join(known) or 'none'}",
            )
        prof = known[name]
        offered = cat.vgpu_offered.get(server.gpu.id)
        if offered is not None and name not in offered:
            fit = [p.name for p in known.values() if p.name in offered and (p.cuda or not need.cuda)]
            raise InputError(
                f"{name} is not offered by the host now: its VFs offer {_listed(offered)}",
                where="--profile",
                fix=f"use one of: {_listed(fit, 8)}" if fit else "change the VFs' vGPU types on the host first",
            )
        if need.cuda and not prof.cuda:
            raise InputError(
                f"{name}: {prof.cuda_note}",
                where="--profile",
                fix="choose a CUDA profile, or --no-cuda for desktop seats",
            )
        profiles.append(prof)
    by_chip: dict[int, list[VgpuProfile]] = {c.index: [] for c in server.chips}
    for prof in sorted(profiles, key=lambda p: -p.framebuffer_mb):
        chip = next((i for i, ps in by_chip.items() if vgpu_chip_fits([*ps, prof], mixed, server.gpu.memory_gb)), None)
        if chip is None:
            rule = "mixed-size mode limits" if mixed else "one vGPU type per physical GPU"
            raise _no_fit(f"vGPUs {', '.join(names)}", server, f"respect {rule} and each type's maximum")
        by_chip[chip].append(prof)
    return [
        _slice(server.chips[i], "vgpu", p.name, None, p.memory_gb, p.licence) for i, ps in by_chip.items() for p in ps
    ]


def _profile_mode(gpu: GpuModel, names: Sequence[str], cat: PartitionCatalog) -> Mode:
    migs = {p.name for p in cat.mig_profiles.get(gpu.id, ())}
    vgpus = {p.name for p in cat.vgpu_profiles.get(gpu.id, ())}
    if all(n in migs for n in names):
        return "mig"
    if all(n in vgpus for n in names):
        return "vgpu"
    bad = next((n for n in names if n not in migs | vgpus), names[0])
    raise InputError(
        f"'{bad}' is neither a MIG profile nor a vGPU type of {gpu.id}.{did_you_mean(bad, migs | vgpus)}"
        if bad not in migs | vgpus
        else "MIG profiles and vGPU types mixed in one layout",
        where="--profile",
        fix=f"use one of: {', '.join(sorted(migs | vgpus)) or f'none: {gpu.id} has no MIG or vGPU data'}",
    )


def _explicit(server: Server, req: CarveRequest, cat: PartitionCatalog) -> Layout:
    names = list(req.profiles)
    if len(names) == 1 and req.seats:
        names *= req.seats
    elif req.seats and req.seats != len(names):
        raise InputError(
            f"--seats {req.seats} but {len(names)} profiles listed",
            where="--profile",
            fix="list one profile per seat, or one profile with --seats N",
        )
    mode = _profile_mode(server.gpu, names, cat)
    if req.mode not in ("auto", mode):
        raise InputError(
            f"--profile {names[0]} is a {mode} profile but --mode is {req.mode}",
            where="--profile",
            fix=f"use --mode {mode} or --mode auto",
        )
    if mode == "vgpu":
        slices = _vgpu_slices(server, names, req.need, cat)
    else:
        slices = _mig_slices(server, _pack_mig(server, names, cat), cat, "--profile")
    small = [s for s in slices if s.memory_gb < req.need.min_gpu_memory_gb]
    if small:
        raise InputError(
            f"{small[0].profile} gives {_gb(small[0].memory_gb)} < --min-mem {_gb(req.need.min_gpu_memory_gb)}",
            where="--profile",
            fix="choose larger profiles",
        )
    return Layout(server=server, mode=mode, slices=_numbered(slices))


def _too_many(
    server: Server, req: CarveRequest, options: list[ChipOption], rejected: list[NotChosen], catalog: Catalog
) -> InputError:
    chips = len(server.chips)
    need = req.need.min_gpu_memory_gb
    if not options:
        reasons = "; ".join(f"{r.mode}{' ' + r.profile if r.profile else ''}: {r.reason}" for r in rejected[:4])
        return InputError(
            f"no {req.mode} seats with ≥ {_gb(need)} on {server.gpu.id}: {reasons}",
            where="--mode",
            fix="try --mode auto, a lower --min-mem or another GPU",
        )
    best = min(options, key=lambda o: _most_key(o, chips, catalog.licences))
    most = best.per_chip * chips
    scope = f"{server.gpu.id} {req.mode.upper() if req.mode == 'mig' else req.mode}"
    return InputError(
        f"{scope} fits at most {most} seats of ≥ {_gb(need)} on {chips} chip(s); {req.seats} asked",
        where="--seats",
        fix=f"ask for {most}"
        + ("" if req.mode in ("timeslice", "auto") else " or use time-slicing")
        + " (or add boards, or lower --min-mem)",
    )


def carve(server: Server, req: CarveRequest, catalog: Catalog) -> Layout:
    """The layout of ``req.seats`` slices on ``server``.

    ``auto`` picks the most isolated mode that seats N (passthrough > MIG > vGPU > MPS > time-slicing,
    the planner's rule); without ``seats`` that is one slice per chip, with the other modes listed as
    alternatives. A fixed mode without ``seats`` gives as many slices as that mode fits. Explicit
    ``profiles`` or a per-chip MIG assignment (from a mig-parted config) are placed and validated as given.
    """
    cat = catalog.partitions
    if req.by_chip is not None:
        if server.gpu.id not in cat.mig_gpus:
            raise InputError(f"{server.gpu.name} has no MIG", where="mig-parted config", fix="give a MIG GPU")
        by_chip = {i: [_mig_profile(server.gpu, n, cat) for n in names] for i, names in req.by_chip.items() if names}
        slices = _mig_slices(server, by_chip, cat, "mig-parted config")
        return Layout(server=server, mode="mig", slices=_numbered(slices))
    if req.profiles:
        return _explicit(server, req, cat)
    options, rejected = chip_options(server.gpu, req.need, cat)
    if req.mode != "auto":
        rejected = [r for r in rejected if r.mode == req.mode]
        options = [o for o in options if o.mode == req.mode]
    chips = len(server.chips)
    lic = catalog.licences
    chosen: ChipOption | None
    if req.seats is None and req.mode != "auto":
        chosen = min(options, key=lambda o: _most_key(o, chips, lic), default=None)
        n = chosen.per_chip * chips if chosen else 0
    else:
        want = req.seats or 1
        fitting = [o for o in options if o.per_chip * chips >= want]
        chosen = min(fitting, key=lambda o: _isolated_key(o, chips, want, lic), default=None)
        n = req.seats or (chosen.per_chip * chips if chosen else 0)
        if chosen is not None and req.seats is None:
            n = chips if chosen.mode == "passthrough" else chosen.per_chip * chips
    if chosen is None:
        raise _too_many(server, req, options, rejected, catalog)
    lost = [_explain(o, chosen, chips, n, lic) for o in options if o is not chosen]
    slices = _uniform_slices(server, chosen, n, cat)
    rule = cat.mode(chosen.mode)
    notes: tuple[str, ...] = ()
    if rule.pre_volta_note and float(server.gpu.compute_capability) < 7.0:
        notes = (f"{server.gpu.id}: {rule.pre_volta_note}",)
    return Layout(server=server, mode=chosen.mode, slices=_numbered(slices), not_chosen=(*lost, *rejected), notes=notes)
