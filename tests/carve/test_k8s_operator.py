"""``carve --render k8s`` fits the NVIDIA GPU Operator: its ConfigMaps live in the operator's namespace, the
custom MIG config keeps the operator's ``all-disabled`` default, APPLY.md installs no second device plugin,
and every seat is a namespace of its own with a quota of one GPU. Every manifest passes
``kubernetes-validate --strict`` for several Kubernetes versions that kubernetes-validate ships schemas for.
"""

from __future__ import annotations

import pytest
import yaml
from kubernetes_validate import validate as k8s_validate
from kubernetes_validate.utils import all_versions

from gpuseat.errors import InputError
from gpuseat.render.base import RenderOptions, render
from gpuseat.render.k8s import GPU, resource_for

from .conftest import CATALOG, FIXTURES, carve_example, carve_gpu

# the oldest, a middle and the newest minor that kubernetes-validate has schemas for
_MINORS = sorted({v for v in all_versions()}, key=lambda v: tuple(int(x) for x in v.split(".")))
VERSIONS = sorted({_MINORS[0], "1.30.0", _MINORS[-1]} & set(_MINORS), key=lambda v: tuple(map(int, v.split("."))))

LAYOUTS = {
    "h200-mig": lambda: carve_example("h200-2x-server.toml", mode="mig", need={"min_gpu_memory_gb": 16}),
    "h200-mixed": lambda: carve_example(
        "h200-2x-server.toml", profiles=("3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb", "1g.18gb+me")
    ),
    "m60-passthrough": lambda: carve_example("ibm-2xM60.toml", mode="passthrough"),
    "t4-timeslice": lambda: carve_gpu("T4:2", mode="timeslice", seats=6),
    "a10-mps": lambda: carve_gpu("A10", mode="mps", seats=4),
}


def docs(layout, options=None) -> dict[str, dict]:
    """Every manifest by file name (each file holds one object)."""
    out = {}
    for art in render(layout, "k8s", CATALOG, options):
        if art.kind == "runbook":
            continue
        (doc,) = list(yaml.safe_load_all(art.text))
        out[art.path] = doc
    return out


def runbook(layout, options=None) -> str:
    return next(a.text for a in render(layout, "k8s", CATALOG, options) if a.kind == "runbook")


def test_several_kubernetes_versions_are_checked():
    assert len(VERSIONS) >= 3 and VERSIONS[0] != VERSIONS[-1]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_every_manifest_passes_strict_validation(name, version):
    people = ("ann", "bob", "cy")
    for path, doc in docs(LAYOUTS[name](), RenderOptions(participants=people)).items():
        assert k8s_validate(doc, version, strict=True), path


@pytest.mark.parametrize("name", sorted(LAYOUTS))
@pytest.mark.parametrize("operator_ns", ["gpu-operator", "nvidia-gpu-operator"])
def test_configmaps_live_in_the_operators_namespace(name, operator_ns):
    layout = LAYOUTS[name]()
    found = docs(layout, RenderOptions(operator_namespace=operator_ns))
    maps = {d["metadata"]["name"]: d for d in found.values() if d["kind"] == "ConfigMap"}
    assert set(maps) == (
        {"gpuseat-device-plugin", "gpuseat-mig-config"} if layout.mode == "mig" else {"gpuseat-device-plugin"}
    )
    assert {d["metadata"]["namespace"] for d in maps.values()} == {operator_ns}
    text = runbook(layout, RenderOptions(operator_namespace=operator_ns))
    assert f"helm upgrade gpu-operator nvidia/gpu-operator -n {operator_ns} --reuse-values" in text
    assert "--set devicePlugin.config.name=gpuseat-device-plugin --set devicePlugin.config.default=gpuseat" in text
    # one device plugin: the operator's; APPLY.md never installs the standalone chart beside it
    assert "nvdp/nvidia-device-plugin" not in text and "helm upgrade -i nvdp" not in text
    assert "helm install nvdp" not in text and "nvidia-device-plugin -n" not in text
    if layout.mode == "mig":
        assert "--set mig.strategy=mixed --set migManager.config.name=gpuseat-mig-config" in text


