"""Proxmox VE: ``qm create`` one VM per slice (q35, OVMF with an EFI disk, a disk, a virtio NIC, a serial
console) with the GPU (``hostpci0 <BDF>,pcie=1``) or a vGPU (``hostpci0 <BDF>,mdev=<type>``).

Large-BAR GPUs need UEFI (OVMF) and q35 in the guest (partitioning.md §4.4), so every VM gets both.
vGPUs on SR-IOV GPUs go on a free virtual function, found when the script runs: as a mediated device
(``mdev=<type>``), or — vendor-specific VFIO, vGPU 17+ on Ada/Hopper/Blackwell — by writing the type id to
the VF's ``nvidia/current_vgpu_type`` and passing the VF itself (``driver=keep``: the nvidia driver stays
the VF's VFIO provider).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from gpuseat.core.carve import Layout
from gpuseat.render.base import Artifact, Renderer, RenderOptions, header, require_pci, runbook, vm_name
from gpuseat.render.vgpu import FIND_TYPE, FIND_VF, SYSFS, backend, enable_vfs, is_sriov, parents, type_name

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog


def qm_create(layout: Layout, options: RenderOptions, vmid: int, name: str, hostpci: str) -> str:
    """One ``qm create`` command line (options as in the qm(1) manual)."""
    storage = options.storage
    opts = [
        f"--name {shlex.quote(name)}",
        f"--memory {options.memory_gb * 1024}",
        f"--cores {options.vcpus}",
        "--machine q35",
        "--bios ovmf",
        f"--efidisk0 {storage}:1,efitype=4m,pre-enrolled-keys=0",
        "--scsihw virtio-scsi-pci",
        f"--scsi0 {storage}:{options.disk_gb}",
        f"--net0 virtio,bridge={options.bridge}",
        "--serial0 socket",
        "--ostype l26",
        f"--hostpci0 {hostpci}",
    ]
    return f"qm create {vmid} " + " ".join(opts)


def render(layout: Layout, options: RenderOptions, catalog: Catalog) -> list[Artifact]:
    """``proxmox.sh`` (creates the VMs) and ``APPLY.md``."""
    profiles = {p.name: p for p in catalog.partitions.vgpu_profiles.get(layout.server.gpu.id, ())}
    lines = [
        "#!/usr/bin/env bash",
        header(layout, "#").rstrip(),
        "# Run as root on the Proxmox node.",
        "set -euo pipefail",
    ]
    lines.append("# Creates one VM per seat; VM ids that already exist are skipped (qm status succeeds for them).")
    how = backend(layout, catalog, options.vgpu_backend) if layout.mode == "vgpu" else "mdev"
    if layout.mode == "vgpu":
        lines += [SYSFS, FIND_VF if how == "vfio" else FIND_TYPE, *enable_vfs(layout, catalog)]
    for n, item in enumerate(layout.slices):
        vmid = options.first_vmid + n
        device = require_pci(item, "proxmox")
        lines.append(f"# {item.name}: GPU {item.gpu_index} {item.mode} {item.profile or ''}".rstrip())
        lines.append(f"if ! qm status {vmid} >/dev/null 2>&1; then")
        if item.mode == "vgpu" and how == "vfio":
            want = shlex.quote(type_name(layout, catalog, item.profile or ""))
            lines += [
                f"  found=$(find_vf {want} {shlex.quote(device)})",
                '  read -r vf id <<<"$found"',
                '  echo "$id" > "$SYSFS/bus/pci/devices/$vf/nvidia/current_vgpu_type"',
                '  hostpci="$vf,pcie=1,driver=keep"',
            ]
            hostpci = '"$hostpci"'
        elif item.mode == "vgpu":
            known = profiles.get(item.profile or "")
            if known and known.mdev_type and not is_sriov(layout, catalog):
                hostpci = f"{device},mdev={known.mdev_type}"
            else:
                want = shlex.quote(type_name(layout, catalog, item.profile or ""))
                lines += [
                    f"  found=$(find_type {want} {parents(layout, catalog, item)})",
                    '  read -r parent t <<<"$found"',
                    '  hostpci="$(basename "$parent"),mdev=$(basename "$t")"',
                ]
                hostpci = '"$hostpci"'
        else:
            hostpci = f"{device},pcie=1"
        lines.append("  " + qm_create(layout, options, vmid, vm_name(layout, item), hostpci))
        lines.append("fi")
    first, last = options.first_vmid, options.first_vmid + len(layout.slices) - 1
    steps = [
        "Enable the IOMMU on the node (`intel_iommu=on` / `amd_iommu=on`) and check with"
        " `gpuseat doctor --for passthrough`" + (" (or `--for vgpu`)" if layout.mode == "vgpu" else "") + ".",
        f"`bash proxmox.sh` on the node: creates VMs {first}–{last} (q35, OVMF + EFI disk on"
        f" `{options.storage}`, {options.disk_gb} GB disk, NIC on `{options.bridge}`, serial console) with their GPU.",
        "Install a guest OS (attach an ISO: `qm set VMID --ide2 local:iso/NAME.iso,media=cdrom`), then the NVIDIA"
        " guest driver.",
    ]
    checks = [
        f"`qm config {first}` shows `hostpci0`, `machine: q35` and `bios: ovmf`.",
        f"`qm start {first}`, then `qm terminal {first}` (serial console); in the guest `nvidia-smi -L`.",
    ]
    reboot = ["VMs and their hostpci settings persist (they live in /etc/pve/qemu-server/)."]
    if how == "vfio":
        reboot.append(
            "A VF's vGPU type is gone after a reboot: re-run the `current_vgpu_type` lines of proxmox.sh (or a"
            " hookscript) after nvidia-sriov.service before starting the VMs."
        )
    elif layout.mode == "vgpu":
        reboot.append(
            "Proxmox creates the mdev when the VM starts; SR-IOV VFs must be enabled at every boot"
            " (nvidia-sriov.service from the vGPU host driver, or the sriov-manage line above in a systemd unit)."
        )
    return [
        Artifact(path="proxmox.sh", kind="shell", text="\n".join(lines) + "\n"),
        runbook(layout, "Proxmox VE", [("proxmox.sh", "run as root on the Proxmox node")], steps, checks, reboot),
    ]


RENDERER = Renderer(
    name="proxmox", modes=frozenset({"passthrough", "vgpu"}), summary="Proxmox qm create commands", render=render
)
