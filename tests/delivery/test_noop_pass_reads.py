"""A pass over a settled course with an idle policy (every resync, every event of the course) reads the host's
accounts and processes a fixed number of times, whatever the seats: it read ``/etc/shadow`` twice more and every
process of the machine once more per holder (a thousand times a pass on a 1,000-seat server). Counted on the
real host engine's reads of a stand-in host with real accounts, never in seconds."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuseat.engines.apply import plan_all
from gpuseat.engines.host.machine import Machine
from gpuseat.engines.runner import Runner
from gpuseat.store import open_store

from .conftest import COURSE_TOML, make_course
from .hostlab import Lab
from .test_agent import MIG, _seat_of, _settings
from .test_selfservice import _apply

IDLE = COURSE_TOML + "\n[policy]\nidle_minutes = 3\ngrace_minutes = 0\nidle_gpu_percent = 10\n"


def _reads(db: str, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often one plan of the course read /etc/shadow and scanned the processes; it has nothing to do."""
    counts: Counter[str] = Counter()
    scan, shadow = Machine.processes, Machine._expired

    def processes(self: Machine, uids: set[int], proc_root: str = "/proc") -> dict[int, int]:
        counts["processes"] += 1
        return scan(self, uids, proc_root)

    def expired(self: Machine) -> set[str]:
        counts["shadow"] += 1
        return shadow(self)

    with monkeypatch.context() as m, open_store(db) as store:
        m.setattr(Machine, "processes", processes)
        m.setattr(Machine, "_expired", expired)
        [planned] = plan_all(store, course="lab", engine="host", host="gpu1", runner=Runner())
    assert planned.error is None and planned.changes is not None, planned.error
    assert [s.action for s in planned.changes.steps] == [], planned.changes.steps
    return counts


def test_a_settled_pass_reads_accounts_and_processes_once_whatever_the_holders(
    lab: Lab, tmp_path: Path, cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = f"sqlite:///{tmp_path / 'course.db'}"
    make_course(lab, tmp_path, cli, db, IDLE)
    _settings(cli, lab, db)
    seat = _seat_of(cli, db)
    for who, uuid in zip(("ann", "ben", "cat"), MIG, strict=True):
        assert cli("seats", "assign", "--participant", who, "--seat", seat[uuid], "--db", db).code == 0
    _apply(cli, db)
    reads = _reads(db, monkeypatch)  # once a pass each (processes: the plan's and the idle rule's), not per holder
    assert reads["processes"] <= 2 and reads["shadow"] <= 1, reads
