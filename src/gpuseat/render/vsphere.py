"""VMware vSphere ``.vmx`` keys per slice: DirectPath passthrough with 64-bit MMIO sized from the BARs,
or a vGPU profile (``pciPassthru0.vgpu``); the VM's memory fully reserved (``sched.mem.min`` and
``sched.mem.pin``), which passthrough and vGPU require (partitioning.md §4.4 [DENNEMAN]).

The MMIO size comes from :func:`gpuseat.core.mmio.mmio_size_gb`, the same function ``gpuseat doctor``
uses. BARs come from the inventory (``bar_mib``), a capture (BAR1 plus the small BARs), or an estimate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuseat.core.carve import Layout, Slice
from gpuseat.core.inventory import Chip
from gpuseat.core.mmio import estimated_bars_bytes, mmio_size_gb, needs_64bit_mmio
from gpuseat.readings import MIB
from gpuseat.render.base import Artifact, Renderer, RenderOptions, header, require_pci, runbook
from gpuseat.render.vgpu import vsphere_type

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog


def chip_bars(chip: Chip, catalog: Catalog) -> tuple[tuple[int, ...], str]:
    """A chip's BAR sizes in bytes and where they come from."""
    if chip.bars_mib:
        return tuple(int(b * MIB) for b in chip.bars_mib), f"BARs total {sum(chip.bars_mib):g} MiB"
    return estimated_bars_bytes(chip.gpu.memory_gb, catalog.doctor.bar), "BAR sizes unknown: estimated from memory"


def _esxi_id(pci: str) -> str:
    """ESXi writes ``pciPassthru0.id`` in decimal ``%05d:%03d:%02d.%d``; hex gives "No device hints found"."""
    domain, bus, rest = pci.split(":")
    slot, function = rest.split(".")
    return f"{int(domain, 16):05d}:{int(bus, 16):03d}:{int(slot, 16):02d}.{int(function)}"


def vmx(layout: Layout, item: Slice, options: RenderOptions, catalog: Catalog) -> str:
    """The .vmx lines of one slice."""
    title = f"# {item.name}: GPU {item.gpu_index} {item.mode} {item.profile or ''}".rstrip()
    mem_mb = options.memory_gb * 1024
    lines = [
        header(layout, "#").rstrip(),
        title,
        'firmware = "efi"',
        f'memSize = "{mem_mb}"',
        f'sched.mem.min = "{mem_mb}"',
        'sched.mem.pin = "TRUE"',
        'pciPassthru0.present = "TRUE"',
    ]
    if item.mode == "vgpu":
        lines.append(f'pciPassthru0.vgpu = "{vsphere_type(layout, catalog, item.profile or "")}"')
        return "\n".join(lines) + "\n"
    chip = layout.server.chips[item.gpu_index]
    lines += [f'pciPassthru0.id = "{_esxi_id(require_pci(item, "vsphere"))}"', 'pciPassthru0.vendorId = "0x10de"']
    bars, why = chip_bars(chip, catalog)
    if needs_64bit_mmio(bars, catalog.doctor.bar):
        lines += [
            f"# 64-bit MMIO: {why}, rounded up to a power of two; host BIOS needs above-4G decoding",
            'pciPassthru.use64bitMMIO = "TRUE"',
            f'pciPassthru.64bitMMIOSizeGB = "{mmio_size_gb(bars)}"',
        ]
    return "\n".join(lines) + "\n"


def render(layout: Layout, options: RenderOptions, catalog: Catalog) -> list[Artifact]:
    """One ``<slice>.vmx`` fragment per slice, to merge into each VM's .vmx, and ``APPLY.md``."""
    out = [
        Artifact(path=f"{item.name}.vmx", kind="vmx", text=vmx(layout, item, options, catalog))
        for item in layout.slices
    ]
    steps = [
        "Host: enable 'Above 4G decoding' / 'Memory mapped I/O above 4GB' in the BIOS"
        + (
            " and mark each GPU for passthrough (Host > Configure > PCI Devices), then reboot the host."
            if layout.mode == "passthrough"
            else "; install the NVIDIA vGPU Manager VIB and set the host graphics"
            " to 'Shared Direct', then reboot the host."
        ),
        f"Create one VM per seat (hardware version ≥ 17, EFI firmware, {options.memory_gb} GB memory,"
        f" {options.vcpus} vCPUs, a {options.disk_gb} GB disk) and power it off.",
        "Merge that seat's `seat-NN.vmx` lines into the VM's .vmx (Edit Settings > VM Options > Advanced >"
        " Configuration Parameters, or edit the file on the datastore while the VM is off).",
    ]
    checks = [
        "The VM powers on; Edit Settings shows the PCI device and 'Reserve all guest memory'.",
        "In the guest: `nvidia-smi -L`.",
    ]
    reboot = ["The .vmx keys persist with the VM; passthrough marking persists on the host."]
    files = [("seat-NN.vmx", "one fragment per seat: merge into that VM's .vmx")]
    return [*out, runbook(layout, "VMware vSphere", files, steps, checks, reboot)]


RENDERER = Renderer(
    name="vsphere", modes=frozenset({"passthrough", "vgpu"}), summary="vSphere .vmx keys", render=render
)
