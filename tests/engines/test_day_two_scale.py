"""One pass over a big course stays linear: the plan's size and its time grow with the seats, never with
their square. Measured as ratios on the same machine in the same test, never as absolute times.

The pass is ``gpuseat apply --dry-run`` away from the GPU server (the host engine plans from the store:
no root, no GPU), on a real SQLite store filled through the CLI.
"""

from __future__ import annotations

import base64
import gc
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuseat.engines.apply import one_pass
from gpuseat.engines.runner import Runner
from gpuseat.store import open_store

SMALL, BIG = 300, 3000  # below ~1,000 seats a square term hides under the linear store reads


def _public_key(i: int) -> str:
    """A well-formed ed25519 public key line, different for each ``i``."""
    kind = b"ssh-ed25519"
    blob = struct.pack(">I", len(kind)) + kind + struct.pack(">I", 32) + i.to_bytes(32, "big")
    return f"ssh-ed25519 {base64.b64encode(blob).decode()} p{i}@laptop"


def _course(n: int, folder: Path, cli: Callable[..., Any]) -> str:
    """A course of ``n`` participants on ``n`` whole GPUs of one host, every seat assigned."""
    folder.mkdir()
    db = f"sqlite:///{folder / 'c.db'}"
    (folder / "c.toml").write_text(f'name = "big"\nparticipants = {n}\n[schedule]\nstart = 2026-09-07\ndays = 5\n')
    rows = [f"p{i:05d},P {i},p{i}@example.org,{_public_key(i)}" for i in range(n)]
    (folder / "roster.csv").write_text("key,name,email,ssh_key\n" + "\n".join(rows) + "\n")
    gpus = [f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08x}-0000-4000-8000-000000000000)" for i in range(n)]
    (folder / "smi.txt").write_text("\n".join(gpus) + "\n")
    for args in (
        ("course", "create", folder / "c.toml", "--key", "big"),
        ("roster", "import", folder / "roster.csv"),
        ("seats", "add", "--from-nvidia-smi", folder / "smi.txt", "--engine", "host", "--host", "gpu1"),
        ("seats", "assign"),
    ):
        r = cli(*args, "--db", db)
        assert r.code == 0, (args, r.err)
    return db


def _passes(*dbs: str, rounds: int = 5) -> list[tuple[int, float]]:
    """(steps planned, seconds of the fastest pass) for each store's course: the dry-run passes take turns,
    one on each store a round, so that a load change on a shared machine hits both sizes alike, and the
    fastest of each is the least disturbed by neighbours. The garbage collector is off while a pass is timed (as
    :mod:`timeit` has it): a full collection walks the whole worker's heap, every earlier test's objects too, and
    the big pass, which allocates more, met more of them (21.4x on CI once, 9-10x alone)."""
    best = [float("inf")] * len(dbs)
    steps = [0] * len(dbs)
    stores = [open_store(db) for db in dbs]
    try:
        for _ in range(rounds):
            for n, store in enumerate(stores):
                gc.collect()
                gc.disable()
                try:
                    started = time.perf_counter()
                    result = one_pass(store, course="big", runner=Runner(dry_run=True), engine="host")
                    best[n] = min(best[n], time.perf_counter() - started)
                finally:
                    gc.enable()
                assert not result.failed, result.failed
                steps[n] = sum(len(p.changes.steps) for p in result.planned if p.changes)
    finally:
        for store in stores:
            store.close()
    return list(zip(steps, best, strict=True))


def test_one_pass_over_ten_times_the_seats_plans_ten_times_the_steps_in_under_twenty_times_the_time(
    tmp_path: Path, cli: Callable[..., Any]
) -> None:
    (small_steps, small_s), (big_steps, big_s) = _passes(
        _course(SMALL, tmp_path / "small", cli), _course(BIG, tmp_path / "big", cli)
    )
    assert small_steps > 0 and big_steps == small_steps * BIG // SMALL, (small_steps, big_steps)
    assert big_s < 20 * small_s, f"{BIG} seats took {big_s / small_s:.1f}x the time of {SMALL}"
