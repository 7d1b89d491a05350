"""Issue 38, host truth: MIG names from the driver's own table, a vGPU guest recognised as one, and the
vGPU type chosen from what the host's VFs offer.

Inputs are real prints (tests/fixtures, SOURCES.md) except where a name says ``written_``: those are
written here, in the real file's format, and say so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import FIXTURES
from .test_issue14 import write_tool

L40S_CAPTURE = "nvidia_gpu_exporter__linux-x86_64__nvidia-l40s__595.80.txt"
HARVESTER_L40S = FIXTURES / "harvester-pcidevices__l40s-creatable_vgpu_types.txt"

#: A stand-in nvidia-smi on an L40S host: the real `-q` of the exporter capture, no MIG, no vGPU CLI.
L40S_HOST = """
case "$*" in
  "-q") awk '/^# idle :: query \\(-q\\)/{f=1;next} f&&/^####/{if(++n==2)exit;next} f' "$FIX/$CAP" ;;
  *) echo "not here: $*" >&2; exit 6 ;;
esac
"""

#: Written for this test, not captured: a VF's `creatable_vgpu_types` in the real file's layout (the
#: harvester L40S table's header and "ID : NVIDIA name" rows) listing only C-series types, as a host
#: whose VFs offer compute types only shows it. The type ids are placeholders.
WRITTEN_C_ONLY_CREATABLE = """ID    : vGPU Name
9001  : NVIDIA L40S-4C
9002  : NVIDIA L40S-6C
9003  : NVIDIA L40S-8C
9004  : NVIDIA L40S-12C
9005  : NVIDIA L40S-16C
9006  : NVIDIA L40S-24C
9007  : NVIDIA L40S-48C
"""


def _l40s_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli, creatable: str) -> Path:
    """`gpuseat probe` of an L40S host whose two SR-IOV VFs list ``creatable`` (vendor-specific VFIO)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    write_tool(bin_dir, "nvidia-smi", L40S_HOST)
    monkeypatch.setenv("FIX", str(FIXTURES))
    monkeypatch.setenv("CAP", L40S_CAPTURE)
    pf = tmp_path / "host" / "sys" / "bus" / "pci" / "devices" / "0000:01:00.0"
    pf.mkdir(parents=True)
    (pf / "vendor").write_text("0x10de\n")
    (pf / "class").write_text("0x030200\n")
    for n in range(2):
        vf = pf.parent / f"0000:01:00.{n + 4}"
        (vf / "nvidia").mkdir(parents=True)
        (vf / "nvidia" / "creatable_vgpu_types").write_text(creatable)
        (vf / "nvidia" / "current_vgpu_type").write_text("0\n")
        (pf / f"virtfn{n}").symlink_to(f"../0000:01:00.{n + 4}")
    out = tmp_path / "bundle"
    got = cli("probe", out, "--root", tmp_path / "host", "--nvidia-smi", bin_dir / "nvidia-smi", "--no-doctor")
    assert got.code == 0 and "vGPU layout vfio" in got.out, got.out + got.err
    return out


# -- item 3: the default vGPU type is one the VFs offer ------------------------------------------------------


def test_vfs_offering_only_c_types_get_a_c_type_by_default(tmp_path, monkeypatch, cli):
    """Today the default is L40S-12Q, which these VFs cannot create; the plan must use a C type they list."""
    bundle = _l40s_bundle(tmp_path, monkeypatch, cli, WRITTEN_C_ONLY_CREATABLE)
    got = cli("carve", "--from-probe", bundle, "--mode", "vgpu", "--seats", "4", "--format", "json")
    assert got.code == 0, got.err
    doc = json.loads(got.out)
    assert {s["profile"] for s in doc["slices"]} == {"L40S-12C"}
    assert any("only those the host offers" in n and "series C" in n for n in doc["notes"]), doc["notes"]
    not_offered = {r["profile"] for r in doc["rejected"] if "not offered" in r["reason"]}
    assert "L40S-12Q" in not_offered and "L40S-12C" not in not_offered
    script = cli("carve", "--from-probe", bundle, "--mode", "vgpu", "--seats", "4", "--render", "libvirt")
    assert script.code == 0 and "NVIDIA L40S-12C" in script.out and "L40S-12Q" not in script.out


