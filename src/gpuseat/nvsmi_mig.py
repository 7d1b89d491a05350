"""Readers for ``nvidia-smi mig`` tables: ``-lgip`` (profiles), ``-lgipp`` (placements), ``-lgi`` (GPU
instances), ``-lci`` (compute instances) and the ``MIG devices:`` table of plain ``nvidia-smi``.

These are the driver's own profile table and instance list: carve plans from them (``--from-probe``), and
the monitor names MIG devices from ``-lgi``/``-lci`` (GPU instance id → profile) instead of guessing.
Formats as printed by drivers 450–610 (MIG user guide "Getting Started"; real prints in tests/fixtures).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpuseat.readings import MigInstance, Snapshot

_LGIP = re.compile(
    r"^\|\s+(?P<gpu>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<id>\d+)\s+(?P<free>\d+)/(?P<total>\d+)\s+"
    r"(?P<mem>\d+(?:\.\d+)?)\s+(?P<p2p>\S+)\s+(?P<sm>\d+)\s+(?P<dec>\d+)\s+(?P<enc>\d+)\s+\|$",
    re.ASCII,
)
_LGIP2 = re.compile(r"^\|\s+(?P<ce>\d+)\s+(?P<jpeg>\d+)\s+(?P<ofa>\d+)\s+\|$", re.ASCII)
_LGIPP = re.compile(
    r"^GPU\s+(?P<gpu>\d+)\s+Profile ID\s+(?P<id>\d+)\s+Placements?\s*:\s*\{(?P<starts>[\d,]+)\}:(?P<size>\d+)",
    re.ASCII,
)
_LGI = re.compile(
    r"^\|\s+(?P<gpu>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<id>\d+)\s+(?P<gi>\d+)\s+(?P<start>\d+):(?P<size>\d+)\s+\|$",
    re.ASCII,
)
_LCI = re.compile(
    r"^\|\s+(?P<gpu>\d+)\s+(?P<gi>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<id>\d+)\s+(?P<ci>\d+)\s+(?P<start>\d+):(?P<size>\d+)\s+\|$",
    re.ASCII,
)
_DEV = re.compile(
    r"^\|\s+(?P<gpu>\d+)\s+(?P<gi>\d+)\s+(?P<ci>\d+)\s+(?P<dev>\d+)\s+\|\s+(?P<used>\d+)MiB\s+/\s+(?P<total>\d+)MiB\s+\|"
    r"\s+(?P<sm>\d+)\s+\S+\s+\|\s+(?P<ce>\d+)\s+",
    re.ASCII,
)


@dataclass(frozen=True, slots=True)
class ProfileRow:
    """One ``-lgip`` profile: name, id, instances free/total, memory (GiB), SMs, CEs, media engines."""

    gpu: int
    name: str
    profile_id: int
    free: int
    total: int
    memory_gib: float
    sms: int
    copy_engines: int | None = None
    decoders: int = 0
    encoders: int = 0
    jpeg: int | None = None
    ofa: int | None = None


@dataclass(frozen=True, slots=True)
class Instance:
    """One ``-lgi`` GPU instance or ``-lci`` compute instance: profile name and id, ids, placement."""

    gpu: int
    name: str
    profile_id: int
    gpu_instance_id: int
    start: int
    size: int
    compute_instance_id: int | None = None


def parse_lgip(text: str) -> list[ProfileRow]:
    """``nvidia-smi mig -lgip``: one row per profile (the second line adds CE, JPEG, OFA)."""
    rows: list[ProfileRow] = []
    for line in text.splitlines():
        line = line.strip()
        if m := _LGIP.match(line):
            rows.append(
                ProfileRow(
                    gpu=int(m["gpu"]),
                    name=m["name"],
                    profile_id=int(m["id"]),
                    free=int(m["free"]),
                    total=int(m["total"]),
                    memory_gib=float(m["mem"]),
                    sms=int(m["sm"]),
                    decoders=int(m["dec"]),
                    encoders=int(m["enc"]),
                )
            )
        elif (m := _LGIP2.match(line)) and rows and rows[-1].copy_engines is None:
            rows[-1] = replace(rows[-1], copy_engines=int(m["ce"]), jpeg=int(m["jpeg"]), ofa=int(m["ofa"]))
    return rows


def parse_lgipp(text: str) -> dict[tuple[int, int], tuple[tuple[int, ...], int]]:
    """``nvidia-smi mig -lgipp``: (GPU, profile id) → (valid starts, size in placement units)."""
    out = {}
    for line in text.splitlines():
        if m := _LGIPP.match(line.strip()):
            out[(int(m["gpu"]), int(m["id"]))] = (tuple(int(s) for s in m["starts"].split(",")), int(m["size"]))
    return out


def parse_lgi(text: str) -> list[Instance]:
    """``nvidia-smi mig -lgi``: the GPU instances with their profile and placement."""
    return _instances(text, _LGI)


def parse_lci(text: str) -> list[Instance]:
    """``nvidia-smi mig -lci``: the compute instances (name ``1c.3g.71gb`` style when smaller than the GI)."""
    return _instances(text, _LCI)


def _instances(text: str, row: re.Pattern[str]) -> list[Instance]:
    """The rows of an ``-lgi`` or ``-lci`` table (the same columns; ``-lci`` adds the compute instance id)."""
    out = []
    for line in text.splitlines():
        if m := row.match(line.strip()):
            ci = int(m["ci"]) if "ci" in row.groupindex else None
            out.append(
                Instance(int(m["gpu"]), m["name"], int(m["id"]), int(m["gi"]), int(m["start"]), int(m["size"]), ci)
            )
    return out


@dataclass(frozen=True, slots=True)
class TableDevice:
    """One row of plain ``nvidia-smi``'s ``MIG devices:`` table."""

    gpu: int
    gpu_instance_id: int
    compute_instance_id: int
    device: int
    used_mib: int
    total_mib: int
    multiprocessors: int
    copy_engines: int


