"""PCI BAR sizing for passthrough: when a guest needs 64-bit MMIO, and vSphere's ``64bitMMIOSizeGB``.

One source for this fact: ``gpuseat doctor`` (from a host's BARs) and every renderer (from an
inventory's BARs, or an estimate from GPU memory) call these functions, so they always agree. The
limits are data (``doctor.toml`` ``[bar]``), passed in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpuseat.catalog.doctor import BarLimits

GIB = 1 << 30


def mmio_size_gb(bars_bytes: Sequence[int]) -> int:
    """vSphere ``pciPassthru.64bitMMIOSizeGB`` for the GPUs of one VM: the sum of all their BARs in GiB,
    rounded up to a power of two (partitioning.md §4.4: H100 → 256, H200 → 512, A100 40GB → 128)."""
    gib = max(1, math.ceil(sum(bars_bytes) / GIB))
    return 1 << (gib - 1).bit_length()


def needs_64bit_mmio(bars_bytes: Sequence[int], limits: BarLimits) -> bool:
    """A BAR of 4 GiB or more, or BARs totalling more than the limit: above-4G decoding and an EFI guest."""
    return any(b >= limits.above_4g_bytes for b in bars_bytes) or sum(bars_bytes) > limits.total_mmio_warn_bytes


def estimated_bars_bytes(memory_gb: float, limits: BarLimits) -> tuple[int, ...]:
    """BAR sizes of a GPU whose BARs were not captured: BAR1 maps the whole memory (rounded up to a power
    of two GiB) beside the small BAR0 and BAR3 (``limits.small_bars_bytes`` together)."""
    bar1 = (1 << (max(1, math.ceil(memory_gb)) - 1).bit_length()) * GIB
    return (limits.small_bars_bytes, bar1)
