"""The values the checks judge: one host and its NVIDIA GPUs as procfs/sysfs showed them (pure data)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuseat.catalog import GpuModel
from gpuseat.doctor.parse import PciBar

PCI_DEVICES = "/sys/bus/pci/devices"


@dataclass(frozen=True)
class PciFunction:
    """A PCI function sharing the GPU's IOMMU group."""

    bdf: str
    pci_id: str
    pci_class: str
    driver: str | None

    def same_slot(self, bdf: str) -> bool:
        """Another function of the same device (``41:00.1`` next to ``41:00.0``)."""
        return self.bdf.rsplit(".", 1)[0] == bdf.rsplit(".", 1)[0]


@dataclass(frozen=True)
class MdevType:
    """An mdev (vGPU) type: ``nvidia-22`` named ``GRID M60-8Q`` with N instances left."""

    type_id: str
    name: str
    available: int | None


@dataclass(frozen=True)
class GpuFacts:
    """One NVIDIA GPU function as sysfs/procfs show it."""

    bdf: str
    device_id: str
    name: str
    model: GpuModel | None
    driver: str | None
    bars: tuple[PciBar, ...] | None
    iommu_group: str | None
    group_members: tuple[PciFunction, ...]
    sriov_totalvfs: int | None = None
    sriov_numvfs: int | None = None
    mdev_types: tuple[MdevType, ...] = ()
    vf_vgpu_types: tuple[str, ...] = ()
    mig_mode: tuple[str, str] | None = None

    @property
    def dev(self) -> str:
        """Sysfs folder of this function."""
        return f"{PCI_DEVICES}/{self.bdf}"

    @property
    def companions(self) -> tuple[PciFunction, ...]:
        """The GPU's own other functions (HDMI audio, USB-C) found in its IOMMU group."""
        return tuple(m for m in self.group_members if m.same_slot(self.bdf))

    @property
    def vfio_ids(self) -> str:
        """``10de:13f2,10de:10f0``: the ids to give ``vfio-pci ids=`` (the GPU and its own functions)."""
        return ",".join(dict.fromkeys([f"10de:{self.device_id}", *(m.pci_id for m in self.companions)]))


@dataclass(frozen=True)
class HostFacts:
    """Host-wide facts plus the GPUs found. ``None`` means the file could not be read."""

    cpuinfo_flags: frozenset[str] | None
    cmdline: tuple[str, ...] | None
    kvm: bool
    iommu_units: tuple[str, ...] | None
    iommu_groups: int | None
    interrupts: tuple[bool, bool] | None
    unsafe_interrupts: str | None
    modules: frozenset[str] | None
    sys_modules: frozenset[str]
    blacklist_files: tuple[str, ...]
    nvidia_version: str | None
    gpus: tuple[GpuFacts, ...] = field(default=())
    cpu_vendor: str | None = None  # vendor_id of /proc/cpuinfo

    def loaded(self, module: str) -> str | None:
        """Where the module shows as present (``/proc/modules`` or built-in ``/sys/module``), else None."""
        if self.modules is not None and module in self.modules:
            return "/proc/modules"
        return f"/sys/module/{module}" if module in self.sys_modules else None
