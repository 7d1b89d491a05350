"""What a gpuseat domain is, read back from libvirt's XML: its owner and the parts ``vms up`` keeps right.

Pure (ElementTree only). Drift is decided by comparing :func:`essentials` of the XML gpuseat would
define with libvirt's own inactive XML of the existing domain: memory, CPUs, the GPU, disks, network,
console, boot and owner. Everything else (addresses libvirt assigned, defaults it filled in) is
libvirt's business and never counts as drift.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

from gpuseat.render.libvirt import METADATA_NS

_UNITS = {"b": 1, "bytes": 1, "kib": 1024, "k": 1024, "mib": 1024**2, "m": 1024**2, "gib": 1024**3, "g": 1024**3}


@dataclass(frozen=True)
class DomainOwner:
    """The course and seat in a domain's gpuseat metadata (None: not gpuseat's domain)."""

    course: str
    seat: str
    participant: str | None


def owner(xml: str) -> DomainOwner | None:
    """The gpuseat owner of a domain, from its XML's ``<metadata>``."""
    root = ET.fromstring(xml)
    el = root.find(f"metadata/{{{METADATA_NS}}}seat")
    if el is None or not el.get("course") or not el.get("seat"):
        return None
    return DomainOwner(course=el.get("course", ""), seat=el.get("seat", ""), participant=el.get("participant"))


def _memory_kib(el: ET.Element | None) -> int | None:
    if el is None or el.text is None:
        return None
    unit = (el.get("unit") or "KiB").lower()
    return int(el.text) * _UNITS.get(unit, 1024) // 1024


def _address(el: ET.Element | None) -> str:
    if el is None:
        return ""
    if el.get("uuid"):
        return f"mdev:{el.get('uuid')}"
    parts = [int(el.get(k, "0"), 16) for k in ("domain", "bus", "slot", "function")]
    return "pci:{:04x}:{:02x}:{:02x}.{:x}".format(*parts)


def _source(el: ET.Element, attr: str) -> str:
    """``<source attr=...>`` of a device ("" when it has none)."""
    src = el.find("source")
    return "" if src is None else src.get(attr, "")


def _log(el: ET.Element) -> str:
    """``<log file=...>`` of a character device ("" when it has none)."""
    log = el.find("log")
    return "" if log is None else log.get("file", "")


#: the address a GPU carved from ``--gpu`` has until ``pci-fill.sh`` writes the host's in (it names no device)
UNFILLED = "pci:0000:00:00.0"


def hostdevs(xml: str) -> tuple[str, ...]:
    """The devices a domain passes through (``pci:DDDD:BB:SS.F``, ``mdev:UUID``), sorted; unfilled ones left out."""
    dev = ET.fromstring(xml).find("devices")
    found = (_address(h.find("source/address")) for h in (dev.findall("hostdev") if dev is not None else ()))
    return tuple(sorted(a for a in found if a and a != UNFILLED))


def essentials(xml: str) -> dict[str, object]:
    """The parts of a domain gpuseat owns, normalised so that gpuseat's XML and libvirt's compare equal."""
    root = ET.fromstring(xml)
    os_el = root.find("os")
    dev = root.find("devices")
    devices = dev if dev is not None else ET.Element("devices")
    who = owner(xml)
    return {
        "type": root.get("type"),
        "name": root.findtext("name"),
        "owner": who,
        "memory_kib": _memory_kib(root.find("memory")),
        "current_memory_kib": _memory_kib(root.find("currentMemory")) or _memory_kib(root.find("memory")),
        "vcpu": int(root.findtext("vcpu") or 0),
        "kernel": os_el.findtext("kernel") if os_el is not None else None,
        "initrd": os_el.findtext("initrd") if os_el is not None else None,
        "cmdline": os_el.findtext("cmdline") if os_el is not None else None,
        "hostdevs": sorted(_address(h.find("source/address")) for h in devices.findall("hostdev")),
        "disks": sorted((d.get("device", "disk"), _source(d, "file")) for d in devices.findall("disk")),
        "networks": sorted(_source(i, "network") for i in devices.findall("interface")),
        "macs": sorted(m.get("address", "").lower() for m in devices.findall("interface/mac")),
        "serial": sorted(
            (
                s.get("type", ""),
                _source(s, "path"),
                _log(s),
            )
            for s in devices.findall("serial")
        ),
        "console": sorted(c.get("type", "") for c in devices.findall("console")),
    }


def drift(wanted: str, current: str) -> list[str]:
    """What differs between the XML gpuseat wants and a domain's current inactive XML (field names)."""
    a, b = essentials(wanted), essentials(current)
    return [k for k in a if a[k] != b[k]]
