"""The snapshot every sampler yields: GPUs, their MIG instances and the processes on them.

Values a source cannot give (``[N/A]``, ``[Not Supported]``, a missing field, utilisation of a
MIG instance without GPM) are ``None`` — never ``0`` — so an unknown reading is never mistaken for
an idle or empty device.
"""

from __future__ import annotations

from typing import Any

from gpuseat.readings import (
    SCHEMA_VERSION,
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
    "to_contract",
]


def to_contract(snapshot: Snapshot, attributed: list[Attributed]) -> dict[str, Any]:
    """The JSON contract of ``top --once --format json`` and ``monitor --once --format json``."""
    return {
        "gpus": [
            {
                "index": g.index,
                "uuid": g.uuid,
                "name": g.name,
                "memory_used_mib": g.memory_used_mib,
                "memory_total_mib": g.memory_total_mib,
                "utilization_gpu": g.utilization_gpu,
                "mig": [
                    {
                        "uuid": m.uuid,
                        "profile": m.profile,
                        "memory_used_mib": m.memory_used_mib,
                        "memory_total_mib": m.memory_total_mib,
                    }
                    for m in g.mig
                ],
            }
            for g in snapshot.gpus
        ],
        "processes": [
            {
                "pid": a.process.pid,
                "gpu_uuid": a.process.gpu_uuid,
                "mig_uuid": a.process.mig_uuid,
                "used_memory_mib": a.process.used_memory_mib,
                "user": a.user,
                "seat": a.seat,
                "participant": a.participant,
                "foreign": a.foreign,
            }
            for a in attributed
        ],
    }
