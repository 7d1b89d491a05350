"""The doctor's checks: pure functions from gathered facts to a :class:`Check` (no I/O).

Facts and fixes follow shared/reference/monitoring_doctor.md §4 (checks 1-14) and
partitioning.md §1.1 (MIG minimum drivers) and §4.4 (vSphere 64-bit MMIO).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from gpuseat.catalog.doctor import DoctorCatalog
from gpuseat.core.mmio import mmio_size_gb, needs_64bit_mmio
from gpuseat.doctor.model import GpuFacts, HostFacts
from gpuseat.doctor.parse import MIG_QUERY, MIG_QUERY_PATH, cmdline_value, human_bytes, version_tuple
from gpuseat.doctor.report import Check, Status

Target = Literal["passthrough", "vgpu", "mig", "containers"]
TARGETS: tuple[Target, ...] = ("passthrough", "vgpu", "mig", "containers")
VFIO_MODULES = ("vfio", "vfio_pci", "vfio_iommu_type1")
REBUILD = "update-initramfs -u -k all (dracut -f on RHEL); reboot"
GRUB = (
    "GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub, then update-grub (Proxmox: proxmox-boot-tool refresh) and reboot"
)
BLACKLIST_NOUVEAU = (
    "printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' > /etc/modprobe.d/blacklist-nouveau.conf; " + REBUILD
)
INSTALL_NVIDIA = "install the NVIDIA driver (for vGPU: the NVIDIA vGPU Manager) and load it: modprobe nvidia"


@dataclass(frozen=True)
class Context:
    """What every check may consult besides the facts: the catalog and whether the user chose a target."""

    catalog: DoctorCatalog
    explicit: Target | None
    has_gpus: bool


# ------------------------------------------------------------------ host checks


def cpu_virt(f: HostFacts, ctx: Context) -> Check:
    """CPU virtualisation flag (vmx Intel / svm AMD) in /proc/cpuinfo."""
    if f.cpuinfo_flags is None:
        return Check("cpu-virt", "skip", None, "/proc/cpuinfo: no readable x86 flags line")
    found = sorted(f.cpuinfo_flags & {"vmx", "svm"})
    if found:
        return Check("cpu-virt", "ok", None, f"/proc/cpuinfo flags: {' '.join(found)}")
    vm = " (hypervisor flag set: this is a VM without nested virtualisation)" if "hypervisor" in f.cpuinfo_flags else ""
    return Check(
        "cpu-virt",
        "fail",
        None,
        f"/proc/cpuinfo flags: neither vmx nor svm{vm}",
        "Enable Intel VT-x ('Intel Virtualization Technology') or AMD-V ('SVM Mode') in the BIOS/UEFI setup;"
        " inside a VM, enable nested virtualisation on its host",
    )


def _intel(f: HostFacts) -> bool:
    """Intel by ``vendor_id`` (an Intel host with VT-x off has no ``vmx`` flag); the flag only as a fallback."""
    if f.cpu_vendor is not None:
        return f.cpu_vendor == "GenuineIntel"
    return f.cpuinfo_flags is not None and "vmx" in f.cpuinfo_flags


def kvm(f: HostFacts, ctx: Context) -> Check:
    """/dev/kvm exists (the KVM module is loaded and usable)."""
    if f.kvm:
        return Check("kvm", "ok", None, "/dev/kvm present")
    module = "kvm_intel" if _intel(f) else "kvm_amd"
    return Check(
        "kvm", "fail", None, "/dev/kvm missing", f"modprobe {module}; if it fails, enable VT-x/AMD-V in the BIOS/UEFI"
    )


def iommu_on(f: HostFacts) -> bool:
    """IOMMU active: /sys/class/iommu and /sys/kernel/iommu_groups both non-empty (weka 200_checkiommu.sh)."""
    return bool(f.iommu_units) and bool(f.iommu_groups)


def _iommu_tokens(f: HostFacts) -> list[str]:
    return [t for t in f.cmdline or () if t.split("=")[0] in ("intel_iommu", "amd_iommu", "iommu")]


def iommu_enabled(f: HostFacts, ctx: Context) -> Check:
    """IOMMU (VT-d / AMD-Vi) enabled in firmware and kernel."""
    units = ", ".join(f.iommu_units) if f.iommu_units else ("empty" if f.iommu_units is not None else "missing")
    groups = f"{f.iommu_groups} groups" if f.iommu_groups else ("empty" if f.iommu_groups == 0 else "missing")
    tokens = _iommu_tokens(f)
    params = " ".join(tokens) if tokens else "no intel_iommu/amd_iommu/iommu parameter"
    evidence = f"/sys/class/iommu: {units}; /sys/kernel/iommu_groups: {groups}; /proc/cmdline: {params}"
    off = [t for t in tokens if t in ("intel_iommu=off", "amd_iommu=off", "iommu=off")]
    if iommu_on(f) and not off:
        return Check("iommu-enabled", "ok", None, evidence)
    if off:
        fix = f"remove {' '.join(off)} from {GRUB}"
    elif _intel(f):
        fix = f"Enable VT-d in the BIOS/UEFI setup and add intel_iommu=on (needed on kernels before 6.8) to {GRUB}"
    else:
        fix = (
            "Enable AMD-Vi / IOMMU in the BIOS/UEFI setup (the kernel turns it on by default; on Intel also "
            f"enable VT-d and add intel_iommu=on to {GRUB})"
        )
    return Check("iommu-enabled", "fail", None, evidence, fix)


def _needs_iommu(check_id: str, f: HostFacts) -> Check | None:
    if not iommu_on(f):
        return Check(check_id, "skip", None, "IOMMU is off (see iommu-enabled)")
    return None


def iommu_passthrough_mode(f: HostFacts, ctx: Context) -> Check:
    """``iommu=pt``: optional, keeps host-owned devices off the IOMMU translation path."""
    if skipped := _needs_iommu("iommu-passthrough-mode", f):
        return skipped
    if cmdline_value(f.cmdline or (), "iommu") == "pt":
        return Check("iommu-passthrough-mode", "ok", None, "/proc/cmdline: iommu=pt")
    return Check(
        "iommu-passthrough-mode",
        "warn",
        None,
        "/proc/cmdline: no iommu=pt (optional: host devices then use translated DMA)",
        f"add iommu=pt to {GRUB}",
    )


def interrupt_remapping(f: HostFacts, ctx: Context) -> Check:
    """Interrupt remapping on: /proc/interrupts shows ``IR-`` chips (vfio refuses devices without it)."""
    if skipped := _needs_iommu("interrupt-remapping", f):
        return skipped
    off = [t for t in f.cmdline or () if t in ("intremap=off", "nointremap")]
    fix = (
        "Enable interrupt remapping in the BIOS/UEFI (part of VT-d / AMD-Vi; keep x2APIC on). Only if the platform"
        " has none: 'options vfio_iommu_type1 allow_unsafe_interrupts=1' in /etc/modprobe.d/vfio.conf"
        " (can make the system unstable)"
    )
    if off:
        return Check("interrupt-remapping", "fail", None, f"/proc/cmdline: {' '.join(off)}", f"remove it from {GRUB}")
    if f.interrupts is None:
        return Check("interrupt-remapping", "skip", None, "/proc/interrupts: not readable")
    remapped, plain = f.interrupts
    if remapped:
        return Check("interrupt-remapping", "ok", None, "/proc/interrupts: IR-* (remapped) interrupt chips")
    if not plain:
        return Check("interrupt-remapping", "warn", None, "/proc/interrupts: no PCI-MSI/IO-APIC lines to judge by", fix)
    unsafe = (f.unsafe_interrupts or "").strip()
    if unsafe in ("Y", "1"):
        return Check(
            "interrupt-remapping",
            "warn",
            None,
            "/proc/interrupts: no IR-* chips; /sys/module/vfio_iommu_type1/parameters/allow_unsafe_interrupts: Y",
            fix,
        )
    return Check("interrupt-remapping", "fail", None, "/proc/interrupts: PCI-MSI/IO-APIC chips without IR-", fix)


def vfio_modules(f: HostFacts, ctx: Context) -> Check:
    """vfio, vfio_pci and vfio_iommu_type1 loaded (or built in)."""
    where = {m: f.loaded(m) for m in VFIO_MODULES}
    seen = "; ".join(f"{m} ({w})" for m, w in where.items() if w)
    missing = [m for m, w in where.items() if not w]
    if not missing:
        return Check("vfio-modules", "ok", None, seen)
    return Check(
        "vfio-modules",
        "fail",
        None,
        f"not in /proc/modules or /sys/module: {', '.join(missing)}" + (f"; present: {seen}" if seen else ""),
        "printf 'vfio\\nvfio_iommu_type1\\nvfio_pci\\n' > /etc/modules-load.d/vfio.conf; "
        + REBUILD
        + " (now: modprobe vfio_pci)",
    )


def nouveau(f: HostFacts, ctx: Context) -> Check:
    """nouveau not loaded, and blacklisted where NVIDIA GPUs are present."""
    loaded = f.loaded("nouveau")
    if loaded:
        return Check("nouveau", "fail", None, f"nouveau loaded ({loaded})", BLACKLIST_NOUVEAU)
    if f.blacklist_files:
        return Check("nouveau", "ok", None, f"not loaded; blacklisted in {', '.join(f.blacklist_files)}")
    blacklist_param = cmdline_value(f.cmdline or (), "modprobe.blacklist") or ""
    if "nouveau" in blacklist_param.split(",") or "nouveau.modeset=0" in (f.cmdline or ()):
        return Check("nouveau", "ok", None, "not loaded; disabled on /proc/cmdline")
    if not ctx.has_gpus:
        return Check("nouveau", "ok", None, "nouveau not loaded")
    return Check(
        "nouveau",
        "warn",
        None,
        "nouveau not loaded, but no 'blacklist nouveau' in /etc/modprobe.d, /lib/modprobe.d or /usr/lib/modprobe.d",
        BLACKLIST_NOUVEAU,
    )


# ------------------------------------------------------------------ GPU checks


def _pci_bridge(pci_class: str) -> bool:
    """PCI-to-PCI bridges (class 0x0604, 0x0609) may share a GPU's group; an ISA/host bridge (0x0601, 0x0600) may not:
    vfio refuses a group whose other devices are bound to a host driver such as lpc_ich."""
    return pci_class.lower().startswith(("0x0604", "0x0609"))


def iommu_group(f: HostFacts, gpu: GpuFacts, targets: frozenset[Target], ctx: Context) -> Check:
    """The GPU's IOMMU group holds only its own functions and bridges (vfio.rst; pve-docs)."""
    if gpu.iommu_group is None:
        return Check("iommu-group", "skip", gpu.bdf, f"{gpu.dev}/iommu_group: no link (IOMMU off, see iommu-enabled)")
    group = f"/sys/kernel/iommu_groups/{gpu.iommu_group}/devices"
    foreign = [m for m in gpu.group_members if not m.same_slot(gpu.bdf) and not _pci_bridge(m.pci_class)]
    own = [m.bdf for m in gpu.group_members if m not in foreign]
    if not foreign:
        extra = f" with {', '.join(own)} (its own functions or bridges)" if own else " alone"
        return Check("iommu-group", "ok", gpu.bdf, f"{group}: {gpu.bdf}{extra}")
    names = ", ".join(f"{m.bdf} ({ctx.catalog.class_name(m.pci_class)}, driver {m.driver or 'none'})" for m in foreign)
    return Check(
        "iommu-group",
        "fail",
        gpu.bdf,
        f"{group}: {gpu.bdf} shares group {gpu.iommu_group} with {names}",
        f"move the GPU to a slot with its own IOMMU group (a root port with ACS), or pass every device of group"
        f" {gpu.iommu_group} to the same VM (bind {', '.join(m.bdf for m in foreign)} to vfio-pci too);"
        " pcie_acs_override=downstream (Proxmox kernels only) splits groups but weakens isolation",
    )


