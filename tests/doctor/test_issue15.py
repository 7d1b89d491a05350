"""Issue 15 item 10 and issue 9: the doctor reads the CPU vendor, flags an ISA bridge in the GPU's IOMMU
group, caps SR-IOV counts at the kernel's limit, and never reads or captures anything outside ``--root``."""

from __future__ import annotations

import json
import subprocess
import tarfile
from dataclasses import replace
from pathlib import Path

from doctor_trees import HEALTHY_VFIO, Fn

from gpuseat.catalog.doctor import doctor_catalog
from gpuseat.doctor import diagnose
from gpuseat.doctor.facts import MAX_VFS, gather

GPU = "0000:41:00.0"


def by_id(root: Path, target: str | None = None) -> dict[str, object]:
    report, _ = diagnose(root, target)
    return {c.id: c for c in report.checks}


def test_intel_host_with_vt_x_off_gets_intel_advice(host_tree):
    """Without the vmx flag (VT-x off in the BIOS) the vendor still says Intel: kvm_intel, VT-d, intel_iommu."""
    host = replace(HEALTHY_VFIO, cpu_flags="fpu sse sse2", kvm=False, cmdline="ro quiet", iommu_units=())
    c = by_id(host_tree(host))
    assert c["kvm"].fix.startswith("modprobe kvm_intel")
    assert "VT-d" in c["iommu-enabled"].fix and "amd" not in c["iommu-enabled"].fix.lower()


def test_amd_host_gets_amd_advice(host_tree):
    host = replace(HEALTHY_VFIO, vendor="AuthenticAMD", cpu_flags="fpu sse sse2 svm", kvm=False)
    assert by_id(host_tree(host))["kvm"].fix.startswith("modprobe kvm_amd")


def test_isa_bridge_in_the_gpu_group_fails(host_tree):
    """vfio refuses a group holding an ISA bridge bound to lpc_ich; a PCIe root port (0x0604) is fine."""
    isa = Fn("0000:00:1f.0", vendor="8086", device="a1c8", pci_class="060100", driver="lpc_ich")
    host = replace(
        HEALTHY_VFIO,
        functions=(*HEALTHY_VFIO.functions, isa),
        groups={"1": ("0000:00:03.0", "0000:00:1f.0", "0000:41:00.0"), "7": ("0000:00:19.0",)},
    )
    check = by_id(host_tree(host))["iommu-group"]
    assert check.status == "fail" and "0000:00:1f.0" in check.evidence and "lpc_ich" in check.evidence
    assert "0000:00:03.0" not in check.evidence.split("with", 1)[1]  # the root port is not blamed


def test_huge_sriov_counts_are_capped_at_the_kernel_limit(host_tree):
    """sriov_totalvfs = sriov_numvfs = 100000000 in a capture: capped at 65535, and VFs are read only while present."""
    root = host_tree(HEALTHY_VFIO)
    dev = root / "sys/devices/pci0000:00" / GPU
    (dev / "sriov_totalvfs").write_text("100000000\n")
    (dev / "sriov_numvfs").write_text("100000000\n")
    (dev / "virtfn0").mkdir()
    report, view = diagnose(root, "vgpu")
    facts = gather(view, doctor_catalog())
    (gpu,) = facts.gpus
    assert gpu.sriov_totalvfs == MAX_VFS == 65535 and gpu.sriov_numvfs == MAX_VFS
    assert f"/sys/bus/pci/devices/{GPU}/virtfn2" not in view.seen  # stopped at the first missing VF
    check = next(c for c in report.checks if c.id == "vgpu-types")
    assert "65535" in check.evidence


def test_symlinks_out_of_the_root_are_not_read_or_captured(cli, host_tree, tmp_path):
    root = host_tree(HEALTHY_VFIO)
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:SECRET-LINE:/root:/bin/bash\n")
    (root / "proc/cmdline").unlink()
    (root / "proc/cmdline").symlink_to(secret)  # absolute link out of the root
    (root / "etc/modprobe.d/evil.conf").symlink_to("../../../secret.txt")  # relative link out of the root
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").symlink_to("/dev/zero")
    capture = tmp_path / "c.tar.gz"
    r = cli("doctor", "--root", root, "--capture", capture, "--format", "json")
    assert "Traceback" not in r.err
    data = json.loads(r.out)
    assert data["schema_version"] == 1
    assert "SECRET-LINE" not in r.out
    with tarfile.open(capture) as tar:
        for member in tar.getmembers():
            if member.isfile():
                body = tar.extractfile(member)
                assert body is not None and b"SECRET-LINE" not in body.read()
    listing = subprocess.run(["tar", "tzf", str(capture)], capture_output=True, text=True, check=True).stdout
    assert "secret" not in listing


def test_fifo_inside_the_root_does_not_hang(host_tree):
    import os

    root = host_tree(HEALTHY_VFIO)
    (root / "proc/cmdline").unlink()
    os.mkfifo(root / "proc/cmdline")
    report, _ = diagnose(root)
    assert report.checks  # finished; the FIFO was treated as unreadable