def test_a_windows_seat_on_c_only_vfs_is_refused_naming_the_vfs(tmp_path, monkeypatch, cli):
    bundle = _l40s_bundle(tmp_path, monkeypatch, cli, WRITTEN_C_ONLY_CREATABLE)
    got = cli("carve", "--from-probe", bundle, "--mode", "vgpu", "--guest", "windows", "--seats", "2")
    assert got.code == 2 and "Traceback" not in got.err
    assert "VFs offer only C-series types" in got.err and "L40S-4C" in got.err, got.err


def test_a_profile_the_real_vfs_do_not_offer_is_refused(tmp_path, monkeypatch, cli):
    """The real harvester L40S table lists B, Q and A types only: --profile L40S-12C cannot be created."""
    bundle = _l40s_bundle(tmp_path, monkeypatch, cli, HARVESTER_L40S.read_text())
    got = cli("carve", "--from-probe", bundle, "--profile", "L40S-12C", "--seats", "2")
    assert got.code == 2 and "Traceback" not in got.err
    assert "L40S-12C is not offered by the host now" in got.err and "--profile" in got.err, got.err
    assert "L40S-12Q" in got.err  # the fix names types that are offered and have CUDA
    default = cli("carve", "--from-probe", bundle, "--mode", "vgpu", "--seats", "4", "--format", "json")
    assert default.code == 0, default.err
    assert {s["profile"] for s in json.loads(default.out)["slices"]} == {"L40S-12Q"}
    win = cli("carve", "--from-probe", bundle, "--mode", "vgpu", "--guest", "windows", "--seats", "4")
    assert win.code == 0, win.err


# -- item 2: a vGPU guest is recognised as one ----------------------------------------------------------------

V100D_GUEST = FIXTURES / "vgpu-guest__grid-v100d-8c-q.txt"
A100_GUEST = FIXTURES / "vgpu-guest__grid-a100-4c-q-excerpt.txt"


def test_a_guest_capture_is_named_a_vgpu_guest_not_an_unknown_gpu(cli):
    """The real `nvidia-smi -q` inside a VM with a GRID V100D-8C: not "not in the catalog", no "did you mean"."""
    got = cli("carve", "--from-nvidia-smi", V100D_GUEST)
    assert got.code == 2 and "Traceback" not in got.err
    assert "not in the catalog" not in got.err and "Did you mean" not in got.err
    for part in (
        "is a vGPU guest: profile V100D-8C",
        "on a physical Tesla V100 PCIe 32GB (V100-32GB)",
        "8 GB of framebuffer",
        "the guest sees 8192 MiB",
        "CUDA: yes",
        "Carving happens on the host",
        "--gpu V100-32GB:BOARDS",
    ):
        assert part in got.err, (part, got.err)


def test_a_guest_of_a_catalog_type_says_what_the_vgpu_tables_give(cli):
    """GRID A100-4C (real -q head): the catalog's A100-40GB row gives 4096 MB, CUDA, the C-series licence."""
    got = cli("carve", "--from-nvidia-smi", A100_GUEST, "--mode", "vgpu")
    assert got.code == 2 and "Traceback" not in got.err
    assert "profile A100-4C on a physical NVIDIA A100 40GB (A100-40GB)" in got.err, got.err
    assert "4096 MB of framebuffer" in got.err and "CUDA: yes" in got.err and "C-series" in got.err


def test_a_guest_probe_bundle_is_a_guest_too(tmp_path, cli):
    """`carve --from-probe` of a bundle made inside the VM (only `-q` recorded) says the same."""
    bundle = tmp_path / "guest"
    bundle.mkdir()
    (bundle / "nvidia-smi-q.txt").write_text(V100D_GUEST.read_text())
    (bundle / "probe.json").write_text(json.dumps({"bundle_version": 1, "commands": {}}))
    got = cli("carve", "--from-probe", bundle)
    assert got.code == 2 and "vGPU guest: profile V100D-8C" in got.err, got.err