def bar_size(f: HostFacts, gpu: GpuFacts, targets: frozenset[Target], ctx: Context) -> Check:
    """BARs assigned; a BAR above 4 GiB needs Above-4G decoding, a UEFI guest and vSphere 64-bit MMIO."""
    if gpu.bars is None:
        return Check("bar-size", "skip", gpu.bdf, f"{gpu.dev}/resource: not readable")
    limits = ctx.catalog.bar
    total = sum(b.size for b in gpu.bars)
    mmio = mmio_size_gb([b.size for b in gpu.bars])
    evidence = f"{gpu.dev}/resource: " + "; ".join(b.describe() for b in gpu.bars) + f" (total {human_bytes(total)})"
    guest = (
        "boot the guest with UEFI firmware (OVMF; libvirt <os firmware='efi'>; vSphere firmware = \"efi\"); on"
        f' vSphere set pciPassthru.use64bitMMIO = "TRUE" and pciPassthru.64bitMMIOSizeGB = "{mmio}"'
        " (add up all GPUs of one VM)"
    )
    if any(not b.assigned for b in gpu.bars):
        return Check(
            "bar-size",
            "fail",
            gpu.bdf,
            evidence + ": firmware could not place a BAR (32-bit-only MMIO)",
            "Enable 'Above 4G decoding' ('Memory Mapped I/O above 4GB') in the host BIOS/UEFI and reboot; then "
            + guest,
        )
    large = needs_64bit_mmio([b.size for b in gpu.bars], limits)
    if large and "passthrough" in targets:
        return Check("bar-size", "warn", gpu.bdf, evidence + ": a guest needs 64-bit MMIO", guest)
    return Check("bar-size", "ok", gpu.bdf, evidence)