@pytest.mark.parametrize("name", ["h200-mig", "h200-mixed"])
def test_the_custom_mig_config_keeps_all_disabled_as_the_operator_ships_it(name):
    layout = LAYOUTS[name]()
    config = yaml.safe_load(docs(layout)["mig-config.yaml"]["data"]["config.yaml"])
    upstream = yaml.safe_load((FIXTURES / "mig-parted__config-default.yaml").read_text())
    assert config["mig-configs"]["all-disabled"] == upstream["mig-configs"]["all-disabled"]
    ours = config["mig-configs"][f"gpuseat-{layout.server.slug}"]
    assert sum(sum(e.get("mig-devices", {}).values()) * len(e["devices"]) for e in ours) == len(layout.slices)


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_each_seat_is_a_namespace_with_a_quota_of_one_gpu_of_its_kind(name):
    layout = LAYOUTS[name]()
    people = tuple(f"p{i:02d}" for i in range(len(layout.slices) - 1))  # the last seat has nobody yet
    found = docs(layout, RenderOptions(participants=people))
    spaces = [d for d in found.values() if d["kind"] == "Namespace"]
    assert len(spaces) == len(layout.slices) == len({d["metadata"]["name"] for d in spaces})
    offered = {GPU, *(resource_for(s) for s in layout.slices)}
    for i, item in enumerate(layout.slices):
        who = people[i] if i < len(people) else None
        ns = f"gpuseat-{who or item.name}"
        assert found[f"{item.name}-1-namespace.yaml"]["metadata"]["name"] == ns
        # with edit there, a participant must not run a privileged Pod or mount the node's disk (as the engine)
        labels = found[f"{item.name}-1-namespace.yaml"]["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "baseline", labels
        hard = found[f"{item.name}-2-quota.yaml"]["spec"]["hard"]
        assert found[f"{item.name}-2-quota.yaml"]["metadata"]["namespace"] == ns
        assert hard == {f"requests.{r}": ("1" if r == resource_for(item) else "0") for r in offered}
        probe = found[f"{item.name}-4-probe.yaml"]
        assert probe["metadata"]["namespace"] == ns and probe["spec"]["restartPolicy"] == "Never"
        assert probe["spec"]["containers"][0]["command"] == ["nvidia-smi", "-L"]
        access = found.get(f"{item.name}-3-access.yaml")
        if who is None:
            assert access is None
        else:
            assert access["metadata"]["namespace"] == ns
            assert access["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": who}]
            assert access["roleRef"]["kind"] == "ClusterRole" and access["roleRef"]["name"] == "edit"
    # no workload runs outside the seats' namespaces, and no placeholder that sleeps forever
    assert all(d["metadata"].get("namespace") != "gpuseat" for d in found.values())
    assert "sleep" not in yaml.safe_dump(list(found.values()))


def test_more_participants_than_seats_and_bad_names_are_refused(cli):
    layout = LAYOUTS["a10-mps"]()
    with pytest.raises(InputError, match="5 participants for 4 seats"):
        render(layout, "k8s", CATALOG, RenderOptions(participants=tuple("abcde")))
    r = cli("carve", "--gpu", "A10", "--mode", "mps", "--seats", "4", "--render", "k8s", "--participants", "ann,Bob")
    assert r.code == 2 and "--participants" in r.err
    r = cli("carve", "--gpu", "A10", "--mode", "mps", "--seats", "4", "--render", "k8s", "--operator-namespace", "x_y")
    assert r.code == 2 and "--operator-namespace" in r.err
    r = cli(
        "carve", "--gpu", "A10", "--mode", "mps", "--seats", "4", "--render", "k8s",
        "--participants", "ann,bob", "--operator-namespace", "nvidia-gpu",
    )  # fmt: skip
    assert r.code == 0, r.err
    assert "namespace: nvidia-gpu" in r.out and "name: gpuseat-ann" in r.out and "name: gpuseat-bob" in r.out
