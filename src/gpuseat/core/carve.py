"""The carve engine: how many seats of what a server gives, and the exact layout of N seats.

Pure: it takes a :class:`~gpuseat.core.inventory.Server`, a :class:`~gpuseat.core.needs.SeatNeed` and
the loaded :class:`~gpuseat.catalog.partitions.PartitionCatalog`, and returns values. Every mode or
profile it does not choose comes back with a one-line reason, so users learn *why* (e.g. "no CUDA in
Linux guests on Maxwell").

MIG layouts are searched, not counted: a GPU instance occupies memory slots ``[start, start+size)``
with ``start`` from the profile's valid list, no two overlap, compute slices add up to at most the
GPU's, per-profile maxima hold (partitioning.md §1.2 rules 1–4).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpuseat.catalog import GpuModel
from gpuseat.catalog.licences import licences
from gpuseat.catalog.partitions import (
    MigGpu,
    MigProfile,
    Mode,
    ModeRule,
    PartitionCatalog,
    VgpuProfile,
    partition_catalog,
)
from gpuseat.core.inventory import Chip, Server
from gpuseat.core.needs import SeatNeed
from gpuseat.errors import InputError, did_you_mean

ISOLATION_LEVELS = ("dedicated", "partitioned", "shared")
MODES: tuple[Mode, ...] = ("passthrough", "mig", "vgpu", "mps", "timeslice")

_FROZEN = ConfigDict(frozen=True)


class Placement(BaseModel):
    """Where a MIG GPU instance sits: first memory slot and number of slots (NVML's placement)."""

    model_config = _FROZEN

    start: int = Field(ge=0)
    size: int = Field(gt=0)


class Seat(BaseModel):
    """One participant's slice of the server."""

    model_config = _FROZEN

    seat: str
    gpu_index: int
    pci: str | None
    uuid: str | None
    mode: Mode
    profile: str | None
    placement: Placement | None
    memory_gb: float
    licence: str | None = None
    replicas: int | None = Field(None, description="seats sharing this chip (time-slicing / MPS)")


class Rejection(BaseModel):
    """A mode or profile not chosen, with the one-line reason."""

    model_config = _FROZEN

    mode: str
    profile: str | None
    reason: str


class Layout(BaseModel):
    """The carve result: seats and the explained rejections."""

    model_config = _FROZEN

    server: Server
    mode: Mode
    seats: tuple[Seat, ...]
    rejected: tuple[Rejection, ...] = ()

    def to_json(self) -> dict:
        """The JSON contract of ``gpuseat carve --format json``."""
        return {
            "seats": [
                {
                    "seat": s.seat,
                    "gpu_index": s.gpu_index,
                    "pci": s.pci,
                    "uuid": s.uuid,
                    "mode": s.mode,
                    "profile": s.profile,
                    "placement": s.placement.model_dump() if s.placement else None,
                    "memory_gb": s.memory_gb,
                }
                for s in self.seats
            ],
            "rejected": [r.model_dump() for r in self.rejected],
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


class Option(BaseModel):
    """A viable (mode, profile) on one chip: how many seats it gives and how much memory each."""

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

    def memory_for(self, seats: int, chips: int) -> float:
        """Memory per seat when ``seats`` are spread over ``chips`` (shared modes split the chip)."""
        if self.chip_gb:
            return round(self.chip_gb / math.ceil(seats / chips), 2)
        return self.memory_gb


class CarveRequest(BaseModel):
    """What ``gpuseat carve`` was asked for."""

    model_config = _FROZEN

    seats: int | None = Field(None, gt=0)
    mode: Mode | Literal["auto"] = "auto"
    need: SeatNeed = SeatNeed(isolation="shared")
    profiles: tuple[str, ...] = ()
    by_chip: dict[int, tuple[str, ...]] | None = None


# --- MIG placement search ---------------------------------------------------------------------------


def mig_rule_break(gpu: MigGpu, profiles: Sequence[MigProfile]) -> str | None:
    """Why a set of GPU instances can never share one GPU (counts and compute), or None."""
    counts = Counter(p.name for p in profiles)
    for p in profiles:
        if counts[p.name] > p.max_count:
            return f"at most {p.max_count} × {p.name} per GPU"
    compute = sum(p.compute_slices for p in profiles)
    if compute > gpu.compute_slices:
        return f"{compute} compute slices > {gpu.compute_slices}"
    for p in profiles:
        # mig-parted rejects a +me GI beside other GIs of its size (partitioning.md §1.2 rule 2) [?]
        if p.media and sum(q.compute_slices == p.compute_slices for q in profiles) > 1:
            return f"{p.name} cannot share the GPU with another {p.compute_slices}g instance"
    return None


def place(gpu: MigGpu, profiles: Sequence[MigProfile]) -> tuple[int, ...] | None:
    """Start slot of each GPU instance (same order as ``profiles``), or None if no valid placement exists."""
    if mig_rule_break(gpu, profiles) is not None:
        return None
    order = sorted(range(len(profiles)), key=lambda i: (-profiles[i].memory_slices, len(profiles[i].starts)))
    starts: list[int] = [0] * len(profiles)

    def search(k: int, used: int) -> bool:
        if k == len(order):
            return True
        prof = profiles[order[k]]
        for start in prof.starts:
            mask = ((1 << prof.memory_slices) - 1) << start
            if start + prof.memory_slices <= gpu.memory_slices and not used & mask:
                starts[order[k]] = start
                if search(k + 1, used | mask):
                    return True
        return False

    return tuple(starts) if search(0, 0) else None


def max_uniform(gpu: MigGpu, profile: MigProfile) -> int:
    """Most GPU instances of one profile that fit one GPU."""
    return next(n for n in range(profile.max_count, 0, -1) if place(gpu, [profile] * n) is not None)


# --- options per chip -----------------------------------------------------------------------------

OptionsFn = Callable[[GpuModel, SeatNeed, PartitionCatalog, ModeRule], tuple[list[Option], list[Rejection]]]


def _gb(x: float) -> str:
    return f"{x:g} GB"


def _too_small(mode: str, profile: str | None, what: str, need: SeatNeed) -> Rejection:
    return Rejection(mode=mode, profile=profile, reason=f"{what} < {_gb(need.min_gpu_memory_gb)} asked")


def _passthrough(
    gpu: GpuModel, need: SeatNeed, cat: PartitionCatalog, rule: ModeRule
) -> tuple[list[Option], list[Rejection]]:
    if gpu.memory_gb < need.min_gpu_memory_gb:
        return [], [_too_small("passthrough", None, f"whole chip has {_gb(gpu.memory_gb)}", need)]
    return [Option(mode="passthrough", profile=None, per_chip=1, memory_gb=gpu.memory_gb, licence=None,
                   rank=rule.rank)], []


def _mig(
    gpu: GpuModel, need: SeatNeed, cat: PartitionCatalog, rule: ModeRule
) -> tuple[list[Option], list[Rejection]]:
    if not gpu.mig:
        why = f"{gpu.name} has no MIG (MIG needs Ampere or newer, compute capability ≥ 8.0)"
        return [], [Rejection(mode="mig", profile=None, reason=why)]
    if gpu.id not in cat.mig_gpus:
        return [], [Rejection(mode="mig", profile=None, reason=f"no MIG profile data for {gpu.id} in the catalog")]
    mig_gpu = cat.mig_gpus[gpu.id]
    options: list[Option] = []
    rejected: list[Rejection] = []
    for prof in cat.mig_profiles[gpu.id]:
        if prof.seat_gb < need.min_gpu_memory_gb:
            rejected.append(_too_small("mig", prof.name, f"{_gb(prof.seat_gb)} per instance", need))
            continue
        options.append(Option(mode="mig", profile=prof.name, per_chip=max_uniform(mig_gpu, prof),
                              memory_gb=prof.seat_gb, licence=None, rank=rule.rank))
    return options, rejected


def _vgpu(
    gpu: GpuModel, need: SeatNeed, cat: PartitionCatalog, rule: ModeRule
) -> tuple[list[Option], list[Rejection]]:
    if not gpu.vgpu:
        return [], [Rejection(mode="vgpu", profile=None, reason=f"{gpu.name} has no NVIDIA vGPU support")]
    if gpu.id not in cat.vgpu_profiles:
        return [], [Rejection(mode="vgpu", profile=None, reason=f"no vGPU type data for {gpu.id} in the catalog")]
    options: list[Option] = []
    rejected: list[Rejection] = []
    for prof in cat.vgpu_profiles[gpu.id]:
        if need.cuda and not prof.cuda:
            rejected.append(Rejection(mode="vgpu", profile=prof.name, reason=prof.cuda_note or "no CUDA"))
        elif prof.memory_gb < need.min_gpu_memory_gb:
            rejected.append(_too_small("vgpu", prof.name, f"{_gb(prof.memory_gb)} framebuffer", need))
        else:
            options.append(Option(mode="vgpu", profile=prof.name, per_chip=prof.max_per_gpu,
                                  memory_gb=prof.memory_gb, licence=prof.licence, rank=rule.rank))
    return options, rejected


def _shared(
    gpu: GpuModel, need: SeatNeed, cat: PartitionCatalog, rule: ModeRule
) -> tuple[list[Option], list[Rejection]]:
    cap = rule.max_replicas or 1
    replicas = min(cap, int(gpu.memory_gb // need.min_gpu_memory_gb)) if need.min_gpu_memory_gb else cap
    if replicas < 1:
        return [], [_too_small(rule.mode, None, f"whole chip has {_gb(gpu.memory_gb)}", need)]
    share = round(gpu.memory_gb / replicas, 2)
    return [Option(mode=rule.mode, profile=None, per_chip=replicas, memory_gb=share, licence=None,
                   rank=rule.rank, chip_gb=gpu.memory_gb)], []


_OPTIONS: dict[str, OptionsFn] = {
    "passthrough": _passthrough,
    "mig": _mig,
    "vgpu": _vgpu,
    "mps": _shared,
    "timeslice": _shared,
}


def chip_options(
    gpu: GpuModel, need: SeatNeed, cat: PartitionCatalog | None = None
) -> tuple[list[Option], list[Rejection]]:
    """Every viable (mode, profile) on one chip of ``gpu`` for ``need``, and why the others are not."""
    cat = cat or partition_catalog()
    allowed = ISOLATION_LEVELS.index(need.isolation)
    options: list[Option] = []
    rejected: list[Rejection] = []
    for rule in cat.modes:
        if ISOLATION_LEVELS.index(rule.isolation) > allowed:
            why = f"isolation '{need.isolation}' excludes it ({rule.memory_isolation})"
            rejected.append(Rejection(mode=rule.mode, profile=None, reason=why))
        elif rule.linux_only and need.guest_os != "linux":
            rejected.append(Rejection(mode=rule.mode, profile=None, reason="Linux guests only"))
        else:
            opts, rej = _OPTIONS[rule.mode](gpu, need, cat, rule)
            options += opts
            rejected += rej
    return options, rejected


def _licence_usd(opt: Option, chips: int) -> float:
    """List price of the licences one server needs with ``opt`` (0 without a licence)."""
    if opt.licence is None:
        return 0.0
    lic = licences().get(opt.licence)
    if lic is None:
        return math.inf
    return lic.usd * (chips if lic.per == "gpu" else opt.per_chip * chips)


def _capacity_key(opt: Option, chips: int) -> tuple:
    return (-opt.per_chip * chips, opt.rank, opt.licence is not None, _licence_usd(opt, chips), -opt.memory_gb)


def _explain(opt: Option, chosen: Option, chips: int, seats: int) -> Rejection:
    """Why ``opt`` lost to ``chosen`` (one line)."""
    own = opt.per_chip * chips
    head = f"{own} seats of {_gb(opt.memory_for(min(own, seats), chips))}"
    if own < seats:
        why = f"fewer than the {seats} of {chosen.label()}"
    elif opt.rank > chosen.rank:
        why = f"{chosen.label()} is more isolated"
    elif (opt.licence is not None) > (chosen.licence is not None):
        why = f"needs a licence ({opt.licence}); {chosen.label()} gives as many seats"
    elif _licence_usd(opt, chips) > _licence_usd(chosen, chips):
        why = f"its licence ({opt.licence}) costs more than {chosen.label()}'s for as many seats"
    else:
        why = f"{chosen.label()} gives more memory per seat"
    return Rejection(mode=opt.mode, profile=opt.profile, reason=f"{head}; {why}")


def server_capacity(
    gpu: GpuModel, boards: int, need: SeatNeed, catalog: PartitionCatalog | None = None
) -> Capacity:
    """Most seats one server of ``boards`` × ``gpu`` gives with ≥ ``need.min_gpu_memory_gb`` each.

    Ties go to the more isolated mode (passthrough first), then to no licence or the cheaper licence,
    then to more memory.
    """
    chips = boards * gpu.chips_per_board
    options, rejected = chip_options(gpu, need, catalog)
    if not options or chips == 0:
        reasons = tuple((r.mode, r.profile, r.reason) for r in rejected)
        return Capacity(seats=0, mode=None, profile=None, memory_gb=0, licence=None, rejected=reasons)
    best = min(options, key=lambda o: _capacity_key(o, chips))
    seats = best.per_chip * chips
    lost = [_explain(o, best, chips, seats) for o in options if o is not best]
    return Capacity(
        seats=seats,
        mode=best.mode,
        profile=best.profile,
        memory_gb=best.memory_gb,
        licence=best.licence,
        rejected=tuple((r.mode, r.profile, r.reason) for r in [*lost, *rejected]),
    )


# --- layouts ----------------------------------------------------------------------------------------


def _seat_ids(n: int) -> list[str]:
    width = max(2, len(str(n)))
    return [f"seat-{i:0{width}d}" for i in range(1, n + 1)]


def _spread(seats: int, per_chip: int, chips: int) -> list[int]:
    """Seats per chip, as even as possible (lower indices first)."""
    base, extra = divmod(seats, chips)
    counts = [min(per_chip, base + (i < extra)) for i in range(chips)]
    short = seats - sum(counts)
    for i in range(chips):
        take = min(short, per_chip - counts[i])
        counts[i] += take
        short -= take
    return counts


def _uniform_seats(server: Server, opt: Option, seats: int, cat: PartitionCatalog) -> list[Seat]:
    counts = _spread(seats, opt.per_chip, len(server.chips))
    memory = opt.memory_for(seats, len(server.chips))
    out: list[Seat] = []
    for chip, count in zip(server.chips, counts, strict=True):
        if count == 0:
            continue
        placements: list[Placement | None] = [None] * count
        if opt.mode == "mig":
            prof = _mig_profile(server.gpu, opt.profile or "", cat)
            starts = place(cat.mig_gpus[server.gpu.id], [prof] * count) or ()
            placements = [Placement(start=s, size=prof.memory_slices) for s in sorted(starts)]
        shared = count if opt.mode in ("mps", "timeslice") else None
        out += [_seat(chip, opt.mode, opt.profile, p, memory, opt.licence, shared) for p in placements]
    return out


def _seat(
    chip: Chip,
    mode: Mode,
    profile: str | None,
    placement: Placement | None,
    memory: float,
    licence: str | None,
    replicas: int | None = None,
) -> Seat:
    return Seat(seat="", gpu_index=chip.index, pci=chip.pci, uuid=chip.uuid, mode=mode, profile=profile,
                placement=placement, memory_gb=memory, licence=licence, replicas=replicas)


def _numbered(seats: list[Seat]) -> tuple[Seat, ...]:
    ordered = sorted(seats, key=lambda s: (s.gpu_index, s.placement.start if s.placement else 0))
    return tuple(s.model_copy(update={"seat": i}) for s, i in zip(ordered, _seat_ids(len(ordered)), strict=True))


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


def _mig_seats(server: Server, by_chip: dict[int, list[MigProfile]], cat: PartitionCatalog) -> list[Seat]:
    mig_gpu = cat.mig_gpus[server.gpu.id]
    out: list[Seat] = []
    for index, profiles in sorted(by_chip.items()):
        starts = place(mig_gpu, profiles)
        if starts is None:
            names = ", ".join(p.name for p in profiles)
            why = mig_rule_break(mig_gpu, profiles) or "no placement keeps the memory slices apart"
            raise InputError(f"impossible MIG layout on GPU {index}: {names} ({why})", where="MIG layout",
                             fix="drop or shrink an instance; `gpuseat carve --mode mig` lists what fits")
        chip = server.chips[index]
        out += [_seat(chip, "mig", p.name, Placement(start=s, size=p.memory_slices), p.seat_gb, None)
                for p, s in zip(profiles, starts, strict=True)]
    return out


def _pack_mig(server: Server, names: Sequence[str], cat: PartitionCatalog) -> dict[int, list[MigProfile]]:
    """First-fit decreasing over the chips, each step checked by the placement search."""
    mig_gpu = cat.mig_gpus[server.gpu.id]
    profiles = sorted((_mig_profile(server.gpu, n, cat) for n in names), key=lambda p: -p.memory_slices)
    by_chip: dict[int, list[MigProfile]] = {c.index: [] for c in server.chips}
    for prof in profiles:
        chip = next((i for i, ps in by_chip.items() if place(mig_gpu, [*ps, prof]) is not None), None)
        if chip is None:
            raise _no_fit(f"MIG instances {', '.join(names)}", server,
                          "ask for fewer or smaller instances, or add GPUs")
        by_chip[chip].append(prof)
    return {i: ps for i, ps in by_chip.items() if ps}


def vgpu_chip_fits(profiles: Sequence[VgpuProfile], mixed_size: bool, chip_gb: float) -> bool:
    """Whether these vGPUs may share one chip: one type unless mixed-size mode, maxima, framebuffer."""
    counts = Counter(p.name for p in profiles)
    if len(counts) > 1 and not mixed_size:
        return False
    limit = {p.name: (p.max_per_gpu if len(counts) == 1 else (p.max_per_gpu_mixed or 0)) for p in profiles}
    framebuffer = sum(p.framebuffer_mb for p in profiles)
    return all(counts[n] <= limit[n] for n in counts) and framebuffer <= chip_gb * 1024


def _vgpu_seats(server: Server, names: Sequence[str], need: SeatNeed, cat: PartitionCatalog) -> list[Seat]:
    known = {p.name: p for p in cat.vgpu_profiles.get(server.gpu.id, ())}
    mixed = cat.vgpu_gpus[server.gpu.id].mixed_size if server.gpu.id in cat.vgpu_gpus else False
    profiles = []
    for name in names:
        if name not in known:
            raise InputError(f"unknown vGPU type '{name}' for {server.gpu.id}.{did_you_mean(name, known)}",
                             where="--profile", fix=f"use one of: {', '.join(known) or 'none'}")
        prof = known[name]
        if need.cuda and not prof.cuda:
            raise InputError(f"{name}: {prof.cuda_note}", where="--profile",
                             fix="choose a CUDA profile, or --no-cuda for desktop seats")
        profiles.append(prof)
    by_chip: dict[int, list[VgpuProfile]] = {c.index: [] for c in server.chips}
    for prof in sorted(profiles, key=lambda p: -p.framebuffer_mb):
        chip = next((i for i, ps in by_chip.items()
                     if vgpu_chip_fits([*ps, prof], mixed, server.gpu.memory_gb)), None)
        if chip is None:
            rule = "mixed-size mode limits" if mixed else "one vGPU type per physical GPU"
            raise _no_fit(f"vGPUs {', '.join(names)}", server, f"respect {rule} and each type's maximum")
        by_chip[chip].append(prof)
    return [_seat(server.chips[i], "vgpu", p.name, None, p.memory_gb, p.licence)
            for i, ps in by_chip.items() for p in ps]


def _profile_mode(gpu: GpuModel, names: Sequence[str], cat: PartitionCatalog) -> Mode:
    mig = {p.name for p in cat.mig_profiles.get(gpu.id, ())}
    vgpu = {p.name for p in cat.vgpu_profiles.get(gpu.id, ())}
    if all(n in mig for n in names):
        return "mig"
    if all(n in vgpu for n in names):
        return "vgpu"
    bad = next(n for n in names if n not in mig | vgpu)
    raise InputError(
        f"'{bad}' is neither a MIG profile nor a vGPU type of {gpu.id}.{did_you_mean(bad, mig | vgpu)}",
        where="--profile",
        fix=f"use one of: {', '.join(sorted(mig | vgpu)) or f'none: {gpu.id} has no MIG or vGPU data'}",
    )


def _explicit(server: Server, req: CarveRequest, cat: PartitionCatalog) -> Layout:
    names = list(req.profiles)
    if len(names) == 1 and req.seats:
        names *= req.seats
    elif req.seats and req.seats != len(names):
        raise InputError(f"--seats {req.seats} but {len(names)} profiles listed", where="--profile",
                         fix="list one profile per seat, or one profile with --seats N")
    mode = _profile_mode(server.gpu, names, cat)
    if req.mode not in ("auto", mode):
        raise InputError(f"--profile {names[0]} is a {mode} profile but --mode is {req.mode}", where="--profile",
                         fix=f"use --mode {mode} or --mode auto")
    if mode == "vgpu":
        seats = _vgpu_seats(server, names, req.need, cat)
    else:
        seats = _mig_seats(server, _pack_mig(server, names, cat), cat)
    small = [s for s in seats if s.memory_gb < req.need.min_gpu_memory_gb]
    if small:
        raise InputError(f"{small[0].profile} gives {_gb(small[0].memory_gb)} < --min-mem "
                         f"{_gb(req.need.min_gpu_memory_gb)}", where="--profile", fix="choose larger profiles")
    return Layout(server=server, mode=mode, seats=_numbered(seats))


def _too_many(server: Server, req: CarveRequest, options: list[Option], rejected: list[Rejection]) -> InputError:
    chips = len(server.chips)
    need = req.need.min_gpu_memory_gb
    if not options:
        reasons = "; ".join(f"{r.mode}{' ' + r.profile if r.profile else ''}: {r.reason}" for r in rejected[:4])
        return InputError(f"no {req.mode} seats with ≥ {_gb(need)} on {server.gpu.id}: {reasons}",
                          where="--mode", fix="try --mode auto, a lower --min-mem or another GPU")
    best = min(options, key=lambda o: _capacity_key(o, chips))
    most = best.per_chip * chips
    scope = f"{server.gpu.id} {req.mode.upper() if req.mode == 'mig' else req.mode}"
    return InputError(
        f"{scope} fits at most {most} seats of ≥ {_gb(need)} on {chips} chip(s); {req.seats} asked",
        where="--seats",
        fix=f"ask for {most}" + ("" if req.mode in ("timeslice", "auto") else " or use time-slicing")
        + " (or add boards, or lower --min-mem)",
    )


def carve(server: Server, req: CarveRequest, catalog: PartitionCatalog | None = None) -> Layout:
    """The layout of ``req.seats`` seats (or as many as possible) on ``server``.

    ``auto`` picks the most isolated mode that seats N; within a mode the profile with the most
    memory per seat that still seats N. Explicit ``profiles`` or a per-chip MIG assignment (from a
    mig-parted config) are placed and validated as given.
    """
    cat = catalog or partition_catalog()
    if req.by_chip is not None:
        if server.gpu.id not in cat.mig_gpus:
            raise InputError(f"{server.gpu.name} has no MIG", where="mig-parted config", fix="give a MIG GPU")
        by_chip = {i: [_mig_profile(server.gpu, n, cat) for n in names] for i, names in req.by_chip.items() if names}
        return Layout(server=server, mode="mig", seats=_numbered(_mig_seats(server, by_chip, cat)))
    if req.profiles:
        return _explicit(server, req, cat)
    options, rejected = chip_options(server.gpu, req.need, cat)
    if req.mode != "auto":
        rejected = [r for r in rejected if r.mode == req.mode]
        options = [o for o in options if o.mode == req.mode]
    chips = len(server.chips)
    if req.seats is None:
        chosen = min(options, key=lambda o: _capacity_key(o, chips), default=None)
    else:
        fitting = [o for o in options if o.per_chip * chips >= req.seats]
        chosen = min(fitting, key=lambda o: (o.rank, o.licence is not None, -o.memory_for(req.seats or 1, chips)),
                     default=None)
    if chosen is None:
        raise _too_many(server, req, options, rejected)
    n = req.seats or chosen.per_chip * chips
    lost = [_explain(o, chosen, chips, n) for o in options if o is not chosen]
    seats = _uniform_seats(server, chosen, n, cat)
    return Layout(server=server, mode=chosen.mode, seats=_numbered(seats), rejected=(*lost, *rejected))