def parse_mig_table(text: str) -> list[TableDevice]:
    """The ``MIG devices:`` rows of plain ``nvidia-smi`` (GI, CI, device index, memory, SMs, CEs)."""
    out = []
    for line in text.splitlines():
        if m := _DEV.match(line.strip()):
            out.append(
                TableDevice(
                    *(int(m[k]) for k in ("gpu", "gi", "ci", "dev", "used", "total", "sm", "ce")),
                )
            )
    return out


def _by_sms(m: MigInstance, rows: Sequence[ProfileRow]) -> str | None:
    """The one ``-lgip`` profile with the device's SM count and memory (a whole GPU instance), or None.

    The driver's own table tells ``1g.20gb`` (26 SMs) from ``2g.20gb`` (32 SMs) at equal memory; variants
    (``+me``, ``+gfx``, ``-me``) print the same figures as their base profile, so the base is named.
    """
    if not m.multiprocessors:
        return None
    hits = {
        r.name
        for r in rows
        if r.sms == m.multiprocessors
        and "+" not in r.name
        and "-" not in r.name
        and (m.memory_total_mib is None or abs(r.memory_gib * 1024 - m.memory_total_mib) <= 0.03 * r.memory_gib * 1024)
    }
    return hits.pop() if len(hits) == 1 else None


def name_from_instances(
    snapshot: Snapshot,
    gis: Sequence[Instance],
    cis: Sequence[Instance] = (),
    profiles: Sequence[ProfileRow] = (),
) -> Snapshot:
    """MIG device profiles from the driver's own tables, never guessed: ``-lgi``/``-lci`` matched by GPU
    index and GI/CI id (the GI's profile id named by ``-lgip`` when captured), else a whole GPU instance
    matched to the one ``-lgip`` profile with its SM count and memory.

    Names read elsewhere (``-L``, NVML) are kept; names guessed from the catalog are replaced.
    """
    gi_of: dict[tuple[int, int | None], Instance] = {(i.gpu, i.gpu_instance_id): i for i in gis}
    ci_name: dict[tuple[int, int | None, int | None], str] = {
        (i.gpu, i.gpu_instance_id, i.compute_instance_id): i.name for i in cis
    }
    table: dict[tuple[int, int], str] = {(r.gpu, r.profile_id): r.name for r in profiles}
    gpus = []
    for gpu in snapshot.gpus:
        rows = [r for r in profiles if r.gpu == gpu.index]
        per_gi = Counter(m.gpu_instance_id for m in gpu.mig)
        mig = []
        for m in gpu.mig:
            if m.profile and not m.profile_inferred:
                mig.append(m)
                continue
            found = gi_of.get((gpu.index, m.gpu_instance_id))
            gi = (table.get((gpu.index, found.profile_id)) or found.name) if found else None
            name = ci_name.get((gpu.index, m.gpu_instance_id, m.compute_instance_id))
            if name is not None and gi is not None and name != gi and "c." not in name:
                name = None
            name = name or gi
            if name is None and per_gi[m.gpu_instance_id] == 1:
                name = _by_sms(m, rows)
            mig.append(replace(m, profile=name, profile_inferred=False) if name else m)
        gpus.append(replace(gpu, mig=tuple(mig)))
    return replace(snapshot, gpus=tuple(gpus))
