"""A participant's page reads their own GPU minutes (on every seat they held) by an index, not by a scan of
every course's minutes: migration 0019's ``ix_minute_aggregates_participant_id_minute``.

The statement the page runs is caught as SQLite runs it and given to SQLite's own planner
(``EXPLAIN QUERY PLAN``), so the test holds whatever the table's size; the minutes table is read through
the index (``SEARCH … USING INDEX``), never scanned whole (``SCAN minute_aggregates``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import event
from tests.portal.routes.served import COURSE

from gpuseat.store import open_store


def test_a_participants_page_reads_their_minutes_by_the_participant_index(tmp_path: Path) -> None:
    (tmp_path / "lab.toml").write_text(COURSE)
    (tmp_path / "r.csv").write_text("name,email,unix_user\nAnn,ann@example.org,ann\n")
    with open_store(f"sqlite:///{tmp_path / 'g.db'}", create=True) as store:
        store.courses.create_course(tmp_path / "lab.toml", key="lab")
        store.roster.import_roster("lab", tmp_path / "r.csv")
        store.seats.add_seats("lab", [{"key": "mig-01", "kind": "mig", "host": "gpu1", "device_uuid": "MIG-1"}])
        store.seats.assign("lab", "ann", "mig-01")
        caught: list[tuple[str, Any]] = []

        def on(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
            if "minute_aggregates" in statement:
                caught.append((statement, parameters))

        event.listen(store.database.engine, "before_cursor_execute", on)
        try:
            store.requests.page_of("lab", "ann")
        finally:
            event.remove(store.database.engine, "before_cursor_execute", on)
        assert caught, "the page reads no minutes"
        with store.database.engine.connect() as conn:
            for statement, parameters in caught:
                plan = " | ".join(
                    str(r[-1]) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
                )
                assert "SCAN minute_aggregates" not in plan, plan
                assert "USING INDEX ix_minute_aggregates_participant_id_minute" in plan, plan
