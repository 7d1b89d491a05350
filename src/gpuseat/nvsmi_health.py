"""GPU health as the driver reports it: ``nvidia-smi -q -x`` health fields and Xid lines of the kernel log.

Pure parsing (no I/O), shared by the nvidia-smi adapter (:mod:`gpuseat.nvsmi`), the ``-q`` text reader
(:mod:`gpuseat.nvsmi_text`) and the probe bundle. Every DTD seen in the fixtures is read:

* ECC: ``ecc_errors/{volatile,aggregate}/{single_bit,double_bit}/total`` (DTD ≤ v11) or
  ``sram_correctable``/``dram_correctable`` and ``sram_uncorrectable[_parity|_secded]``/``dram_uncorrectable``
  (v12, v13);
* clocks-event (throttle) reasons: ``clocks_throttle_reasons/clocks_throttle_reason_*`` (≤ 535) or
  ``clocks_event_reasons/clocks_event_reason_*`` (535+), folded into NVML's bitmask — the value
  dcgm-exporter exports as ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS``;
* retired pages, remapped rows, power limit (``power_limit`` or ``current_power_limit``), memory clock, fan;
* Xid: ``NVRM: Xid (PCI:0000:3b:00): 79, …`` lines of ``dmesg`` / ``journalctl -k``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any

#: NVML's clocks-event reason bits (nvml.h ``nvmlClocksEventReason*``), by the suffix nvidia-smi prints.
REASON_BITS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clocks_setting": 0x100,
}
#: Reasons that mean the GPU is slowed by heat or power (alerts); idle, sync boost and settings are not faults.
THERMAL_BITS = 0x20 | 0x40
POWER_BITS = 0x4 | 0x8 | 0x80

_NA = ("", "N/A", "[N/A]", "Not Supported", "[Not Supported]")


def _text(node: ET.Element | None) -> str | None:
    if node is None or node.text is None:
        return None
    value = node.text.strip()
    return None if value in _NA or value.startswith("[") else value


def _int(node: ET.Element | None) -> int | None:
    value = _text(node)
    if value is None:
        return None
    match = re.match(r"^\d{1,12}", value, re.ASCII)
    return int(match.group(0)) if match else None


def _yes(node: ET.Element | None) -> bool | None:
    value = _text(node)
    return None if value is None else value.lower() in ("yes", "active", "enabled")


def _sum(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _ecc(block: ET.Element | None) -> tuple[int | None, int | None]:
    """(corrected, uncorrected) totals of one ``volatile``/``aggregate`` block, any DTD."""
    if block is None:
        return None, None
    if block.find("single_bit") is not None or block.find("double_bit") is not None:
        return _int(block.find("single_bit/total")), _int(block.find("double_bit/total"))
    corrected = _sum([_int(block.find("sram_correctable")), _int(block.find("dram_correctable"))])
    uncorrected = _sum(
        [
            _int(block.find("sram_uncorrectable")),
            _int(block.find("sram_uncorrectable_parity")),
            _int(block.find("sram_uncorrectable_secded")),
            _int(block.find("dram_uncorrectable")),
        ]
    )
    return corrected, uncorrected


def reasons_mask(active: dict[str, bool]) -> int | None:
    """NVML's bitmask from ``{reason suffix: active}``; None when nothing was reported."""
    if not active:
        return None
    return sum(REASON_BITS[k] for k, on in active.items() if on and k in REASON_BITS)


