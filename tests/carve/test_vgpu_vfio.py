"""vGPU on both KVM backends (issue 26): the generated scripts run against fake sysfs trees laid out as the
driver lays them out, create the vGPUs, and the domains they complete validate.

* vendor-specific VFIO (vGPU 17+, Ada/Hopper/Blackwell): SR-IOV VFs with ``nvidia/creatable_vgpu_types``
  (the real L40S table from harvester/pcidevices, tests/fixtures/SOURCES.md) and ``nvidia/current_vgpu_type``;
* mdev: ``mdev_supported_types/<type>/{name,available_instances,create}`` on the VFs (Ampere) or the GPU.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import libvirt
import pytest

from gpuseat.core.carve import CarveRequest, carve
from gpuseat.core.needs import SeatNeed
from gpuseat.errors import InputError
from gpuseat.render.base import RenderOptions, render, slice_uuid

from .conftest import CATALOG, FIXTURES, carve_toml
from .test_issue14 import write_tool

CREATABLE = (FIXTURES / "harvester-pcidevices__l40s-creatable_vgpu_types.txt").read_text()
TYPE_IDS = {
    line.split(":")[1].strip(): line.split(":")[0].strip() for line in CREATABLE.splitlines()[1:] if ":" in line
}
PFS = ["0000:41:00.0", "0000:c1:00.0"]


def _vfio_tree(sysfs: Path, pf: str, vfs: int, taken: set[int] = frozenset()) -> list[str]:
    """A PF with ``vfs`` VFs (``virtfnN`` links to the VF's own device folder, as in sysfs)."""
    devices = sysfs / "bus" / "pci" / "devices"
    (devices / pf).mkdir(parents=True, exist_ok=True)
    bus = pf.split(":")[1]
    addrs = []
    for n in range(vfs):
        addr = f"0000:{bus}:{(n + 4) // 8:02x}.{(n + 4) % 8}"
        nv = devices / addr / "nvidia"
        nv.mkdir(parents=True)
        (nv / "creatable_vgpu_types").write_text(CREATABLE if n not in taken else "ID    : vGPU Name\n")
        (nv / "current_vgpu_type").write_text("1156\n" if n in taken else "0\n")
        (devices / pf / f"virtfn{n}").symlink_to(Path("..") / addr)
        addrs.append(addr)
    return addrs


def _env(tmp_path: Path, sysfs: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    write_tool(bin_dir, "sriov-manage", 'echo "sriov-manage $*" >> "$LOG"\n')
    write_tool(bin_dir, "mdevctl", 'echo "mdevctl $*" >> "$LOG"\n')
    write_tool(
        bin_dir, "qm", 'if [ "$1" = status ]; then exit 2; fi\necho "qm $*" >> "$LOG"\n'
    )  # no VM exists yet: every qm status fails
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("GPUSEAT_") or k == "GPUSEAT_CACHE_DIR"},
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SYSFS": str(sysfs),
        "LOG": str(tmp_path / "log"),
        "SRIOV_MANAGE": str(bin_dir / "sriov-manage"),
    }


def _windows_l40s(seats: int):
    data = {"name": "ada", "gpu": [{"model": "L40S", "boards": 2, "chip": [{"pci": pf} for pf in PFS]}]}
    return carve_toml(
        data, mode="vgpu", seats=seats, need={"guest_os": "windows", "cuda": False, "min_gpu_memory_gb": 12}
    )


