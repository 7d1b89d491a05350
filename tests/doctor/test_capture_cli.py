"""`gpuseat doctor` end to end: exit codes, the no-GPU verdict, and capture → --root giving the same JSON."""

from __future__ import annotations

import json
import subprocess
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest
from doctor_trees import HEALTHY_VFIO, UNSET, MiB, gpu

from gpuseat.doctor import diagnose


def _extract(capture: Path, into: Path) -> Path:
    """Unpack with the system tar, as a support engineer would."""
    into.mkdir()
    subprocess.run(["tar", "xzf", str(capture), "-C", str(into)], check=True)
    return into


def test_capture_then_root_gives_the_same_json_on_a_fixture_tree(cli, host_tree, tmp_path):
    root = host_tree(HEALTHY_VFIO)
    capture = tmp_path / "support.tar.gz"
    live = cli("doctor", "--root", root, "--capture", capture, "--format", "json")
    assert live.code == 0
    replay = cli("doctor", "--root", _extract(capture, tmp_path / "x"), "--format", "json")
    assert replay.code == 0
    assert json.loads(replay.out) == json.loads(live.out)
    assert str(root) not in live.out  # evidence names root-relative paths only


def test_capture_holds_only_what_the_checks_read(cli, host_tree, tmp_path):
    capture = tmp_path / "c.tgz"
    cli("doctor", "--root", host_tree(HEALTHY_VFIO), "--capture", capture)
    with tarfile.open(capture) as tar:
        names = set(tar.getnames())
        links = {m.name: m.linkname for m in tar.getmembers() if m.issym()}
    assert {"proc/cmdline", "proc/cpuinfo", "sys/bus/pci/devices/0000:41:00.0/resource"} <= names
    assert links["sys/bus/pci/devices/0000:41:00.0/driver"] == "../../../bus/pci/drivers/vfio-pci"
    assert "etc/hostname" not in names
    assert not any(name.startswith("sys/devices/") for name in names)  # read through the bus links only


def test_capture_of_a_failing_host_replays_the_failure(cli, host_tree, tmp_path):
    bars = ((0xF2000000, 16 * MiB, 0x40200), (0, 1 << 33, 0x0014220C | UNSET))
    root = host_tree(replace(gpu(HEALTHY_VFIO, device="13f2", bars=bars), iommu_units=()))
    capture = tmp_path / "m60.tar.gz"
    live = cli("doctor", "--root", root, "--capture", capture, "--format", "json")
    replay = cli("doctor", "--root", _extract(capture, tmp_path / "x"), "--format", "json")
    assert live.code == replay.code == 1
    assert json.loads(replay.out) == json.loads(live.out)
    failed = {c["id"] for c in json.loads(live.out)["checks"] if c["status"] == "fail"}
    assert failed == {"iommu-enabled", "bar-size"}


def _has_nvidia_gpu() -> bool:
    """Independent of the doctor: any vendor 0x10de display-class function in the real sysfs."""
    for dev in Path("/sys/bus/pci/devices").glob("*"):
        ids = [(dev / name).read_text().strip() if (dev / name).exists() else "" for name in ("vendor", "class")]
        if ids[0] == "0x10de" and ids[1].startswith("0x03"):
            return True
    return False


def test_capture_of_this_machine_replays(cli, tmp_path):
    capture = tmp_path / "here.tar.gz"
    live = cli("doctor", "--capture", capture, "--format", "json")
    replay = cli("doctor", "--root", _extract(capture, tmp_path / "x"), "--format", "json")
    assert json.loads(replay.out) == json.loads(live.out)
    assert replay.code == live.code


@pytest.mark.skipif(_has_nvidia_gpu(), reason="this machine has an NVIDIA GPU")
def test_this_machine_without_gpu_gives_a_verdict(cli):
    table = cli("doctor")
    assert "no NVIDIA GPU found" in table.out
    assert "Traceback" not in table.out + table.err
    live = cli("doctor", "--format", "json")
    data = json.loads(live.out)
    assert data["gpus"] == []
    gpu_ids = {"iommu-group", "bar-size", "driver-binding", "driver-version", "mig-pending", "vgpu-types"}
    assert {c["id"] for c in data["checks"] if c["status"] == "skip" and c["gpu"] is None} >= gpu_ids
    host_fail = any(c["status"] == "fail" for c in data["checks"] if c["id"] not in gpu_ids)
    assert live.code == (1 if host_fail else 0) == table.code


def test_table_is_grouped_by_gpu(cli, host_tree):
    r = cli("doctor", "--root", host_tree(HEALTHY_VFIO))
    assert r.code == 0
    assert "Host" in r.out and "GPU 0000:41:00.0 · NVIDIA Tesla T4" in r.out
    assert "no NVIDIA GPU found" not in r.out


def test_json_follows_the_contract(cli, host_tree):
    root = host_tree(HEALTHY_VFIO)
    data = json.loads(cli("doctor", "--root", root, "--format", "json").out)
    assert set(data) == {"schema_version", "gpus", "checks"}
    assert data == diagnose(root)[0].to_dict()  # the CLI prints the report's to_dict()
    assert data["gpus"] == [{"pci": "0000:41:00.0", "name": "NVIDIA Tesla T4"}]
    for check in data["checks"]:
        assert list(check) == ["id", "status", "gpu", "evidence", "fix"]
        assert check["status"] in {"ok", "warn", "fail", "skip"}


def test_for_target_limits_the_checks(cli, host_tree):
    data = json.loads(cli("doctor", "--root", host_tree(HEALTHY_VFIO), "--for", "containers", "-f", "json").out)
    assert {c["id"] for c in data["checks"]} == {"nouveau", "bar-size", "driver-binding", "driver-version"}


def test_usage_and_input_errors_exit_2(cli, host_tree, tmp_path):
    missing = cli("doctor", "--root", tmp_path / "nope")
    assert missing.code == 2 and "directory not found" in missing.err
    a_file = tmp_path / "capture.tar.gz"
    a_file.write_bytes(b"")
    assert cli("doctor", "--root", a_file).code == 2
    assert cli("doctor", "--capture", tmp_path / "no" / "dir.tar.gz").code == 2
    assert cli("doctor", "--capture", tmp_path / "out.zip").code == 2
    assert cli("doctor", "--for", "kubernetes").code == 2


def test_mig_mode_from_nvidia_smi_travels_in_the_capture(cli, host_tree, tmp_path):
    csv = "pci.bus_id, mig.mode.current, mig.mode.pending\n00000000:41:00.0, Disabled, Enabled\n"
    host = replace(gpu(HEALTHY_VFIO, device="20b2", driver="nvidia"), nvidia_version="535.54.03", mig_csv=csv)
    capture = tmp_path / "mig.tar.gz"
    live = cli("doctor", "--root", host_tree(host), "--for", "mig", "--capture", capture, "-f", "json")
    with tarfile.open(capture) as tar:
        assert tar.extractfile("gpuseat-capture/nvidia-smi-mig.csv").read().decode() == csv
    replay = cli("doctor", "--root", _extract(capture, tmp_path / "x"), "--for", "mig", "-f", "json")
    assert live.code == replay.code == 1
    assert json.loads(replay.out) == json.loads(live.out)
