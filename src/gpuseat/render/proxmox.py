"""Proxmox VE ``qm set VMID -hostpciN ...`` commands, one VM per seat (VMIDs from ``first_vmid``)."""

from __future__ import annotations

from gpuseat.catalog.partitions import partition_catalog
from gpuseat.core.carve import Layout
from gpuseat.render.base import Artifact, Engine, RenderOptions, header, require_pci


def render(layout: Layout, options: RenderOptions) -> list[Artifact]:
    """``proxmox.sh``: q35 machine, then the GPU (``pcie=1``) or the vGPU type (``mdev=``)."""
    types = {p.name: p.mdev_type for p in partition_catalog().vgpu_profiles.get(layout.server.gpu.id, ())}
    lines = ["#!/usr/bin/env bash", header(layout, "#").rstrip(), "# Run on the Proxmox node.", "set -euo pipefail"]
    for n, seat in enumerate(layout.seats):
        vmid = options.first_vmid + n
        device = require_pci(seat, "proxmox")
        if seat.mode == "vgpu":
            mdev = types.get(seat.profile or "")
            if mdev is None:
                lines.append(f"mdev=$(basename \"$(dirname \"$(grep -lx '.*{seat.profile}' "
                             f"/sys/bus/pci/devices/{device}/mdev_supported_types/*/name)\")\")")
                mdev = "$mdev"
            device += f",mdev={mdev}"
        lines += [
            f"# {seat.seat}: GPU {seat.gpu_index} {seat.mode} {seat.profile or ''}".rstrip(),
            f"qm set {vmid} -machine q35",
            f"qm set {vmid} -hostpci0 {device},pcie=1",
        ]
    return [Artifact(path="proxmox.sh", kind="shell", text="\n".join(lines) + "\n")]


ENGINE = Engine(name="proxmox", modes=frozenset({"passthrough", "vgpu"}), summary="Proxmox qm set commands",
                render=render)
