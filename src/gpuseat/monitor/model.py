"""The snapshot every sampler yields: GPUs, their MIG instances and the processes on them.

Values a source cannot give (``[N/A]``, ``[Not Supported]``, a missing field, utilisation of a
MIG instance without GPM) are ``None`` — never ``0`` — so an unknown reading is never mistaken for
an idle or empty device.
"""

from __future__ import annotations

from gpuseat.readings import (
    Attributed,
    Gpu,
    GpuProcess,
    Leaf,
    MigInstance,
    Snapshot,
    leaves,
    mig_key,
    snapshot_from_dict,
    snapshot_to_dict,
)

__all__ = [
    "Attributed",
    "Gpu",
    "GpuProcess",
    "Leaf",
    "MigInstance",
    "Snapshot",
    "leaves",
    "mig_key",
    "snapshot_from_dict",
    "snapshot_to_dict",
]
