"""The one interface every renderer implements: a carve layout in, engine config files out.

Each engine module (``gpuseat.render.<name>``) exposes ``ENGINE = Engine(...)``. Renderers are pure:
they return :class:`Artifact` values; the CLI decides whether to print them or write them to ``--out``.
"""

from __future__ import annotations

import importlib
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from gpuseat.core.carve import Layout, Seat
from gpuseat.errors import InputError, did_you_mean

ENGINES = ("mig-parted", "nvidia-smi", "libvirt", "proxmox", "xen", "vsphere", "k8s", "jupyterhub")

# Namespace for the deterministic UUIDs of domains and mdev devices (uuid5 of server + seat).
_UUID_NS = uuid.UUID("5b0c3f0e-6a2d-4c44-9b53-4d2f8a1e7c10")


class Artifact(BaseModel):
    """One rendered file."""

    model_config = ConfigDict(frozen=True)

    path: str = Field(description="file name relative to --out")
    kind: str = Field(description="what it is: libvirt-domain, k8s-manifest, shell, yaml, python, vmx")
    text: str


class RenderOptions(BaseModel):
    """Settings the engines need beyond the layout (guest size, VM ids, container image)."""

    model_config = ConfigDict(frozen=True)

    vcpus: int = Field(4, gt=0)
    ram_gb: int = Field(16, gt=0)
    first_vmid: int = Field(100, ge=100)
    image: str = "nvidia/cuda:12.4.1-base-ubuntu22.04"
    namespace: str = "gpuseat"


@dataclass(frozen=True)
class Engine:
    """A renderer: its name, the modes it can express, and the function that renders a layout."""

    name: str
    modes: frozenset[str]
    summary: str
    render: Callable[[Layout, RenderOptions], list[Artifact]]


def engine(name: str) -> Engine:
    """The engine called ``name`` (imported on demand)."""
    if name not in ENGINES:
        raise InputError(
            f"unknown engine '{name}'.{did_you_mean(name, ENGINES)}",
            where="--render",
            fix=f"use one of: {', '.join(ENGINES)}",
        )
    module = importlib.import_module(f"gpuseat.render.{name.replace('-', '_')}")
    return module.ENGINE


def render(layout: Layout, name: str, options: RenderOptions | None = None) -> list[Artifact]:
    """Render ``layout`` for engine ``name``; a mode the engine cannot express is an input error."""
    eng = engine(name)
    if layout.mode not in eng.modes:
        able = [e for e in ENGINES if layout.mode in engine(e).modes]
        raise InputError(
            f"{name} cannot express {layout.mode} seats ({name} does {', '.join(sorted(eng.modes))})",
            where="--render",
            fix=f"render {layout.mode} with one of: {', '.join(able)}; or carve with --mode {sorted(eng.modes)[0]}",
        )
    return eng.render(layout, options or RenderOptions())


def seat_uuid(layout: Layout, seat: Seat, what: str) -> str:
    """A stable UUID for ``what`` (domain, mdev) of one seat: same layout → same UUIDs."""
    return str(uuid.uuid5(_UUID_NS, f"{layout.server.name}/{seat.seat}/{what}"))


def require_pci(seat: Seat, engine_name: str) -> str:
    """The seat's PCI address; engines that attach devices cannot work without one."""
    if seat.pci is None:
        raise InputError(
            f"{engine_name} needs the PCI address of GPU {seat.gpu_index} ({seat.seat})",
            where="server description",
            fix="carve from an inventory with [[gpu.chip]] pci = \"0000:86:00.0\" or from --from-nvidia-smi",
        )
    return seat.pci


def slug(text: str) -> str:
    """A DNS-1123 label (Kubernetes names, config names): lower case, digits and dashes."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:63] or "gpuseat"


def header(layout: Layout, comment: str) -> str:
    """The first line of every rendered file: who wrote it, for which server and mode."""
    return f"{comment} gpuseat carve: {len(layout.seats)} {layout.mode} seat(s) on {layout.server.name}\n"


def seats_by_chip(layout: Layout) -> dict[int, list[Seat]]:
    """The layout's seats grouped by GPU index, in index order."""
    out: dict[int, list[Seat]] = {}
    for seat in layout.seats:
        out.setdefault(seat.gpu_index, []).append(seat)
    return dict(sorted(out.items()))
