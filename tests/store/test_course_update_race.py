"""A course update and a roster import at once (two processes, PostgreSQL: its writers do not wait for each
other as SQLite's do). The update checks the roster against the new file under the course row's lock; an import
that read the old file before that lock was let go must not add people the new file has no seats for."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from gpuseat.core.roster import RosterText
from gpuseat.errors import InputError
from gpuseat.services.planning import read_course_file
from gpuseat.store import courses as store_courses
from gpuseat.store import open_store
from pg_schema import pg_schema_url

ROSTER = "email,name,group\nann@x.org,Ann,a\nben@x.org,Ben,a\n"


def course(count: int) -> str:
    schedule = "[schedule]\nstart = 2026-09-07\nend = 2026-09-11\n"
    return f'name = "lab"\n\n[[group]]\nname = "a"\ncount = {count}\n\n{schedule}'


def test_a_roster_import_under_a_course_update_reads_the_updated_file(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = pg_schema_url(request)
    path = tmp_path / "lab.toml"
    path.write_text(course(2))
    with open_store(url, create=True) as store:
        store.courses.create_course(path)
    path.write_text(course(1))  # group a now plans one seat: the roster (empty) fits, the update goes through
    read = read_course_file(path)
    paused, go = threading.Event(), threading.Event()
    backend: list[int] = []
    check = store_courses._check_in_use

    def checked_then_paused(s: Any, row: Any, file: Any) -> None:  # the update, checked, holds its lock
        check(s, row, file)
        backend.append(s.scalar(text("SELECT pg_backend_pid()")))
        paused.set()
        assert go.wait(30)

    monkeypatch.setattr(store_courses, "_check_in_use", checked_then_paused)
    done: dict[str, Any] = {}

    def run(name: str, call: Any) -> threading.Thread:
        def target() -> None:
            try:
                done[name] = call()
            except Exception as exc:  # the thread's outcome, asserted below
                done[name] = exc

        thread = threading.Thread(target=target, name=name)
        thread.start()
        return thread

    admin = create_engine(url)
    with open_store(url) as updater, open_store(url) as importer:
        update = run("update", lambda: updater.courses.update_course("lab", read.course, read.text, actor="cli"))
        assert paused.wait(30)
        roster = run("import", lambda: importer.roster.import_roster("lab", RosterText(ROSTER, "people.csv")))
        deadline = time.monotonic() + 30
        while roster.is_alive():  # until the import ends, or waits for the update's lock
            with admin.connect() as conn:  # a new transaction each time: pg_stat_activity is read afresh
                q = "SELECT count(*) FROM pg_stat_activity WHERE :pid = ANY(pg_blocking_pids(pid))"
                if conn.scalar(text(q), {"pid": backend[0]}):
                    break
            assert time.monotonic() < deadline, "the import neither ended nor waited"
            time.sleep(0.01)
        go.set()
        update.join(30)
        roster.join(30)
        assert not isinstance(done["update"], Exception), done["update"]
        assert isinstance(done["import"], InputError), done["import"]  # the new file's count, not the old one's
        assert "2 participants in group 'a', the course file plans 1 seats" in done["import"].message
        assert importer.roster.participants("lab") == []
    admin.dispose()
