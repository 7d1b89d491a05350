"""Untrusted input stays data, --out never writes outside its folder or over others' files, one MMIO rule
for doctor and carve, the JSON contract, and `carve --assert`."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import libvirt
import pytest
import yaml

from gpuseat.render.base import RENDERERS, render, renderer
from gpuseat.services.carving import CARVE_MANIFEST, server_from_nvidia_smi

from .conftest import CATALOG, EXAMPLES, FIXTURES, carve_toml

HOSTILE = "evil\n$(touch PWNED_SUB)`touch PWNED_TICK`'\"; touch PWNED_SEMI\n--> ]]> <x> &amp; {a: [b]} ---\n- c\n"
HOSTILE += "__import__('os').system('touch PWNED_PY')"

TOOLS = ("xe", "xl", "qm", "nvidia-smi", "nvidia-mig-parted", "qemu-img", "mdevctl", "lspci", "virsh", "kubectl")
LOGGER = '#!/usr/bin/env bash\nprintf "%s\\0" "$(basename "$0")" "$@" >> "$LOG"; printf "\\n" >> "$LOG"\n'


def layouts() -> dict[str, object]:
    chips = [{"pci": "0000:86:00.0"}, {"pci": "0000:87:00.0"}]
    m60 = {"name": HOSTILE, "gpu": [{"model": "M60", "chip": chips}]}
    h200 = {"name": HOSTILE, "gpu": [{"model": "H200-141GB", "boards": 2, "chip": chips}]}
    l40s = {"name": HOSTILE, "gpu": [{"model": "L40S", "chip": chips[:1]}]}
    return {
        "passthrough": carve_toml(m60, mode="passthrough"),
        "vgpu": carve_toml(m60, mode="vgpu"),
        "sriov-vgpu": carve_toml(l40s, mode="vgpu", seats=2),
        "mig": carve_toml(h200, mode="mig", seats=14),
        "mps": carve_toml(h200, mode="mps", seats=4),
    }


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    bin_dir = tmp_path_factory.mktemp("bin")
    for tool in TOOLS:
        path = bin_dir / tool
        path.write_text(LOGGER)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def test_hostile_server_name_never_runs_and_never_breaks_a_format(tmp_path, stand_ins):
    """Every renderer on every layout it can express: scripts run with stand-in engine commands, the Python
    file is executed, YAML parses to exactly the expected documents, XML defines in libvirt's test driver."""
    rendered = 0
    conn = libvirt.open("test:///default")
    try:
        for kind, layout in layouts().items():
            for name in RENDERERS:
                if layout.mode not in renderer(name).modes:
                    continue
                work = tmp_path / f"{kind}-{name}"
                work.mkdir()
                for art in render(layout, name, CATALOG):
                    rendered += 1
                    path = work / art.path
                    path.write_text(art.text)
                    assert art.text.splitlines()[0].count("\n") == 0 and "evil\n" not in art.text.split("\n", 2)[0]
                    if art.kind == "shell":
                        assert "PWNED" not in art.text  # the name reaches scripts only as its slug
                        env = {**os.environ, "PATH": f"{stand_ins}:{os.environ['PATH']}", "LOG": str(work / "log")}
                        subprocess.run(["bash", str(path)], cwd=work, env=env, capture_output=True, timeout=60)
                    elif art.kind == "python":
                        config = type("C", (), {"KubeSpawner": type("K", (), {})})()
                        exec(compile(art.text, str(path), "exec"), {"get_config": lambda c=config: c})
                        assert HOSTILE in config.KubeSpawner.profile_list[0]["description"]
                    elif art.kind in ("yaml", "k8s-manifest"):
                        docs = list(yaml.safe_load_all(art.text))
                        assert len(docs) == 1 and isinstance(docs[0], dict)
                    elif art.kind == "libvirt-domain":
                        ET.fromstring(art.text)
                        dom = conn.defineXMLFlags(art.text, libvirt.VIR_DOMAIN_DEFINE_VALIDATE)
                        dom.undefine()
                pwned = [p.name for p in work.rglob("PWNED*")] + [p.name for p in Path.cwd().glob("PWNED*")]
                assert pwned == [], (kind, name, pwned)
                log = work / "log"
                if log.exists():
                    for line in log.read_bytes().split(b"\n"):
                        assert b"PWNED" not in line or b"touch" not in line.split(b"\0")[0]
    finally:
        conn.close()
    assert rendered > 40


