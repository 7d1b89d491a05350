"""libvirt domain XML, one per seat: a PCI hostdev for passthrough, an mdev hostdev for vGPU.

vGPU seats also get ``mdev-create.sh``, which creates each mediated device with the UUID the domain
refers to (``/sys/class/mdev_bus/<BDF>/mdev_supported_types/<type>/create``).
"""

from __future__ import annotations

from xml.sax.saxutils import quoteattr

from gpuseat.catalog.partitions import partition_catalog
from gpuseat.core.carve import Layout, Seat
from gpuseat.render.base import Artifact, Engine, RenderOptions, header, require_pci, seat_uuid


def _pci_hostdev(seat: Seat) -> str:
    domain, bus, rest = require_pci(seat, "libvirt").split(":")
    slot, function = rest.split(".")
    return (
        "    <hostdev mode='subsystem' type='pci' managed='yes'>\n"
        "      <source>\n"
        f"        <address domain='0x{domain}' bus='0x{bus}' slot='0x{slot}' function='0x{function}'/>\n"
        "      </source>\n"
        "    </hostdev>\n"
    )


def _mdev_hostdev(layout: Layout, seat: Seat) -> str:
    return (
        "    <hostdev mode='subsystem' type='mdev' model='vfio-pci'>\n"
        "      <source>\n"
        f"        <address uuid='{seat_uuid(layout, seat, 'mdev')}'/>\n"
        "      </source>\n"
        "    </hostdev>\n"
    )


def domain_xml(layout: Layout, seat: Seat, options: RenderOptions) -> str:
    """The domain of one seat (UEFI, q35: what large-BAR GPUs need)."""
    device = _pci_hostdev(seat) if seat.mode == "passthrough" else _mdev_hostdev(layout, seat)
    name = f"{layout.server.name}-{seat.seat}"
    return (
        header(layout, "<!--").rstrip() + " -->\n"
        "<domain type='kvm'>\n"
        f"  <name>{quoteattr(name)[1:-1]}</name>\n"
        f"  <uuid>{seat_uuid(layout, seat, 'domain')}</uuid>\n"
        f"  <description>gpuseat {seat.seat}: GPU {seat.gpu_index} {seat.mode} {seat.profile or ''}</description>\n"
        f"  <memory unit='GiB'>{options.ram_gb}</memory>\n"
        f"  <vcpu>{options.vcpus}</vcpu>\n"
        "  <os firmware='efi'>\n"
        "    <type arch='x86_64' machine='q35'>hvm</type>\n"
        "  </os>\n"
        "  <features>\n    <acpi/>\n  </features>\n"
        "  <devices>\n"
        f"{device}"
        "  </devices>\n"
        "</domain>\n"
    )


def _mdev_script(layout: Layout) -> str:
    types = {p.name: p.mdev_type for p in partition_catalog().vgpu_profiles[layout.server.gpu.id]}
    lines = ["#!/usr/bin/env bash", header(layout, "#").rstrip(), "# Run as root on the KVM host.", "set -euo pipefail"]
    for seat in layout.seats:
        bdf = require_pci(seat, "libvirt")
        mdev_type = types.get(seat.profile or "")
        if mdev_type:
            target = f"/sys/class/mdev_bus/{bdf}/mdev_supported_types/{mdev_type}/create"
        else:
            lines.append(f"t=$(grep -lx '.*{seat.profile}' /sys/class/mdev_bus/{bdf}/mdev_supported_types/*/name)")
            target = '"$(dirname "$t")/create"'
        lines.append(f"echo {seat_uuid(layout, seat, 'mdev')} > {target}  # {seat.seat} {seat.profile}")
    return "\n".join(lines) + "\n"


def render(layout: Layout, options: RenderOptions) -> list[Artifact]:
    """One domain XML per seat (and the mdev script for vGPU)."""
    out = [
        Artifact(path=f"{seat.seat}.xml", kind="libvirt-domain", text=domain_xml(layout, seat, options))
        for seat in layout.seats
    ]
    if layout.mode == "vgpu":
        out.append(Artifact(path="mdev-create.sh", kind="shell", text=_mdev_script(layout)))
    return out


ENGINE = Engine(name="libvirt", modes=frozenset({"passthrough", "vgpu"}), summary="libvirt domain XML",
                render=render)
