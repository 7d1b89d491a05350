"""The roster's login rule (store/roster.py) on the other paths that create or rename participants: a seats
file (``gpuseat monitor --seats``) and ``course import`` of an export. No two participants end up with one
login, and once an engine has applied the course a login another participant had on its machines (renamed
after delivery) is never given to someone else: refused with a clear message, nothing stored. On SQLite and
PostgreSQL (the ``store`` fixture)."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from gpuseat.core.roster import RosterText
from gpuseat.errors import InputError
from gpuseat.readings import SeatEntry
from gpuseat.store import CourseStore

COURSE = 'name = "Logins"\nparticipants = 4\n[schedule]\nstart = 2026-09-07\ndays = 5\n'
MIG = "MIG-{n:08d}-0000-4000-8000-00000000000{n}"


def _import(store: CourseStore, *rows: str) -> object:
    return store.roster.import_roster("lab", RosterText("\n".join(["key,email,unix_user", *rows]), where="r.csv"))


def _logins(store: CourseStore, course: str = "lab") -> dict[str, str | None]:
    return {p.key: p.unix_user for p in store.roster.participants(course)}


def _delivered(store: CourseStore, course: str = "lab") -> None:
    """What an engine's apply writes when it changed something on a machine."""
    store.events.log(course, "engine.apply", detail={"engine": "host", "host": "gpu1", "done": ["+ account.add"]})


@pytest.fixture
def lab(store: CourseStore, tmp_path: Path) -> CourseStore:
    """Course ``lab``: ann (login ann), bob (login bob) and cat (login cat)."""
    (tmp_path / "lab.toml").write_text(COURSE)
    store.courses.create_course(tmp_path / "lab.toml", key="lab")
    _import(store, "ann,ann@example.org,ann", "bob,bob@example.org,bob", "cat,cat@example.org,cat")
    return store


def _seats(store: CourseStore, *rows: tuple[str, str | None], course: str = "lab") -> int:
    """A seats file: one seat per (participant, user) row."""
    entries = [SeatEntry(f"s{n}", MIG.format(n=n), who, user) for n, (who, user) in enumerate(rows)]
    return store.seatfile.import_seat_file(course, entries, where="seats.toml")


# -- the seats file -----------------------------------------------------------------------------------


def test_a_seats_file_never_gives_one_login_to_two_participants(lab: CourseStore) -> None:
    """Before any apply too: bob given ann's login would share her account."""
    with pytest.raises(InputError, match="the login 'ann' would be both ann's and bob's") as info:
        _seats(lab, ("bob", "ann"))
    assert info.value.where == "seats.toml: seat 1 (s0)" and "their own" in (info.value.fix or "")
    assert _logins(lab) == {"ann": "ann", "bob": "bob", "cat": "cat"} and lab.seats.seats("lab") == []


def test_a_seats_file_never_passes_a_login_someone_had_on_the_machines(lab: CourseStore) -> None:
    _delivered(lab)
    _import(lab, "ann,ann@example.org,ann2", "bob,bob@example.org,bob", "cat,cat@example.org,cat")
    with pytest.raises(InputError, match="the login 'ann' is ann's on the course's machines") as info:
        _seats(lab, ("cat", "cat"), ("bob", "ann"))
    assert info.value.where == "seats.toml: seat 2 (s1)"
    assert _logins(lab)["bob"] == "bob" and lab.seats.seats("lab") == []  # nothing stored
    _seats(lab, ("ann", "ann"))  # her own login back: hers
    assert _logins(lab)["ann"] == "ann"


def test_a_rename_by_a_seats_file_is_remembered_by_the_roster(lab: CourseStore) -> None:
    """After day one a seats file gives cat a new login; her old one stays hers on the machines: a roster
    re-import that gives it to a newcomer is refused."""
    _delivered(lab)
    _seats(lab, ("cat", "cat2"))
    assert _logins(lab)["cat"] == "cat2"
    with pytest.raises(InputError, match="the login 'cat' is cat's on the course's machines") as info:
        _import(lab, "ann,ann@example.org,ann", "bob,bob@example.org,bob", "dan,dan@example.org,cat")
    assert info.value.where == "r.csv:4:3"


def test_a_seats_file_course_refuses_a_newcomer_with_anothers_login(store: CourseStore) -> None:
    """A course named only by seats files gets its participants from them: a newcomer whose login (their
    ``user``, else their key) is another participant's is refused."""
    _seats(store, ("ann", None), ("bob", "bob"), course="bare")
    with pytest.raises(InputError, match="the login 'bob' would be both bob's and dan's"):
        _seats(store, ("ann", None), ("bob", "bob"), ("dan", "bob"), course="bare")
    with pytest.raises(InputError, match="the login 'ann' would be both ann's and eve's"):
        _seats(store, ("ann", None), ("bob", "bob"), ("eve", "ann"), course="bare")
    assert _logins(store, "bare") == {"ann": None, "bob": "bob"}


# -- course import of an export ------------------------------------------------------------------------


def _edited(store: CourseStore, tmp_path: Path, login_of: dict[str, str | None]) -> Path:
    """An export of ``lab`` (then deleted) whose participants.json gives these participants these logins."""
    good = tmp_path / "lab.zip"
    store.lifecycle.delete_course("lab", export_to=good)
    with zipfile.ZipFile(good) as z:
        people = json.loads(z.read("participants.json"))
        manifest = json.loads(z.read("manifest.json"))
    for p in people:
        if p["key"] in login_of:
            p["unix_user"] = login_of[p["key"]]
    blob = json.dumps(people).encode()
    manifest["sha256"]["participants.json"] = hashlib.sha256(blob).hexdigest()
    edited = tmp_path / "edited.zip"
    with zipfile.ZipFile(good) as zin, zipfile.ZipFile(edited, "w") as zout:
        for name in zin.namelist():
            new = {"participants.json": blob, "manifest.json": json.dumps(manifest).encode()}.get(name)
            zout.writestr(name, new if new is not None else zin.read(name))
    return edited


def test_course_import_never_gives_one_login_to_two_participants(lab: CourseStore, tmp_path: Path) -> None:
    """bob's unix_user is cleared: his login is made from his key, ``bob``; cat is given ``bob`` as well."""
    edited = _edited(lab, tmp_path, {"bob": None, "cat": "bob"})
    with pytest.raises(InputError, match="the login 'bob' would be both bob's and cat's") as info:
        lab.lifecycle.import_course(edited)
    assert "participants.json" in (info.value.where or "")
    assert [c.key for c in lab.courses.list_courses()] == []  # nothing stored


def test_course_import_never_passes_a_login_someone_had_on_the_machines(lab: CourseStore, tmp_path: Path) -> None:
    _delivered(lab)
    _import(lab, "ann,ann@example.org,ann2", "bob,bob@example.org,bob", "cat,cat@example.org,cat")
    edited = _edited(lab, tmp_path, {"cat": "ann"})
    with pytest.raises(InputError, match="the login 'ann' is ann's on the course's machines") as info:
        lab.lifecycle.import_course(edited)
    assert "participants.json" in (info.value.where or "") and "cat" in (info.value.where or "")
    assert [c.key for c in lab.courses.list_courses()] == []
    lab.lifecycle.import_course(tmp_path / "lab.zip")  # the intact export imports
    assert _logins(lab) == {"ann": "ann2", "bob": "bob", "cat": "cat"}