def _vfio_bind(gpu: GpuFacts) -> str:
    softdep = gpu.driver if gpu.driver in ("nvidia", "nouveau") else "nvidia"
    return (
        f"echo 'options vfio-pci ids={gpu.vfio_ids}' > /etc/modprobe.d/vfio.conf; "
        f"echo 'softdep {softdep} pre: vfio-pci' >> /etc/modprobe.d/vfio.conf; {REBUILD} "
        f"(now: echo vfio-pci > {gpu.dev}/driver_override; echo {gpu.bdf} > {gpu.dev}/driver/unbind; "
        f"echo {gpu.bdf} > /sys/bus/pci/drivers_probe)"
    )


def driver_binding(f: HostFacts, gpu: GpuFacts, targets: frozenset[Target], ctx: Context) -> Check:
    """Bound to vfio-pci for passthrough, to nvidia for MIG/vGPU/containers; nouveau always fails."""
    evidence = f"{gpu.dev}/driver -> {gpu.driver}" if gpu.driver else f"{gpu.dev}/driver: no driver bound"
    passthrough = "passthrough" in targets
    if gpu.driver == "nouveau":
        then = _vfio_bind(gpu) if passthrough else INSTALL_NVIDIA
        return Check("driver-binding", "fail", gpu.bdf, evidence, f"{BLACKLIST_NOUVEAU}; then {then}")
    if passthrough:
        if gpu.driver == "vfio-pci":
            stray = [m for m in gpu.companions if m.driver not in (None, "vfio-pci")]
            if stray:
                on_host = ", ".join(f"{m.bdf} -> {m.driver}" for m in stray)
                warning = f"{evidence}; own functions on host drivers: {on_host}"
                return Check("driver-binding", "warn", gpu.bdf, warning, _vfio_bind(gpu))
            return Check("driver-binding", "ok", gpu.bdf, evidence + " (ready for passthrough)")
        status: Status = "warn" if gpu.driver is None else "fail"
        return Check("driver-binding", status, gpu.bdf, evidence + "; passthrough needs vfio-pci", _vfio_bind(gpu))
    if gpu.driver == "nvidia":
        return Check("driver-binding", "ok", gpu.bdf, evidence)
    if gpu.driver == "vfio-pci":
        return Check(
            "driver-binding",
            "fail",
            gpu.bdf,
            evidence + f"; {'/'.join(sorted(targets))} needs the nvidia host driver",
            f"remove 10de:{gpu.device_id} from 'options vfio-pci ids=' in /etc/modprobe.d/*.conf and from any"
            f" vfio-pci.ids= kernel parameter; {REBUILD} (now: echo {gpu.bdf} > /sys/bus/pci/drivers/vfio-pci/unbind; "
            f"echo > {gpu.dev}/driver_override; echo {gpu.bdf} > /sys/bus/pci/drivers_probe)",
        )
    return Check("driver-binding", "fail", gpu.bdf, evidence + "; needs the nvidia driver", INSTALL_NVIDIA)


