"""A bash script of ``nvidia-smi mig`` commands that creates the layout's GPU instances.

Each GPU instance is created at its planned placement (``-cgi <profile id>:<start>``): NVIDIA's MIG user
guide shows that creating instances in an order the driver dislikes fails with "Insufficient Resources"
or lands them where the driver likes. The script then compares ``nvidia-smi mig -lgi`` with the plan
and exits 1 on any difference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuseat.core.carve import Layout
from gpuseat.render.base import Artifact, Renderer, RenderOptions, header, runbook, slices_by_chip

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog

# Static bash: compare the "profile-id start:size" pairs of `nvidia-smi mig -lgi` with the planned ones.
CHECK = r"""# check_gpu INDEX EXPECTED: the GPU instances nvidia-smi lists equal the planned ones
check_gpu() {
  local actual
  actual=$(nvidia-smi mig -i "$1" -lgi | awk '$3 == "MIG" { print $5, $7 }' | LC_ALL=C sort)
  if [ "$actual" != "$2" ]; then
    printf 'GPU %s: planned GPU instances (profile start:size)\n%s\nbut nvidia-smi lists\n%s\n' "$1" "$2" "$actual" >&2
    return 1
  fi
  echo "GPU $1: GPU instances as planned"
}"""


def render(layout: Layout, options: RenderOptions, catalog: Catalog) -> list[Artifact]:
    """``mig-create.sh``, run as root on the host while the GPUs are idle, and ``APPLY.md``."""
    gi_ids = {p.name: p.gi_id for p in catalog.partitions.mig_profiles[layout.server.gpu.id]}
    lines = [
        "#!/usr/bin/env bash",
        header(layout, "#").rstrip(),
        "# Run as root on the host while the GPUs are idle; it replaces existing MIG instances.",
        "set -euo pipefail",
        "",
        CHECK,
    ]
    for index, items in slices_by_chip(layout).items():
        ordered = sorted(items, key=lambda s: s.placement.start if s.placement else 0)
        lines += [
            "",
            f"# GPU {index}" + (f" ({items[0].pci})" if items[0].pci else ""),
            f"nvidia-smi -i {index} -mig 1",
            f"nvidia-smi mig -i {index} -dci >/dev/null 2>&1 || true",
            f"nvidia-smi mig -i {index} -dgi >/dev/null 2>&1 || true",
        ]
        pinned = []
        expected = []
        for s in ordered:
            assert s.placement is not None
            gi = gi_ids[s.profile or ""]
            lines.append(
                f"#   {s.name}: {s.profile} (GI profile {gi}) at memory slices "
                f"{s.placement.start}..{s.placement.start + s.placement.size - 1}"
            )
            pinned.append(f"{gi}:{s.placement.start}")
            expected.append(f"{gi} {s.placement.start}:{s.placement.size}")
        lines += [
            f"nvidia-smi mig -i {index} -cgi {','.join(pinned)} -C",
            f"check_gpu {index} '{chr(10).join(sorted(expected))}'",
        ]
    steps = [
        "Stop every process on the GPUs (`nvidia-smi` shows none), and stop nvidia-persistenced/DCGM if they"
        " hold the GPU.",
        "`sudo bash mig-create.sh`: enables MIG, removes old instances, creates each GPU instance at its"
        " planned placement, then compares `nvidia-smi mig -lgi` with the plan (exit 1 on a difference).",
        "If enabling MIG reports a pending mode change, reset the GPU (`nvidia-smi -r -i N`) or reboot, then run"
        " the script again.",
    ]
    checks = [
        "`nvidia-smi mig -lgi` (placements as `start:size`) and `nvidia-smi -L` (one MIG device per seat).",
        "`gpuseat carve --assert --from-nvidia-smi live.xml layout.json` with `nvidia-smi -q -x > live.xml`.",
    ]
    reboot = [
        "MIG mode persists across reboots; GPU and compute instances do NOT: run mig-create.sh again at boot"
        " (a systemd unit after nvidia-persistenced.service), or use the mig-parted render with"
        " nvidia-mig-manager.service, which re-applies the config at boot.",
    ]
    return [
        Artifact(path="mig-create.sh", kind="shell", text="\n".join(lines) + "\n"),
        runbook(
            layout, "nvidia-smi MIG script", [("mig-create.sh", "run as root on the GPU host")], steps, checks, reboot
        ),
    ]


RENDERER = Renderer(name="nvidia-smi", modes=frozenset({"mig"}), summary="nvidia-smi mig script", render=render)
