"""vGPU helpers shared by the libvirt, Proxmox, Xen and vSphere renderers: type names per hypervisor,
and the bash that finds a vGPU type on a GPU or on one of its SR-IOV virtual functions.

GPUs whose vGPUs live on SR-IOV virtual functions (Ampere and newer: A10, A16, L4, L40S, …) have no vGPU
types on the physical function: the VFs are enabled with ``/usr/lib/nvidia/sriov-manage -e <PF>`` and a
vGPU goes on a free VF. Type names differ by generation: ``GRID M60-8Q`` / ``grid_m60-8q`` up to Ampere,
``NVIDIA L40S-24C`` / ``nvidia_l40s-24c`` on Ada (catalog ``type_prefix``).

Two ways to create a vGPU on KVM (``RenderOptions.vgpu_backend``, or the layout a probe bundle saw):

* ``mdev`` — write a UUID to ``mdev_supported_types/<type>/create`` of the GPU or a VF; the guest gets
  ``<hostdev type='mdev'>``;
* ``vfio`` — NVIDIA's vendor-specific VFIO framework (vGPU 17+ on Ada, Hopper, Blackwell with Linux 6.8+;
  NVIDIA/vgpu-device-manager #195): no mdev bus; each VF has ``nvidia/creatable_vgpu_types`` (``ID : vGPU
  Name`` table) and ``nvidia/current_vgpu_type`` (0 = free); the type id is written there and the VF itself
  is passed to the guest as a PCI host device.
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


#: Architectures whose vGPUs use the vendor-specific VFIO framework from vGPU 17 (driver R550) on.
VFIO_ARCHITECTURES = frozenset({"Ada Lovelace", "Hopper", "Blackwell"})
#: First driver branch of vGPU 17 (vendor-specific VFIO on the architectures above).
VFIO_DRIVER_MAJOR = 550

# Static bash (no input reaches it): a free SR-IOV VF of PF offering the named type, vendor-specific VFIO.
FIND_VF = r"""# find_vf NAME PF: print "VF_ADDRESS TYPE_ID" of the first free virtual function of PF that can
# create vGPU type NAME (vendor-specific VFIO: nvidia/current_vgpu_type is 0 on a free VF)
find_vf() {
  local want=$1 pf=$2 link vf id
  for link in "$SYSFS"/bus/pci/devices/"$pf"/virtfn*; do
    [ -e "$link/nvidia/current_vgpu_type" ] || continue
    [ "$(cat "$link/nvidia/current_vgpu_type")" = 0 ] || continue
    id=$(awk -F: -v want="$want" 'NR > 1 { gsub(/^[ \t]+|[ \t]+$/, "", $1); gsub(/^[ \t]+|[ \t]+$/, "", $2)
      if ($2 == want) { print $1; exit } }' "$link/nvidia/creatable_vgpu_types")
    [ -n "$id" ] || continue
    vf=$(basename "$(readlink -f "$link")")
    echo "$vf $id"
    return 0
  done
  if compgen -G "$SYSFS/bus/pci/devices/$pf/virtfn*/mdev_supported_types" >/dev/null; then
    echo "$pf uses mdev, not vendor-specific VFIO: render again with --vgpu-backend mdev" >&2
  else
    echo "no free virtual function of $pf offers vGPU type $want (all taken, or SR-IOV not enabled)" >&2
  fi
  return 1
}"""


def backend(layout: Layout, catalog: Catalog, wanted: str = "auto", driver: str | None = None) -> str:
    """``mdev`` or ``vfio`` for this layout: the one asked for, else from the architecture and driver.

    vGPU 17 (driver 550) and later use the vendor-specific VFIO framework on Ada, Hopper and Blackwell;
    with a known older driver (a probe or capture), or on earlier GPUs, vGPUs are mediated devices.
    """
    if wanted in ("mdev", "vfio"):
        return wanted
    if layout.server.gpu.architecture not in VFIO_ARCHITECTURES or not is_sriov(layout, catalog):
        return "mdev"
    major = driver.split(".", 1)[0] if driver else ""
    if major.isascii() and major.isdigit() and int(major) < VFIO_DRIVER_MAJOR:  # not "²": int() refuses it
        return "mdev"
    return "vfio"


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


def vf_marker(item: Slice) -> str:
    """The comment that marks where a seat's VF address goes in its domain XML (filled by vgpu-create.sh)."""
    return f"<!-- gpuseat:vf {item.name} -->"


def vfio_lines(
    layout: Layout, catalog: Catalog, pending: Callable[[Slice], str], record: Callable[[Slice], list[str]]
) -> list[str]:
    """Bash giving each slice a free VF with its vGPU type written to ``nvidia/current_vgpu_type``.

    ``pending(item)`` is a bash test true while the seat has no VF yet (a rerun skips the others);
    ``record(item)`` returns the lines that hand the chosen VF (``$vf``) to the engine.
    """
    lines = [SYSFS, FIND_VF, "", *enable_vfs(layout, catalog)]
    for index, items in slices_by_chip(layout).items():
        lines.append(f"# GPU {index}")
        for item in items:
            want = shlex.quote(type_name(layout, catalog, item.profile or ""))
            pf = shlex.quote(require_pci(item, "vgpu"))
            lines += [
                f"if {pending(item)}; then  # {item.name}",
                f"  found=$(find_vf {want} {pf})",
                '  read -r vf id <<<"$found"',
                '  echo "$id" > "$SYSFS/bus/pci/devices/$vf/nvidia/current_vgpu_type"',
                *("  " + line for line in record(item)),
                "fi",
            ]
    return lines