def driver_version(f: HostFacts, gpu: GpuFacts, targets: frozenset[Target], ctx: Context) -> Check:
    """NVIDIA kernel driver loaded, and at least the MIG minimum for this GPU when MIG is wanted."""
    if f.nvidia_version is None:
        return Check(
            "driver-version",
            "fail",
            gpu.bdf,
            "/proc/driver/nvidia/version: missing or unparsable (NVIDIA kernel driver not loaded)",
            INSTALL_NVIDIA,
        )
    evidence = f"/proc/driver/nvidia/version: {f.nvidia_version}"
    model = gpu.model
    minimum = ctx.catalog.mig_min.get(model.id) if model is not None and "mig" in targets else None
    if minimum is None:
        return Check("driver-version", "ok", gpu.bdf, evidence)
    if version_tuple(f.nvidia_version) < version_tuple(minimum.driver):
        return Check(
            "driver-version",
            "fail",
            gpu.bdf,
            f"{evidence} < MIG minimum {minimum.driver} for {gpu.name}",
            f"install NVIDIA driver {minimum.driver} or newer (MIG minimum for {gpu.name}), then reboot",
        )
    return Check("driver-version", "ok", gpu.bdf, f"{evidence} >= MIG minimum {minimum.driver} for {gpu.name}")


