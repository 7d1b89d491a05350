"""mig-parted ``version: v1`` config: one named config with the MIG devices of every GPU.

``gpuseat carve --from-mig-parted FILE`` reads it back (round trip). The ``device-filter`` names the
GPU model by PCI device id so the file alone says which GPU it is for.
"""

from __future__ import annotations

from collections import Counter

import yaml

from gpuseat.catalog.partitions import partition_catalog
from gpuseat.core.carve import Layout
from gpuseat.render.base import Artifact, Engine, RenderOptions, header, seats_by_chip, slug


def config_name(layout: Layout) -> str:
    """The config's name inside the file (``nvidia-mig-parted apply -c NAME``)."""
    return f"gpuseat-{slug(layout.server.name)}"


def render(layout: Layout, options: RenderOptions) -> list[Artifact]:
    """One YAML file; GPUs without seats get ``mig-enabled: false``."""
    by_chip = seats_by_chip(layout)
    mig_gpu = partition_catalog().mig_gpus[layout.server.gpu.id]
    groups: dict[tuple[tuple[str, int], ...], list[int]] = {}
    for chip in layout.server.chips:
        counts = Counter(s.profile or "" for s in by_chip.get(chip.index, []))
        groups.setdefault(tuple(sorted(counts.items())), []).append(chip.index)
    entries = []
    for counts, devices in groups.items():
        entry: dict = {"device-filter": list(mig_gpu.device_ids), "devices": devices, "mig-enabled": bool(counts)}
        if counts:
            entry["mig-devices"] = dict(counts)
        entries.append(entry)
    doc = {"version": "v1", "mig-configs": {config_name(layout): entries}}
    usage = f"# apply: nvidia-mig-parted apply -f mig-parted.yaml -c {config_name(layout)}\n"
    text = header(layout, "#") + usage + yaml.safe_dump(doc, sort_keys=False)
    return [Artifact(path="mig-parted.yaml", kind="yaml", text=text)]


ENGINE = Engine(name="mig-parted", modes=frozenset({"mig"}), summary="mig-parted config YAML", render=render)