def test_no_physical_gpu_name_reads_as_a_vgpu_type():
    from gpuseat.core.inventory import vgpu_guest

    from .conftest import CATALOG

    names = [n for g in CATALOG.gpus.values() for n in (g.id, g.name, *g.aliases)]
    names += ["NVIDIA H100 80GB HBM3", "Tesla V100-PCIE-32GB", "NVIDIA GeForce RTX 3080", "NVIDIA L40S", "Tesla T4"]
    assert [n for n in names if vgpu_guest(n, CATALOG) is not None] == []
    assert vgpu_guest("GRID P4-1Q", CATALOG) is not None and vgpu_guest("NVIDIA L40S-12Q", CATALOG) is not None
    text, host = vgpu_guest("GRID P4-1Q", CATALOG) or ("", None)
    assert host == "P4" and "CUDA: yes (Q-series on Pascal or later)" in text


# -- item 1: MIG names from the driver's own table ------------------------------------------------------------

H100_CAPTURE = "nvidia_gpu_exporter__linux-x86_64__nvidia-h100-mig__590.48.01.txt"
H200_CAPTURE = "nvidia_gpu_exporter__linux-x86_64__nvidia-h200-mig__590.48.01.txt"
H100_LGIP = FIXTURES / "ansible-slurm-appliance__h100-80gb-lgip.txt"

#: A stand-in nvidia-smi on an H100 80GB HBM3 host in MIG mode: the real `-q` and plain table of the
#: exporter capture (3g.40gb, 2g.20gb, 1g.10gb ×2) and a real H100 80GB HBM3 `mig -lgip`; no -q -x, no -L,
#: no -lgi (so names must come from -lgip's SM counts, or be guessed).
H100_HOST = """
section() { awk -v t="# $1" '$0==t{f=1;next} f&&/^####/{if(++n==2)exit;next} f' "$FIX/$CAP"; }
case "$*" in
  "-q") section "idle :: query (-q)" ;;
  "") section "idle :: nvidia-smi (default table)" ;;
  "mig -lgip") cat "$LGIP" ;;
  *) echo "not here: $*" >&2; exit 6 ;;
esac
"""


def _section(path: Path, title: str) -> str:
    lines = path.read_text(encoding="utf-8").splitlines()
    start = lines.index(f"# {title}") + 3
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("####"))
    return "\n".join(lines[start:end]) + "\n"


def _h100_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    write_tool(bin_dir, "nvidia-smi", H100_HOST)
    monkeypatch.setenv("FIX", str(FIXTURES))
    monkeypatch.setenv("CAP", H100_CAPTURE)
    monkeypatch.setenv("LGIP", str(H100_LGIP))
    (tmp_path / "host").mkdir()
    out = tmp_path / "bundle"
    got = cli("probe", out, "--root", tmp_path / "host", "--nvidia-smi", bin_dir / "nvidia-smi", "--no-doctor")
    assert got.code == 0, got.out + got.err
    return out


def test_the_driver_table_names_the_2g_instance_not_a_guess(tmp_path, monkeypatch, cli):
    """Real H100 -q + real H100 -lgip: every device named by the driver's table (SMs + memory), not guessed,
    and the names equal what `nvidia-smi -L` of the same capture prints."""
    from gpuseat import nvsmi
    from gpuseat.services import probe

    bundle = _h100_bundle(tmp_path, monkeypatch, cli)
    snap = probe.snapshot(probe.read_bundle(bundle))
    mig = snap.gpus[0].mig
    assert [(m.gpu_instance_id, m.profile, m.profile_inferred) for m in mig] == [
        (2, "3g.40gb", False),
        (3, "2g.20gb", False),
        (9, "1g.10gb", False),
        (10, "1g.10gb", False),
    ]
    listed = nvsmi.parse_list(_section(FIXTURES / H100_CAPTURE, "capabilities :: list (-L)"))
    assert [m.profile for m in mig] == [m.profile for m in listed[0].mig]
    got = cli("carve", "--from-probe", bundle, "--format", "json")
    assert got.code == 0, got.err
    notes = json.loads(got.out)["notes"]
    assert "GPU 0 holds MIG devices 1g.10gb ×2, 2g.20gb, 3g.40gb (names from the driver)" in notes, notes


