"""What the checks need, gathered once from a :class:`HostView` into plain frozen values.

This is the adapter half of the doctor: it decides which files to read. The checks
(:mod:`gpuseat.doctor.checks`) only ever see the :class:`HostFacts` built here.
"""

from __future__ import annotations

from dataclasses import replace

from gpuseat.catalog import GpuModel, find_gpu
from gpuseat.catalog.doctor import DoctorCatalog
from gpuseat.doctor.host import HostView
from gpuseat.doctor.model import PCI_DEVICES, GpuFacts, HostFacts, MdevType, PciFunction
from gpuseat.doctor.parse import (
    cmdline_tokens,
    cpu_flags,
    cpu_vendor,
    creatable_vgpu_types,
    interrupt_chips,
    mig_modes,
    modprobe_blacklists,
    module_names,
    parse_driver_version,
    parse_resource,
    sysfs_int,
)

NVIDIA_VENDOR = "0x10de"
MODPROBE_DIRS = ("/etc/modprobe.d", "/run/modprobe.d", "/lib/modprobe.d", "/usr/lib/modprobe.d")
PROBED_MODULES = ("vfio", "vfio_pci", "vfio_iommu_type1", "nouveau", "nvidia", "kvm")


def gather(view: HostView, catalog: DoctorCatalog) -> HostFacts:
    """Read everything the checks use (the nvidia-smi MIG query only when the NVIDIA driver is loaded)."""
    cpuinfo = view.text("/proc/cpuinfo")
    cmdline = view.text("/proc/cmdline")
    units = view.listdir("/sys/class/iommu")
    groups = view.listdir("/sys/kernel/iommu_groups")
    interrupts = view.text("/proc/interrupts")
    modules = view.text("/proc/modules")
    version = view.text("/proc/driver/nvidia/version")
    gpus = tuple(_gpu(view, catalog, bdf) for bdf in _nvidia_gpus(view))
    modes: dict[str, tuple[str, str]] = {}
    if gpus and version is not None:
        csv_text = view.nvidia_smi_mig()
        modes = mig_modes(csv_text) if csv_text else {}
    gpus = tuple(replace(gpu, mig_mode=modes.get(gpu.bdf)) for gpu in gpus)
    return HostFacts(
        cpuinfo_flags=cpu_flags(cpuinfo) if cpuinfo is not None else None,
        cpu_vendor=cpu_vendor(cpuinfo) if cpuinfo is not None else None,
        cmdline=cmdline_tokens(cmdline) if cmdline is not None else None,
        kvm=view.exists("/dev/kvm"),
        iommu_units=tuple(units) if units is not None else None,
        iommu_groups=len(groups) if groups is not None else None,
        interrupts=interrupt_chips(interrupts) if interrupts is not None else None,
        unsafe_interrupts=view.text("/sys/module/vfio_iommu_type1/parameters/allow_unsafe_interrupts"),
        modules=module_names(modules) if modules is not None else None,
        sys_modules=frozenset(m for m in PROBED_MODULES if view.exists(f"/sys/module/{m}")),
        blacklist_files=_nouveau_blacklists(view),
        nvidia_version=parse_driver_version(version) if version is not None else None,
        gpus=gpus,
    )


def _nvidia_gpus(view: HostView) -> list[str]:
    """BDFs of NVIDIA display-class functions (vendor 0x10de, class 0x03xxxx)."""
    found = []
    for bdf in view.listdir(PCI_DEVICES) or []:
        vendor = (view.text(f"{PCI_DEVICES}/{bdf}/vendor") or "").strip().lower()
        if vendor != NVIDIA_VENDOR:
            continue
        pci_class = (view.text(f"{PCI_DEVICES}/{bdf}/class") or "").strip().lower()
        if pci_class.startswith("0x03"):
            found.append(bdf)
    return found


def _link_name(view: HostView, path: str) -> str | None:
    target = view.readlink(path)
    return target.rstrip("/").rsplit("/", 1)[-1] if target else None