def test_hostile_name_reaches_shell_commands_as_one_argument(tmp_path, stand_ins):
    layout = layouts()["passthrough"]
    work = tmp_path / "x"
    work.mkdir()
    (art,) = [a for a in render(layout, "xen", CATALOG) if a.path == "xen.sh"]
    (work / "xen.sh").write_text(art.text)
    env = {**os.environ, "PATH": f"{stand_ins}:{os.environ['PATH']}", "LOG": str(work / "log")}
    subprocess.run(["bash", str(work / "xen.sh")], cwd=work, env=env, capture_output=True, timeout=60)
    calls = [line.split(b"\0")[:-1] for line in (work / "log").read_bytes().split(b"\n") if line]
    installs = [c for c in calls if c[:2] == [b"xe", b"vm-list"]]
    assert installs and all(arg.startswith(b"name-label=evil-touch") or arg == b"--minimal" for arg in installs[0][2:])


# --- --out -----------------------------------------------------------------------------------------------


def m60_libvirt(cli, out, *extra):
    return cli("carve", EXAMPLES / "ibm-2xM60.toml", "--render", "libvirt", "--out", out, *extra)


def test_out_writes_a_manifest_and_a_recarve_removes_stale_files(cli, tmp_path):
    out = tmp_path / "d"
    assert m60_libvirt(cli, out).code == 0
    manifest = json.loads((out / CARVE_MANIFEST).read_text())
    assert set(manifest["files"]) == {p.name for p in out.iterdir()} - {CARVE_MANIFEST}
    assert {"seat-01.xml", "seat-04.xml", "APPLY.md", "disks.sh"} <= set(manifest["files"])
    again = cli(
        "carve", EXAMPLES / "ibm-2xM60.toml", "--render", "libvirt", "--out", out, "--mode", "vgpu", "--seats", "2"
    )
    assert again.code == 0, again.err
    assert not (out / "seat-04.xml").exists() and (out / "mdev-create.sh").exists()
    assert "removed stale" in again.out


