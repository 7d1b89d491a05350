"""MIG placement: where GPU instances sit on one GPU, and how a set of them packs onto several GPUs.

Pure: it takes the catalog's :class:`~gpuseat.catalog.partitions.MigGpu` and
:class:`~gpuseat.catalog.partitions.MigProfile` rows and returns values. Layouts are searched, not
counted: a GPU instance occupies memory slots ``[start, start+size)`` with ``start`` from the profile's
valid list, no two overlap, compute slices add up to at most the GPU's, per-profile maxima hold
(partitioning.md §1.2 rules 1–4).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import cache

from pydantic import BaseModel, ConfigDict, Field

from gpuseat.catalog.partitions import MigGpu, MigProfile


class Placement(BaseModel):
    """Where a MIG GPU instance sits: first memory slot and number of slots (NVML's placement)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    start: int = Field(ge=0)
    size: int = Field(gt=0)


def rule_break(gpu: MigGpu, profiles: Sequence[MigProfile]) -> str | None:
    """Why a set of GPU instances can never share one GPU (counts, compute, media engines), or None."""
    counts = Counter(p.name for p in profiles)
    for p in profiles:
        if counts[p.name] > p.max_count:
            return f"at most {p.max_count} × {p.name} per GPU"
    compute = sum(p.compute_slices for p in profiles)
    if compute > gpu.compute_slices:
        return f"{compute} compute slices > {gpu.compute_slices}"
    media = [p.name for p in profiles if p.media]
    if len(media) > 1:
        # The GPU has one JPEG/OFA engine set and every +me instance takes it (partitioning.md §1.3, A30
        # table: 1g.6gb+me and 2g.12gb+me each 1 JPEG / 1 OFA of 1).
        return f"{' and '.join(media)} both need the GPU's one media-engine set (JPEG/OFA)"
    for p in profiles:
        # mig-parted's known-config generator rejects a 1g +me GI beside other 1g GIs (partitioning.md §1.2 rule 2)
        if p.media and sum(q.compute_slices == p.compute_slices for q in profiles) > 1:
            return f"{p.name} cannot share the GPU with another {p.compute_slices}g instance"
    return None


def place(gpu: MigGpu, profiles: Sequence[MigProfile]) -> tuple[int, ...] | None:
    """Start slot of each GPU instance (same order as ``profiles``), or None if no valid placement exists."""
    if rule_break(gpu, profiles) is not None:
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
    return next((n for n in range(profile.max_count, 0, -1) if place(gpu, [profile] * n) is not None), 0)


def pack(gpu: MigGpu, profiles: Sequence[MigProfile], chips: int) -> list[list[MigProfile]] | None:
    """GPU instances per chip such that every chip has a valid placement, or None when none exists.

    An exact search (not first-fit): the answer does not depend on the order the profiles are given in.
    Chips holding the same instances are interchangeable, so only the first of them is tried.
    """
    items = sorted(profiles, key=lambda p: (-p.memory_slices, -p.compute_slices, p.name))
    by_name = {p.name: p for p in items}

    @cache
    def fits(names: tuple[str, ...]) -> bool:
        return place(gpu, [by_name[n] for n in names]) is not None

    failed: set[tuple[int, tuple[tuple[str, ...], ...]]] = set()
    state: list[tuple[str, ...]] = [() for _ in range(chips)]

    def search(k: int) -> bool:
        if k == len(items):
            return True
        key = (k, tuple(sorted(state)))
        if key in failed:
            return False
        tried: set[tuple[str, ...]] = set()
        for c in range(chips):
            if state[c] in tried:
                continue
            tried.add(state[c])
            grown = tuple(sorted((*state[c], items[k].name)))
            if fits(grown):
                before, state[c] = state[c], grown
                if search(k + 1):
                    return True
                state[c] = before
        failed.add(key)
        return False

    if not search(0):
        return None
    return [[by_name[n] for n in names] for names in state]


# -- naming MIG devices from what -q reports -------------------------------------------------------


class MigDeviceFacts(BaseModel):
    """What ``nvidia-smi -q`` says about one MIG device (no profile name): GI/CI ids, memory, SMs, CEs."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    memory_mib: float | None = None
    multiprocessors: int | None = None
    copy_engines: int | None = None


def _base(name: str) -> bool:
    """A plain profile (no ``+me``/``+gfx``/``-me`` variant): the ones -q cannot tell apart from variants."""
    return "+" not in name and "-" not in name


def _nearest_in_sms(near: list[MigProfile], sms: int, table: Sequence[MigProfile]) -> list[MigProfile]:
    """Among profiles of equal memory (``1g.20gb``/``2g.20gb``), those whose SM count is nearest ``sms``.

    Why: with no copy-engine count to tell them apart, the SM count does: a real H100 ``-lgip`` prints 26
    SMs for 1g.20gb and 32 for 2g.20gb. Profiles without a printed SM count are estimated from the
    table's largest printed one (SMs per compute slice); with no printed count at all, nothing changes.
    """
    printed = [p for p in table if p.sms]
    if not printed:
        return near
    ref = max(printed, key=lambda p: p.compute_slices)
    per_slice = (ref.sms or 0) / ref.compute_slices

    def distance(p: MigProfile) -> float:
        return abs((p.sms if p.sms else p.compute_slices * per_slice) - sms)

    best = min(distance(p) for p in near)
    return [p for p in near if distance(p) == best]


def infer_names(devices: Sequence[MigDeviceFacts], profiles: Sequence[MigProfile]) -> list[str | None]:
    """The profile name of each device, inferred from the GPU's profile table (not from one SM constant).

    The GPU instance profile is the one whose usable memory (NVIDIA's ``-lgip`` figure) is nearest the
    device's; among profiles of equal memory (``1g.20gb``/``2g.20gb``, ``3g.40gb``/``4g.40gb``) the one
    whose copy-engine count matches. Devices sharing a GPU instance are its compute instances: each
    gets ``<c>c.`` in front when its share of the instance's SMs is less than the whole instance
    (``1c.3g.71gb``). None when the table has no candidate or the memory is unknown.
    """
    plain = [p for p in profiles if _base(p.name)] or list(profiles)
    groups: dict[object, list[int]] = {}
    for i, d in enumerate(devices):
        groups.setdefault(d.gpu_instance_id if d.gpu_instance_id is not None else ("dev", i), []).append(i)
    names: list[str | None] = [None] * len(devices)
    for members in groups.values():
        first = devices[members[0]]
        if first.memory_mib is None or not plain:
            continue
        gib = first.memory_mib / 1024
        best = min(abs(p.seat_gb - gib) for p in plain)
        near = [p for p in plain if abs(p.seat_gb - gib) <= best + 0.05 * max(gib, 1.0)]
        if first.copy_engines is not None and any(p.copy_engines == first.copy_engines for p in near):
            near = [p for p in near if p.copy_engines == first.copy_engines]
        sms = [devices[i].multiprocessors for i in members]
        gi_sms = sum(s for s in sms if s) if all(sms) else None
        if gi_sms and len({p.compute_slices for p in near}) > 1:
            near = _nearest_in_sms(near, gi_sms, profiles)
        gi = min(near, key=lambda p: (abs(p.seat_gb - gib), p.compute_slices))
        whole = gi_sms if len(members) > 1 else None
        for i in members:
            count = devices[i].multiprocessors
            if whole and count:
                c = max(1, round(count * gi.compute_slices / whole))
                names[i] = f"{c}c.{gi.name}" if c < gi.compute_slices else gi.name
            else:
                names[i] = gi.name
    return names
