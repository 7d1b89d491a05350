"""XenServer / XCP-ng ``xe`` commands: PCI passthrough via ``other-config:pci``, vGPU via ``xe vgpu-create``.

Each seat's VM is looked up by its name label (``<server>-<seat>``); create the VMs first.
XCP-ng has no NVIDIA vGPU (partitioning.md §4.3), so vGPU scripts are for XenServer.
"""

from __future__ import annotations

from gpuseat.core.carve import Layout
from gpuseat.render.base import Artifact, Engine, RenderOptions, header, require_pci


def render(layout: Layout, options: RenderOptions) -> list[Artifact]:
    """``xen.sh``: hide the GPUs from dom0 (passthrough) and attach one device per seat's VM."""
    lines = ["#!/usr/bin/env bash", header(layout, "#").rstrip(), "# Run in dom0.", "set -euo pipefail"]
    if layout.mode == "passthrough":
        hidden = "".join(f"({require_pci(s, 'xen')})" for s in layout.seats)
        lines += [
            "# once, then reboot the host:",
            f'# /opt/xensource/libexec/xen-cmdline --set-dom0 "xen-pciback.hide={hidden}"',
            "xl pci-assignable-list",
        ]
    else:
        lines.append("group=$(xe gpu-group-list --minimal | cut -d, -f1)  # the group holding these GPUs")
    for seat in layout.seats:
        name = f"{layout.server.name}-{seat.seat}"
        lines += [f"# {seat.seat}: GPU {seat.gpu_index} {seat.mode} {seat.profile or ''}".rstrip(),
                  f'vm=$(xe vm-list name-label="{name}" --minimal)']
        if seat.mode == "passthrough":
            lines.append(f'xe vm-param-set other-config:pci=0/{require_pci(seat, "xen")} uuid="$vm"')
        else:
            lines += [
                f'type=$(xe vgpu-type-list model-name="GRID {seat.profile}" --minimal)',
                'xe vgpu-create vm-uuid="$vm" gpu-group-uuid="$group" vgpu-type-uuid="$type"',
            ]
    return [Artifact(path="xen.sh", kind="shell", text="\n".join(lines) + "\n")]


ENGINE = Engine(name="xen", modes=frozenset({"passthrough", "vgpu"}), summary="XenServer xe commands",
                render=render)
