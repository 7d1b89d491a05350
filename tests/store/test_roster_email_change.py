"""A participant's email changes after day one (a typo, a new address): a re-import that names them by their key
gives them the new email and keeps everything else (their seat, their access link, their login). Before, the
import matched rows by email only: it refused the row ("key 'ann' belongs to another participant") and its fix
said to give the row another key, which would have made a second ann. On SQLite and PostgreSQL (``store``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuseat.core.roster import RosterText
from gpuseat.errors import InputError
from gpuseat.store import CourseStore

COURSE = 'name = "Emails"\nparticipants = 4\n[schedule]\nstart = 2026-09-07\ndays = 5\n'


def _import(store: CourseStore, header: str, *rows: str) -> object:
    return store.roster.import_roster("lab", RosterText("\n".join([header, *rows]), where="r.csv"))


@pytest.fixture
def lab(store: CourseStore, tmp_path: Path) -> CourseStore:
    """Course ``lab``: ann (login ann) holding seat s1, with a link, and bob."""
    (tmp_path / "lab.toml").write_text(COURSE)
    store.courses.create_course(tmp_path / "lab.toml", key="lab")
    _import(store, "key,email,unix_user", "ann,ann@example.org,ann", "bob,bob@example.org,bob")
    store.seats.add_seats(
        "lab", [{"key": "s1", "kind": "gpu", "host": "gpu1", "engine": "host", "device_uuid": "GPU-1"}]
    )
    store.seats.assign("lab", "ann", "s1")
    return store


def test_a_row_named_by_its_key_gives_the_participant_a_new_email_and_keeps_the_rest(lab: CourseStore) -> None:
    report = _import(lab, "key,email", "ann,ann.new@example.org")
    assert [(c.key, c.action, c.fields) for c in report.changes] == [("ann", "updated", ("email",))]  # type: ignore[attr-defined]
    assert report.absent == ("bob",)  # type: ignore[attr-defined]  # ann is in the file: not "kept, not listed"
    people = {p.key: p for p in lab.roster.participants("lab")}
    assert set(people) == {"ann", "bob"}  # no second ann
    assert (people["ann"].email, people["ann"].unix_user, people["ann"].seat) == ("ann.new@example.org", "ann", "s1")
    # the same file again changes nothing; the old email names nobody now
    again = _import(lab, "key,email", "ann,ann.new@example.org")
    assert [c.action for c in again.changes] == ["unchanged"]  # type: ignore[attr-defined]


def test_without_a_key_column_the_refusal_says_how_to_change_the_email(lab: CourseStore) -> None:
    with pytest.raises(InputError, match="belongs to another participant") as info:
        _import(lab, "email,unix_user", "ann.new@example.org,ann")
    assert "to change ann@example.org's email, name them on this row by their key ('ann') in a key column" in str(
        info.value.fix
    )
    assert {p.key: p.email for p in lab.roster.participants("lab")}["ann"] == "ann@example.org"  # nothing stored


def test_a_key_row_whose_old_email_is_also_in_the_file_is_not_taken_as_a_change(lab: CourseStore) -> None:
    """The file lists ann's old email on another row too: that row is ann (by email), and the key row that would
    also be ann is refused, not merged."""
    with pytest.raises(InputError):
        _import(lab, "key,email", "ann,ann.new@example.org", "ann2,ann@example.org")
    assert {p.key: p.email for p in lab.roster.participants("lab")} == {
        "ann": "ann@example.org",
        "bob": "bob@example.org",
    }
