"""Pure parsers for the procfs/sysfs formats the doctor reads (no I/O here)."""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass

# nvidia-smi output (the one fact not in a file: MIG current/pending) is stored in captures here.
MIG_QUERY = ("nvidia-smi", "--query-gpu=pci.bus_id,mig.mode.current,mig.mode.pending", "--format=csv")
MIG_QUERY_PATH = "/gpuseat-capture/nvidia-smi-mig.csv"

# include/linux/ioport.h: flags exposed in /sys/bus/pci/devices/<bdf>/resource
IORESOURCE_MEM = 0x200
IORESOURCE_PREFETCH = 0x2000
IORESOURCE_MEM_64 = 0x00100000
IORESOURCE_UNSET = 0x20000000
BAR_LINES = 6  # lines 0-5 are BAR0-5; line 6 is the expansion ROM, then SR-IOV VF BARs


@dataclass(frozen=True)
class PciBar:
    """One PCI BAR from a ``resource`` line: ``start end flags`` (``0x%016llx`` each)."""

    index: int
    start: int
    end: int
    flags: int

    @property
    def size(self) -> int:
        """Bytes (``end - start + 1``, include/linux/ioport.h ``resource_size``)."""
        return self.end - self.start + 1 if self.end else 0

    @property
    def is_64bit(self) -> bool:
        """A 64-bit memory BAR (can be placed above 4 GiB)."""
        return bool(self.flags & IORESOURCE_MEM_64)

    @property
    def prefetchable(self) -> bool:
        """A prefetchable memory BAR (the large VRAM window, BAR1 on NVIDIA GPUs)."""
        return bool(self.flags & IORESOURCE_PREFETCH)

    @property
    def assigned(self) -> bool:
        """Firmware/kernel gave the BAR an address (no ``IORESOURCE_UNSET``, start not 0)."""
        return not (self.flags & IORESOURCE_UNSET) and self.start != 0

    def describe(self) -> str:
        """``BAR1 8 GiB 64-bit prefetchable @0x...`` or ``... not assigned``."""
        kind = ("64-bit" if self.is_64bit else "32-bit") + (" prefetchable" if self.prefetchable else "")
        where = f"@{self.start:#x}" if self.assigned else "not assigned"
        return f"BAR{self.index} {human_bytes(self.size)} {kind} {where}"


def human_bytes(n: int) -> str:
    """Power-of-two units: ``8 GiB``, ``16 MiB``, ``4 KiB``, ``512 B``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            value = n / (1 << shift)
            return f"{value:g} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} B"


def parse_resource(text: str) -> tuple[PciBar, ...]:
    """Memory BARs (non-zero size, memory flag) from a sysfs ``resource`` file."""
    bars = []
    for index, line in enumerate(text.splitlines()[:BAR_LINES]):
        fields = line.split()
        if len(fields) != 3:
            continue
        try:
            start, end, flags = (int(f, 16) for f in fields)
        except ValueError:
            continue
        if end and flags & IORESOURCE_MEM:
            bars.append(PciBar(index, start, end, flags))
    return tuple(bars)


def cpu_flags(cpuinfo: str) -> frozenset[str] | None:
    """The x86 ``flags`` of the first CPU in ``/proc/cpuinfo`` (None when there is no flags line)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return None


def cpu_vendor(cpuinfo: str) -> str | None:
    """``GenuineIntel``/``AuthenticAMD``/``HygonGenuine`` from the first ``vendor_id`` line, or None."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id":
            return value.strip() or None
    return None


def cmdline_tokens(cmdline: str) -> tuple[str, ...]:
    """Kernel command-line parameters (``/proc/cmdline``), in order."""
    return tuple(cmdline.split())


def cmdline_value(tokens: tuple[str, ...], key: str) -> str | None:
    """Value of the last ``key=value`` parameter (the kernel honours the last one), or None."""
    value = None
    for token in tokens:
        name, sep, rest = token.partition("=")
        if sep and name == key:
            value = rest
    return value


_NVRM = re.compile(r"^NVRM version:.*?\s(\d+\.\d+(?:\.\d+)?)(?:\s|$)", re.MULTILINE | re.ASCII)


def parse_driver_version(text: str) -> str | None:
    """Driver version from ``/proc/driver/nvidia/version`` (``NVRM version: ... Kernel Module  535.54.03 ...``)."""
    match = _NVRM.search(text)
    return match.group(1) if match else None


def version_tuple(version: str) -> tuple[int, ...]:
    """``'535.54.03'`` → ``(535, 54, 3)`` for ordering driver versions."""
    return tuple(int(part) for part in version.split("."))


def normalize_bdf(address: str) -> str:
    """``00000000:00:09.0`` (nvidia-smi) or ``0000:00:09.0`` (sysfs) → ``0000:00:09.0``."""
    domain, _, rest = address.strip().lower().rpartition(":")
    bus_domain, _, bus = domain.rpartition(":")
    return f"{int(bus_domain or '0', 16):04x}:{bus}:{rest}" if bus else address.strip().lower()


def mig_modes(csv_text: str) -> dict[str, tuple[str, str]]:
    """``nvidia-smi --query-gpu=pci.bus_id,mig.mode.current,mig.mode.pending --format=csv`` → bdf → modes."""
    rows = list(csv.reader(io.StringIO(csv_text), skipinitialspace=True))
    modes: dict[str, tuple[str, str]] = {}
    for row in rows:
        if len(row) != 3 or row[0].strip() == "pci.bus_id":
            continue
        modes[normalize_bdf(row[0])] = (row[1].strip(), row[2].strip())
    return modes


def interrupt_chips(text: str) -> tuple[bool, bool]:
    """From ``/proc/interrupts``: (any ``IR-`` remapped chip seen, any un-remapped PCI-MSI/IO-APIC seen)."""
    remapped = plain = False
    for token in text.split():
        if token.startswith("IR-"):
            remapped = True
        elif token.startswith(("PCI-MSI", "IO-APIC")):
            plain = True
    return remapped, plain


def module_names(proc_modules: str) -> frozenset[str]:
    """Loaded module names (first field of each ``/proc/modules`` line)."""
    return frozenset(line.split()[0] for line in proc_modules.splitlines() if line.split())


def modprobe_blacklists(conf: str, module: str) -> bool:
    """Whether a modprobe.d file has an active ``blacklist <module>`` (or ``install <module> /bin/false``)."""
    for line in conf.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) >= 2 and words[1] == module and words[0] in ("blacklist", "install"):
            return words[0] == "blacklist" or words[-1] in ("/bin/false", "/bin/true", "/usr/bin/false")
    return False


_VGPU_TYPE = re.compile(r"^\s*(\d+)\s*:\s*(\S.*?)\s*$", re.ASCII)


def creatable_vgpu_types(text: str) -> tuple[str, ...]:
    """Type names from ``nvidia/creatable_vgpu_types`` lines such as ``1414 : NVIDIA H200X-1-18C``."""
    return tuple(f"{m.group(1)} {m.group(2)}" for line in text.splitlines() if (m := _VGPU_TYPE.match(line)))


def sysfs_int(text: str | None) -> int | None:
    """An integer sysfs attribute (``sriov_totalvfs``, ``available_instances``), or None."""
    if text is None or not text.isascii():  # int() also reads ١٢ and １２ as 12
        return None
    try:
        return int(text.strip(), 0)
    except ValueError:
        return None
