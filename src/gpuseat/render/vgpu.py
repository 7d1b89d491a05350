"""vGPU helpers shared by the libvirt, Proxmox, Xen and vSphere renderers: type names per hypervisor,
and the bash that finds a vGPU type on a GPU or on one of its SR-IOV virtual functions.

GPUs whose vGPUs live on SR-IOV virtual functions (Ampere and newer: A10, A16, L4, L40S, …) have no vGPU
types on the physical function: the VFs are enabled with ``/usr/lib/nvidia/sriov-manage -e <PF>`` and a
vGPU goes on a free VF. Type names differ by generation: ``GRID M60-8Q`` / ``grid_m60-8q`` up to Ampere,
``NVIDIA L40S-24C`` / ``nvidia_l40s-24c`` on Ada (catalog ``type_prefix``).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpuseat.core.carve import Layout, Slice
from gpuseat.render.base import require_pci, slices_by_chip

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog

SRIOV_MANAGE = "/usr/lib/nvidia/sriov-manage"
SYSFS = "SYSFS=${SYSFS:-/sys}  # where sysfs is mounted (a test may point it elsewhere)"

# Static bash (no input reaches it): the first parent with a free instance of the named type.
FIND_TYPE = r"""# find_type NAME PARENT...: print "PARENT_DIR TYPE_DIR" of the first parent offering vGPU type NAME
find_type() {
  local want=$1 parent t
  shift
  for parent in "$@"; do
    for t in "$parent"/mdev_supported_types/*; do
      [ -e "$t/name" ] || continue
      if [ "$(cat "$t/name")" = "$want" ] && [ "$(cat "$t/available_instances")" -gt 0 ]; then
        echo "$parent $t"
        return 0
      fi
    done
  done
  echo "no free vGPU of type $want on: $*" >&2
  return 1
}"""


def is_sriov(layout: Layout, catalog: Catalog) -> bool:
    """Whether this GPU model's vGPUs live on SR-IOV virtual functions."""
    row = catalog.partitions.vgpu_gpus.get(layout.server.gpu.id)
    return bool(row and row.sriov)


def type_name(layout: Layout, catalog: Catalog, profile: str) -> str:
    """The vGPU type's name as sysfs ``mdev_supported_types/*/name`` and Xen ``model-name`` show it."""
    row = catalog.partitions.vgpu_gpus.get(layout.server.gpu.id)
    return f"{'NVIDIA' if row and row.type_prefix == 'nvidia' else 'GRID'} {profile}"


def vsphere_type(layout: Layout, catalog: Catalog, profile: str) -> str:
    """The vGPU type for a .vmx ``pciPassthru0.vgpu`` key (``grid_m60-8q``, ``nvidia_l40s-24c``)."""
    row = catalog.partitions.vgpu_gpus.get(layout.server.gpu.id)
    return f"{row.type_prefix if row else 'grid'}_{profile.lower()}"


def parents(layout: Layout, catalog: Catalog, item: Slice) -> str:
    """The sysfs parents (quoted for bash) that may host this slice's vGPU: the GPU, or its VFs."""
    pf = '"$SYSFS"/bus/pci/devices/' + shlex.quote(require_pci(item, "vgpu"))
    return f"{pf}/virtfn*" if is_sriov(layout, catalog) else pf


def enable_vfs(layout: Layout, catalog: Catalog) -> list[str]:
    """Lines enabling the SR-IOV virtual functions of every GPU holding vGPUs (none without SR-IOV)."""
    if not is_sriov(layout, catalog):
        return []
    pfs = sorted({require_pci(item, "vgpu") for item in layout.slices})
    return ["# vGPUs on this GPU live on SR-IOV virtual functions: enable them first"] + [
        f'"${{SRIOV_MANAGE:-{SRIOV_MANAGE}}}" -e {shlex.quote(pf)}' for pf in pfs
    ]


def mdev_lines(layout: Layout, catalog: Catalog, uuid_for: Callable[[Slice], str]) -> list[str]:
    """Bash creating each slice's mediated device with a fixed UUID, persisted with mdevctl when present."""
    lines = [SYSFS, FIND_TYPE, "", *enable_vfs(layout, catalog)]
    for index, items in slices_by_chip(layout).items():
        lines.append(f"# GPU {index}")
        for item in items:
            uuid = shlex.quote(uuid_for(item))
            want = shlex.quote(type_name(layout, catalog, item.profile or ""))
            lines += [
                f'if [ ! -e "$SYSFS"/bus/mdev/devices/{uuid} ]; then  # {item.name}',
                f"  found=$(find_type {want} {parents(layout, catalog, item)})",
                '  read -r parent t <<<"$found"',
                f'  echo {uuid} > "$t/create"',
                f"  if command -v mdevctl >/dev/null; then mdevctl define --auto --uuid {uuid}; fi",
                "fi",
            ]
    return lines
