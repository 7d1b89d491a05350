"""libvirt domain XML, one per slice: a PCI hostdev for passthrough, an mdev hostdev for vGPU.

Each domain gets a qcow2 disk, a virtio NIC on a libvirt network and a serial console (defaults from
:class:`RenderOptions`). vGPU layouts also get ``mdev-create.sh``, which creates each mediated device
with the UUID the domain refers to — on the GPU itself, or on a free SR-IOV virtual function for GPUs
whose vGPUs live on VFs (Ampere and newer) — and persists it with ``mdevctl`` when installed.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal
from xml.sax.saxutils import escape, quoteattr

from gpuseat.core.carve import Layout, Slice
from gpuseat.render.base import (
    Artifact,
    Renderer,
    RenderOptions,
    header,
    runbook,
    slice_uuid,
    vm_name,
)
from gpuseat.render.vgpu import backend, mdev_lines, vf_marker, vfio_lines

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog


PCI_ADDRESS_PLACEHOLDER = "<address domain='0x0000' bus='0x00' slot='0x00' function='0x0'/>"


def _pci_hostdev(seat: Slice) -> str:
    if seat.pci is None:
        # carved from --gpu: pci-fill.sh writes the host's address here before `virsh define`
        address = f"{PCI_ADDRESS_PLACEHOLDER}<!-- gpuseat:gpu {seat.gpu_index} -->"
    else:
        domain, bus, rest = seat.pci.split(":")
        slot, function = rest.split(".")
        address = f"<address domain='0x{domain}' bus='0x{bus}' slot='0x{slot}' function='0x{function}'/>"
    return (
        "    <hostdev mode='subsystem' type='pci' managed='yes'>\n"
        "      <source>\n"
        f"        {address}\n"
        "      </source>\n"
        "    </hostdev>\n"
    )


# Static bash: the n-th NVIDIA display/3D function in PCI order is GPU n (nvidia-smi's default order).
PCI_FILL = r"""# Fill in the PCI address of each GPU (the n-th NVIDIA display controller in PCI bus order is GPU n).
mapfile -t gpus < <(lspci -D -n -d 10de: | awk '$2 ~ /^03/ { print $1 }')
for f in seat-*.xml; do
  for i in "${!gpus[@]}"; do
    IFS=':.' read -r d b s fn <<<"${gpus[$i]}"
    old="<address domain='0x0000' bus='0x00' slot='0x00' function='0x0'/><!-- gpuseat:gpu $i -->"
    new="<address domain='0x$d' bus='0x$b' slot='0x$s' function='0x$fn'/>"
    sed -i "s|$old|$new|" "$f"
  done
  if grep -q 'gpuseat:gpu ' "$f"; then echo "$f: this host has fewer NVIDIA GPUs than the layout" >&2; exit 1; fi
