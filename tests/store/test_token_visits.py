"""Issue 38, item 9 (the store's side of a page view): a link's lookup writes nothing, and noting its use
waits only a moment for another writer (then says so, for the portal to retry), on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import create_engine, text

from gpuseat.store import CourseStore

EXAMPLES = Path(__file__).parents[2] / "examples"


def _status(store: CourseStore) -> dict[str, object]:
    return {r["participant"]: r["last_used_at"] for r in store.tokens.token_status("c")}


def test_lookup_writes_nothing_and_visits_are_recorded(store: CourseStore) -> None:
    store.courses.create_course(EXAMPLES / "course-2016.toml", key="c")
    store.roster.import_roster("c", EXAMPLES / "roster-16.csv")
    issued = store.tokens.issue_tokens("c")
    hit = store.tokens.find_token(issued[0].token)
    assert hit is not None and hit.participant is not None and hit.participant.key == issued[0].participant
    assert not hit.archived and hit.last_used_at is None
    assert _status(store)[issued[0].participant] is None  # a lookup is a read
    assert store.tokens.record_visits({hit.token_id: datetime.now(UTC)})
    assert _status(store)[issued[0].participant] is not None
    # a revoked link is found (to say why it no longer works) but opens nothing
    store.tokens.revoke_tokens("c", [issued[0].participant])
    again = store.tokens.find_token(issued[0].token)
    assert again is not None and again.participant is None and not again.archived
    assert store.tokens.participant_for_token(issued[0].token) is None
    store.lifecycle.archive_course("c")
    gone = store.tokens.find_token(issued[1].token)
    assert gone is not None and gone.participant is None and gone.archived


def test_recording_a_visit_does_not_wait_for_another_writer(store: CourseStore, url: str) -> None:
    store.courses.create_course(EXAMPLES / "course-2016.toml", key="c")
    store.roster.import_roster("c", EXAMPLES / "roster-16.csv")
    issued = store.tokens.issue_tokens("c")
    hit = store.tokens.find_token(issued[0].token)
    assert hit is not None
    hold_s = 6.0
    other = create_engine(url)
    held, release = threading.Event(), threading.Event()

    def writer() -> None:  # another writer: SQLite's write lock, or the token row's lock on PostgreSQL
        with other.connect() as conn:
            if conn.dialect.name == "sqlite":
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            else:
                conn.begin()
            conn.execute(text("UPDATE access_tokens SET revoked_at = NULL WHERE id = :i"), {"i": hit.token_id})
            held.set()
            release.wait(hold_s)
            conn.rollback()

    thread = threading.Thread(target=writer)
    thread.start()
    assert held.wait(30)
    started = time.monotonic()
    done = store.tokens.record_visits({hit.token_id: datetime.now(UTC)}, wait_s=0.2)
    took = time.monotonic() - started
    release.set()
    thread.join(30)
    other.dispose()
    assert done is False and took < hold_s / 4, (done, took)
    if url.startswith("sqlite"):  # the pooled connection is back to the writers' busy timeout
        from gpuseat.db import busy_timeout

        with store.database.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == int(busy_timeout() * 1000)
    assert _status(store)[issued[0].participant] is None  # nothing written: the portal tries again
    assert store.tokens.record_visits({hit.token_id: datetime.now(UTC)}, wait_s=0.2)  # the lock is free: written
    assert _status(store)[issued[0].participant] is not None
