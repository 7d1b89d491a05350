"""Every engine's output, checked by the engine's own validator where one runs without the engine."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import libvirt
import pytest
import yaml
from kubernetes_validate import validate as k8s_validate

from gpuseat.core.carve import Layout
from gpuseat.core.mmio import estimated_bars_bytes, mmio_size_gb
from gpuseat.errors import InputError
from gpuseat.render.base import RENDERERS, Artifact, render, renderer
from gpuseat.render.k8s import check_manifest, mig_resource

from .conftest import CATALOG, carve_example, carve_gpu, carve_toml

K8S_VERSION = "1.30"


def m60(mode: str) -> Layout:
    return carve_example("ibm-2xM60.toml", mode=mode)


def h200_mixed() -> Layout:
    return carve_example("h200-2x-server.toml", profiles=("3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb", "1g.18gb+me"))


LAYOUTS = {
    "m60-passthrough": lambda: m60("passthrough"),
    "m60-vgpu": lambda: m60("vgpu"),
    "l4-vgpu": lambda: carve_toml(
        {"name": "l4", "gpu": [{"model": "L4", "chip": [{"pci": "0000:c1:00.0"}]}]}, mode="vgpu", seats=3
    ),
    "h200-mig": lambda: carve_example("h200-2x-server.toml", mode="mig", need={"min_gpu_memory_gb": 16}),
    "h200-mixed": h200_mixed,
    "t4-timeslice": lambda: carve_gpu("T4:2", mode="timeslice", seats=6),
    "a10-mps": lambda: carve_gpu("A10", mode="mps", seats=4),
}


def rendered(layout_name: str, engine_name: str) -> list[Artifact]:
    return render(LAYOUTS[layout_name](), engine_name, CATALOG)


def files(layout_name: str, engine_name: str) -> list[Artifact]:
    """The rendered files without the runbook (checked separately)."""
    return [a for a in rendered(layout_name, engine_name) if a.kind != "runbook"]


def cases(engine_name: str) -> list[str]:
    modes = renderer(engine_name).modes
    return [name for name, make in LAYOUTS.items() if make().mode in modes]


@pytest.fixture(scope="module")
def test_driver():
    conn = libvirt.open("test:///default")
    yield conn
    conn.close()


@pytest.mark.parametrize("layout_name", cases("libvirt"))
def test_libvirt_domains_validate_and_define(layout_name, tmp_path, test_driver):
    arts = rendered(layout_name, "libvirt")
    domains = [a for a in arts if a.kind == "libvirt-domain"]
    assert len(domains) == len(LAYOUTS[layout_name]().slices)
    for art in domains:
        path = tmp_path / art.path
        path.write_text(art.text)
        proc = subprocess.run(["virt-xml-validate", str(path), "domain"], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr + proc.stdout
        dom = test_driver.defineXMLFlags(art.text, libvirt.VIR_DOMAIN_DEFINE_VALIDATE)
        try:
            vfio = any(a.path == "vgpu-create.sh" for a in arts)  # Ada+: the VF itself, vendor-specific VFIO
            kind = "mdev" if "vgpu" in layout_name and not vfio else "pci"
            assert f"type='{kind}'" in dom.XMLDesc(0).replace('"', "'")
            assert ("managed='no'" in art.text) == vfio
        finally:
            dom.undefine()
    for art in arts:
        if art.kind == "shell":
            check_shell(art, tmp_path)


def test_libvirt_validator_rejects_a_broken_domain(tmp_path, test_driver):
    text = files("m60-passthrough", "libvirt")[0].text.replace("managed='yes'", "managed='maybe'")
    path = tmp_path / "bad.xml"
    path.write_text(text)
    assert subprocess.run(["virt-xml-validate", str(path), "domain"], capture_output=True).returncode != 0
    with pytest.raises(libvirt.libvirtError):
        test_driver.defineXMLFlags(text, libvirt.VIR_DOMAIN_DEFINE_VALIDATE)


def check_shell(art: Artifact, tmp_path: Path) -> None:
    path = tmp_path / art.path
    path.write_text(art.text)
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert art.text.startswith("#!/usr/bin/env bash\n# gpuseat")


@pytest.mark.parametrize("layout_name", cases("k8s"))
def test_k8s_manifests_pass_strict_schema_and_resource_checks(layout_name):
    layout = LAYOUTS[layout_name]()
    arts = [a for a in render(layout, "k8s", CATALOG) if a.kind != "runbook"]
    pods = []
    for art in arts:
        doc = yaml.safe_load(art.text)
        assert k8s_validate(doc, K8S_VERSION, strict=True)
        assert check_manifest(doc) == []
        if doc["kind"] == "Pod":
            pods.append(doc)
        elif doc["metadata"]["name"] == "gpuseat-device-plugin":
            assert doc["metadata"]["namespace"] == "gpu-operator"
            plugin = yaml.safe_load(doc["data"]["gpuseat"])
            assert plugin["version"] == "v1"
    assert len(pods) == len(layout.slices)
    wanted = sorted(mig_resource(s.profile) if s.mode == "mig" else "nvidia.com/gpu" for s in layout.slices)
    assert sorted(next(iter(p["spec"]["containers"][0]["resources"]["limits"])) for p in pods) == wanted


def test_k8s_strict_schema_and_own_check_catch_mistakes():
    doc = yaml.safe_load(next(a for a in rendered("h200-mig", "k8s") if a.path.endswith("-probe.yaml")).text)
    doc["spec"]["containers"][0]["resources"]["limitz"] = {}
    with pytest.raises(Exception, match="Additional properties"):
        k8s_validate(doc, K8S_VERSION, strict=True)
    limits = {"nvidia.com/mig-1g.18gb+me": "1", "nvidia.com/gpu": 1, "nvidia.com/mig-1g.18gb": "0.5"}
    bad = {"spec": {"containers": [{"name": "seat", "resources": {"limits": limits}}]}}
    assert len(check_manifest(bad)) == 3


def test_device_plugin_resource_naming():
    assert mig_resource("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"
    assert mig_resource("3g.71gb") == "nvidia.com/mig-3g.71gb"


def test_timeslice_config_has_the_replicas_of_the_busiest_gpu():
    doc = yaml.safe_load(files("t4-timeslice", "k8s")[0].text)
    config = yaml.safe_load(doc["data"]["gpuseat"])
    assert config["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 3}]


@pytest.mark.parametrize("layout_name", ["h200-mig", "h200-mixed"])
def test_mig_parted_round_trip(layout_name, tmp_path, cli):
    layout = LAYOUTS[layout_name]()
    (art,) = [a for a in render(layout, "mig-parted", CATALOG) if a.kind != "runbook"]
    path = tmp_path / art.path
    path.write_text(art.text)
    again = cli("carve", "--from-mig-parted", path, "--format", "json")
    assert again.code == 0, again.err
    back = json.loads(again.out)["slices"]
    assert sorted((s["gpu_index"], s["profile"]) for s in back) == sorted(
        (s.gpu_index, s.profile) for s in layout.slices
    )


@pytest.mark.parametrize("layout_name", cases("nvidia-smi"))
def test_nvidia_smi_script(layout_name, tmp_path):
    (art,) = files(layout_name, "nvidia-smi")
    check_shell(art, tmp_path)
    layout = LAYOUTS[layout_name]()
    created = re.findall(r"-cgi ([0-9:,]+) -C", art.text)
    assert sum(len(c.split(",")) for c in created) == len(layout.slices)


@pytest.mark.parametrize("engine_name", ["proxmox", "xen"])
@pytest.mark.parametrize("layout_name", ["m60-passthrough", "m60-vgpu"])
def test_hypervisor_scripts(engine_name, layout_name, tmp_path):
    (art,) = files(layout_name, engine_name)
    check_shell(art, tmp_path)
    layout = LAYOUTS[layout_name]()
    for seat in layout.slices:
        assert seat.pci in art.text or (engine_name == "xen" and layout.mode == "vgpu")
    if engine_name == "proxmox":
        assert art.text.count("qm create ") == len(layout.slices)
        assert art.text.count("--hostpci0 ") == len(layout.slices)
        assert ("mdev=nvidia-22" in art.text) == (layout.mode == "vgpu")
        assert art.text.count("--bios ovmf") == art.text.count("--machine q35") == len(layout.slices)
    elif layout.mode == "passthrough":
        assert art.text.count("xe vm-param-set other-config:pci=0/") == 4
        assert art.text.count("xe vm-install ") == 4
    else:
        assert art.text.count("xe vgpu-create ") == 4 and "'model-name=GRID M60-8Q'" in art.text


VMX_LINE = re.compile(r'^(#.*|[A-Za-z][A-Za-z0-9_.]*\s=\s"[^"]*")$')


@pytest.mark.parametrize("layout_name", cases("vsphere"))
def test_vsphere_vmx_grammar_and_mmio(layout_name):
    arts = files(layout_name, "vsphere")
    for art in arts:
        assert all(VMX_LINE.match(line) for line in art.text.splitlines()), art.text
        keys = dict(line.split(" = ") for line in art.text.splitlines() if not line.startswith("#"))
        if layout_name == "m60-passthrough":
            assert keys["pciPassthru.use64bitMMIO"] == '"TRUE"' and keys["pciPassthru.64bitMMIOSizeGB"] == '"16"'
            assert re.fullmatch(r'"\d{5}:\d{3}:\d{2}\.\d"', keys["pciPassthru0.id"])


def test_mmio_size_from_bars_and_estimate():
    mib = 1 << 20
    assert mmio_size_gb([16 * mib, 8192 * mib, 32 * mib]) == 16
    assert mmio_size_gb([16 * mib, 32768 * mib, 32 * mib]) == 64
    assert mmio_size_gb(estimated_bars_bytes(141, CATALOG.doctor.bar)) == 512  # NVIDIA: H200 512 GB


@pytest.mark.parametrize("layout_name", cases("jupyterhub"))
def test_jupyterhub_profiles(layout_name):
    config, python = files(layout_name, "jupyterhub")
    items = yaml.safe_load(config.text)["singleuser"]["profileList"]
    config_obj = type("Config", (), {"KubeSpawner": type("KubeSpawner", (), {})})()
    namespace = {"get_config": lambda: config_obj}
    exec(compile(python.text, python.path, "exec"), namespace)
    assert namespace["c"].KubeSpawner.profile_list == items
    for item in items:
        ((resource, qty),) = item["kubespawner_override"]["extra_resource_limits"].items()
        pod = {"spec": {"containers": [{"name": "x", "resources": {"limits": {resource: qty}}}]}}
        assert check_manifest(pod) == []


def test_every_engine_renders_something_and_refuses_what_it_cannot_express():
    for name in RENDERERS:
        assert cases(name), name
    with pytest.raises(InputError, match="cannot express"):
        render(LAYOUTS["m60-passthrough"](), "mig-parted", CATALOG)
    with pytest.raises(InputError, match="needs the PCI address"):
        render(carve_gpu("M60:2", mode="passthrough"), "proxmox", CATALOG)
    with pytest.raises(InputError, match="Did you mean"):
        renderer("libvirtd")