def test_assert_reads_the_driver_names_where_memory_cannot_tell(tmp_path, monkeypatch, cli):
    """A plan with 1g.20gb where the host holds 2g.20gb: equal memory (19.62 GiB), so only names tell."""
    bundle = _h100_bundle(tmp_path, monkeypatch, cli)
    plan = cli("carve", "--gpu", "H100-80GB", "--profile", "3g.40gb,1g.20gb,1g.10gb,1g.10gb", "--format", "json")
    assert plan.code == 0, plan.err
    layout = tmp_path / "layout.json"
    layout.write_text(plan.out)
    got = cli("carve", "--assert", "--from-probe", bundle, layout)
    assert got.code == 1, got.out + got.err
    assert "2g.20gb" in got.out and "the driver's names" in got.out and "planned" in got.out
    same = cli("carve", "--gpu", "H100-80GB", "--profile", "3g.40gb,2g.20gb,1g.10gb,1g.10gb", "--format", "json")
    layout.write_text(same.out)
    ok = cli("carve", "--assert", "--from-probe", bundle, layout)
    assert ok.code == 0 and "matches" in ok.out, ok.out + ok.err


@pytest.mark.parametrize(
    ("gpu", "facts", "name"),
    [
        # real capture values (GI 3 of each exporter capture's -q), copy engines left out, as sources without
        # them give them (an older -q, a table without the CE column)
        ("H100-80GB", {"gpu_instance_id": 3, "memory_mib": 20096, "multiprocessors": 32}, "2g.20gb"),
        ("H200-141GB", {"gpu_instance_id": 3, "memory_mib": 33280, "multiprocessors": 32}, "2g.35gb"),
        ("H100-94GB", {"gpu_instance_id": 5, "memory_mib": 22144, "multiprocessors": 26}, "1g.24gb"),
    ],
)
def test_without_copy_engines_the_guess_reads_the_sm_count(gpu, facts, name):
    """Today a 32-SM instance is guessed 1g.20gb/1g.35gb (the smaller of equal memory); the -lgip SM
    counts in the catalog (26 vs 32 on H100) tell them apart."""
    from gpuseat.core.mig import MigDeviceFacts, infer_names

    from .conftest import CATALOG

    assert infer_names([MigDeviceFacts(**facts)], CATALOG.partitions.mig_profiles[gpu]) == [name]


def test_a_plain_q_capture_without_tables_says_its_names_are_guessed(tmp_path, cli):
    """The real H100 -q alone (no -lgip/-lgi): the layout notes name the devices and say they are guessed."""
    q = tmp_path / "h100-q.txt"
    q.write_text(_section(FIXTURES / H100_CAPTURE, "idle :: query (-q)"))
    got = cli("carve", "--from-nvidia-smi", q, "--format", "json")
    assert got.code == 0, got.err
    (note,) = [n for n in json.loads(got.out)["notes"] if "holds MIG devices" in n]
    assert "2g.20gb" in note and "guessed" in note and "gpuseat probe" in note, note


@pytest.mark.parametrize(
    "sysfs",
    ["[1]", "not json", '{"layout": "vfio", "gpus": {"a": {"vfs": 5, "creatable": 7}}}', '{"layout": "vfio"}'],
)
def test_an_odd_sysfs_record_is_never_a_crash(sysfs, tmp_path, monkeypatch, cli):
    """Written inputs (hand-edited sysfs.json): either no vGPU layout known, or none offered — never exit 70."""
    bundle = _l40s_bundle(tmp_path, monkeypatch, cli, HARVESTER_L40S.read_text())
    (bundle / "sysfs.json").write_text(sysfs)
    got = cli("carve", "--from-probe", bundle, "--mode", "vgpu", "--seats", "2")
    assert got.code in (0, 2) and "Traceback" not in got.err and "internal error" not in got.err, got.err
    if got.code == 2:
        assert "offers no vGPU type" in got.err, got.err