def test_out_refuses_foreign_files_symlinks_files_and_missing_parents(cli, tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    got = m60_libvirt(cli, foreign)
    assert got.code == 2 and "gpuseat did not write it" in got.err
    assert m60_libvirt(cli, foreign, "--force").code == 0 and (foreign / "notes.txt").read_text() == "keep"

    out = tmp_path / "d"
    assert m60_libvirt(cli, out).code == 0
    (out / "seat-01.xml").write_text("edited by hand")
    got = m60_libvirt(cli, out)
    assert got.code == 2 and "seat-01.xml" in got.err and (out / "seat-01.xml").read_text() == "edited by hand"

    victim = tmp_path / "victim"
    victim.write_text("precious")
    out2 = tmp_path / "d2"
    assert m60_libvirt(cli, out2).code == 0
    (out2 / "seat-02.xml").unlink()
    (out2 / "seat-02.xml").symlink_to(victim)
    got = m60_libvirt(cli, out2)
    assert got.code == 2 and victim.read_text() == "precious"
    assert m60_libvirt(cli, out2, "--force").code == 0
    assert victim.read_text() == "precious" and not (out2 / "seat-02.xml").is_symlink()

    a_file = tmp_path / "f"
    a_file.write_text("x")
    got = m60_libvirt(cli, a_file)
    assert got.code == 2 and "is a file" in got.err and "Traceback" not in got.err
    got = m60_libvirt(cli, tmp_path / "no" / "such")
    assert got.code == 2 and "does not exist" in got.err


# --- one MMIO rule -------------------------------------------------------------------------------------


MiB, GiB = 1 << 20, 1 << 30
MMIO_CASES = [  # device id, gpus.toml model, BARs (doctor trees: BAR0 16 MiB, BAR1, BAR3 32 MiB)
    ("13f2", "M60", 8 * GiB, 16),
    ("20b2", "A100-80GB", 128 * GiB, 256),
    ("2330", "H100-80GB", 128 * GiB, 256),
    ("2335", "H200-141GB", 256 * GiB, 512),
]


@pytest.mark.parametrize(("device", "model", "bar1", "expected"), MMIO_CASES)
def test_doctor_and_carve_agree_on_vsphere_mmio(tmp_path, device, model, bar1, expected):
    """partitioning.md §4.4 [NVAIE-C]: H200 512, H100 256, A100 80GB 256 — doctor and carve, one function."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "doctor"))
    from doctor_trees import HEALTHY_VFIO, MEM32, MEM64_PREF, gpu, write_host

    from gpuseat.doctor import diagnose

    bars = ((0xF2000000, 16 * MiB, MEM32), (0x38000000000, bar1, MEM64_PREF), (0x3A000000000, 32 * MiB, MEM64_PREF))
    root = write_host(tmp_path / "root", gpu(HEALTHY_VFIO, device=device, bars=bars))
    report, _ = diagnose(root)
    fix = next(c.fix for c in report.checks if c.id == "bar-size")
    doctor_gb = int(fix.split('64bitMMIOSizeGB = "')[1].split('"')[0])
    inventory = {
        "name": "s",
        "gpu": [{"model": model, "chip": [{"pci": "0000:41:00.0", "bar_mib": [16, bar1 / MiB, 32]}]}],
    }
    layout = carve_toml(inventory, mode="passthrough", seats=1)
    vmx = next(a.text for a in render(layout, "vsphere", CATALOG) if a.path.endswith(".vmx"))
    carve_gb = int(vmx.split('64bitMMIOSizeGB = "')[1].split('"')[0])
    assert doctor_gb == carve_gb == expected


# --- JSON contract and --assert ------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["--gpu", "H200-141GB", "--mode", "mig"], [str(EXAMPLES / "ibm-2xM60.toml")]])
def test_to_dict_is_the_cli_json(cli, args):
    from gpuseat.services.carving import CarveRequest, carve_layout, load_server, need_for

    got = json.loads(cli("carve", *args, "--format", "json").out)
    if args[0] == "--gpu":
        server = load_server(CATALOG, gpu=args[1])
        request = CarveRequest(mode="mig", need=need_for())
    else:
        server = load_server(CATALOG, inventory=Path(args[0]))
        request = CarveRequest(need=need_for())
    assert got == json.loads(json.dumps(carve_layout(server, request, CATALOG).to_dict()))
    assert got["schema_version"] == 1


def test_assert_matches_a_capture_and_reports_differences(cli, tmp_path):
    capture = FIXTURES / "telegraf__a100-sxm4-v12.xml"
    live = server_from_nvidia_smi(capture.read_text(), CATALOG, where="x")
    have = live.chips[0].mig
    assert have is not None and have.enabled
    plan = tmp_path / "plan.json"
    planned = cli(
        "carve",
        "--from-nvidia-smi",
        capture,
        "--mode",
        "mig",
        "--profile",
        "1g.20gb",
        "--seats",
        str(len(have.devices)),
        "--format",
        "json",
    )
    plan.write_text(planned.out)
    ok = cli("carve", "--assert", "--from-nvidia-smi", capture, plan)
    assert ok.code == 0, ok.out + ok.err
    other = tmp_path / "other.json"
    other.write_text(cli("carve", "--from-nvidia-smi", capture, "--mode", "mig", "--format", "json").out)
    bad = cli("carve", "--assert", "--from-nvidia-smi", capture, other)
    assert bad.code == 1 and "GPU 0:" in bad.out
    m60 = tmp_path / "m60.json"
    m60.write_text(cli("carve", EXAMPLES / "ibm-2xM60.toml", "--format", "json").out)
    wrong = cli("carve", "--assert", "--from-nvidia-smi", capture, m60)
    assert wrong.code == 1 and "GPU model: planned M60" in wrong.out
