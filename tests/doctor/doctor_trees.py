"""Fake hosts for `gpuseat doctor`, written by the tests under tmp_path in the real procfs/sysfs formats.

``Host`` describes a machine; ``write_host`` lays it out the way Linux does: PCI functions live in
``/sys/devices/pci0000:00/<bdf>`` with ``/sys/bus/pci/devices/<bdf>`` symlinks, ``driver`` and
``iommu_group`` are relative symlinks, ``resource`` has 13 ``0x%016llx`` triples, and so on.
Variants are ``dataclasses.replace`` of :data:`HEALTHY_VFIO`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

GiB = 1 << 30
MiB = 1 << 20
# include/linux/ioport.h flags as the kernel shows them in `resource` (MEM, PREFETCH, MEM_64, SIZEALIGN, UNSET)
MEM32 = 0x00040200
MEM64_PREF = 0x0014220C
UNSET = 0x20000000
MIG_CSV = "/gpuseat-capture/nvidia-smi-mig.csv"


@dataclass(frozen=True)
class Fn:
    """A PCI function: address, ids, class, driver, BARs as (start, size, flags)."""

    bdf: str
    vendor: str = "10de"
    device: str = "1eb8"
    pci_class: str = "030200"
    driver: str | None = "vfio-pci"
    bars: tuple[tuple[int, int, int], ...] = ()
    sriov_totalvfs: int | None = None
    sriov_numvfs: int = 0
    mdev_types: tuple[tuple[str, str, int], ...] = ()
    vf_creatable: str | None = None


T4_BARS = (
    (0xF2000000, 16 * MiB, MEM32),
    (0x38BFE0000000, 256 * MiB, MEM64_PREF),
    (0x38BFF0000000, 32 * MiB, MEM64_PREF),
)


@dataclass(frozen=True)
class Host:
    """Everything a fake host shows. ``groups`` maps IOMMU group number → member BDFs."""

    vendor: str = "GenuineIntel"
    cpu_flags: str = "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat clflush mmx fxsr sse sse2 vmx"
    cmdline: str = "BOOT_IMAGE=/boot/vmlinuz-6.1.0-18-amd64 root=UUID=0b1e ro quiet intel_iommu=on iommu=pt"
    iommu_units: tuple[str, ...] = ("dmar0", "dmar1")
    interrupts_ir: bool = True
    modules: tuple[str, ...] = ("vfio_pci", "vfio_pci_core", "vfio_iommu_type1", "vfio", "kvm_intel", "kvm")
    modprobe: tuple[tuple[str, str], ...] = (
        ("blacklist-nouveau.conf", "blacklist nouveau\noptions nouveau modeset=0\n"),
    )
    kvm: bool = True
    nvidia_version: str | None = None
    mig_csv: str | None = None
    functions: tuple[Fn, ...] = (
        Fn("0000:00:03.0", vendor="8086", device="1901", pci_class="060400", driver="pcieport"),
        Fn("0000:41:00.0", bars=T4_BARS),
        Fn("0000:00:19.0", vendor="8086", device="15b8", pci_class="020000", driver="e1000e"),
    )
    groups: dict[str, tuple[str, ...]] = field(
        default_factory=lambda: {"1": ("0000:00:03.0", "0000:41:00.0"), "7": ("0000:00:19.0",)}
    )


HEALTHY_VFIO = Host()


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, path)


def _resource(bars: tuple[tuple[int, int, int], ...]) -> str:
    lines = []
    for i in range(13):
        if i < len(bars) and bars[i][1]:
            start, size, flags = bars[i]
            lines.append(f"0x{start:016x} 0x{start + size - 1:016x} 0x{flags:016x}")
        else:
            lines.append(f"0x{0:016x} 0x{0:016x} 0x{0:016x}")
    return "\n".join(lines) + "\n"


def _interrupts(ir: bool) -> str:
    prefix = "IR-" if ir else ""
    return (
        "            CPU0       CPU1       \n"
        f"   0:         36          0   {prefix}IO-APIC    2-edge      timer\n"
        f"  24:          0          0  {prefix}PCI-MSI 458752-edge      PCIe PME, pciehp\n"
        f" 120:          0       1210  {prefix}PCI-MSIX-0000:00:19.0   0-edge      eno1\n"
        " NMI:          0          0   Non-maskable interrupts\n"
    )


def write_host(root: Path, host: Host) -> Path:
    """Lay ``host`` out under ``root`` and return ``root``."""
    cpu = "".join(
        f"processor\t: {n}\nvendor_id\t: {host.vendor}\nmodel name\t: Intel(R) Xeon(R) Gold 6230\n"
        f"flags\t\t: {host.cpu_flags}\n\n"
        for n in range(2)
    )
    _write(root / "proc/cpuinfo", cpu)
    _write(root / "proc/cmdline", host.cmdline + "\n")
    _write(root / "proc/interrupts", _interrupts(host.interrupts_ir))
    _write(root / "proc/modules", "".join(f"{m} 65536 0 - Live 0x0000000000000000\n" for m in host.modules))
    for module in host.modules:
        (root / "sys/module" / module).mkdir(parents=True, exist_ok=True)
    if "vfio_iommu_type1" in host.modules:
        _write(root / "sys/module/vfio_iommu_type1/parameters/allow_unsafe_interrupts", "N\n")
    for name, text in host.modprobe:
        _write(root / "etc/modprobe.d" / name, text)
    _write(root / "etc/hostname", "lab-host-1\n")  # never read by the doctor: must stay out of captures
    if host.kvm:
        _write(root / "dev/kvm", "")
    if host.nvidia_version:
        _write(
            root / "proc/driver/nvidia/version",
            f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {host.nvidia_version}  Tue Jun  6 22:20:39 UTC 2023\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n",
        )
    if host.mig_csv is not None:
        _write(root / MIG_CSV.lstrip("/"), host.mig_csv)
    (root / "sys/class/iommu").mkdir(parents=True, exist_ok=True)
    (root / "sys/kernel/iommu_groups").mkdir(parents=True, exist_ok=True)
    for unit in host.iommu_units:
        (root / "sys/devices/virtual/iommu" / unit).mkdir(parents=True, exist_ok=True)
        _link(root / "sys/class/iommu" / unit, f"../../devices/virtual/iommu/{unit}")
    group_of = {bdf: group for group, members in host.groups.items() for bdf in members}
    for fn in host.functions:
        _write_function(root, fn, group_of.get(fn.bdf) if host.iommu_units else None)
    return root


def _write_function(root: Path, fn: Fn, group: str | None) -> None:
    dev = root / "sys/devices/pci0000:00" / fn.bdf
    _write(dev / "vendor", f"0x{fn.vendor}\n")
    _write(dev / "device", f"0x{fn.device}\n")
    _write(dev / "class", f"0x{fn.pci_class}\n")
    _write(dev / "resource", _resource(fn.bars))
    _link(root / "sys/bus/pci/devices" / fn.bdf, f"../../../devices/pci0000:00/{fn.bdf}")
    if fn.driver:
        (root / "sys/bus/pci/drivers" / fn.driver).mkdir(parents=True, exist_ok=True)
        _link(dev / "driver", f"../../../bus/pci/drivers/{fn.driver}")
    if group is not None:
        (root / "sys/kernel/iommu_groups" / group / "devices").mkdir(parents=True, exist_ok=True)
        _link(dev / "iommu_group", f"../../../kernel/iommu_groups/{group}")
        _link(root / "sys/kernel/iommu_groups" / group / "devices" / fn.bdf, f"../../../../devices/pci0000:00/{fn.bdf}")
    if fn.sriov_totalvfs is not None:
        _write(dev / "sriov_totalvfs", f"{fn.sriov_totalvfs}\n")
        _write(dev / "sriov_numvfs", f"{fn.sriov_numvfs}\n")
        for n in range(fn.sriov_numvfs):
            vf = dev / f"virtfn{n}"
            vf.mkdir()
            if fn.vf_creatable is not None:
                _write(vf / "nvidia/creatable_vgpu_types", fn.vf_creatable)
    for type_id, name, available in fn.mdev_types:
        base = dev / "mdev_supported_types" / type_id
        _write(base / "name", f"{name}\n")
        _write(base / "available_instances", f"{available}\n")
        _write(base / "device_api", "vfio-pci\n")


def gpu(host: Host, **changes: object) -> Host:
    """``host`` with its NVIDIA GPU function (0000:41:00.0) changed."""
    functions = tuple(replace(fn, **changes) if fn.bdf == "0000:41:00.0" else fn for fn in host.functions)  # type: ignore[arg-type]
    return replace(host, functions=functions)
