"""``nvidia-smi -L``, read once: the GPUs with their MIG devices, and which devices a process would use.

Every place that reads the listing (the inventory, the monitor's MIG names, ``bench --all-seats``, and each
engine's readiness probe) reads it here, so a MIG device counts once under its GPU everywhere: a GPU in MIG
mode is its MIG devices, a GPU without them is itself (:func:`visible_devices`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

_LIST_GPU = re.compile(r"^GPU\s+(\d+):\s+(.+?)\s+\(UUID:\s*(GPU-[0-9A-Za-z-]+)\)\s*$", re.ASCII)
_LIST_MIG = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+(\d+):\s+\(UUID:\s*(MIG-[0-9A-Za-z/-]+)\)\s*$", re.ASCII)


@dataclass(frozen=True, slots=True)
class ListedMig:
    """One MIG device line of ``nvidia-smi -L``: profile (``1g.10gb``, ``1c.3g.71gb``), device index, UUID."""

    profile: str
    device: int
    uuid: str


@dataclass(frozen=True, slots=True)
class Listed:
    """One GPU of ``nvidia-smi -L``, with its MIG devices in device order."""

    index: int
    name: str
    uuid: str
    mig: tuple[ListedMig, ...] = ()


def parse_list(text: str) -> list[Listed]:
    """Parse ``nvidia-smi -L``; lines that are neither a GPU nor a MIG device are ignored."""
    out: list[Listed] = []
    for line in text.splitlines():
        if m := _LIST_GPU.match(line):
            out.append(Listed(int(m.group(1)), m.group(2), m.group(3)))
        elif (m := _LIST_MIG.match(line)) and out:
            out[-1] = replace(out[-1], mig=(*out[-1].mig, ListedMig(m.group(1), int(m.group(2)), m.group(3))))
    return out


def visible_devices(listed: list[Listed]) -> tuple[str, ...]:
    """The devices the listing offers a process: per GPU its MIG devices, else the GPU itself (a MIG slice
    of one GPU beside a whole second GPU is two devices, not one)."""
    return tuple(uuid for g in listed for uuid in ([m.uuid for m in g.mig] or [g.uuid]))
