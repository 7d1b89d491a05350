"""Kubernetes manifests: the NVIDIA device plugin's config (MIG strategy or sharing) as a ConfigMap in
the plugin's own namespace, for MIG the layout itself (the mig-parted config the GPU operator's MIG
manager applies when the node carries the ``nvidia.com/mig.config`` label), and one Pod per slice
requesting ``nvidia.com/gpu`` or ``nvidia.com/mig-<profile>``.

:func:`check_manifest` is gpuseat's own check of resource names and quantities, which the
Kubernetes schema does not do (platform.md B3).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING, Any

import yaml

from gpuseat.core.carve import Layout, Slice
from gpuseat.render import mig_parted
from gpuseat.render.base import Artifact, Renderer, RenderOptions, header, runbook, vm_name

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog

GPU = "nvidia.com/gpu"
PLUGIN_CONFIG = "gpuseat-device-plugin"
PLUGIN_CONFIG_KEY = "gpuseat"
MIG_CONFIG = "gpuseat-mig-config"
_RESOURCE = re.compile(r"^nvidia\.com/(gpu|gpu\.shared|mig-\d+g\.\d+gb(\.me)?)$")
_COUNT = re.compile(r"^[1-9][0-9]*$")


def mig_resource(profile: str) -> str:
    """The device plugin's name for a MIG profile (mixed strategy): ``1g.10gb+me`` → ``nvidia.com/mig-1g.10gb.me``."""
    return "nvidia.com/mig-" + profile.replace("+", ".")


def resource_for(item: Slice) -> str:
    """The extended resource a slice's Pod asks for."""
    return mig_resource(item.profile or "") if item.mode == "mig" else GPU


def device_plugin_config(layout: Layout) -> dict[str, Any]:
    """The device plugin's ``version: v1`` config for this layout."""
    if layout.mode == "mig":
        return {"version": "v1", "flags": {"migStrategy": "mixed"}}
    if layout.mode in ("timeslice", "mps"):
        replicas = max(Counter(s.gpu_index for s in layout.slices).values())
        key = "timeSlicing" if layout.mode == "timeslice" else "mps"
        sharing: dict[str, Any] = {"resources": [{"name": GPU, "replicas": replicas}]}
        if layout.mode == "timeslice":
            sharing = {"failRequestsGreaterThanOne": True, **sharing}
        return {"version": "v1", "sharing": {key: sharing}}
    return {"version": "v1", "flags": {"migStrategy": "none"}}


