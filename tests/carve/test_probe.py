"""`gpuseat probe` writes a bundle from what nvidia-smi and sysfs say; `carve --from-probe` plans from the
bundle's own profile table (issue 26). The stand-in nvidia-smi prints real captures (tests/fixtures,
SOURCES.md): the RTX PRO 6000 -lgip/-lgipp/-lgi/-lci/-L of a public walkthrough and telegraf's RTX PRO 6000
Max-Q `-q -x`; the fake sysfs holds the real L40S `creatable_vgpu_types` table on SR-IOV VFs.
"""

from __future__ import annotations

import json
import os
import tarfile

import pytest

from gpuseat.services import probe

from .conftest import CATALOG, FIXTURES
from .test_issue14 import write_tool

FAKE = """
case "$*" in
  "-q -x") cat "$FIX/telegraf__pro-6000-maxq-blackwell-v13-excerpt.xml" ;;
  "-L") cat "$FIX/rtxpro6000__L.txt" ;;
  "mig -lgip") cat "$FIX/rtxpro6000__lgip.txt" ;;
  "mig -lgipp") cat "$FIX/rtxpro6000__lgipp.txt" ;;
  "mig -lgi") cat "$FIX/rtxpro6000__lgi.txt" ;;
  "mig -lci") cat "$FIX/rtxpro6000__lci.txt" ;;
  "vgpu -s -v"|"vgpu -c") echo "NVIDIA vGPU Manager is not loaded" >&2; exit 9 ;;
  *) echo "unknown $*" >&2; exit 2 ;;
esac
"""


