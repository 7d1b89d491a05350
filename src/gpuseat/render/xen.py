"""XenServer / XCP-ng ``xe`` commands: create one VM per slice (``xe vm-install`` from a template, UEFI,
memory, vCPUs, a disk on the pool's default SR, a NIC), then attach the GPU (``other-config:pci``) or a
vGPU (``xe vgpu-create``). A VM whose name label already exists is reused, not created again.

XCP-ng has no NVIDIA vGPU (partitioning.md §4.3), so vGPU scripts are for XenServer.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from gpuseat.core.carve import Layout, Slice
from gpuseat.render.base import Artifact, Renderer, RenderOptions, header, require_pci, runbook, vm_name
from gpuseat.render.vgpu import type_name

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog

TEMPLATE = "Other install media"


def _create(layout: Layout, item: Slice, options: RenderOptions) -> list[str]:
    name = vm_name(layout, item)
    label = shlex.quote(f"name-label={name}")
    mem = f"{options.memory_gb}GiB"
    return [
        f"vm=$(xe vm-list {label} --minimal)",
        'if [ -z "$vm" ]; then',
        f"  vm=$(xe vm-install {shlex.quote('template=' + TEMPLATE)} {shlex.quote('new-name-label=' + name)})",
        '  xe vm-param-set uuid="$vm" HVM-boot-params:firmware=uefi',
        f'  xe vm-memory-limits-set uuid="$vm" static-min={mem} dynamic-min={mem} dynamic-max={mem} static-max={mem}',
        f'  xe vm-param-set uuid="$vm" VCPUs-max={options.vcpus}',
        f'  xe vm-param-set uuid="$vm" VCPUs-at-startup={options.vcpus}',
        f'  vdi=$(xe vdi-create sr-uuid="$sr" {shlex.quote("name-label=" + name + "-disk")}'
        f" virtual-size={options.disk_gb}GiB type=user)",
        '  xe vbd-create vm-uuid="$vm" vdi-uuid="$vdi" device=0 bootable=true type=Disk mode=RW',
        '  xe vif-create vm-uuid="$vm" network-uuid="$net" device=0',
        "fi",
    ]


def render(layout: Layout, options: RenderOptions, catalog: Catalog) -> list[Artifact]:
    """``xen.sh`` (creates the VMs, attaches the GPUs) and ``APPLY.md``."""
    lines = ["#!/usr/bin/env bash", header(layout, "#").rstrip(), "# Run in dom0.", "set -euo pipefail"]
    lines += [
        'sr=$(xe pool-param-get uuid="$(xe pool-list --minimal)" param-name=default-SR)',
        "net=$(xe network-list bridge=xenbr0 --minimal | cut -d, -f1)",
    ]
    if layout.mode == "passthrough":
        hidden = "".join(f"({require_pci(s, 'xen')})" for s in layout.slices)
        lines += [
            "# once, then reboot the host:",
            f'# /opt/xensource/libexec/xen-cmdline --set-dom0 "xen-pciback.hide={hidden}"',
            "xl pci-assignable-list",
        ]
    else:
        lines.append("group=$(xe gpu-group-list --minimal | cut -d, -f1)  # the group holding these GPUs")
    for item in layout.slices:
        lines.append(f"# {item.name}: GPU {item.gpu_index} {item.mode} {item.profile or ''}".rstrip())
        lines += _create(layout, item, options)
        if item.mode == "passthrough":
            lines.append(f'xe vm-param-set {shlex.quote("other-config:pci=0/" + require_pci(item, "xen"))} uuid="$vm"')
        else:
            model = shlex.quote("model-name=" + type_name(layout, catalog, item.profile or ""))
            lines += [
                f"type=$(xe vgpu-type-list {model} --minimal)",
                'xe vgpu-create vm-uuid="$vm" gpu-group-uuid="$group" vgpu-type-uuid="$type"',
            ]
    steps = [
        "Passthrough: hide the GPUs from dom0 with the `xen-cmdline` line at the top of xen.sh, then reboot the host."
        if layout.mode == "passthrough"
        else "Install the NVIDIA vGPU Manager for XenServer and reboot.",
        f"`bash xen.sh` in dom0: creates the VMs from the '{TEMPLATE}' template (UEFI, {options.memory_gb} GiB,"
        f" {options.vcpus} vCPUs, a {options.disk_gb} GiB disk on the default SR, a NIC on xenbr0) and attaches"
        " one GPU or vGPU to each.",
        "Install a guest OS (attach an ISO with `xe vm-cd-add`), then the NVIDIA guest driver.",
    ]
    checks = [
        "`xe vm-list params=name-label,other-config` shows `pci: 0/<BDF>` (passthrough);"
        " `xe vgpu-list` lists one vGPU per seat.",
        "In the guest: `nvidia-smi -L`.",
    ]
    reboot = ["VMs, other-config:pci and vGPUs persist in the XAPI database; the dom0 hide option persists."]
    return [
        Artifact(path="xen.sh", kind="shell", text="\n".join(lines) + "\n"),
        runbook(layout, "XenServer / XCP-ng", [("xen.sh", "run in dom0")], steps, checks, reboot),
    ]


RENDERER = Renderer(
    name="xen", modes=frozenset({"passthrough", "vgpu"}), summary="XenServer xe commands", render=render
)