def pod(layout: Layout, item: Slice, options: RenderOptions) -> dict[str, Any]:
    """One slice's Pod: a long-running CUDA container holding one GPU resource."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": vm_name(layout, item),
            "namespace": options.namespace,
            "labels": {"app.kubernetes.io/managed-by": "gpuseat", "gpuseat/seat": item.name},
        },
        "spec": {
            "restartPolicy": "Always",
            "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "seat",
                    "image": options.container_image,
                    "command": ["sleep", "infinity"],
                    "resources": {"limits": {resource_for(item): "1"}},
                }
            ],
        },
    }


def check_manifest(doc: dict[str, Any]) -> list[str]:
    """Problems with the GPU resources of a Pod (empty when fine): names, whole-number quantities."""
    problems = []
    for container in doc.get("spec", {}).get("containers", []):
        resources = container.get("resources", {})
        for section in ("limits", "requests"):
            for name, qty in resources.get(section, {}).items():
                if not name.startswith("nvidia.com/"):
                    continue
                if not _RESOURCE.match(name):
                    problems.append(f"{container['name']}: unknown NVIDIA resource '{name}'")
                if not isinstance(qty, str) or not _COUNT.match(qty):
                    problems.append(f"{container['name']}: {name} must be a whole count as a string, got {qty!r}")
        requested = resources.get("requests", {})
        for name, qty in requested.items():
            if name.startswith("nvidia.com/") and resources.get("limits", {}).get(name) != qty:
                problems.append(f"{container['name']}: {name} request must equal its limit")
    return problems


def _yaml(layout: Layout, doc: dict[str, Any]) -> str:
    return header(layout, "#") + yaml.safe_dump(doc, sort_keys=False)


def render(layout: Layout, options: RenderOptions, catalog: Catalog) -> list[Artifact]:
    """The device-plugin ConfigMap, the MIG config (MIG only), one Pod per slice, and ``APPLY.md``."""
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": PLUGIN_CONFIG, "namespace": options.plugin_namespace},
        "data": {PLUGIN_CONFIG_KEY: yaml.safe_dump(device_plugin_config(layout), sort_keys=False)},
    }
    out = [Artifact(path="device-plugin-config.yaml", kind="k8s-manifest", text=_yaml(layout, config_map))]
    files = [("device-plugin-config.yaml", f"the device plugin's config, namespace `{options.plugin_namespace}`")]
    steps = [
        f"`kubectl create namespace {options.plugin_namespace}` (if new) and"
        f" `kubectl create namespace {options.namespace}` (if new).",
        "`kubectl apply -f device-plugin-config.yaml`.",
        f"Point the device plugin at it: `helm upgrade -i nvdp nvdp/nvidia-device-plugin -n {options.plugin_namespace}"
        f" --set config.name={PLUGIN_CONFIG} --set config.default={PLUGIN_CONFIG_KEY}` (with the GPU operator:"
        f" `--set devicePlugin.config.name={PLUGIN_CONFIG} --set devicePlugin.config.default={PLUGIN_CONFIG_KEY}`).",
    ]
    checks = [
        "`kubectl get node NODE -o jsonpath='{.status.allocatable}'` lists "
        + ", ".join(sorted({f"`{resource_for(s)}`" for s in layout.slices}))
        + ".",
    ]
    if layout.mode == "mig":
        name = mig_parted.config_name(layout)
        mig_map = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": MIG_CONFIG, "namespace": options.operator_namespace},
            "data": {"config.yaml": yaml.safe_dump(mig_parted.config(layout, catalog), sort_keys=False)},
        }
        out.append(Artifact(path="mig-config.yaml", kind="k8s-manifest", text=_yaml(layout, mig_map)))
        files.append(
            ("mig-config.yaml", f"the MIG layout for the GPU operator's MIG manager, `{options.operator_namespace}`")
        )
        steps += [
            "`kubectl apply -f mig-config.yaml`, then let the MIG manager use it: `helm upgrade gpu-operator"
            f" nvidia/gpu-operator -n {options.operator_namespace} --reuse-values --set mig.strategy=mixed"
            f" --set migManager.config.name={MIG_CONFIG}`.",
            f"`kubectl label node NODE nvidia.com/mig.config={name} --overwrite` (the MIG manager applies it).",
        ]
        checks.insert(
            0,
            "`kubectl get node NODE -o jsonpath='{.metadata.labels.nvidia\\.com/mig\\.config\\.state}'` prints"
            " `success`.",
        )
    out += [
        Artifact(path=f"pod-{item.name}.yaml", kind="k8s-manifest", text=_yaml(layout, pod(layout, item, options)))
        for item in layout.slices
    ]
    files.append(("pod-seat-NN.yaml", f"one Pod per seat, namespace `{options.namespace}`"))
    steps.append("`kubectl apply -f pod-seat-01.yaml` … (one per seat).")
    checks.append(f"`kubectl get pods -n {options.namespace}` shows every seat Running (Pending = no GPU resource).")
    reboot = [
        "The ConfigMaps, the node label and the Pods persist; the GPU operator's MIG manager re-applies the"
        " labelled MIG config after a node reboot."
        if layout.mode == "mig"
        else "The ConfigMap and Pods persist; the device plugin re-reads its config at start."
    ]
    out.append(runbook(layout, "Kubernetes (NVIDIA device plugin)", files, steps, checks, reboot))
    return out


RENDERER = Renderer(
    name="k8s",
    modes=frozenset({"passthrough", "mig", "timeslice", "mps"}),
    summary="device-plugin ConfigMap, MIG config, one Pod per seat",
    render=render,
)