def mig_pending(f: HostFacts, gpu: GpuFacts, targets: frozenset[Target], ctx: Context) -> Check:
    """MIG mode current == pending (else a GPU reset or reboot is owed); enabled when MIG is asked for."""
    source = f"nvidia-smi {MIG_QUERY[1]} (captured as {MIG_QUERY_PATH})"
    unsupported = (gpu.model is not None and not gpu.model.mig) or (gpu.mig_mode or ("",))[0] == "[N/A]"
    if unsupported:
        return Check(
            "mig-pending",
            "fail",
            gpu.bdf,
            f"{gpu.name} does not support MIG",
            "MIG needs an A100, A30, H100, H200 or B200-class GPU; on this GPU use time-slicing/MPS or vGPU",
        )
    if gpu.mig_mode is None:
        return Check("mig-pending", "skip", gpu.bdf, f"{source}: no row for this GPU")
    current, pending = gpu.mig_mode
    evidence = f"{source}: mig.mode.current {current}, mig.mode.pending {pending}"
    if current != pending:
        return Check(
            "mig-pending",
            "fail",
            gpu.bdf,
            evidence + " (a GPU reset is owed)",
            f"stop the GPU's processes, then nvidia-smi -i {gpu.bdf} --gpu-reset, or reboot the host"
            " (in a passthrough VM: reboot the VM)",
        )
    if current == "Disabled" and ctx.explicit == "mig":
        return Check(
            "mig-pending",
            "fail",
            gpu.bdf,
            evidence,
            f"nvidia-smi -i {gpu.bdf} -mig 1, then nvidia-smi -i {gpu.bdf} --gpu-reset (or reboot)",
        )
    return Check("mig-pending", "ok", gpu.bdf, evidence)


_SERIES = re.compile(r"\d([QBAC])\d*$")


def _series(gpu: GpuFacts) -> str:
    """Which vGPU series the VFs offer, and what that means for the guest: what `carve --from-probe` picks from."""
    series = sorted({m[1] for t in gpu.vf_vgpu_types if (m := _SERIES.search(t.strip()))})
    if series == ["C"]:
        return "series offered: C only (Linux compute seats; a Windows seat needs Q, B or A types)"
    if series and "C" not in series:
        return f"series offered: {', '.join(series)} (no C-series: Linux CUDA seats get Q types)"
    return f"series offered: {', '.join(series) or 'unknown'}"