@pytest.fixture
def fake_host(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    write_tool(bin_dir, "nvidia-smi", FAKE)
    monkeypatch.setenv("FIX", str(FIXTURES))
    root = tmp_path / "host"
    devices = root / "sys" / "bus" / "pci" / "devices"
    pf = devices / "0000:61:00.0"
    pf.mkdir(parents=True)
    (pf / "vendor").write_text("0x10de\n")
    (pf / "class").write_text("0x030000\n")
    (pf / "sriov_totalvfs").write_text("16\n")
    for n in range(2):
        vf = devices / f"0000:61:00.{n + 4}"
        (vf / "nvidia").mkdir(parents=True)
        (vf / "nvidia" / "creatable_vgpu_types").write_text(
            (FIXTURES / "harvester-pcidevices__l40s-creatable_vgpu_types.txt").read_text()
        )
        (vf / "nvidia" / "current_vgpu_type").write_text("0\n")
        (pf / f"virtfn{n}").symlink_to(f"../0000:61:00.{n + 4}")
    return bin_dir / "nvidia-smi", root


@pytest.mark.parametrize("name", ["bundle", "bundle.tar.gz"])
def test_probe_writes_every_print_and_the_sysfs_layout(name, fake_host, tmp_path, cli):
    smi, root = fake_host
    out = tmp_path / name
    got = cli("probe", out, "--root", root, "--nvidia-smi", smi)
    assert got.code == 0, got.err
    assert "driver 590.44.01, vGPU layout vfio" in got.out and "vgpu-s-v.txt (exit 9)" in got.out
    bundle = probe.read_bundle(out)
    assert bundle.driver_version == "590.44.01" and bundle.vgpu_layout == "vfio"
    assert bundle.text("mig-lgip.txt") == (FIXTURES / "rtxpro6000__lgip.txt").read_text()
    assert bundle.text("vgpu-c.txt") is None  # its command failed: recorded in probe.json, not read as data
    ran = bundle.manifest["commands"]
    assert ran["vgpu-c.txt"]["exit"] == 9 and "not loaded" in ran["vgpu-c.txt"]["stderr"]
    layout = json.loads(bundle.files["sysfs.json"])
    vfs = layout["gpus"]["0000:61:00.0"]["vfs"]
    assert [v["vf"] for v in vfs] == ["0000:61:00.4", "0000:61:00.5"]
    assert "1155 NVIDIA L40S-24Q" in vfs[0]["creatable"] and vfs[0]["current_vgpu_type"] == 0
    assert "doctor-capture.tar.gz" in bundle.files


def test_carve_from_probe_plans_from_the_driver_table(fake_host, tmp_path, cli):
    smi, root = fake_host
    out = tmp_path / "b"
    assert cli("probe", out, "--root", root, "--nvidia-smi", smi, "--no-doctor").code == 0
    got = cli("carve", "--from-probe", out, "--mode", "mig", "--format", "json")
    assert got.code == 0, got.err
    doc = json.loads(got.out)
    assert doc["gpu"] == "RTX-PRO-6000"
    assert [(s["profile"], s["placement"]["start"], s["placement"]["size"]) for s in doc["slices"]] == [
        ("1g.24gb", 0, 3),
        ("1g.24gb", 3, 3),
        ("1g.24gb", 6, 3),
        ("1g.24gb", 9, 3),
    ]  # the 12-unit placement grid of the real -lgipp, memory 23.62 GiB of the real -lgip
    assert {s["memory_gb"] for s in doc["slices"]} == {23.62}
    assert any("driver's own table" in n and "590.44.01" in n for n in doc["notes"])
    script = cli("carve", "--from-probe", out, "--mode", "mig", "--render", "nvidia-smi")
    assert script.code == 0 and "-cgi 14:0,14:3,14:6,14:9 -C" in script.out, script.out


def test_the_bundle_table_wins_over_the_catalog(fake_host, tmp_path):
    """An edited -lgip (a driver that prints 22.00 GiB) changes the plan: the bundle, not the catalog, decides."""
    smi, root = fake_host
    out = tmp_path / "b"
    probe.write_bundle(out, root=root, nvidia_smi=str(smi), doctor=False)
    (out / "mig-lgip.txt").write_text((out / "mig-lgip.txt").read_text().replace("23.62", "22.00"))
    bundle = probe.read_bundle(out)
    _server, catalog, notes = probe.plan_inputs(bundle, CATALOG)
    assert {p.usable_gb for p in catalog.partitions.mig_profiles["RTX-PRO-6000"] if p.name == "1g.24gb"} == {22.0}
    assert notes and CATALOG.partitions.mig_profiles["RTX-PRO-6000"][0].usable_gb == 23.62


def test_doctor_and_top_read_the_bundle(fake_host, tmp_path, cli):
    smi, root = fake_host
    out = tmp_path / "b.tar.gz"
    assert cli("probe", out, "--root", root, "--nvidia-smi", smi).code == 0
    doc = cli("doctor", "--from-probe", out, "--format", "json")
    assert doc.code in (0, 1) and "Traceback" not in doc.err, doc.err
    assert json.loads(doc.out)["gpus"]
    top = cli("top", "--from-probe", out, "--once", "--format", "json")
    assert top.code == 0, top.err
    (gpu,) = json.loads(top.out)["gpus"]
    assert gpu["name"] == "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
    assert (gpu["driver_version"], gpu["power_limit_w"], gpu["fan_percent"]) == ("590.44.01", 300.0, 30.0)


@pytest.mark.parametrize(
    "payload",
    [
        {"../escape": b"x"},
        {"probe.json": b"not json"},
        {"probe.json": b'{"bundle_version": 99}'},
    ],
)
def test_a_hostile_or_foreign_bundle_is_one_clear_message(payload, tmp_path, cli):
    path = tmp_path / "evil.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        import io

        for name, data in payload.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    got = cli("carve", "--from-probe", path)
    assert got.code == 2 and "Traceback" not in got.err and "probe" in got.err, got.err
    assert not (tmp_path.parent / "escape").exists()
    assert os.listdir(tmp_path) == ["evil.tar.gz"]


def test_carve_from_nvidia_smi_knows_the_rtx_pro_6000_blackwell(cli):
    """telegraf's real RTX PRO 6000 Max-Q `-q -x` (driver 590.44.01): a catalog GPU with its MIG table."""
    capture = FIXTURES / "telegraf__pro-6000-maxq-blackwell-v13-excerpt.xml"
    got = cli("carve", "--from-nvidia-smi", capture, "--format", "json")
    assert got.code == 0, got.err
    doc = json.loads(got.out)
    assert doc["gpu"] == "RTX-PRO-6000" and doc["chips"][0]["pci"] == "0000:61:00.0"
    mig = cli("carve", "--from-nvidia-smi", capture, "--mode", "mig", "--min-mem", "40", "--format", "json")
    assert mig.code == 0, mig.err
    slices = json.loads(mig.out)["slices"]
    assert [(s["profile"], s["memory_gb"]) for s in slices] == [("2g.48gb", 47.38), ("2g.48gb", 47.38)]


L40S_Q = """
case "$*" in
  "-q") awk '/^# idle :: query \\(-q\\)/{f=1;next} f&&/^####/{if(++n==2)exit;next} f' "$FIX/$CAP" ;;
  "-L") echo "GPU 0: NVIDIA L40S (UUID: GPU-00000000-0000-0000-0000-000000000000)" ;;
  *) echo "not here: $*" >&2; exit 6 ;;
esac
"""


@pytest.mark.parametrize("layout", ["vfio", "mdev"])
def test_the_vgpu_backend_follows_the_probed_sysfs(layout, tmp_path, monkeypatch, cli):
    """An L40S host probed (its real `-q` text; no -q -x): the bundle's sysfs layout picks the scripts."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    write_tool(bin_dir, "nvidia-smi", L40S_Q)
    monkeypatch.setenv("FIX", str(FIXTURES))
    monkeypatch.setenv("CAP", "nvidia_gpu_exporter__linux-x86_64__nvidia-l40s__595.80.txt")
    pf = tmp_path / "host" / "sys" / "bus" / "pci" / "devices" / "0000:01:00.0"
    pf.mkdir(parents=True)
    (pf / "vendor").write_text("0x10de\n")
    (pf / "class").write_text("0x030200\n")
    vf = pf.parent / "0000:01:00.4"
    if layout == "vfio":
        (vf / "nvidia").mkdir(parents=True)
        (vf / "nvidia" / "creatable_vgpu_types").write_text(
            (FIXTURES / "harvester-pcidevices__l40s-creatable_vgpu_types.txt").read_text()
        )
        (vf / "nvidia" / "current_vgpu_type").write_text("0\n")
    else:
        t = vf / "mdev_supported_types" / "nvidia-1155"
        t.mkdir(parents=True)
        (t / "name").write_text("NVIDIA L40S-24Q\n")
        (t / "available_instances").write_text("1\n")
    (pf / "virtfn0").symlink_to("../0000:01:00.4")
    out = tmp_path / "b"
    got = cli("probe", out, "--root", tmp_path / "host", "--nvidia-smi", bin_dir / "nvidia-smi", "--no-doctor")
    assert got.code == 0 and f"driver 595.80, vGPU layout {layout}" in got.out, got.out
    files = cli("carve", "--from-probe", out, "--mode", "vgpu", "--guest", "windows", "--render", "libvirt")
    assert files.code == 0, files.err
    assert ("==> vgpu-create.sh <==" in files.out) == (layout == "vfio")
    assert ("==> mdev-create.sh <==" in files.out) == (layout == "mdev")
    assert "L40S-" in files.out and "C'" not in files.out  # Q types for Windows
