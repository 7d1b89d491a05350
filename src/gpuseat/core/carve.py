"""Carving: the exact layout of N slices on a server.

Pure: it takes a :class:`~gpuseat.core.inventory.Server`, a :class:`~gpuseat.core.needs.SeatNeed` and
the :class:`~gpuseat.catalog.bundle.Catalog` (passed in, never loaded here), and returns values. A
*slice* is one carved unit (a whole chip, a MIG instance, a vGPU, an MPS/time-slice share); the
*layout* is all of them. Every mode or profile not chosen comes back with a one-line reason, so users
learn *why* (e.g. "no CUDA in Linux guests on Maxwell"). How many slices of what a chip or a server
gives lives in :mod:`gpuseat.core.capacity` (re-exported here), MIG placement in :mod:`gpuseat.core.mig`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpuseat.catalog import GpuModel
from gpuseat.catalog.partitions import MigProfile, Mode, PartitionCatalog, VgpuProfile
from gpuseat.core import mig
from gpuseat.core.capacity import (
    Capacity,
    ChipOption,
    NotChosen,
    chip_options,
    gb,
    isolated_key,
    listed,
    most_key,
    server_capacity,
    why_not,
)
from gpuseat.core.inventory import Chip, Server
from gpuseat.core.mig import Placement
from gpuseat.core.needs import SeatNeed
from gpuseat.errors import InputError, did_you_mean

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog

SCHEMA_VERSION = 1
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


class CarveRequest(BaseModel):
    """What ``gpuseat carve`` was asked for."""

    model_config = _FROZEN

    seats: int | None = Field(None, gt=0, le=100_000)
    mode: Mode | Literal["auto"] = "auto"
    need: SeatNeed = SeatNeed(isolation="shared")
    profiles: tuple[str, ...] = ()
    by_chip: dict[int, tuple[str, ...]] | None = None


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
                f"{name} is not offered by the host now: its VFs offer {listed(offered)}",
                where="--profile",
                fix=f"use one of: {listed(fit, 8)}" if fit else "change the VFs' vGPU types on the host first",
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
            f"{small[0].profile} gives {gb(small[0].memory_gb)} < --min-mem {gb(req.need.min_gpu_memory_gb)}",
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
            f"no {req.mode} seats with ≥ {gb(need)} on {server.gpu.id}: {reasons}",
            where="--mode",
            fix="try --mode auto, a lower --min-mem or another GPU",
        )
    best = min(options, key=lambda o: most_key(o, chips, catalog.licences))
    most = best.per_chip * chips
    scope = f"{server.gpu.id} {req.mode.upper() if req.mode == 'mig' else req.mode}"
    return InputError(
        f"{scope} fits at most {most} seats of ≥ {gb(need)} on {chips} chip(s); {req.seats} asked",
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
        chosen = min(options, key=lambda o: most_key(o, chips, lic), default=None)
        n = chosen.per_chip * chips if chosen else 0
    else:
        want = req.seats or 1
        fitting = [o for o in options if o.per_chip * chips >= want]
        chosen = min(fitting, key=lambda o: isolated_key(o, chips, want, lic), default=None)
        n = req.seats or (chosen.per_chip * chips if chosen else 0)
        if chosen is not None and req.seats is None:
            n = chips if chosen.mode == "passthrough" else chosen.per_chip * chips
    if chosen is None:
        raise _too_many(server, req, options, rejected, catalog)
    lost = [why_not(o, chosen, chips, n, lic) for o in options if o is not chosen]
    slices = _uniform_slices(server, chosen, n, cat)
    rule = cat.mode(chosen.mode)
    notes: tuple[str, ...] = ()
    if rule.pre_volta_note and float(server.gpu.compute_capability) < 7.0:
        notes = (f"{server.gpu.id}: {rule.pre_volta_note}",)
    return Layout(server=server, mode=chosen.mode, slices=_numbered(slices), not_chosen=(*lost, *rejected), notes=notes)
