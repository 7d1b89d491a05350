"""Kubernetes manifests: the NVIDIA device plugin's config (MIG strategy or sharing) as a ConfigMap,
and one Pod per seat requesting ``nvidia.com/gpu`` or ``nvidia.com/mig-<profile>``.

:func:`check_manifest` is gpuseat's own check of resource names and quantities, which the
Kubernetes schema does not do (platform.md B3).
"""

from __future__ import annotations

import re
from collections import Counter

import yaml

from gpuseat.core.carve import Layout, Seat
from gpuseat.render.base import Artifact, Engine, RenderOptions, header, slug

GPU = "nvidia.com/gpu"
_RESOURCE = re.compile(r"^nvidia\.com/(gpu|gpu\.shared|mig-\d+g\.\d+gb(\.me)?)$")
_COUNT = re.compile(r"^[1-9][0-9]*$")


def mig_resource(profile: str) -> str:
    """The device plugin's name for a MIG profile (mixed strategy): ``1g.10gb+me`` → ``nvidia.com/mig-1g.10gb.me``."""
    return "nvidia.com/mig-" + profile.replace("+", ".")


def resource_for(seat: Seat) -> str:
    """The extended resource a seat's Pod asks for."""
    return mig_resource(seat.profile or "") if seat.mode == "mig" else GPU


def device_plugin_config(layout: Layout) -> dict:
    """The device plugin's ``version: v1`` config for this layout."""
    if layout.mode == "mig":
        return {"version": "v1", "flags": {"migStrategy": "mixed"}}
    if layout.mode in ("timeslice", "mps"):
        replicas = max(Counter(s.gpu_index for s in layout.seats).values())
        key = "timeSlicing" if layout.mode == "timeslice" else "mps"
        sharing: dict = {"resources": [{"name": GPU, "replicas": replicas}]}
        if layout.mode == "timeslice":
            sharing = {"failRequestsGreaterThanOne": True, **sharing}
        return {"version": "v1", "sharing": {key: sharing}}
    return {"version": "v1", "flags": {"migStrategy": "none"}}


def pod(layout: Layout, seat: Seat, options: RenderOptions) -> dict:
    """One seat's Pod: a long-running CUDA container holding one GPU resource."""
    name = slug(f"{layout.server.name}-{seat.seat}")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": options.namespace,
            "labels": {"app.kubernetes.io/managed-by": "gpuseat", "gpuseat/seat": seat.seat},
        },
        "spec": {
            "restartPolicy": "Always",
            "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "seat",
                    "image": options.image,
                    "command": ["sleep", "infinity"],
                    "resources": {"limits": {resource_for(seat): "1"}},
                }
            ],
        },
    }


def check_manifest(doc: dict) -> list[str]:
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


def render(layout: Layout, options: RenderOptions) -> list[Artifact]:
    """The device-plugin ConfigMap and one Pod manifest per seat."""
    config = yaml.safe_dump(device_plugin_config(layout), sort_keys=False)
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "gpuseat-device-plugin", "namespace": options.namespace},
        "data": {"gpuseat": config},
    }
    out = [Artifact(path="device-plugin-config.yaml", kind="k8s-manifest",
                    text=header(layout, "#") + yaml.safe_dump(config_map, sort_keys=False))]
    out += [
        Artifact(path=f"pod-{seat.seat}.yaml", kind="k8s-manifest",
                 text=header(layout, "#") + yaml.safe_dump(pod(layout, seat, options), sort_keys=False))
        for seat in layout.seats
    ]
    return out


ENGINE = Engine(name="k8s", modes=frozenset({"passthrough", "mig", "timeslice", "mps"}),
                summary="device-plugin ConfigMap + one Pod per seat", render=render)