def vgpu_types(f: HostFacts, gpu: GpuFacts, targets: frozenset[Target], ctx: Context) -> Check:
    """vGPU host ready: mdev types on the GPU, or SR-IOV VFs with creatable vGPU types."""
    if gpu.model is not None and not gpu.model.vgpu:
        return Check(
            "vgpu-types",
            "fail",
            gpu.bdf,
            f"{gpu.name} is not supported by NVIDIA vGPU",
            "use passthrough, MIG or time-slicing on this GPU",
        )
    if gpu.mdev_types:
        free = [t for t in gpu.mdev_types if (t.available or 0) > 0]
        listed = ", ".join(f"{t.type_id} {t.name} ({t.available} left)" for t in (free or list(gpu.mdev_types))[:3])
        evidence = f"{gpu.dev}/mdev_supported_types: {len(gpu.mdev_types)} types, e.g. {listed}"
        if free:
            return Check("vgpu-types", "ok", gpu.bdf, evidence)
        return Check(
            "vgpu-types",
            "warn",
            gpu.bdf,
            evidence + ": none has an instance left (fully allocated)",
            "remove unused mdev devices (echo 1 > /sys/bus/mdev/devices/<uuid>/remove)",
        )
    if gpu.sriov_totalvfs:
        evidence = f"{gpu.dev}/sriov_totalvfs: {gpu.sriov_totalvfs}; sriov_numvfs: {gpu.sriov_numvfs or 0}"
        if not gpu.sriov_numvfs:
            return Check(
                "vgpu-types",
                "fail",
                gpu.bdf,
                evidence + " (VFs not enabled)",
                f"/usr/lib/nvidia/sriov-manage -e {gpu.bdf} (or ALL); if it fails, enable SR-IOV in the BIOS/UEFI",
            )
        if gpu.vf_vgpu_types:
            shown = ", ".join(gpu.vf_vgpu_types[:3])
            return Check("vgpu-types", "ok", gpu.bdf, f"{evidence}; creatable on VFs: {shown}; {_series(gpu)}")
        return Check(
            "vgpu-types",
            "warn",
            gpu.bdf,
            f"{evidence}; no creatable vGPU types on the VFs (all allocated, or no vGPU Manager)",
            "check the NVIDIA vGPU Manager is installed and nvidia owns the GPU",
        )
    return Check(
        "vgpu-types",
        "fail",
        gpu.bdf,
        f"{gpu.dev}: no mdev_supported_types and no SR-IOV VFs (sriov_totalvfs)",
        "install the NVIDIA vGPU Manager (host driver) and bind the GPU to nvidia"
        + (
            "; a Tesla M60/M6 must also be in graphics mode: gpumodeswitch --gpumode graphics"
            if gpu.model is not None and gpu.model.id == "M60"
            else ""
        ),
    )


HostCheck = Callable[[HostFacts, Context], Check]
GpuCheck = Callable[[HostFacts, GpuFacts, frozenset[Target], Context], Check]
ALL: frozenset[Target] = frozenset(TARGETS)
VMS: frozenset[Target] = frozenset({"passthrough", "vgpu"})
HOST_DRIVER: frozenset[Target] = frozenset({"vgpu", "mig", "containers"})

# check id → (function, targets it matters for); order here is the report's order
HOST_CHECKS: dict[str, tuple[HostCheck, frozenset[Target]]] = {
    "cpu-virt": (cpu_virt, VMS),
    "kvm": (kvm, VMS),
    "iommu-enabled": (iommu_enabled, VMS),
    "iommu-passthrough-mode": (iommu_passthrough_mode, frozenset({"passthrough"})),
    "interrupt-remapping": (interrupt_remapping, frozenset({"passthrough"})),
    "vfio-modules": (vfio_modules, frozenset({"passthrough"})),
    "nouveau": (nouveau, ALL),
}
GPU_CHECKS: dict[str, tuple[GpuCheck, frozenset[Target]]] = {
    "iommu-group": (iommu_group, frozenset({"passthrough"})),
    "bar-size": (bar_size, ALL),
    "driver-binding": (driver_binding, ALL),
    "driver-version": (driver_version, HOST_DRIVER),
    "mig-pending": (mig_pending, frozenset({"mig"})),
    "vgpu-types": (vgpu_types, frozenset({"vgpu"})),
}