done"""


def _vf_hostdev(seat: Slice) -> str:
    """A vendor-specific VFIO vGPU: the VF itself, left bound to the nvidia driver (``managed='no'``).

    The nvidia driver is the VF's VFIO provider; libvirt must not rebind it to vfio-pci (which
    refuses a VF the nvidia driver holds). ``vgpu-create.sh`` writes the chosen VF's address here.
    """
    return (
        "    <hostdev mode='subsystem' type='pci' managed='no'>\n"
        "      <source>\n"
        f"        {PCI_ADDRESS_PLACEHOLDER}{vf_marker(seat)}\n"
        "      </source>\n"
        "    </hostdev>\n"
    )


def _mdev_hostdev(layout: Layout, seat: Slice) -> str:
    return (
        "    <hostdev mode='subsystem' type='mdev' model='vfio-pci'>\n"
        "      <source>\n"
        f"        <address uuid='{slice_uuid(layout, seat, 'mdev')}'/>\n"
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
    seat: Slice,
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
    pty_console: bool = False,
    vgpu_backend: str = "mdev",
) -> str:
    """The domain of one seat (UEFI, q35: what large-BAR GPUs need).

    The keywords are for ``gpuseat vms``: the domain ``name`` and ``uuid``, ``memory_mib`` (instead of
    the options' GiB), ``virt_type='qemu'`` (TCG, no KVM needed), the ``owner`` metadata, ``gpu=False``
    for a seat without a GPU (BIOS boot then), the qcow2 ``disk``, the NoCloud ``cidata`` ISO as a
    CD-ROM, the serial console to a ``serial_log`` file, a virtio NIC on the libvirt ``network``, and a
    direct kernel ``boot``; ``pty_console`` adds a serial console for ``virsh console``;
    ``vgpu_backend='vfio'`` attaches a vGPU as its SR-IOV VF (vendor-specific VFIO) instead of an mdev.
    """
    device = ""
    if gpu:
        if seat.mode == "passthrough":
            device = _pci_hostdev(seat)
        elif vgpu_backend == "vfio":
            device = _vf_hostdev(seat)
        else:
            device = _mdev_hostdev(layout, seat)
    name = name or vm_name(layout, seat)
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
    elif pty_console:
        device += "    <serial type='pty'>\n      <target port='0'/>\n    </serial>\n"
        device += "    <console type='pty'>\n      <target type='serial' port='0'/>\n    </console>\n"
    memory = (
        f"<memory unit='MiB'>{memory_mib}</memory>"
        if memory_mib
        else f"<memory unit='GiB'>{options.memory_gb}</memory>"
    )
    description = f"gpuseat {seat.name}: GPU {seat.gpu_index} {seat.mode} {seat.profile or ''}"
    return (
        header(layout, "<!--").rstrip() + " -->\n"
        f"<domain type='{virt_type}'>\n"
        f"  <name>{escape(name)}</name>\n"
        f"  <uuid>{escape(uuid or slice_uuid(layout, seat, 'domain'))}</uuid>\n"
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


def disk_path(layout: Layout, item: Slice) -> str:
    """Where a slice's qcow2 disk goes on the host (libvirt's default image pool)."""
    return f"/var/lib/libvirt/images/{vm_name(layout, item)}.qcow2"


def _disks_script(layout: Layout, options: RenderOptions) -> str:
    backing = f" -b {shlex.quote(options.image)} -F qcow2" if options.image else ""
    lines = ["#!/usr/bin/env bash", header(layout, "#").rstrip(), "# Run as root on the KVM host.", "set -euo pipefail"]
    for item in layout.slices:
        path = shlex.quote(disk_path(layout, item))
        lines.append(f"[ -e {path} ] || qemu-img create -f qcow2{backing} {path} {options.disk_gb}G")
    return "\n".join(lines) + "\n"


# Static bash: write a VF's PCI address over a seat's placeholder (the address comes from sysfs).
VF_FILL = r"""# fill_vf SEAT VF: write the VF's PCI address into SEAT.xml in place of its placeholder
fill_vf() {
  local d b s fn old new
  IFS=':.' read -r d b s fn <<<"$2"
  local old="<address domain='0x0000' bus='0x00' slot='0x00' function='0x0'/><!-- gpuseat:vf $1 -->"
  local new="<address domain='0x$d' bus='0x$b' slot='0x$s' function='0x$fn'/>"
  sed -i "s|$old|$new|" "$1.xml"
}"""


def _vfio_script(layout: Layout, catalog: Catalog) -> str:
    lines = [
        "#!/usr/bin/env bash",
        header(layout, "#").rstrip(),
        "# Run as root on the KVM host, in this folder (it writes each seat's VF into its domain XML).",
        "set -euo pipefail",
        VF_FILL,
    ]
    lines += vfio_lines(
        layout,
        catalog,
        pending=lambda item: f"grep -q {shlex.quote(vf_marker(item))} {shlex.quote(item.name + '.xml')}",
        record=lambda item: [f'fill_vf {shlex.quote(item.name)} "$vf"', f'echo "{item.name}: vGPU type $id on VF $vf"'],
    )
    return "\n".join(lines) + "\n"


def _mdev_script(layout: Layout, catalog: Catalog) -> str:
    lines = ["#!/usr/bin/env bash", header(layout, "#").rstrip(), "# Run as root on the KVM host.", "set -euo pipefail"]
    lines += mdev_lines(layout, catalog, lambda item: slice_uuid(layout, item, "mdev"))
    return "\n".join(lines) + "\n"


def render(layout: Layout, options: RenderOptions, catalog: Catalog) -> list[Artifact]:
    """One domain XML per slice, the disk script, the mdev or VF script for vGPU, and ``APPLY.md``."""
    how = backend(layout, catalog, options.vgpu_backend) if layout.mode == "vgpu" else "mdev"
    out = [
        Artifact(
            path=f"{item.name}.xml",
            kind="libvirt-domain",
            text=domain_xml(
                layout,
                item,
                options,
                disk=disk_path(layout, item),
                network=options.network,
                pty_console=True,
                vgpu_backend=how,
            ),
        )
        for item in layout.slices
    ]
    out.append(Artifact(path="disks.sh", kind="shell", text=_disks_script(layout, options)))
    unknown = [item for item in layout.slices if item.pci is None and item.mode == "passthrough"]
    if unknown:
        text = "\n".join(["#!/usr/bin/env bash", header(layout, "#").rstrip(), "set -euo pipefail", PCI_FILL]) + "\n"
        out.append(Artifact(path="pci-fill.sh", kind="shell", text=text))
    files = [
        *(
            [("pci-fill.sh", "run first, in this folder: writes the host's GPU addresses into the domains")]
            if unknown
            else []
        ),
        ("disks.sh", "run on the KVM host: creates each domain's qcow2 disk"),
        ("seat-NN.xml", "one libvirt domain per seat: `virsh define` them on the KVM host"),
    ]
    steps = [
        *(
            [
                "This layout has no PCI addresses (carved from --gpu): `bash pci-fill.sh` in this folder on the KVM"
                " host writes each GPU's address into its domain (or carve from an inventory or a capture)."
            ]
            if unknown
            else []
        ),
        "Boot the host with the IOMMU on (`intel_iommu=on` or `amd_iommu=on`, `iommu=pt`) and check it with"
        " `gpuseat doctor --for passthrough`.",
        f"`sudo bash disks.sh` (disks of {options.disk_gb} GB"
        + (f" backed by `{options.image}`" if options.image else ", empty: install a guest OS or pass --image")
        + ").",
    ]
    checks = ["`virsh list --all` shows every domain; `virsh dumpxml NAME` shows its `<hostdev>`."]
    reboot = ["Domains defined with `virsh define` persist; start them with `virsh autostart NAME` if wanted."]
    if layout.mode == "vgpu" and how == "vfio":
        out.append(Artifact(path="vgpu-create.sh", kind="shell", text=_vfio_script(layout, catalog)))
        files.append(("vgpu-create.sh", "run as root on the KVM host, in this folder, before defining the domains"))
        steps.append(
            "`sudo bash vgpu-create.sh` in this folder: enables the VFs, writes each seat's vGPU type id to a free"
            " VF's `nvidia/current_vgpu_type` (vendor-specific VFIO, vGPU 17+) and puts that VF into the domain."
        )
        checks.append("`cat /sys/bus/pci/devices/VF/nvidia/current_vgpu_type` is non-zero for each seat's VF.")
        reboot = [
            "VFs and their vGPU types are gone after a reboot: enable nvidia-sriov.service and re-run"
            " vgpu-create.sh from a systemd unit ordered after nvidia-vgpu-mgr.service (the domains keep their VF).",
            *reboot,
        ]
    elif layout.mode == "vgpu":
        out.append(Artifact(path="mdev-create.sh", kind="shell", text=_mdev_script(layout, catalog)))
        files.append(("mdev-create.sh", "run as root on the KVM host before defining the domains"))
        steps.append("`sudo bash mdev-create.sh` (creates each vGPU as a mediated device with the domain's UUID).")
        checks.append("`mdevctl list` (or `ls /sys/bus/mdev/devices/`) lists one device per seat.")
        reboot = [
            "mdevs created through sysfs are gone after a reboot: the script also runs `mdevctl define --auto` for"
            " each one when mdevctl is installed (install it, or re-run mdev-create.sh from a systemd unit"
            " ordered after nvidia-vgpu-mgr.service).",
            *reboot,
        ]
    else:
        steps.append(
            "Bind each GPU to vfio-pci (`gpuseat doctor --for passthrough` prints the modprobe lines), or let"
            " libvirt detach it (`managed='yes'`)."
        )
    steps += [
        '`for f in seat-*.xml; do virsh define "$f"; done`',
        "`virsh start NAME`, then `virsh console NAME` (serial console) to reach the guest.",
    ]
    checks.append("In the guest: `nvidia-smi -L` lists the GPU (after the NVIDIA guest driver is installed).")
    out.append(runbook(layout, "libvirt domains", files, steps, checks, reboot))
    return out


RENDERER = Renderer(
    name="libvirt", modes=frozenset({"passthrough", "vgpu"}), summary="libvirt domain XML", render=render
)
