"""JupyterHub profiles: z2jh ``singleuser.profileList`` YAML and a KubeSpawner ``profile_list``.

One profile per kind of slice (e.g. "MIG 1g.18gb, 16 GB"), each holding one GPU resource through
``kubespawner_override.extra_resource_limits`` (partitioning.md §5). The Python file holds the list as a
``repr`` literal, so no text from the layout can become code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml

from gpuseat.core.carve import Layout, Slice
from gpuseat.core.inventory import slug
from gpuseat.render.base import Artifact, Renderer, RenderOptions, header, runbook
from gpuseat.render.k8s import resource_for

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog


def profiles(layout: Layout) -> list[dict[str, Any]]:
    """One KubeSpawner profile per distinct slice resource, the first one default."""
    kinds: dict[str, list[Slice]] = {}
    for item in layout.slices:
        kinds.setdefault(resource_for(item), []).append(item)
    out = []
    for n, (resource, items) in enumerate(kinds.items()):
        first = items[0]
        title = f"{first.mode} {first.profile}" if first.profile else first.mode
        out.append(
            {
                "display_name": f"GPU seat: {title}, {first.memory_gb:g} GB",
                "slug": slug(f"gpu-{title}"),
                "description": f"{len(items)} seat(s) on {layout.server.name}",
                "default": n == 0,
                "kubespawner_override": {"extra_resource_limits": {resource: "1"}},
            }
        )
    return out


def render(layout: Layout, options: RenderOptions, catalog: Catalog) -> list[Artifact]:
    """``config.yaml`` (z2jh Helm values), ``jupyterhub_config.py`` (KubeSpawner) and ``APPLY.md``."""
    items = profiles(layout)
    z2jh = header(layout, "#") + yaml.safe_dump({"singleuser": {"profileList": items}}, sort_keys=False)
    python = (
        header(layout, "#")
        + "c = get_config()  # noqa: F821  (provided by JupyterHub)\n"
        + f"c.KubeSpawner.profile_list = {items!r}\n"
    )
    files = [
        ("config.yaml", "Helm values for Zero to JupyterHub (merge into yours)"),
        ("jupyterhub_config.py", "or: append to a KubeSpawner hub's jupyterhub_config.py"),
    ]
    steps = [
        "First make the GPU resources exist on the nodes: apply the k8s render of the same layout"
        " (device-plugin config, and the MIG config for MIG).",
        "z2jh: `helm upgrade --install jhub jupyterhub/jupyterhub -f your-values.yaml -f config.yaml`.",
        "KubeSpawner without z2jh: append jupyterhub_config.py's lines to the hub's config and restart the hub.",
    ]
    checks = ["The spawn page lists the GPU profiles; a started server runs `nvidia-smi -L` in a terminal."]
    reboot = ["Helm values and the hub config persist."]
    return [
        Artifact(path="config.yaml", kind="yaml", text=z2jh),
        Artifact(path="jupyterhub_config.py", kind="python", text=python),
        runbook(layout, "JupyterHub profiles", files, steps, checks, reboot),
    ]


RENDERER = Renderer(
    name="jupyterhub",
    modes=frozenset({"passthrough", "mig", "timeslice", "mps"}),
    summary="z2jh profileList + KubeSpawner profile_list",
    render=render,
)
