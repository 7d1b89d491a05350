"""A bash script of ``nvidia-smi mig`` commands that creates the layout's GPU instances.

Instances are created in ascending placement order, so an allocator that takes the lowest free valid
start reproduces the planned placements; the script prints ``-lgi`` at the end to check them.
"""

from __future__ import annotations

from gpuseat.catalog.partitions import partition_catalog
from gpuseat.core.carve import Layout
from gpuseat.render.base import Artifact, Engine, RenderOptions, header, seats_by_chip


def render(layout: Layout, options: RenderOptions) -> list[Artifact]:
    """One script, ``mig-create.sh``, run as root on the host while the GPUs are idle."""
    gi_ids = {p.name: p.gi_id for p in partition_catalog().mig_profiles[layout.server.gpu.id]}
    lines = [
        "#!/usr/bin/env bash",
        header(layout, "#").rstrip(),
        "# Run as root on the host while the GPUs are idle; it replaces existing MIG instances.",
        "set -euo pipefail",
    ]
    for index, seats in seats_by_chip(layout).items():
        ordered = sorted(seats, key=lambda s: s.placement.start if s.placement else 0)
        lines += [
            "",
            f"# GPU {index}" + (f" ({seats[0].pci})" if seats[0].pci else ""),
            f"nvidia-smi -i {index} -mig 1",
            f"nvidia-smi mig -i {index} -dci >/dev/null 2>&1 || true",
            f"nvidia-smi mig -i {index} -dgi >/dev/null 2>&1 || true",
        ]
        lines += [
            f"#   {s.seat}: {s.profile} (GI profile {gi_ids[s.profile or '']}) at memory slices "
            f"{s.placement.start}..{s.placement.start + s.placement.size - 1}"
            for s in ordered
            if s.placement
        ]
        ids = ",".join(str(gi_ids[s.profile or ""]) for s in ordered)
        lines += [f"nvidia-smi mig -i {index} -cgi {ids} -C", f"nvidia-smi mig -i {index} -lgi"]
    return [Artifact(path="mig-create.sh", kind="shell", text="\n".join(lines) + "\n")]


ENGINE = Engine(name="nvidia-smi", modes=frozenset({"mig"}), summary="nvidia-smi mig script", render=render)
