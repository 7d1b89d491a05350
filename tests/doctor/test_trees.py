"""The doctor on fake hosts: each broken host fails exactly the check that explains it, with the right fix."""

from __future__ import annotations

from dataclasses import replace

import pytest
from doctor_trees import HEALTHY_VFIO, MEM32, MEM64_PREF, UNSET, Fn, GiB, MiB, gpu

from gpuseat.doctor import Check, diagnose

GPU = "0000:41:00.0"
M60_UNPLACED = ((0xF2000000, 16 * MiB, MEM32), (0, 8 * GiB, MEM64_PREF | UNSET), (0xF0000000, 32 * MiB, MEM64_PREF))
A100_BARS = (
    (0xF2000000, 16 * MiB, MEM32),
    (0x38000000000, 128 * GiB, MEM64_PREF),
    (0x3A000000000, 32 * MiB, MEM64_PREF),
)


def checks(root, target=None) -> dict[tuple[str, str | None], Check]:
    report, _ = diagnose(root, target)
    return {(c.id, c.gpu): c for c in report.checks}


def failing(root, target=None) -> set[str]:
    report, _ = diagnose(root, target)
    return {c.id for c in report.checks if c.status == "fail"}


def test_healthy_vfio_host_passes_every_passthrough_check(host_tree):
    report, _ = diagnose(host_tree(HEALTHY_VFIO))
    assert report.gpus == ((GPU, "NVIDIA Tesla T4"),)
    statuses = {c.id: c.status for c in report.checks}
    assert statuses == {
        "cpu-virt": "ok", "kvm": "ok", "iommu-enabled": "ok", "iommu-passthrough-mode": "ok",
        "interrupt-remapping": "ok", "vfio-modules": "ok", "nouveau": "ok",
        "iommu-group": "ok", "bar-size": "ok", "driver-binding": "ok",
    }  # fmt: skip
    assert report.exit_code == 0
    by_id = {c.id: c for c in report.checks}
    assert "dmar0, dmar1" in by_id["iommu-enabled"].evidence
    assert "0000:00:03.0" in by_id["iommu-group"].evidence  # the root port may share the group
    assert "BAR1 256 MiB 64-bit prefetchable" in by_id["bar-size"].evidence


def test_iommu_off(host_tree):
    root = host_tree(replace(HEALTHY_VFIO, iommu_units=(), cmdline="BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro"))
    assert failing(root) == {"iommu-enabled"}
    c = checks(root)
    fix = c["iommu-enabled", None].fix
    assert "intel_iommu=on" in fix and "VT-d" in fix and "/etc/default/grub" in fix
    assert c["iommu-group", GPU].status == "skip"
    assert c["interrupt-remapping", None].status == "skip"


def test_iommu_switched_off_on_the_command_line_says_remove_it(host_tree):
    root = host_tree(replace(HEALTHY_VFIO, iommu_units=(), cmdline="ro quiet intel_iommu=off"))
    fix = checks(root)["iommu-enabled", None].fix
    assert fix.startswith("remove intel_iommu=off")


def test_gpu_sharing_its_group_with_a_nic(host_tree):
    host = replace(HEALTHY_VFIO, groups={"1": ("0000:00:03.0", GPU, "0000:00:19.0")})
    c = checks(host_tree(host))
    assert failing(host_tree(host)) == {"iommu-group"}
    check = c["iommu-group", GPU]
    assert "0000:00:19.0 (network controller, driver e1000e)" in check.evidence
    assert "ACS" in check.fix and "bind 0000:00:19.0 to vfio-pci" in check.fix


def test_own_audio_function_in_the_group_is_fine_and_joins_vfio_ids(host_tree):
    audio = Fn("0000:41:00.1", device="10f7", pci_class="040300", driver="snd_hda_intel")
    quadro = gpu(HEALTHY_VFIO, device="1e30")
    host = replace(quadro, functions=(*quadro.functions, audio), groups={"1": ("0000:00:03.0", GPU, "0000:41:00.1")})
    c = checks(host_tree(host))
    assert c["iommu-group", GPU].status == "ok"
    binding = c["driver-binding", GPU]
    assert binding.status == "warn" and "0000:41:00.1 -> snd_hda_intel" in binding.evidence
    assert "options vfio-pci ids=10de:1e30,10de:10f7" in binding.fix


