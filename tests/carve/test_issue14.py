"""Regression tests for issue 14, each built from the source it cites (named in the docstring)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from itertools import product
from pathlib import Path

import libvirt
import pytest
import yaml

from gpuseat.core import mig
from gpuseat.core.carve import CarveRequest, carve
from gpuseat.errors import InputError
from gpuseat.readings import MIB
from gpuseat.render.base import RenderOptions, render
from gpuseat.services.carving import server_from_nvidia_smi

from .conftest import CATALOG, EXAMPLES, FIXTURES, carve_gpu, carve_toml

MIG_PARTED_DEFAULT = FIXTURES / "mig-parted__config-default.yaml"


def write_tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


# A stand-in nvidia-smi that keeps the GPU instances of `mig -cgi ID:START,...` and prints them back for
# `mig -lgi` in nvidia-smi's table layout (MIG user guide, "-lgi" example: GPU, Name, Profile ID, Instance ID,
# Placement Start:Size). SIZE_<id> gives each profile's size; PLACE_AT overrides where the "driver" puts them.
FAKE_NVIDIA_SMI = r"""
echo "$*" >> "$STATE/argv"
if [ "$1" = mig ] && [ "$4" = -cgi ]; then
  IFS=, read -ra gis <<<"$5"
  n=0
  for gi in "${gis[@]}"; do
    id=${gi%%:*}; start=${gi#*:}
    [ -n "${PLACE_AT:-}" ] && start=$PLACE_AT
    size_var="SIZE_$id"
    echo "|   $3  MIG x   $id   $n   $start:${!size_var}   |" >> "$STATE/gi-$3"
    n=$((n + 1))
  done
elif [ "$1" = mig ] && [ "$4" = -lgi ]; then
  cat "$STATE/gi-$3"
fi
"""


def run_mig_script(tmp_path: Path, layout, **env: str) -> subprocess.CompletedProcess:
    arts = {a.path: a for a in render(layout, "nvidia-smi", CATALOG)}
    script = tmp_path / "mig-create.sh"
    script.write_text(arts["mig-create.sh"].text)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    write_tool(bin_dir, "nvidia-smi", FAKE_NVIDIA_SMI)
    sizes = {f"SIZE_{p.gi_id}": str(p.memory_slices) for p in CATALOG.partitions.mig_profiles[layout.server.gpu.id]}
    full = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STATE": str(tmp_path), **sizes, **env}
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, env=full, timeout=60)


def test_1_nvidia_smi_pins_each_placement_and_checks_lgi(tmp_path):
    """MIG user guide "3-2-1-1" example: create at planned starts (`-cgi ID:START`), verify with -lgi."""
    layout = carve_gpu("H100-80GB", profiles=("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"))
    done = run_mig_script(tmp_path, layout)
    assert done.returncode == 0, done.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    assert "mig -i 0 -cgi 14:0,19:2,19:3,9:4 -C" in argv
    assert "GPU 0: GPU instances as planned" in done.stdout


def test_1_a_driver_that_places_elsewhere_fails_the_script(tmp_path):
    layout = carve_gpu("H100-80GB", profiles=("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"))
    done = run_mig_script(tmp_path, layout, PLACE_AT="0")
    assert done.returncode == 1 and "planned GPU instances" in done.stderr


@pytest.mark.parametrize(
    ("config", "gpu", "profiles"),
    [
        ("all-1g.10gb", "H100-80GB", ["1g.10gb"] * 7),
        ("all-1g.10gb", "A100-80GB", ["1g.10gb"] * 7),
        ("all-1g.10gb", "A100-40GB", ["1g.10gb"] * 4),
        ("all-balanced", "H100-80GB", ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]),
        ("all-balanced", "H200-141GB", ["1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"]),
        ("all-balanced", "A30", ["1g.6gb", "1g.6gb", "2g.12gb"]),
    ],
)
def test_2_mig_parted_entries_apply_only_to_their_device_filter(cli, config, gpu, profiles):
    """mig-parted's own deployments/systemd/config-default.yaml: one entry per device-filter."""
    got = cli("carve", "--from-mig-parted", MIG_PARTED_DEFAULT, "--config", config, "--gpu", gpu, "--format", "json")
    assert got.code == 0, got.err
    assert sorted(s["profile"] for s in json.loads(got.out)["slices"]) == sorted(profiles)


@pytest.mark.parametrize(("gpu", "per_chip"), [("M60", 16), ("K520", 16), ("K2", 16), ("V100", 48), ("H100-80GB", 48)])
def test_3_mps_client_limit_before_volta(gpu, per_chip):
    """NVIDIA MPS documentation: pre-Volta MPS supports 16 client contexts per device, Volta and later 48."""
    layout = carve_gpu(gpu, mode="mps")
    chips = len(layout.server.chips)
    assert len(layout.slices) == per_chip * chips
    assert bool(layout.notes) == (per_chip == 16)
    if layout.notes:
        assert "not enforced" in layout.notes[0]
        runbook = next(a.text for a in render(layout, "k8s", CATALOG) if a.path == "APPLY.md")
        assert "memory limits per client are not enforced" in runbook


def _placeable(gpu_id: str) -> set[tuple[str, ...]]:
    """Every multiset of GPU instances one GPU can hold (brute force over the catalog's profiles)."""
    gpu = CATALOG.partitions.mig_gpus[gpu_id]
    profs = CATALOG.partitions.mig_profiles[gpu_id]
    out = set()
    for counts in product(*(range(p.max_count + 1) for p in profs)):
        chosen = [p for p, n in zip(profs, counts, strict=True) for _ in range(n)]
        if sum(p.memory_slices for p in chosen) <= gpu.memory_slices and mig.place(gpu, chosen) is not None:
            out.add(tuple(sorted(p.name for p in chosen)))
    return out


@pytest.mark.parametrize("gpu_id", ["A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB", "A30"])
def test_4_exhaustive_two_gpu_packing_refuses_nothing_that_fits(gpu_id):
    """Issue 14 item 4: every multiset that fits two GPUs in some split is packed, whatever the order."""
    gpu = CATALOG.partitions.mig_gpus[gpu_id]
    by_name = {p.name: p for p in CATALOG.partitions.mig_profiles[gpu_id]}
    one = _placeable(gpu_id)
    two = {tuple(sorted(a + b)) for a in one for b in one}
    assert len(two) > 50
    for names in two:
        profiles = [by_name[n] for n in names]
        for order in (profiles, profiles[::-1]):
            packed = mig.pack(gpu, order, 2)
            assert packed is not None, names
            assert sorted(p.name for chip in packed for p in chip) == sorted(names)
            assert all(mig.place(gpu, chip) is not None for chip in packed)


def test_4_the_issue_example_in_both_orders():
    for order in (("3g.40gb", "3g.40gb", "4g.40gb", "4g.40gb"), ("4g.40gb", "3g.40gb", "4g.40gb", "3g.40gb")):
        layout = carve_gpu("H100-80GB:2", profiles=order)
        assert sorted(s.profile for s in layout.slices) == sorted(order)


def test_5_vsphere_mmio_from_a_capture_counts_every_bar_and_reserves_memory():
    """telegraf's A100-SXM4-80GB capture (BAR1 131072 MiB) + BAR0/BAR3 → 256, NVIDIA's A100 80GB figure."""
    server = server_from_nvidia_smi((FIXTURES / "telegraf__a100-sxm4-v12.xml").read_text(), CATALOG, where="x")
    layout = carve(server, CarveRequest(mode="passthrough"), CATALOG)
    vmx = next(a for a in render(layout, "vsphere", CATALOG) if a.path.endswith(".vmx")).text
    assert 'pciPassthru.64bitMMIOSizeGB = "256"' in vmx
    assert 'sched.mem.min = "16384"' in vmx and 'sched.mem.pin = "TRUE"' in vmx


@pytest.mark.parametrize("gpu", ["L40S", "L4", "A10", "A16"])
def test_6_vgpu_on_sriov_gpus_goes_on_virtual_functions(gpu, tmp_path):
    """NVIDIA vGPU user guide (KVM): Ampere+ vGPUs live on SR-IOV VFs enabled with sriov-manage -e."""
    chips = [{"pci": f"0000:4{i + 1}:00.0"} for i in range(CATALOG.gpus[gpu].chips_per_board)]
    data = {"name": "s", "gpu": [{"model": gpu, "chip": chips}]}
    layout = carve_toml(data, mode="vgpu", seats=2)
    mdev_only = RenderOptions(vgpu_backend="mdev")  # Ada defaults to vendor-specific VFIO (test_vgpu_vfio.py)
    arts = {a.path: a.text for a in render(layout, "libvirt", CATALOG, mdev_only)}
    mdev = arts["mdev-create.sh"]
    assert '/usr/lib/nvidia/sriov-manage}" -e 0000:41:00.0' in mdev
    assert '"$SYSFS"/bus/pci/devices/0000:41:00.0/virtfn*' in mdev
    prefix = "NVIDIA"  # Ampere and Ada type names (a real A2 tree says NVIDIA A2-1B)
    assert f"'{prefix} {layout.slices[0].profile}'" in mdev
    proxmox = next(a.text for a in render(layout, "proxmox", CATALOG, mdev_only) if a.path == "proxmox.sh")
    assert "virtfn*" in proxmox and '/usr/lib/nvidia/sriov-manage}" -e 0000:41:00.0' in proxmox
    vmx = next(a.text for a in render(layout, "vsphere", CATALOG) if a.path.endswith(".vmx"))
    assert 'pciPassthru0.vgpu = "nvidia_' in vmx
    for text, name in ((mdev, "m.sh"), (proxmox, "p.sh")):
        (tmp_path / name).write_text(text)
        assert subprocess.run(["bash", "-n", str(tmp_path / name)]).returncode == 0


def test_7_k8s_plugin_config_in_its_own_namespace_and_the_mig_layout_itself():
    """k8s-device-plugin README (config.name/config.default) and GPU operator MIG manager (mig.config label)."""
    layout = carve_gpu("H200-141GB", mode="mig", seats=7)
    arts = {a.path: a.text for a in render(layout, "k8s", CATALOG)}
    plugin = yaml.safe_load(arts["device-plugin-config.yaml"])
    assert plugin["metadata"]["namespace"] == "gpu-operator"  # where the GPU operator mounts it from
    mig_map = yaml.safe_load(arts["mig-config.yaml"])
    config = yaml.safe_load(mig_map["data"]["config.yaml"])
    name = f"gpuseat-{layout.server.slug}"
    assert [e["mig-devices"] for e in config["mig-configs"][name]] == [{"1g.18gb": 7}]
    assert f"nvidia.com/mig.config={name}" in arts["APPLY.md"]
    assert "devicePlugin.config.name=gpuseat-device-plugin" in arts["APPLY.md"]


def test_8_libvirt_names_with_comment_dashes_and_slashes_stay_valid(tmp_path):
    """libvirt refuses '/' in names; '--' ends an XML comment."""
    layout = carve_toml(
        {"name": "lab--a/b <c>", "gpu": [{"model": "M60", "chip": [{"pci": "0000:86:00.0"}]}]}, mode="passthrough"
    )
    arts = [a for a in render(layout, "libvirt", CATALOG) if a.kind == "libvirt-domain"]
    path = tmp_path / "d.xml"
    path.write_text(arts[0].text)
    assert subprocess.run(["virt-xml-validate", str(path), "domain"], capture_output=True).returncode == 0
    assert "<name>lab-a-b-c-seat-01</name>" in arts[0].text


def test_9_a30_has_one_media_engine_set():
    """partitioning.md §1.3 A30 table: each +me profile takes the GPU's single JPEG/OFA."""
    with pytest.raises(InputError, match="media-engine"):
        carve_gpu("A30", profiles=("1g.6gb+me", "2g.12gb+me"))


BAD_PARTED = [
    (
        "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n      mig-devices: {1g.10gb: 7}\n",
        "mig-enabled is false",
    ),
    (
        "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {1g.10gb: 0}\n",
        "count of 0",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD_PARTED)
def test_10_mig_parted_files_mig_parted_rejects(cli, tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    got = cli("carve", "--from-mig-parted", path, "--gpu", "H100-80GB")
    assert got.code == 2 and message in got.err and "Traceback" not in got.err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu", "H100-80GB", "--profile", ","], "empty profile"),
        (["--gpu", "H100-80GB", "--min-mem", "nan"], "--min-mem"),
        (["--gpu", "H100-80GB", "--min-mem", "inf"], "--min-mem"),
        (["--gpu", "H100-80GB", "--min-mem", "-1"], "--min-mem"),
    ],
)
def test_10_bad_flags(cli, args, message):
    got = cli("carve", *args)
    assert got.code == 2 and message in got.err and "Traceback" not in got.err


def test_10_duplicate_pci_addresses(cli, tmp_path):
    inv = tmp_path / "s.toml"
    inv.write_text(
        'name = "x"\n[[gpu]]\nmodel = "M60"\n[[gpu.chip]]\npci = "0000:86:00.0"\n[[gpu.chip]]\npci = "86:00.0"\n'
    )
    got = cli("carve", inv)
    assert got.code == 2 and "0000:86:00.0 given for GPU 0 and GPU 1" in got.err
    xml = (FIXTURES / "gpuseat__tesla-m60-x2.xml").read_text()
    twice = xml.replace("0000:05:00.0", "0000:04:00.0")
    assert twice != xml
    with pytest.raises(InputError, match="given for GPU 0 and GPU 1"):
        server_from_nvidia_smi(twice, CATALOG, where="x.xml")


def test_11_auto_is_the_most_isolated_mode(cli):
    """Issue 14 item 11: the 2016 server gives 4 passthrough seats; more seats → the next isolated mode."""
    got = cli("carve", EXAMPLES / "ibm-2xM60.toml", "--format", "json")
    doc = json.loads(got.out)
    assert got.code == 0 and doc["mode"] == "passthrough" and len(doc["slices"]) == 4
    assert {a["mode"] for a in doc["alternatives"]} >= {"vgpu", "mps", "timeslice"}
    eight = json.loads(cli("carve", "--gpu", "H200-141GB", "--seats", "7", "--format", "json").out)
    assert eight["mode"] == "mig"
    shared = json.loads(cli("carve", EXAMPLES / "ibm-2xM60.toml", "--seats", "16", "--format", "json").out)
    assert shared["mode"] == "mps" and len(shared["slices"]) == 16


def test_11_h200_libvirt_out_folder(cli, tmp_path):
    got = cli("carve", "--gpu", "H200-141GB", "--render", "libvirt", "--out", tmp_path / "d")
    assert got.code == 0, got.err
    assert f"Next: follow {tmp_path / 'd' / 'APPLY.md'}" in got.out
    assert (tmp_path / "d" / "APPLY.md").exists()
    domain = tmp_path / "d" / "seat-01.xml"
    check = subprocess.run(["virt-xml-validate", str(domain), "domain"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    conn = libvirt.open("test:///default")
    try:
        dom = conn.defineXMLFlags(domain.read_text(), libvirt.VIR_DOMAIN_DEFINE_VALIDATE)
        xml = dom.XMLDesc(0)
        assert "<hostdev" in xml and "<console type='pty'>" in xml and "<interface type='network'>" in xml
        assert "type='qcow2'" in xml
        dom.undefine()
    finally:
        conn.close()
    applied = (tmp_path / "d" / "APPLY.md").read_text()
    assert "## Steps (in this order)" in applied and "pci-fill.sh" in applied and "After a reboot" in applied


def test_python_is_never_needed_to_read_the_fixture_sources():
    assert MIG_PARTED_DEFAULT.exists() and sys.version_info >= (3, 11)
    assert MIB == 1 << 20


# qm(1) / qm.conf(5) option grammar (pve-docs generated/qm.conf.5-opts.adoc, quoted in partitioning.md §4.2):
# hostpci[n]: [[host=]<HOSTPCIID>] [,mdev=<string>] [,pcie=<1|0>] …; pcie needs machine q35.
HOSTPCI_KEYS = {"host", "device-id", "driver", "legacy-igd", "mapping", "mdev", "pcie", "rombar", "romfile",
                "sub-device-id", "sub-vendor-id", "vendor-id", "x-vga"}  # fmt: skip
QM_OPTIONS = {
    "name": r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?",
    "memory": r"[1-9][0-9]*",
    "cores": r"[1-9][0-9]*",
    "machine": r"q35|pc|pc-q35-[0-9.]+",
    "bios": r"ovmf|seabios",
    "efidisk0": r"[A-Za-z0-9_.-]+:[0-9]+(,efitype=(2m|4m))?(,pre-enrolled-keys=[01])?",
    "scsihw": r"lsi|virtio-scsi-pci|virtio-scsi-single|megasas|pvscsi",
    "scsi0": r"[A-Za-z0-9_.-]+:[0-9]+",
    "net0": r"(virtio|e1000|rtl8139|vmxnet3),bridge=[A-Za-z0-9_.-]+",
    "serial0": r"socket|/dev/.+",
    "ostype": r"l26|l24|win11|win10|other",
    "hostpci0": None,
}


def _check_hostpci(value: str) -> None:
    import re

    parts = value.split(",")
    assert re.fullmatch(r"(host=)?[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}(\.[0-7])?", parts[0]), value
    for part in parts[1:]:
        key, _, val = part.partition("=")
        assert key in HOSTPCI_KEYS, value
        if key == "pcie":
            assert val in ("0", "1")
        if key == "mdev":
            assert re.fullmatch(r"nvidia-[0-9]+", val), value


@pytest.mark.parametrize("mode", ["passthrough", "vgpu"])
def test_8_proxmox_creates_q35_ovmf_vms_in_qm_grammar(mode, tmp_path):
    """Run proxmox.sh with a stand-in `qm` and check every `qm create` against qm's documented options."""
    import re

    chips = [{"pci": f"0000:8{6 + i}:00.0"} for i in range(4)]
    layout = carve_toml({"name": "m60", "gpu": [{"model": "M60", "boards": 2, "chip": chips}]}, mode=mode)
    script = next(a.text for a in render(layout, "proxmox", CATALOG) if a.path == "proxmox.sh")
    (tmp_path / "p.sh").write_text(script)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    write_tool(bin_dir, "qm", '[ "$1" = status ] && exit 2\nprintf "%s\\0" "$@" >> "$LOG"; printf "\\n" >> "$LOG"\n')
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(tmp_path / "log")}
    done = subprocess.run(["bash", str(tmp_path / "p.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    calls = [line.split("\0")[:-1] for line in (tmp_path / "log").read_text().split("\n") if line]
    assert len(calls) == len(layout.slices)
    for call in calls:
        assert call[0] == "create" and re.fullmatch(r"[1-9][0-9]{2,8}", call[1])
        opts = dict(zip(call[2::2], call[3::2], strict=True))
        for flag, value in opts.items():
            name = flag.removeprefix("--")
            assert name in QM_OPTIONS, flag
            if QM_OPTIONS[name] is None:
                _check_hostpci(value)
            else:
                assert re.fullmatch(QM_OPTIONS[name], value), (flag, value)
        assert opts["--machine"] == "q35" and opts["--bios"] == "ovmf" and "--efidisk0" in opts


def test_12_gh200_names_and_the_144gb_part(cli):
    """nvidia-smi prints "NVIDIA GH200 480GB" for the 96 GB superchip; mig-parted's config-default.yaml has a
    "GH200 144G HBM3e" entry (device-filter 0x234810DE) with 1g.18gb … 7g.144gb."""
    assert CATALOG.find_gpu("NVIDIA GH200 480GB").id == "GH200"
    assert CATALOG.find_gpu("NVIDIA GH200 144G HBM3e").id == "GH200-144GB"
    got = cli(
        "carve",
        "--from-mig-parted",
        MIG_PARTED_DEFAULT,
        "--config",
        "all-1g.18gb",
        "--gpu",
        "GH200-144GB",
        "--format",
        "json",
    )
    assert got.code == 0 and [s["profile"] for s in json.loads(got.out)["slices"]] == ["1g.18gb"] * 7


def test_catalog_overlay_adds_a_gpu(cli, tmp_path):
    """`--catalog DIR` lays a user's gpus.toml over the bundled one (issue 9: the catalog is injected)."""
    (tmp_path / "gpus.toml").write_text(
        '[[gpu]]\nid = "X1"\nname = "Example X1"\narchitecture = "Hopper"\ncompute_capability = "9.0"\n'
        'chips_per_board = 2\nmemory_gb = 24\nmig = false\nvgpu = false\nsource = "test"\nas_of = 2026-12-02\n'
    )
    got = cli("carve", "--gpu", "X1", "--catalog", tmp_path, "--format", "json")
    assert got.code == 0, got.err
    doc = json.loads(got.out)
    assert doc["gpu"] == "X1" and len(doc["slices"]) == 2 and doc["mode"] == "passthrough"
    assert cli("carve", "--gpu", "X1").code == 2


@pytest.mark.parametrize(
    "args",
    [
        ["--gpu", "H100-80GB", "--seats", "99999999999"],
        ["--gpu", "H100-80GB", "--render", "libvirt", "--image", "relative.qcow2"],
        ["--gpu", "H100-80GB", "--render", "libvirt", "--network", "-evil"],
        ["--gpu", "H100-80GB", "--mode", "mig", "--profile", "1g.10gb", "--seats", "8"],
        ["--gpu", "H100-80GB", "--out", "/tmp"],
        ["--assert", "--from-nvidia-smi", str(FIXTURES / "telegraf__a10g.xml"), str(EXAMPLES / "ibm-2xM60.toml")],
        ["--gpu", "M60:99"],
        ["--catalog", "/nonexistent", "--gpu", "M60"],
    ],
)
def test_bad_input_is_one_message_not_a_traceback(cli, args):
    got = cli("carve", *args)
    assert got.code == 2 and "Traceback" not in got.err + got.out and got.err.strip(), (got.code, got.err)


def _fake_type(folder: Path, type_id: str, name: str, free: int) -> None:
    folder = folder / "mdev_supported_types" / type_id
    folder.mkdir(parents=True)
    (folder / "name").write_text(name + "\n")
    (folder / "available_instances").write_text(f"{free}\n")
    (folder / "create").write_text("")


@pytest.mark.parametrize("gpu", ["M60", "L40S"])
def test_6_mdev_script_on_a_sysfs_tree(gpu, tmp_path):
    """Run mdev-create.sh against a sysfs tree laid out as the vGPU user guide describes: types on the GPU
    (Maxwell) or on its SR-IOV virtual functions (Ada), the first VF with a free instance taken."""
    pf = "0000:41:00.0"
    layout = carve_toml(
        {"name": "s", "gpu": [{"model": gpu, "chip": [{"pci": pf}]}]}, mode="vgpu", seats=2 if gpu == "L40S" else 1
    )
    opts = RenderOptions(vgpu_backend="mdev")
    script = next(a.text for a in render(layout, "libvirt", CATALOG, opts) if a.path == "mdev-create.sh")
    sysfs = tmp_path / "sys"
    dev = sysfs / "bus" / "pci" / "devices" / pf
    (sysfs / "bus" / "mdev" / "devices").mkdir(parents=True)
    want = f"{'NVIDIA' if gpu == 'L40S' else 'GRID'} {layout.slices[0].profile}"
    if gpu == "L40S":
        for n, free in enumerate([0, 1, 1]):
            _fake_type(dev / f"virtfn{n}", "nvidia-1155", want, free)
    else:
        _fake_type(dev, "nvidia-22", want, 1)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    write_tool(bin_dir, "mdevctl", 'echo "mdevctl $*" >> "$LOG"\n')
    write_tool(bin_dir, "sriov-manage", 'echo "sriov-manage $*" >> "$LOG"\n')
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SYSFS": str(sysfs),
        "LOG": str(tmp_path / "log"),
        "SRIOV_MANAGE": str(bin_dir / "sriov-manage"),
    }
    (tmp_path / "m.sh").write_text(script)
    done = subprocess.run(["bash", str(tmp_path / "m.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    log = (tmp_path / "log").read_text()
    from gpuseat.render.base import slice_uuid

    uuids = [slice_uuid(layout, s, "mdev") for s in layout.slices]
    if gpu == "L40S":
        assert f"sriov-manage -e {pf}" in log
        assert (dev / "virtfn0/mdev_supported_types/nvidia-1155/create").read_text() == ""
        created = (dev / "virtfn1/mdev_supported_types/nvidia-1155/create").read_text().split()
        created += (dev / "virtfn2/mdev_supported_types/nvidia-1155/create").read_text().split()
        assert set(created) <= set(uuids) and created  # the fake tree does not count instances down
    else:
        assert (dev / "mdev_supported_types/nvidia-22/create").read_text().split() == uuids
    assert all(f"mdevctl define --auto --uuid {u}" in log for u in uuids)
