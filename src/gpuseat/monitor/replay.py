"""Recorded snapshots played back (demos, tests, benchmarks), and a synthetic lab to record.

A replay file is JSON Lines: one :func:`~gpuseat.readings.snapshot_to_dict` record per line,
in time order. Snapshots keep their recorded ``taken_at`` so idle times and GPU-hours come out as
they were; when ``loop`` wraps around, times are shifted so they keep increasing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuseat.errors import InputError
from gpuseat.files import read_text
from gpuseat.nvsmi import in_range
from gpuseat.readings import Gpu, GpuProcess, MigInstance, Snapshot, snapshot_from_dict, snapshot_to_dict


def read_replay(path: Path, *, max_bytes: int = 256 * 1024 * 1024) -> list[Snapshot]:
    """All snapshots of a replay file; a bad line is an input error naming the line.

    Readings out of their physical range (or of the wrong type) are dropped with a warning, as the
    nvidia-smi parsers do; ids of the wrong type (a pid that is not an integer) make the line bad.
    """
    out = []
    for n, line in enumerate(read_text(path, max_bytes=max_bytes).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(clean_snapshot(snapshot_from_dict(json.loads(line)), where=f"{path}:{n}"))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            raise InputError(
                f"not a snapshot record: {exc}", where=f"{path}:{n}", fix="record replays with gpuseat"
            ) from None
    if not out:
        raise InputError("no snapshots", where=str(path), fix="give a replay file with at least one line")
    return out


_RANGES = {
    "memory_used_mib": "memory",
    "memory_total_mib": "memory",
    "memory_free_mib": "memory",
    "utilization_gpu": "utilization",
    "temperature_c": "temperature",
    "power_w": "power",
    "clock_sm_mhz": "clock",
    "bar1_total_mib": "memory",
    "used_memory_mib": "memory",
}


def _int_field(value: object, name: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 32):
        raise ValueError(f"{name} {value!r} is not an id")


def _clean(obj: Any, where: str) -> Any:
    changes = {
        k: in_range(getattr(obj, k), kind, where=f"{where} {k}") for k, kind in _RANGES.items() if hasattr(obj, k)
    }
    return replace(obj, **{k: v for k, v in changes.items() if v is not getattr(obj, k)})


def clean_snapshot(snap: Snapshot, *, where: str = "snapshot") -> Snapshot:
    """The snapshot with out-of-range readings dropped (warning); ids of the wrong type raise ValueError."""
    if not isinstance(snap.host, str) or not math.isfinite(snap.taken_at) or not 0 <= snap.taken_at < 1e11:
        raise ValueError(f"bad host or time ({snap.host!r}, {snap.taken_at!r})")
    gpus = []
    for g in snap.gpus:
        _int_field(g.index, "GPU index")
        if not isinstance(g.uuid, str):
            raise ValueError(f"GPU uuid {g.uuid!r} is not text")
        for m in g.mig:
            _int_field(m.gpu_instance_id, "GPU instance id")
            _int_field(m.compute_instance_id, "compute instance id")
        gpus.append(replace(_clean(g, where), mig=tuple(_clean(m, where) for m in g.mig)))
    procs = []
    for p in snap.processes:
        _int_field(p.pid, "pid")
        _int_field(p.gpu_instance_id, "GPU instance id")
        if not isinstance(p.gpu_uuid, str):
            raise ValueError(f"process GPU uuid {p.gpu_uuid!r} is not text")
        procs.append(_clean(p, where))
    return replace(snap, gpus=tuple(gpus), processes=tuple(procs))


def write_replay(path: Path, snapshots: Iterable[Snapshot]) -> None:
    """Write snapshots as JSON Lines (the format :func:`read_replay` reads)."""
    from gpuseat.files import write_file

    write_file(path, "".join(json.dumps(snapshot_to_dict(s), separators=(",", ":")) + "\n" for s in snapshots))


class ReplaySampler:
    """Plays snapshots back in order; with ``loop`` it starts again, later in time."""

    def __init__(self, snapshots: list[Snapshot], *, loop: bool = True) -> None:
        if not snapshots:
            raise ValueError("a replay needs at least one snapshot")
        self.snapshots = snapshots
        self.loop = loop
        self._i = 0
        first, last = snapshots[0].taken_at, snapshots[-1].taken_at
        step = (last - first) / (len(snapshots) - 1) if len(snapshots) > 1 else 1.0
        self._period = last - first + step

    @property
    def exhausted(self) -> bool:
        """True when a non-looping replay has played every snapshot."""
        return not self.loop and self._i >= len(self.snapshots)

    def sample(self) -> Snapshot:
        """The next recorded snapshot (the last one again once a non-looping replay is done)."""
        n = len(self.snapshots)
        if self.exhausted:
            return self.snapshots[-1]
        rounds, pos = divmod(self._i, n)
        self._i += 1
        snap = self.snapshots[pos]
        return replace(snap, taken_at=snap.taken_at + rounds * self._period) if rounds else snap

    def close(self) -> None:
        """Nothing to release."""


def synthetic_snapshot(
    *, gpus: int, migs_per_gpu: int, processes: int, taken_at: float, host: str = "lab", busy: float = 0.5
) -> Snapshot:
    """A lab of A100-like GPUs cut into 1g.10gb instances, with ``processes`` spread over them.

    Deterministic (no randomness): the first ``busy`` share of instances hold the processes.
    """
    leaf_uuids: list[tuple[str, str | None, int | None]] = []
    gpu_list = []
    for g in range(gpus):
        uuid = f"GPU-{g:08x}-0000-4000-8000-000000000000"
        migs = tuple(
            MigInstance(
                uuid=f"MIG-{g:04x}{m:04x}-0000-4000-8000-000000000000",
                profile="1g.10gb",
                gpu_instance_id=7 + m,
                compute_instance_id=0,
                memory_used_mib=0.0,
                memory_total_mib=9856.0,
            )
            for m in range(migs_per_gpu)
        )
        gpu_list.append(Gpu(index=g, uuid=uuid, name="NVIDIA A100-SXM4-80GB", memory_total_mib=81920.0, mig=migs))
        leaf_uuids.extend((uuid, m.uuid, m.gpu_instance_id) for m in migs)
    n_busy = max(1, int(len(leaf_uuids) * busy)) if leaf_uuids else 0
    procs = tuple(
        GpuProcess(
            pid=10_000 + i,
            gpu_uuid=leaf_uuids[i % n_busy][0],
            mig_uuid=leaf_uuids[i % n_busy][1],
            gpu_instance_id=leaf_uuids[i % n_busy][2],
            used_memory_mib=512.0,
            name="python",
        )
        for i in range(processes if n_busy else 0)
    )
    used: dict[str | None, float] = {}
    for p in procs:
        used[p.mig_uuid] = used.get(p.mig_uuid, 0.0) + (p.used_memory_mib or 0.0)
    gpu_list = [
        replace(
            g,
            mig=tuple(
                replace(m, memory_used_mib=used.get(m.uuid, 0.0), memory_free_mib=9856.0 - used.get(m.uuid, 0.0))
                for m in g.mig
            ),
            memory_used_mib=sum(used.get(m.uuid, 0.0) for m in g.mig),
        )
        for g in gpu_list
    ]
    return Snapshot(host, taken_at, tuple(gpu_list), procs)
