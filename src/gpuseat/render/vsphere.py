"""VMware vSphere ``.vmx`` keys per seat: DirectPath passthrough with 64-bit MMIO sized from the BARs,
or a vGPU profile (``pciPassthru0.vgpu``)."""

from __future__ import annotations

import math

from gpuseat.core.carve import Layout, Seat
from gpuseat.render.base import Artifact, Engine, RenderOptions, header, require_pci

# BARs above this need 64-bit MMIO (above-4G decoding, EFI guest): partitioning.md §4.4, Dell KB 000199172.
_LARGE_BAR_MIB = 4096
_LARGE_TOTAL_MIB = 16 * 1024


def mmio_size_gb(bars_mib: tuple[float, ...], memory_gb: float) -> tuple[int, str]:
    """``pciPassthru.64bitMMIOSizeGB`` for one GPU: its BARs rounded up to a power of two.

    Without BAR sizes, the rule of thumb: GPU memory rounded up to a power of two, then doubled.
    """
    if bars_mib:
        total_gb = sum(bars_mib) / 1024
        return 2 ** math.ceil(math.log2(max(total_gb, 1))), f"BARs total {sum(bars_mib):g} MiB"
    return 2 * 2 ** math.ceil(math.log2(max(memory_gb, 1))), "BAR sizes unknown: 2 × GPU memory, power of two"


def _esxi_id(pci: str) -> str:
    """ESXi writes ``pciPassthru0.id`` in decimal ``%05d:%03d:%02d.%d``; hex gives "No device hints found"."""
    domain, bus, rest = pci.split(":")
    slot, function = rest.split(".")
    return f"{int(domain, 16):05d}:{int(bus, 16):03d}:{int(slot, 16):02d}.{int(function)}"


def vmx(layout: Layout, seat: Seat) -> str:
    """The .vmx lines of one seat."""
    title = f"# {seat.seat}: GPU {seat.gpu_index} {seat.mode} {seat.profile or ''}".rstrip()
    lines = [header(layout, "#").rstrip(), title, 'firmware = "efi"', 'pciPassthru0.present = "TRUE"']
    if seat.mode == "vgpu":
        lines.append(f'pciPassthru0.vgpu = "grid_{(seat.profile or "").lower()}"')
        return "\n".join(lines) + "\n"
    chip = layout.server.chips[seat.gpu_index]
    lines += [f'pciPassthru0.id = "{_esxi_id(require_pci(seat, "vsphere"))}"', 'pciPassthru0.vendorId = "0x10de"']
    large = not chip.bars_mib or max(chip.bars_mib) >= _LARGE_BAR_MIB or sum(chip.bars_mib) > _LARGE_TOTAL_MIB
    if large:
        size, why = mmio_size_gb(chip.bars_mib, chip.gpu.memory_gb)
        lines += [f"# 64-bit MMIO: {why}; host BIOS needs above-4G decoding",
                  'pciPassthru.use64bitMMIO = "TRUE"', f'pciPassthru.64bitMMIOSizeGB = "{size}"']
    return "\n".join(lines) + "\n"


def render(layout: Layout, options: RenderOptions) -> list[Artifact]:
    """One ``<seat>.vmx`` fragment per seat, to merge into each VM's .vmx."""
    return [Artifact(path=f"{seat.seat}.vmx", kind="vmx", text=vmx(layout, seat)) for seat in layout.seats]


ENGINE = Engine(name="vsphere", modes=frozenset({"passthrough", "vgpu"}), summary="vSphere .vmx keys",
                render=render)
