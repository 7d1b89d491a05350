"""A course update and a roster import, or a seats add, at once (two processes, PostgreSQL: its writers do not wait
for each other as SQLite's do). The update checks the roster and the seats against the new file under the course
row's lock; an import that read the old file before that lock was let go must not add people the new file has no
seats for, nor a seats add a seat reserved for a group the new file has no more."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
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


def course(count: int, *, b: bool = False) -> str:
    schedule = "[schedule]\nstart = 2026-09-07\nend = 2026-09-11\n"
    second = '[[group]]\nname = "b"\ncount = 1\n\n' if b else ""
    return f'name = "lab"\n\n[[group]]\nname = "a"\ncount = {count}\n\n{second}{schedule}'


def _beside_an_update(
    url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    old: str,
    new: str,
    write: Callable[[Any], Any],
) -> tuple[Any, Any]:
    """``write`` (given its own store) run while a course update from ``old`` to ``new`` holds its lock, checked;
    (the update's outcome, the write's: a value or the exception)."""
    path = tmp_path / "lab.toml"
    path.write_text(old)
    with open_store(url, create=True) as store:
        store.courses.create_course(path)
    path.write_text(new)
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
            except Exception as exc:  # the thread's outcome, asserted by the caller
                done[name] = exc

        thread = threading.Thread(target=target, name=name)
        thread.start()
        return thread

    admin = create_engine(url)
    with open_store(url) as updater, open_store(url) as writer:
        update = run("update", lambda: updater.courses.update_course("lab", read.course, read.text, actor="cli"))
        assert paused.wait(30)
        other = run("write", lambda: write(writer))
        deadline = time.monotonic() + 30
        while other.is_alive():  # until the write ends, or waits for the update's lock
            with admin.connect() as conn:  # a new transaction each time: pg_stat_activity is read afresh
                q = "SELECT count(*) FROM pg_stat_activity WHERE :pid = ANY(pg_blocking_pids(pid))"
                if conn.scalar(text(q), {"pid": backend[0]}):
                    break
            assert time.monotonic() < deadline, "the write neither ended nor waited"
            time.sleep(0.01)
        go.set()
        update.join(30)
        other.join(30)
    admin.dispose()
    return done["update"], done["write"]


def test_a_roster_import_under_a_course_update_reads_the_updated_file(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # group a now plans one seat: the roster (empty) fits, the update goes through
    url = pg_schema_url(request)
    updated, imported = _beside_an_update(
        url, tmp_path, monkeypatch, course(2), course(1),
        lambda store: store.roster.import_roster("lab", RosterText(ROSTER, "people.csv")),
    )  # fmt: skip
    assert not isinstance(updated, Exception), updated
    assert isinstance(imported, InputError), imported  # the new file's count, not the old one's
    assert "2 participants in group 'a', the course file plans 1 seats" in imported.message
    with open_store(url) as store:
        assert store.roster.participants("lab") == []


def test_a_seats_add_under_a_course_update_reads_the_updated_file(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # group b is gone from the new file, and no seat is reserved for it yet: the update goes through
    seat = {"key": "gpu-b", "kind": "gpu", "host": "gpu1", "device_uuid": "GPU-0b", "groups": ["b"]}
    url = pg_schema_url(request)
    updated, added = _beside_an_update(
        url, tmp_path, monkeypatch, course(1, b=True), course(1),
        lambda store: store.seats.add_seats("lab", [seat]),
    )  # fmt: skip
    assert not isinstance(updated, Exception), updated
    assert isinstance(added, InputError), added  # the new file's groups, not the old one's
    assert "unknown group 'b'" in added.message
    with open_store(url) as store:
        assert store.seats.seats("lab") == []