def _run(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def test_libvirt_vfio_writes_the_type_id_on_free_vfs_and_the_domains_validate(tmp_path):
    layout = _windows_l40s(4)
    assert {s.profile for s in layout.slices} == {"L40S-24Q"}  # Q for Windows, never C
    arts = {a.path: a for a in render(layout, "libvirt", CATALOG)}
    assert "vgpu-create.sh" in arts and "mdev-create.sh" not in arts  # Ada → vendor-specific VFIO by default
    sysfs = tmp_path / "sys"
    vfs = {pf: _vfio_tree(sysfs, pf, 4, taken={0}) for pf in PFS}
    out = tmp_path / "out"
    out.mkdir()
    for art in arts.values():
        (out / art.path).write_text(art.text)
    env = _env(tmp_path, sysfs)
    done = _run(arts["vgpu-create.sh"].text, out, env)
    assert done.returncode == 0, done.stderr
    want = TYPE_IDS["NVIDIA L40S-24Q"]
    used = []
    for pf, addrs in vfs.items():
        types = [(sysfs / "bus/pci/devices" / a / "nvidia/current_vgpu_type").read_text().strip() for a in addrs]
        assert types[0] == "1156"  # the VF already in use is left alone
        used += [a for a, t in zip(addrs[1:], types[1:], strict=True) if t == want]
        assert f"sriov-manage -e {pf}" in (tmp_path / "log").read_text()
    assert len(used) == 4
    conn = libvirt.open("test:///default")
    try:
        seen = set()
        for item in layout.slices:
            text = (out / f"{item.name}.xml").read_text()
            assert "gpuseat:vf" not in text and "managed='no'" in text
            m = re.search(r"<address domain='0x(\w+)' bus='0x(\w+)' slot='0x(\w+)' function='0x(\w+)'/>", text)
            assert m is not None
            addr = f"{m[1]}:{m[2]}:{m[3]}.{m[4]}"
            assert addr in used
            seen.add(addr)
            proc = subprocess.run(
                ["virt-xml-validate", str(out / f"{item.name}.xml"), "domain"], capture_output=True, text=True
            )
            assert proc.returncode == 0, proc.stderr + proc.stdout
            dom = conn.defineXMLFlags(text, libvirt.VIR_DOMAIN_DEFINE_VALIDATE)
            dom.undefine()
        assert len(seen) == 4  # one VF per seat
    finally:
        conn.close()
    again = _run(arts["vgpu-create.sh"].text, out, env)  # a rerun takes no further VF
    assert again.returncode == 0, again.stderr
    still = [
        a
        for pf in PFS
        for a in vfs[pf]
        if (sysfs / "bus/pci/devices" / a / "nvidia/current_vgpu_type").read_text().strip() == want
    ]
    assert sorted(still) == sorted(used)


def test_vfio_script_says_why_when_no_vf_is_free(tmp_path):
    layout = _windows_l40s(4)
    script = next(a.text for a in render(layout, "libvirt", CATALOG) if a.path == "vgpu-create.sh")
    sysfs = tmp_path / "sys"
    for pf in PFS:
        _vfio_tree(sysfs, pf, 2, taken={0, 1})
    out = tmp_path / "out"
    out.mkdir()
    for a in render(layout, "libvirt", CATALOG):
        (out / a.path).write_text(a.text)
    done = _run(script, out, _env(tmp_path, sysfs))
    assert (
        done.returncode != 0
        and "no free virtual function of 0000:41:00.0 offers vGPU type NVIDIA L40S-24Q" in done.stderr
    )


def test_proxmox_vfio_passes_the_vf_with_the_nvidia_driver_kept(tmp_path):
    layout = _windows_l40s(2)
    script = next(a.text for a in render(layout, "proxmox", CATALOG) if a.path == "proxmox.sh")
    sysfs = tmp_path / "sys"
    vfs = {pf: _vfio_tree(sysfs, pf, 2) for pf in PFS}
    done = _run(script, tmp_path, _env(tmp_path, sysfs))
    assert done.returncode == 0, done.stderr
    log = (tmp_path / "log").read_text()
    creates = [line for line in log.splitlines() if line.startswith("qm create")]
    assert len(creates) == 2
    for n, pf in enumerate(PFS):
        vf = vfs[pf][0]
        assert f"--hostpci0 {vf},pcie=1,driver=keep" in creates[n]
        want = TYPE_IDS[f"NVIDIA {layout.slices[n].profile}"]
        assert (sysfs / "bus/pci/devices" / vf / "nvidia/current_vgpu_type").read_text().strip() == want


@pytest.mark.parametrize("engine", ["libvirt", "proxmox"])
def test_mdev_layout_on_the_vfs_of_an_ampere_gpu(engine, tmp_path):
    """A16 (Ampere, SR-IOV, mdev): the mdev backend finds the type on a VF with a free instance."""
    data = {
        "name": "amp",
        "gpu": [{"model": "A16", "boards": 1, "chip": [{"pci": f"0000:4{i}:00.0"} for i in range(1, 5)]}],
    }
    layout = carve_toml(data, mode="vgpu", seats=4, need={"guest_os": "windows", "cuda": False, "min_gpu_memory_gb": 4})
    assert all(s.profile and s.profile.endswith("Q") for s in layout.slices)
    arts = {a.path: a for a in render(layout, engine, CATALOG)}
    sysfs = tmp_path / "sys"
    (sysfs / "bus" / "mdev" / "devices").mkdir(parents=True)
    for chip in layout.server.chips:
        for n in range(2):
            t = sysfs / "bus/pci/devices" / (chip.pci or "") / f"virtfn{n}" / "mdev_supported_types" / "nvidia-700"
            t.mkdir(parents=True)
            (t / "name").write_text(f"NVIDIA {layout.slices[0].profile}\n")
            (t / "available_instances").write_text("1\n" if n else "0\n")
            (t / "create").write_text("")
    out = tmp_path / "out"
    out.mkdir()
    for art in arts.values():
        (out / art.path).write_text(art.text)
    script = arts["mdev-create.sh" if engine == "libvirt" else "proxmox.sh"].text
    done = _run(script, out, _env(tmp_path, sysfs))
    assert done.returncode == 0, done.stderr
    if engine == "libvirt":
        created = [
            (sysfs / "bus/pci/devices" / (c.pci or "") / "virtfn1/mdev_supported_types/nvidia-700/create")
            .read_text()
            .split()
            for c in layout.server.chips
        ]
        assert sorted(u for c in created for u in c) == sorted(slice_uuid(layout, s, "mdev") for s in layout.slices)
        for item in layout.slices:
            proc = subprocess.run(["virt-xml-validate", str(out / f"{item.name}.xml"), "domain"], capture_output=True)
            assert proc.returncode == 0
            assert "type='mdev'" in (out / f"{item.name}.xml").read_text()
    else:
        log = (tmp_path / "log").read_text()
        assert log.count("mdev=nvidia-700") == 4 and "virtfn1,mdev" in log


def test_backend_follows_the_probe_or_the_driver():
    """A layout on an Ada GPU with a pre-vGPU-17 driver (535) stays on mdev; an explicit backend wins."""
    from gpuseat.render.vgpu import backend

    layout = _windows_l40s(2)
    assert backend(layout, CATALOG) == "vfio"
    assert backend(layout, CATALOG, driver="535.161.07") == "mdev"
    assert backend(layout, CATALOG, "mdev", driver="580.159.01") == "mdev"
    assert backend(layout, CATALOG, driver="².1") == "vfio"  # a probe's driver that is not a version: as unknown
    m60 = carve_toml({"name": "m", "gpu": [{"model": "M60", "chip": [{"pci": "0000:05:00.0"}]}]}, mode="vgpu", seats=1)
    assert backend(m60, CATALOG) == "mdev"
    arts = [a.path for a in render(layout, "libvirt", CATALOG, RenderOptions(vgpu_backend="mdev"))]
    assert "mdev-create.sh" in arts


@pytest.mark.parametrize("gpu_id", sorted(CATALOG.partitions.vgpu_profiles))
def test_a_windows_seat_never_gets_a_c_series_type(gpu_id):
    """Every vGPU-capable catalog GPU: Windows seats get Q/B types, or a refusal that says why."""
    data = {"name": "w", "gpu": [{"model": gpu_id, "chip": [{}]}]}
    try:
        layout = carve_toml(data, mode="vgpu", need={"guest_os": "windows", "cuda": False})
    except InputError as exc:
        assert "C-series" in str(exc), str(exc)
        return
    series = {p.name: p.series for p in CATALOG.partitions.vgpu_profiles[gpu_id]}
    assert layout.slices and all(series[s.profile or ""] in ("Q", "B") for s in layout.slices)


def test_auto_mode_for_windows_never_picks_c_series():
    """`carve --gpu A16 --guest windows --seats 16` (the issue's example) gives Q types, not A16-4C."""
    data = {"name": "w", "gpu": [{"model": "A16", "boards": 1}]}
    layout = carve(
        carve_toml.__globals__["server_from_toml"](data, CATALOG, where="x"),
        CarveRequest(seats=16, need=SeatNeed(isolation="shared", guest_os="windows", cuda=False)),
        CATALOG,
    )
    assert layout.mode != "vgpu" or all(not (s.profile or "").endswith("C") for s in layout.slices)
