"""The snapshot every sampler yields: GPUs, their MIG instances and the processes on them.

Values a source cannot give (``[N/A]``, ``[Not Supported]``, a missing field, utilisation of a
MIG instance without GPM) are ``None`` — never ``0`` — so an unknown reading is never mistaken for
an idle or empty device.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One MIG device (GPU instance + compute instance) of a GPU."""

    uuid: str | None
    profile: str | None
    gpu_instance_id: int | None
    compute_instance_id: int | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    utilization_gpu: float | None = None  # GPM only (Hopper+); None elsewhere


@dataclass(frozen=True, slots=True)
class Gpu:
    """One physical GPU; ``healthy`` is False when its driver queries failed this tick."""

    index: int
    uuid: str
    name: str | None
    pci_bus_id: str | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    utilization_gpu: float | None = None  # percent
    temperature_c: float | None = None
    power_w: float | None = None
    mig_enabled: bool | None = None
    mig: tuple[MigInstance, ...] = ()
    healthy: bool = True
    error: str | None = None


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process holding a context on a GPU (host pid, as the driver reports it)."""

    pid: int
    gpu_uuid: str
    mig_uuid: str | None = None
    gpu_instance_id: int | None = None
    used_memory_mib: float | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one sampler saw at ``taken_at`` (Unix seconds) on ``host``."""

    host: str
    taken_at: float
    gpus: tuple[Gpu, ...]
    processes: tuple[GpuProcess, ...] = ()

    def gpu(self, uuid: str) -> Gpu | None:
        """The GPU with this UUID, or None."""
        return next((g for g in self.gpus if g.uuid == uuid), None)


@dataclass(frozen=True, slots=True)
class Attributed:
    """A process with who runs it and whose seat it sits on; ``foreign`` = not the seat's owner."""

    process: GpuProcess
    user: str | None
    seat: str | None
    participant: str | None
    foreign: bool = False


@dataclass(frozen=True, slots=True)
class Leaf:
    """A device a seat can own: a MIG instance, or a whole GPU when MIG is off."""

    uuid: str | None
    gpu: Gpu
    mig: MigInstance | None = None
    label: str = field(default="")

    @property
    def memory_used_mib(self) -> float | None:
        """Used memory of this leaf (MiB)."""
        return self.mig.memory_used_mib if self.mig else self.gpu.memory_used_mib

    @property
    def memory_total_mib(self) -> float | None:
        """Total memory of this leaf (MiB)."""
        return self.mig.memory_total_mib if self.mig else self.gpu.memory_total_mib

    @property
    def utilization_gpu(self) -> float | None:
        """Utilisation of this leaf; unknown (None) for MIG without GPM."""
        return self.mig.utilization_gpu if self.mig else self.gpu.utilization_gpu


def leaves(snapshot: Snapshot) -> list[Leaf]:
    """The seat-sized devices: every MIG instance, and every GPU that has none."""
    out: list[Leaf] = []
    for gpu in snapshot.gpus:
        if gpu.mig:
            out.extend(
                Leaf(
                    m.uuid,
                    gpu,
                    m,
                    f"{gpu.index}/{m.gpu_instance_id if m.gpu_instance_id is not None else '?'}",
                )
                for m in gpu.mig
            )
        else:
            out.append(Leaf(gpu.uuid, gpu, None, str(gpu.index)))
    return out


def snapshot_to_dict(snapshot: Snapshot) -> dict[str, Any]:
    """A JSON-ready dict with every field (the replay file format, one per line)."""
    return asdict(snapshot)


def snapshot_from_dict(data: dict[str, Any]) -> Snapshot:
    """Inverse of :func:`snapshot_to_dict`; raises KeyError/TypeError on a malformed record."""
    gpus = tuple(Gpu(**{**g, "mig": tuple(MigInstance(**m) for m in g.get("mig", ()))}) for g in data["gpus"])
    procs = tuple(GpuProcess(**p) for p in data.get("processes", ()))
    return Snapshot(host=data["host"], taken_at=float(data["taken_at"]), gpus=gpus, processes=procs)


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