def _gpu(view: HostView, catalog: DoctorCatalog, bdf: str) -> GpuFacts:
    dev = f"{PCI_DEVICES}/{bdf}"
    device_id = (view.text(f"{dev}/device") or "").strip().lower().removeprefix("0x")
    name, model = catalog.model_for(device_id)
    if model is None:
        name, model = _name_from_driver(view, bdf, name)
    resource = view.text(f"{dev}/resource")
    group = _link_name(view, f"{dev}/iommu_group")
    members: list[PciFunction] = []
    if group is not None:
        for other in view.listdir(f"/sys/kernel/iommu_groups/{group}/devices") or []:
            if other != bdf:
                members.append(_function(view, other))
    totalvfs = _capped(sysfs_int(view.text(f"{dev}/sriov_totalvfs")), MAX_VFS)
    numvfs = _capped(sysfs_int(view.text(f"{dev}/sriov_numvfs")), totalvfs or 0) if totalvfs else None
    return GpuFacts(
        bdf=bdf,
        device_id=device_id,
        name=name,
        model=model,
        driver=_link_name(view, f"{dev}/driver"),
        bars=parse_resource(resource) if resource is not None else None,
        iommu_group=group,
        group_members=tuple(members),
        sriov_totalvfs=totalvfs,
        sriov_numvfs=numvfs,
        mdev_types=_mdev_types(view, dev),
        vf_vgpu_types=_vf_types(view, dev, numvfs or 0),
    )


#: The kernel's limit: SR-IOV TotalVFs is a 16-bit field of the PCIe capability (pci_sriov.total_VFs is u16).
MAX_VFS = 0xFFFF


def _capped(value: int | None, limit: int) -> int | None:
    """A sysfs count clamped to ``[0, limit]`` (a capture may say anything)."""
    return None if value is None else max(0, min(value, limit))


def _function(view: HostView, bdf: str) -> PciFunction:
    def attr(name: str) -> str:
        return (view.text(f"{PCI_DEVICES}/{bdf}/{name}") or "?").strip().lower().removeprefix("0x")

    return PciFunction(
        bdf, f"{attr('vendor')}:{attr('device')}", f"0x{attr('class')}", _link_name(view, f"{PCI_DEVICES}/{bdf}/driver")
    )


def _name_from_driver(view: HostView, bdf: str, fallback: str) -> tuple[str, GpuModel | None]:
    """The ``Model:`` line of ``/proc/driver/nvidia/gpus/<bdf>/information`` when the id is not in the catalog."""
    info = view.text(f"/proc/driver/nvidia/gpus/{bdf}/information") or ""
    for line in info.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Model" and value.strip():
            return value.strip(), find_gpu(value.strip())
    return fallback, None


def _mdev_types(view: HostView, dev: str) -> tuple[MdevType, ...]:
    types = []
    for type_id in view.listdir(f"{dev}/mdev_supported_types") or []:
        base = f"{dev}/mdev_supported_types/{type_id}"
        name = (view.text(f"{base}/name") or type_id).strip()
        types.append(MdevType(type_id, name, sysfs_int(view.text(f"{base}/available_instances"))))
    return tuple(types)


def _vf_types(view: HostView, dev: str, numvfs: int) -> tuple[str, ...]:
    """vGPU types offered on the SR-IOV VFs: mdev types (vGPU ≤ 16) or ``nvidia/creatable_vgpu_types`` (≥ 17)."""
    names: list[str] = []
    for n in range(min(numvfs, MAX_VFS)):
        vf = f"{dev}/virtfn{n}"
        if not view.exists(vf):
            break  # the kernel numbers VFs virtfn0…virtfnN-1 without gaps
        names.extend(f"{t.type_id} {t.name}" for t in _mdev_types(view, vf) if t.available != 0)
        text = view.text(f"{vf}/nvidia/creatable_vgpu_types")
        names.extend(creatable_vgpu_types(text or ""))
    return tuple(dict.fromkeys(names))


def _nouveau_blacklists(view: HostView) -> tuple[str, ...]:
    """modprobe.d files that blacklist nouveau."""
    hits = []
    for folder in MODPROBE_DIRS:
        for name in view.listdir(folder) or []:
            if name.endswith(".conf"):
                text = view.text(f"{folder}/{name}")
                if text and modprobe_blacklists(text, "nouveau"):
                    hits.append(f"{folder}/{name}")
    return tuple(hits)