def xml_health(node: ET.Element) -> dict[str, Any]:
    """The health fields of one ``<gpu>`` element, keyed as :class:`gpuseat.readings.Gpu` names them."""
    active: dict[str, bool] = {}
    for tag in ("clocks_event_reasons", "clocks_throttle_reasons"):
        block = node.find(tag)
        if block is None:
            continue
        for child in block:
            suffix = re.sub(r"^clocks_(event|throttle)_reason_", "", child.tag)
            state = _text(child)
            if state is not None:
                active[suffix] = state.lower() == "active"
    sbe_vol, dbe_vol = _ecc(node.find("ecc_errors/volatile"))
    sbe_agg, dbe_agg = _ecc(node.find("ecc_errors/aggregate"))
    limit = None
    for path in (
        "gpu_power_readings/current_power_limit",
        "power_readings/current_power_limit",
        "power_readings/enforced_power_limit",
        "power_readings/power_limit",
        "gpu_power_readings/*/current_power_limit",  # 610+: nested under a ceiling/limit block
    ):
        value = _text(node.find(path))
        if value is not None:
            match = re.match(r"^\d+(\.\d+)?", value, re.ASCII)
            if match:
                limit = float(match.group(0))
                break
    rows = node.find("remapped_rows")
    return {
        "clocks_event_reasons": reasons_mask(active),
        "ecc_sbe_volatile": sbe_vol,
        "ecc_dbe_volatile": dbe_vol,
        "ecc_sbe_aggregate": sbe_agg,
        "ecc_dbe_aggregate": dbe_agg,
        "retired_pages_sbe": _int(node.find("retired_pages/multiple_single_bit_retirement/retired_count")),
        "retired_pages_dbe": _int(node.find("retired_pages/double_bit_retirement/retired_count")),
        "retired_pages_pending": _yes(node.find("retired_pages/pending_retirement")),
        "remapped_rows_correctable": _int(rows.find("remapped_row_corr")) if rows is not None else None,
        "remapped_rows_uncorrectable": _int(rows.find("remapped_row_unc")) if rows is not None else None,
        "remapped_rows_pending": _yes(rows.find("remapped_row_pending")) if rows is not None else None,
        "remapped_rows_failure": _yes(rows.find("remapped_row_failure")) if rows is not None else None,
        "power_limit_w": limit if limit is not None and 0 < limit <= 100_000 else None,
        "clock_mem_mhz": _clock(node.find("clocks/mem_clock")),
        "fan_percent": _percent(node.find("fan_speed")),
    }


def _clock(node: ET.Element | None) -> float | None:
    value = _int(node)
    return float(value) if value is not None and value <= 100_000 else None


def _percent(node: ET.Element | None) -> float | None:
    value = _int(node)
    return float(value) if value is not None and value <= 100 else None


# -- Xid lines of the kernel log -----------------------------------------------------------------

_XID = re.compile(
    r"NVRM: Xid \(PCI:(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?\): (?P<xid>\d{1,5})\b"
    r"(?P<rest>.*)$",
    re.ASCII,
)
_STAMP = re.compile(r"^\[\s*(?P<s>\d+\.\d+)\]", re.ASCII)


@dataclass(frozen=True, slots=True)
class XidEvent:
    """One Xid error: the GPU's PCI bus (``0000:01:00``), the Xid number and the driver's text."""

    pci: str
    xid: int
    text: str
    line: int
    uptime_s: float | None = None


def parse_xid_log(text: str) -> list[XidEvent]:
    """Every ``NVRM: Xid (PCI:…): N, …`` line of a ``dmesg`` or ``journalctl -k`` capture, in order."""
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        match = _XID.search(line)
        if match is None:
            continue
        stamp = _STAMP.match(line.strip())
        out.append(
            XidEvent(
                pci=match["pci"].lower(),
                xid=int(match["xid"]),
                text=match["rest"].lstrip(", ").strip()[:300],
                line=n,
                uptime_s=float(stamp["s"]) if stamp else None,
            )
        )
    return out


def bus_key(pci_bus_id: str | None) -> str | None:
    """One key for a GPU's bus in both spellings: ``00000000:01:00.0`` (nvidia-smi) and ``0000:01:00`` (Xid)."""
    if not pci_bus_id:
        return None
    parts = pci_bus_id.lower().split(":")
    if len(parts) != 3 or not all(re.fullmatch(r"[0-9a-f]+", p.split(".")[0]) for p in parts):
        return None
    return f"{int(parts[0], 16)}:{int(parts[1], 16):02x}:{int(parts[2].split('.')[0], 16):02x}"
