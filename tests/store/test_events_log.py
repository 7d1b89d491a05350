"""One way to append an events row: ``store.events.log``. A plain line names a stored course; the agent's
lines for a course deleted meanwhile (``gone_ok``) keep the key they were given. Both check the action."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from gpuseat.db.models import Event
from gpuseat.errors import InputError
from gpuseat.store import CourseStore


def _rows(store: CourseStore, key: str) -> list[tuple[str, str, str | None]]:
    with store.database.read() as s:
        return [
            (e.action, e.actor, e.seat)
            for e in s.scalars(select(Event).where(Event.course_key == key).order_by(Event.id))
        ]


def test_a_deleted_courses_lines_are_written_only_when_asked_for(course2016: CourseStore, tmp_path: Path) -> None:
    store = course2016
    store.lifecycle.delete_course(None, export_to=tmp_path / "course-2016.zip")
    with pytest.raises(InputError, match="course-2016"):
        store.events.log("course-2016", "engine.apply", actor="gpuseat-agent")
    store.events.log("course-2016", "engine.apply", seat="seat-01", actor="gpuseat-agent", gone_ok=True)
    assert _rows(store, "course-2016")[-1] == ("engine.apply", "gpuseat-agent", "seat-01")


@pytest.mark.parametrize("gone_ok", [False, True])
def test_every_line_checks_its_action(course2016: CourseStore, gone_ok: bool) -> None:
    store = course2016
    before = _rows(store, "course-2016")
    for action in ("", "Engine.Apply", "a" * 40, "x; drop table events"):
        with pytest.raises(InputError, match="action"):
            store.events.log("course-2016", action, gone_ok=gone_ok)
    assert _rows(store, "course-2016") == before


def test_the_old_names_still_write_with_a_warning(course2016: CourseStore) -> None:
    store = course2016
    store.agents.log_any("course-2016", "seat.connected", seat="seat-02", actor="gpuseat-agent")
    with pytest.warns(DeprecationWarning, match="store.agents.log_any"):
        store.log_any("course-2016", "seat.delivery", seat="seat-03", actor="gpuseat-agent")
    assert _rows(store, "course-2016")[-2:] == [
        ("seat.connected", "gpuseat-agent", "seat-02"),
        ("seat.delivery", "gpuseat-agent", "seat-03"),
    ]
