"""``doctor --from-probe``: the checks run on the /proc and /sys a `gpuseat probe` bundle recorded (issue 26)."""

from __future__ import annotations

import json

from gpuseat.services import probe


def test_doctor_reads_the_probe_capture_like_root(cli, tmp_path):
    """The bundle's capture of a fake host answers the same JSON as `doctor --root` on that host."""
    root = tmp_path / "host"
    pf = root / "sys" / "bus" / "pci" / "devices" / "0000:41:00.0"
    pf.mkdir(parents=True)
    (pf / "vendor").write_text("0x10de\n")
    (pf / "class").write_text("0x030200\n")
    (pf / "device").write_text("0x26b9\n")
    (root / "proc").mkdir()
    (root / "proc" / "cmdline").write_text("BOOT_IMAGE=/vmlinuz intel_iommu=on iommu=pt\n")
    out = tmp_path / "bundle"
    probe.write_bundle(out, root=root, nvidia_smi="/nonexistent/nvidia-smi", dmesg=None)
    direct = cli("doctor", "--root", root, "--format", "json")
    bundled = cli("doctor", "--from-probe", out, "--format", "json")
    assert bundled.code == direct.code and "Traceback" not in bundled.err
    assert json.loads(bundled.out) == json.loads(direct.out)
    manifest = json.loads((out / "probe.json").read_text())
    assert manifest["driver_version"] is None and manifest["commands"]["nvidia-smi-q.xml"]["exit"] is None


def test_a_bundle_without_the_doctor_capture_is_one_message(cli, tmp_path):
    out = tmp_path / "bundle"
    probe.write_bundle(out, root=tmp_path, nvidia_smi="/nonexistent/nvidia-smi", dmesg=None, doctor=False)
    got = cli("doctor", "--from-probe", out)
    assert got.code == 2 and "doctor-capture.tar.gz" in got.err and "without --no-doctor" in got.err
