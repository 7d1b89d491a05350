"""mig-parted ``version: v1`` config: one named config with the MIG devices of every GPU.

``gpuseat carve --from-mig-parted FILE`` reads it back (round trip). The ``device-filter`` names the
GPU model by PCI device id so the file alone says which GPU it is for.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import yaml

from gpuseat.core.carve import Layout
from gpuseat.render.base import Artifact, Renderer, RenderOptions, header, runbook, slices_by_chip

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog


def config_name(layout: Layout) -> str:
    """The config's name inside the file (``nvidia-mig-parted apply -c NAME``, the node label value)."""
    return f"gpuseat-{layout.server.slug}"


def mig_parted_config(layout: Layout, catalog: Catalog) -> dict[str, Any]:
    """The mig-parted document; GPUs without slices get ``mig-enabled: false``."""
    by_chip = slices_by_chip(layout)
    mig_gpu = catalog.partitions.mig_gpus[layout.server.gpu.id]
    groups: dict[tuple[tuple[str, int], ...], list[int]] = {}
    for chip in layout.server.chips:
        tally = Counter(s.profile or "" for s in by_chip.get(chip.index, []))
        groups.setdefault(tuple(sorted(tally.items())), []).append(chip.index)
    entries = []
    for key, devices in groups.items():
        counts: dict[str, int] = dict(key)
        entry: dict[str, Any] = {"device-filter": list(mig_gpu.device_ids), "devices": devices}
        entry["mig-enabled"] = bool(counts)
        if counts:
            entry["mig-devices"] = counts
        entries.append(entry)
    return {"version": "v1", "mig-configs": {config_name(layout): entries}}


def render(layout: Layout, options: RenderOptions, catalog: Catalog) -> list[Artifact]:
    """``mig-parted.yaml`` and ``APPLY.md``."""
    name = config_name(layout)
    usage = f"# apply: nvidia-mig-parted apply -f mig-parted.yaml -c {name}\n"
    text = header(layout, "#") + usage + yaml.safe_dump(mig_parted_config(layout, catalog), sort_keys=False)
    steps = [
        "Stop every process on the GPUs.",
        f"`sudo nvidia-mig-parted apply -f mig-parted.yaml -c {name}`.",
        f"`sudo nvidia-mig-parted assert -f mig-parted.yaml -c {name}` (exit 0 when the GPUs match).",
    ]
    reboot = [
        "GPU instances do not survive a reboot by themselves: install nvidia-mig-manager.service (mig-parted's"
        f" systemd unit), copy mig-parted.yaml to /etc/nvidia-mig-manager/config.yaml and set"
        f" `MIG_PARTED_SELECTED_CONFIG={name}` so it re-applies the config at every boot.",
        "On Kubernetes, use the k8s render instead: the GPU operator's MIG manager applies this config from the"
        " `nvidia.com/mig.config` node label.",
    ]
    checks = ["`nvidia-smi mig -lgi` and `nvidia-smi -L`; `nvidia-mig-parted export` prints the live layout."]
    return [
        Artifact(path="mig-parted.yaml", kind="yaml", text=text),
        runbook(layout, "mig-parted config", [("mig-parted.yaml", "the GPU host")], steps, checks, reboot),
    ]


RENDERER = Renderer(name="mig-parted", modes=frozenset({"mig"}), summary="mig-parted config YAML", render=render)
