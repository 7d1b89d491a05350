"""Server-side organizer sessions in the store, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from gpuseat.store import open_store
from gpuseat.store.sessions import end_session, end_user_sessions, open_session, session_user

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_sessions_open_end_and_expire(db_url):
    store = open_store(db_url, create=True)
    try:
        a = open_session(store, "admin", 3600)
        b = open_session(store, "admin", 3600)
        c = open_session(store, "tutor", 3600)
        assert session_user(store, a) == session_user(store, b) == "admin" and session_user(store, c) == "tutor"
        assert session_user(store, a + "x") is None and session_user(store, None) is None
        assert end_session(store, a) and session_user(store, a) is None  # logout ends only that one
        assert session_user(store, b) == "admin"
        assert end_user_sessions(store, "admin") == 1  # a new password / log out everywhere
        assert session_user(store, b) is None and session_user(store, c) == "tutor"
        later = datetime.now(UTC) + timedelta(hours=2)
        assert session_user(store, c, now=later) is None  # expired after its lifetime
        open_session(store, "admin", 60, now=later)  # a login sweeps expired rows away
        assert session_user(store, c) is None
    finally:
        store.close()