def test_m60_with_an_8_gib_bar1_under_a_32_bit_only_setup(host_tree):
    root = host_tree(gpu(HEALTHY_VFIO, device="13f2", pci_class="030000", bars=M60_UNPLACED))
    report, _ = diagnose(root)
    assert report.gpus == ((GPU, "NVIDIA Tesla M60"),)
    assert failing(root) == {"bar-size"}
    check = checks(root)["bar-size", GPU]
    assert "BAR1 8 GiB 64-bit prefetchable not assigned" in check.evidence
    assert "Above 4G decoding" in check.fix
    assert 'pciPassthru.use64bitMMIO = "TRUE"' in check.fix
    assert 'pciPassthru.64bitMMIOSizeGB = "16"' in check.fix  # 8 GiB + 48 MiB → 16 (power of two)
    assert "UEFI" in check.fix and "OVMF" in check.fix


def test_large_bar_that_is_placed_warns_about_the_guest_only(host_tree):
    root = host_tree(gpu(HEALTHY_VFIO, device="20b2", bars=A100_BARS))
    check = checks(root)["bar-size", GPU]
    assert check.status == "warn"
    assert 'pciPassthru.64bitMMIOSizeGB = "256"' in check.fix  # 128 GiB + 48 MiB → 256, NVIDIA's H100/A100 80GB figure


def test_nouveau_bound(host_tree):
    host = replace(gpu(HEALTHY_VFIO, driver="nouveau"), modules=(*HEALTHY_VFIO.modules, "nouveau"), modprobe=())
    root = host_tree(host)
    assert failing(root) == {"driver-binding", "nouveau"}
    c = checks(root)
    assert "blacklist nouveau" in c["driver-binding", GPU].fix
    assert "softdep nouveau pre: vfio-pci" in c["driver-binding", GPU].fix
    assert c["nouveau", None].evidence == "nouveau loaded (/proc/modules)"
    assert "blacklist nouveau" in c["nouveau", None].fix


def _a100_host(**changes: object):
    host = gpu(HEALTHY_VFIO, device="20b2", driver="nvidia", bars=A100_BARS)
    return replace(host, **{"nvidia_version": "535.54.03", **changes})


def test_mig_enabled_but_pending(host_tree):
    csv = "pci.bus_id, mig.mode.current, mig.mode.pending\n00000000:41:00.0, Disabled, Enabled\n"
    root = host_tree(_a100_host(mig_csv=csv))
    assert failing(root, "mig") == {"mig-pending"}
    check = checks(root, "mig")["mig-pending", GPU]
    assert "mig.mode.current Disabled, mig.mode.pending Enabled" in check.evidence
    assert f"nvidia-smi -i {GPU} --gpu-reset" in check.fix
    assert failing(root) == {"mig-pending"}  # default targets: an nvidia-bound A100 is for containers + MIG


def test_mig_applied_is_ok_and_disabled_fails_only_when_mig_is_asked_for(host_tree):
    enabled = "pci.bus_id, mig.mode.current, mig.mode.pending\n00000000:41:00.0, Enabled, Enabled\n"
    assert checks(host_tree(_a100_host(mig_csv=enabled)), "mig")["mig-pending", GPU].status == "ok"
    disabled = enabled.replace("Enabled", "Disabled")
    root = host_tree(_a100_host(mig_csv=disabled))
    assert checks(root)["mig-pending", GPU].status == "ok"
    assert f"nvidia-smi -i {GPU} -mig 1" in checks(root, "mig")["mig-pending", GPU].fix


def test_driver_older_than_the_mig_minimum(host_tree):
    root = host_tree(_a100_host(nvidia_version="450.51.06"))
    check = checks(root, "mig")["driver-version", GPU]
    assert check.status == "fail"
    assert "450.80.02" in check.evidence and "install NVIDIA driver 450.80.02 or newer" in check.fix


