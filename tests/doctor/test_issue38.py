"""Issue 38 item 3 in the doctor: the vGPU check says which series the host's VFs offer, the same list
`carve --from-probe` now picks the default type from. The L40S table is the real harvester capture
(tests/fixtures, SOURCES.md); the C-only table is written here in its layout (placeholder type ids)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from doctor_trees import HEALTHY_VFIO, gpu

from gpuseat.doctor import diagnose

GPU = "0000:41:00.0"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
WRITTEN_C_ONLY = "ID    : vGPU Name\n9001  : NVIDIA L40S-4C\n9004  : NVIDIA L40S-12C\n"


def _vgpu_check(host_tree, creatable: str):
    base = gpu(HEALTHY_VFIO, device="26b9", driver="nvidia", sriov_totalvfs=16, sriov_numvfs=2)
    host = replace(gpu(base, vf_creatable=creatable), nvidia_version="550.90.07")
    report, _ = diagnose(host_tree(host), "vgpu")
    return next(c for c in report.checks if c.id == "vgpu-types" and c.gpu == GPU)


def test_the_real_l40s_vfs_offer_no_c_series(host_tree):
    text = (FIXTURES / "harvester-pcidevices__l40s-creatable_vgpu_types.txt").read_text()
    check = _vgpu_check(host_tree, text)
    assert check.status == "ok" and "series offered: A, B, Q (no C-series" in check.evidence, check.evidence


def test_c_only_vfs_say_a_windows_seat_cannot_use_them(host_tree):
    check = _vgpu_check(host_tree, WRITTEN_C_ONLY)
    assert "series offered: C only" in check.evidence and "Windows seat needs Q, B or A" in check.evidence
