"""An agent's pass over a big course reads the store a fixed number of times, whatever the seats: it checked
its lease with a read of the store before each step (three statements a step: 12,000 for a 1,000-seat course's
4,000 steps, nine tenths of the pass's time on SQLite, more over a network to PostgreSQL). Counted in SQL
statements on a real SQLite store filled through the CLI, never in seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import event

from gpuseat.engines.agent import Agent, AgentOptions
from gpuseat.engines.runner import Runner
from gpuseat.store import open_store

from .test_day_two_scale import _course


def _statements_of_passes(db: str) -> tuple[int, int, int, int]:
    """(steps, statements) of an agent's first pass over course ``big``, the statements of a release and a move,
    and those of the agent's pass after them."""
    with open_store(db) as store:
        agent = Agent(store, AgentOptions(engine="host", host="gpu1", resync_s=3600), runner=Runner(dry_run=True),
                      say=lambda _line: None)  # fmt: skip
        said: list[str] = []
        on = lambda *_args: said.append("")  # noqa: E731
        event.listen(store.database.engine, "before_cursor_execute", on)
        try:
            first = agent.tick()
            assert first is not None and not first.failed
            passed = len(said)
            said.clear()
            store.seats.release("big", participant="p00001")
            store.seats.move("big", "p00002", next(s.key for s in store.seats.seats("big") if s.participant is None))
            wrote = len(said)
            said.clear()
            again = agent.tick()
            assert again is not None and [p.course for p in again.planned] == ["big"]
        finally:
            event.remove(store.database.engine, "before_cursor_execute", on)
        return sum(len(p.changes.steps) for p in first.planned if p.changes), passed, wrote, len(said)


def test_an_agents_pass_reads_the_store_as_often_for_ten_times_the_seats(
    tmp_path: Path, cli: Callable[..., Any]
) -> None:
    (small_steps, *small), (big_steps, *big) = (
        _statements_of_passes(_course(n, tmp_path / str(n), cli)) for n in (30, 300)
    )
    assert big_steps == 10 * small_steps > 0
    assert big == small, (small, big)  # the first pass, a release and a move, the pass after them
