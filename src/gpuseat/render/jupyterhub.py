"""JupyterHub profiles: z2jh ``singleuser.profileList`` YAML and a KubeSpawner ``profile_list``.

One profile per kind of seat (e.g. "MIG 1g.18gb, 16 GB"), each holding one GPU resource through
``kubespawner_override.extra_resource_limits`` (partitioning.md §5).
"""

from __future__ import annotations

import pprint

import yaml

from gpuseat.core.carve import Layout
from gpuseat.render.base import Artifact, Engine, RenderOptions, header, slug
from gpuseat.render.k8s import resource_for


def profiles(layout: Layout) -> list[dict]:
    """One KubeSpawner profile per distinct seat resource, the first one default."""
    kinds: dict[str, list] = {}
    for seat in layout.seats:
        kinds.setdefault(resource_for(seat), []).append(seat)
    out = []
    for n, (resource, seats) in enumerate(kinds.items()):
        first = seats[0]
        title = f"{first.mode} {first.profile}" if first.profile else first.mode
        out.append({
            "display_name": f"GPU seat: {title}, {first.memory_gb:g} GB",
            "slug": slug(f"gpu-{title}"),
            "description": f"{len(seats)} seat(s) on {layout.server.name}",
            "default": n == 0,
            "kubespawner_override": {"extra_resource_limits": {resource: "1"}},
        })
    return out


def render(layout: Layout, options: RenderOptions) -> list[Artifact]:
    """``config.yaml`` (z2jh Helm values) and ``jupyterhub_config.py`` (KubeSpawner)."""
    items = profiles(layout)
    z2jh = header(layout, "#") + yaml.safe_dump({"singleuser": {"profileList": items}}, sort_keys=False)
    python = (
        header(layout, "#")
        + "c = get_config()  # noqa: F821  (provided by JupyterHub)\n"
        + f"c.KubeSpawner.profile_list = {pprint.pformat(items, sort_dicts=False)}\n"
    )
    return [
        Artifact(path="config.yaml", kind="yaml", text=z2jh),
        Artifact(path="jupyterhub_config.py", kind="python", text=python),
    ]


ENGINE = Engine(name="jupyterhub", modes=frozenset({"passthrough", "mig", "timeslice", "mps"}),
                summary="z2jh profileList + KubeSpawner profile_list", render=render)
