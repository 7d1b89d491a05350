"""PostgreSQL claim connections: what runs on them (the claim, and the triggers it fires) is never
JIT-compiled. The lane turns sequential scans off, which costs any scan without an index past
``jit_above_cost``: the events trigger's look at ``agent_leases`` was compiled at every claim (61–82 ms of
a 68 ms claim in a 20-course store, docs/results.md 2026-12-06)."""

from __future__ import annotations

import json
from pathlib import Path

from gpuseat.store import CourseStore

from .test_concurrency import course_with


def test_nothing_on_a_claim_connection_is_jit_compiled(store: CourseStore, tmp_path: Path) -> None:
    from gpuseat.store import claims

    if store.database.engine.dialect.name != "postgresql":
        return  # SQLite has no JIT; the claim runs on sqlite3
    who = course_with(store, tmp_path, 2, 2)
    assert store.claims.claim_seat("big", who[0], mode="pool").participant == who[0]
    (lane,) = claims._lanes[store.database]
    # the statement the events trigger runs for every claim (migration 0014), planned as on the lane
    plan = lane.conn.execute(
        "EXPLAIN (FORMAT JSON) SELECT 1 FROM agent_leases WHERE expires_at > extract(epoch FROM clock_timestamp())",
        prepare=False,
    ).fetchone()[0]
    plan = plan if isinstance(plan, list) else json.loads(plan)
    assert "JIT" not in plan[0], plan[0]
    assert lane.conn.execute("SELECT current_setting('jit')", prepare=False).fetchone()[0] == "off"
