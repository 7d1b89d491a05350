"""libvirt domain XML, one per seat: a PCI hostdev for passthrough, an mdev hostdev for vGPU.

vGPU seats also get ``mdev-create.sh``, which creates each mediated device with the UUID the domain
refers to (``/sys/class/mdev_bus/<BDF>/mdev_supported_types/<type>/create``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from xml.sax.saxutils import escape, quoteattr

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


# The namespace of gpuseat's element in a domain's <metadata>: it marks the domain as gpuseat's own
# (``gpuseat vms`` touches no domain without it) and says which course and seat it serves.
METADATA_NS = "https://gpuseat.dev/xmlns/libvirt-seat/1"
METADATA_PREFIX = "gpuseat"


@dataclass(frozen=True)
class Owner:
    """Which course and seat a domain serves (written into the domain's gpuseat metadata)."""

    course: str
    seat: str
    participant: str | None = None


@dataclass(frozen=True)
class DirectBoot:
    """Boot a kernel and initrd given as host paths instead of a disk (tests, rescue images)."""

    kernel: str
    initrd: str
    cmdline: str = "console=ttyS0"


def _metadata(owner: Owner) -> str:
    participant = f" participant={quoteattr(owner.participant)}" if owner.participant else ""
    return (
        "  <metadata>\n"
        f"    <{METADATA_PREFIX}:seat xmlns:{METADATA_PREFIX}={quoteattr(METADATA_NS)}"
        f" course={quoteattr(owner.course)} seat={quoteattr(owner.seat)}{participant}/>\n"
        "  </metadata>\n"
    )


def domain_xml(
    layout: Layout,
    seat: Seat,
    options: RenderOptions,
    *,
    name: str | None = None,
    uuid: str | None = None,
    memory_mib: int | None = None,
    virt_type: Literal["kvm", "qemu"] = "kvm",
    owner: Owner | None = None,
    gpu: bool = True,
    disk: str | None = None,
    cidata: str | None = None,
    serial_log: str | None = None,
    network: str | None = None,
    boot: DirectBoot | None = None,
) -> str:
    """The domain of one seat (UEFI, q35: what large-BAR GPUs need).

    The keywords are for ``gpuseat vms``: the domain ``name`` and ``uuid``, ``memory_mib`` (instead of
    the options' GiB), ``virt_type='qemu'`` (TCG, no KVM needed), the ``owner`` metadata, ``gpu=False``
    for a seat without a GPU (BIOS boot then), the qcow2 ``disk``, the NoCloud ``cidata`` ISO as a
    CD-ROM, the serial console to a ``serial_log`` file, a virtio NIC on the libvirt ``network``, and a
    direct kernel ``boot``.
    """
    device = ""
    if gpu:
        device = _pci_hostdev(seat) if seat.mode == "passthrough" else _mdev_hostdev(layout, seat)
    name = name or f"{layout.server.name}-{seat.seat}"
    firmware = " firmware='efi'" if gpu else ""
    kernel = ""
    if boot is not None:
        kernel = (
            f"    <kernel>{escape(boot.kernel)}</kernel>\n"
            f"    <initrd>{escape(boot.initrd)}</initrd>\n"
            f"    <cmdline>{escape(boot.cmdline)}</cmdline>\n"
        )
    if disk is not None:
        device += (
            "    <disk type='file' device='disk'>\n"
            "      <driver name='qemu' type='qcow2'/>\n"
            f"      <source file={quoteattr(disk)}/>\n"
            "      <target dev='vda' bus='virtio'/>\n"
            "    </disk>\n"
        )
    if cidata is not None:
        device += (
            "    <disk type='file' device='cdrom'>\n"
            "      <driver name='qemu' type='raw'/>\n"
            f"      <source file={quoteattr(cidata)}/>\n"
            "      <target dev='sda' bus='sata'/>\n"
            "      <readonly/>\n"
            "    </disk>\n"
        )
    if network is not None:
        device += (
            "    <interface type='network'>\n"
            f"      <source network={quoteattr(network)}/>\n"
            "      <model type='virtio'/>\n"
            "    </interface>\n"
        )
    if serial_log is not None:
        device += (
            "    <serial type='file'>\n"
            f"      <source path={quoteattr(serial_log)}/>\n"
            "      <target port='0'/>\n"
            "    </serial>\n"
        )
    memory = (
        f"<memory unit='MiB'>{memory_mib}</memory>" if memory_mib else f"<memory unit='GiB'>{options.ram_gb}</memory>"
    )
    description = f"gpuseat {seat.seat}: GPU {seat.gpu_index} {seat.mode} {seat.profile or ''}"
    return (
        header(layout, "<!--").rstrip() + " -->\n"
        f"<domain type='{virt_type}'>\n"
        f"  <name>{escape(name)}</name>\n"
        f"  <uuid>{escape(uuid or seat_uuid(layout, seat, 'domain'))}</uuid>\n"
        f"  <description>{escape(description)}</description>\n"
        f"{_metadata(owner) if owner is not None else ''}"
        f"  {memory}\n"
        f"  <vcpu>{options.vcpus}</vcpu>\n"
        f"  <os{firmware}>\n"
        "    <type arch='x86_64' machine='q35'>hvm</type>\n"
        f"{kernel}"
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


ENGINE = Engine(name="libvirt", modes=frozenset({"passthrough", "vgpu"}), summary="libvirt domain XML", render=render)