def test_mig_on_a_gpu_without_mig(host_tree):
    root = host_tree(replace(gpu(HEALTHY_VFIO, driver="nvidia"), nvidia_version="535.54.03"))
    check = checks(root, "mig")["mig-pending", GPU]
    assert check.status == "fail" and "does not support MIG" in check.evidence


def test_nvidia_host_does_not_run_passthrough_checks_by_default(host_tree):
    host = _a100_host(modules=("nvidia", "kvm"), iommu_units=())
    ids = {c.id for c in diagnose(host_tree(host))[0].checks}
    assert "vfio-modules" not in ids and "iommu-group" not in ids and "iommu-enabled" not in ids
    assert {"driver-binding", "driver-version", "bar-size", "nouveau"} <= ids


def test_passthrough_wanted_but_gpu_on_nvidia(host_tree):
    root = host_tree(_a100_host())
    check = checks(root, "passthrough")["driver-binding", GPU]
    assert check.status == "fail"
    assert "options vfio-pci ids=10de:20b2" in check.fix and "softdep nvidia pre: vfio-pci" in check.fix


def test_mig_wanted_but_gpu_on_vfio(host_tree):
    check = checks(host_tree(HEALTHY_VFIO), "containers")["driver-binding", GPU]
    assert check.status == "fail" and "/sys/bus/pci/drivers/vfio-pci/unbind" in check.fix


def test_vfio_modules_and_kvm_missing(host_tree):
    root = host_tree(replace(HEALTHY_VFIO, modules=(), kvm=False))
    assert failing(root) == {"vfio-modules", "kvm"}
    c = checks(root)
    assert "/etc/modules-load.d/vfio.conf" in c["vfio-modules", None].fix
    assert c["kvm", None].fix.startswith("modprobe kvm_intel")


def test_no_virtualisation_flag_and_no_interrupt_remapping(host_tree):
    root = host_tree(replace(HEALTHY_VFIO, cpu_flags="fpu sse sse2 hypervisor", interrupts_ir=False))
    assert failing(root) == {"cpu-virt", "interrupt-remapping"}
    c = checks(root)
    assert "VT-x" in c["cpu-virt", None].fix and "nested" in c["cpu-virt", None].evidence
    assert "allow_unsafe_interrupts=1" in c["interrupt-remapping", None].fix


@pytest.mark.parametrize(
    ("changes", "status", "words"),
    [
        (
            {"mdev_types": (("nvidia-22", "GRID M60-8Q", 1), ("nvidia-18", "GRID M60-2Q", 4))},
            "ok",
            "nvidia-22 GRID M60-8Q",
        ),
        ({"mdev_types": (("nvidia-22", "GRID M60-8Q", 0),)}, "warn", "fully allocated"),
        ({}, "fail", "gpumodeswitch --gpumode graphics"),
    ],
)
def test_vgpu_types_on_an_m60(host_tree, changes, status, words):
    host = replace(gpu(HEALTHY_VFIO, device="13f2", driver="nvidia", **changes), nvidia_version="535.161.05")
    check = checks(host_tree(host), "vgpu")["vgpu-types", GPU]
    assert check.status == status
    assert words in check.evidence + (check.fix or "")


def test_vgpu_on_sr_iov_needs_vfs_enabled_then_lists_creatable_types(host_tree):
    base = gpu(HEALTHY_VFIO, device="2335", driver="nvidia", sriov_totalvfs=16)
    off = checks(host_tree(replace(base, nvidia_version="550.90.07")), "vgpu")["vgpu-types", GPU]
    assert off.status == "fail" and f"/usr/lib/nvidia/sriov-manage -e {GPU}" in off.fix
    on = gpu(base, sriov_numvfs=2, vf_creatable="ID    : vGPU Name\n1414 : NVIDIA H200X-1-18C\n")
    check = checks(host_tree(replace(on, nvidia_version="550.90.07")), "vgpu")["vgpu-types", GPU]
    assert check.status == "ok" and "1414 NVIDIA H200X-1-18C" in check.evidence


def test_unknown_device_id_is_named_by_its_ids(host_tree):
    report, _ = diagnose(host_tree(gpu(HEALTHY_VFIO, device="abcd")))
    assert report.gpus == ((GPU, "NVIDIA device 10de:abcd"),)
