"""The one interface every renderer implements: a layout in, an engine's config files out.

Each renderer module (``gpuseat.render.<name>``) exposes ``RENDERER = Renderer(...)``. Renderers are
pure: they take the layout, the :class:`RenderOptions` and the catalog, and return :class:`Artifact`
values, always including the runbook ``APPLY.md``; the service decides where they go.

Untrusted text stays data: the server name reaches a file only as :attr:`Server.slug` (an identifier)
or through the target's own quoting (``shlex.quote``, a YAML dumper, ``repr``, XML escaping).
"""

from __future__ import annotations

import importlib
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpuseat.core.carve import Layout, Slice
from gpuseat.errors import InputError, did_you_mean

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog

RENDERERS = ("mig-parted", "nvidia-smi", "libvirt", "proxmox", "xen", "vsphere", "k8s", "jupyterhub")
RUNBOOK = "APPLY.md"
FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,100}$")

# Namespace for the deterministic UUIDs of domains and mdev devices (uuid5 of server + slice).
_UUID_NS = uuid.UUID("5b0c3f0e-6a2d-4c44-9b53-4d2f8a1e7c10")


class Artifact(BaseModel):
    """One rendered file."""

    model_config = ConfigDict(frozen=True)

    path: str = Field(pattern=FILE_NAME.pattern, description="file name inside --out (no folders)")
    kind: str = Field(description="libvirt-domain, k8s-manifest, shell, yaml, python, vmx, runbook")
    text: str


class RenderOptions(BaseModel):
    """Settings the engines need beyond the layout (guest size, disks, network, VM ids, container image)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    vcpus: int = Field(4, ge=1, le=512)
    memory_gb: int = Field(16, ge=1, le=16384)
    disk_gb: int = Field(50, ge=1, le=65536)
    image: str | None = Field(
        None, max_length=4096, pattern=r"^/[^\x00-\x1f\x7f]*$", description="base disk image (an absolute host path)"
    )
    network: str = Field("default", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", description="libvirt network")
    bridge: str = Field("vmbr0", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$", description="Proxmox bridge")
    storage: str = Field("local-lvm", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", description="Proxmox storage")
    first_vmid: int = Field(100, ge=100, le=999_999_000)
    container_image: str = Field("nvidia/cuda:12.4.1-base-ubuntu22.04", pattern=r"^[a-z0-9][a-z0-9._/:@-]{0,250}$")
    namespace: str = Field("gpuseat", pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
    plugin_namespace: str = Field("nvidia-device-plugin", pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
    operator_namespace: str = Field("gpu-operator", pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
    vgpu_backend: Literal["auto", "mdev", "vfio"] = Field(
        "auto",
        description="how vGPUs are created: mdev (mdev_supported_types), vfio (NVIDIA's vendor-specific VFIO: a"
        " type id written to a VF's nvidia/current_vgpu_type, vGPU 17+ on Ada/Hopper/Blackwell), or auto",
    )
    participants: tuple[Annotated[str, Field(pattern=r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")], ...] = Field(
        (), max_length=4096, description="k8s: one participant per seat, in seat order (their namespace and access)"
    )


@dataclass(frozen=True)
class Renderer:
    """A renderer: its name, the modes it can express, and the function that renders a layout."""

    name: str
    modes: frozenset[str]
    summary: str
    render: Callable[[Layout, RenderOptions, Catalog], list[Artifact]]


def renderer(name: str) -> Renderer:
    """The renderer called ``name`` (imported on demand)."""
    if name not in RENDERERS:
        raise InputError(
            f"unknown renderer '{name}'.{did_you_mean(name, RENDERERS)}",
            where="--render",
            fix=f"use one of: {', '.join(RENDERERS)}",
        )
    module = importlib.import_module(f"gpuseat.render.{name.replace('-', '_')}")
    found: Renderer = module.RENDERER
    return found


def render(layout: Layout, name: str, catalog: Catalog, options: RenderOptions | None = None) -> list[Artifact]:
    """Render ``layout`` for ``name``; a mode the renderer cannot express is an input error."""
    rend = renderer(name)
    if layout.mode not in rend.modes:
        able = [e for e in RENDERERS if layout.mode in renderer(e).modes]
        raise InputError(
            f"{name} cannot express {layout.mode} seats ({name} does {', '.join(sorted(rend.modes))})",
            where="--render",
            fix=f"render {layout.mode} with one of: {', '.join(able)}; or carve with --mode {sorted(rend.modes)[0]}",
        )
    artifacts = rend.render(layout, options or RenderOptions(), catalog)
    names = [a.path for a in artifacts]
    assert len(set(names)) == len(names) and RUNBOOK in names, names
    return artifacts


def slice_uuid(layout: Layout, item: Slice, what: str) -> str:
    """A stable UUID for ``what`` (domain, mdev) of one slice: same layout → same UUIDs."""
    return str(uuid.uuid5(_UUID_NS, f"{layout.server.name}/{item.name}/{what}"))


def vm_name(layout: Layout, item: Slice) -> str:
    """The VM / domain / Pod name of a slice: ``<server slug>-seat-01`` (a DNS-1123 label)."""
    return f"{layout.server.slug}-{item.name}"


def require_pci(item: Slice, renderer_name: str) -> str:
    """The slice's PCI address; renderers that attach devices cannot work without one."""
    if item.pci is None:
        raise InputError(
            f"{renderer_name} needs the PCI address of GPU {item.gpu_index} ({item.name})",
            where="server description",
            fix='carve from an inventory with [[gpu.chip]] pci = "0000:86:00.0" or from --from-nvidia-smi',
        )
    return item.pci


def header(layout: Layout, comment: str) -> str:
    """The first line of every rendered file: who wrote it, for which server (as its slug) and mode."""
    return f"{comment} gpuseat carve: {len(layout.slices)} {layout.mode} seat(s) on {layout.server.slug}\n"


def slices_by_chip(layout: Layout) -> dict[int, list[Slice]]:
    """The layout's slices grouped by GPU index, in index order."""
    out: dict[int, list[Slice]] = {}
    for item in layout.slices:
        out.setdefault(item.gpu_index, []).append(item)
    return dict(sorted(out.items()))


def runbook(
    layout: Layout,
    title: str,
    files: Sequence[tuple[str, str]],
    steps: Sequence[str],
    checks: Sequence[str],
    reboot: Sequence[str],
    notes: Sequence[str] = (),
) -> Artifact:
    """``APPLY.md`` in the format of docs/carve.md: files, steps in order, checks, what survives a reboot."""
    lines = [
        f"# Apply: {title}",
        "",
        f"Layout: {len(layout.slices)} {layout.mode} seat(s) on `{layout.server.slug}`"
        f" ({len(layout.server.chips)} × {layout.server.gpu.id}).",
        "",
        "## Files",
        "",
        *[f"- `{name}`: {where}" for name, where in files],
        "",
        "## Steps (in this order)",
        "",
        *[f"{n}. {step}" for n, step in enumerate(steps, 1)],
        "",
        "## Check",
        "",
        *[f"- {check}" for check in checks],
        "",
        "## After a reboot",
        "",
        *[f"- {item}" for item in reboot],
    ]
    notes = [*layout.notes, *notes]
    if notes:
        lines += ["", "## Notes", "", *[f"- {note}" for note in notes]]
    return Artifact(path=RUNBOOK, kind="runbook", text="\n".join(lines) + "\n")
