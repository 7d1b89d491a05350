"""Recorded snapshots played back (demos, tests, benchmarks), and a synthetic lab to record.

A replay file is JSON Lines: one :func:`~gpuseat.monitor.model.snapshot_to_dict` record per line,
in time order. Snapshots keep their recorded ``taken_at`` so idle times and GPU-hours come out as
they were; when ``loop`` wraps around, times are shifted so they keep increasing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from gpuseat.errors import InputError
from gpuseat.files import read_text
from gpuseat.monitor.model import Gpu, GpuProcess, MigInstance, Snapshot, snapshot_from_dict, snapshot_to_dict


def read_replay(path: Path) -> list[Snapshot]:
    """All snapshots of a replay file; a bad line is an input error naming the line."""
    out = []
    for n, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(snapshot_from_dict(json.loads(line)))
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(
                f"not a snapshot record: {exc}", where=f"{path}:{n}", fix="record replays with gpuseat"
            ) from None
    if not out:
        raise InputError("no snapshots", where=str(path), fix="give a replay file with at least one line")
    return out


def write_replay(path: Path, snapshots: Iterable[Snapshot]) -> None:
    """Write snapshots as JSON Lines (the format :func:`read_replay` reads)."""
    with path.open("w", encoding="utf-8") as fh:
        for snap in snapshots:
            fh.write(json.dumps(snapshot_to_dict(snap), separators=(",", ":")) + "\n")


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
    leaf_uuids = []
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
        gpu_list.append(
            Gpu(index=g, uuid=uuid, name="NVIDIA A100-SXM4-80GB", memory_total_mib=81920.0, mig=migs)
        )
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
            mig=tuple(replace(m, memory_used_mib=used.get(m.uuid, 0.0)) for m in g.mig),
            memory_used_mib=sum(used.get(m.uuid, 0.0) for m in g.mig),
        )
        for g in gpu_list
    ]
    return Snapshot(host, taken_at, tuple(gpu_list), procs)
