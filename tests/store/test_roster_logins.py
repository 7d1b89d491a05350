"""A login stays with its participant: once an engine has applied the course, a re-import that gives a login
to another participant (an exchange of two, or a newcomer given one someone had) is refused with
``FILE:LINE:COLUMN`` and nothing is stored; before that (a typo fixed before day one) logins may move. Two
participants never end up with one login. On SQLite and PostgreSQL (the ``store`` fixture)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuseat.core.roster import RosterText
from gpuseat.errors import InputError
from gpuseat.store import CourseStore

COURSE = 'name = "Logins"\nparticipants = 4\n[schedule]\nstart = 2026-09-07\ndays = 5\n'
HEADER = "key,email,unix_user"


def _import(store: CourseStore, *rows: str) -> object:
    return store.roster.import_roster("lab", RosterText("\n".join([HEADER, *rows]), where="r.csv"))


def _logins(store: CourseStore) -> dict[str, str | None]:
    return {p.key: p.unix_user for p in store.roster.participants("lab")}


@pytest.fixture
def lab(store: CourseStore, tmp_path: Path) -> CourseStore:
    """Course ``lab``: ann (login ann) and bob (login bob)."""
    (tmp_path / "lab.toml").write_text(COURSE)
    store.courses.create_course(tmp_path / "lab.toml", key="lab")
    _import(store, "ann,ann@example.org,ann", "bob,bob@example.org,bob")
    return store


def _delivered(store: CourseStore) -> None:
    """What an engine's apply writes when it changed something on a machine."""
    store.events.log("lab", "engine.apply", detail={"engine": "host", "host": "gpu1", "done": ["+ account.add ann"]})


def test_before_any_apply_two_logins_may_be_exchanged(lab: CourseStore) -> None:
    _import(lab, "ann,ann@example.org,bob", "bob,bob@example.org,ann")
    assert _logins(lab) == {"ann": "bob", "bob": "ann"}


def test_after_an_apply_an_exchange_of_logins_is_refused_and_nothing_is_stored(lab: CourseStore) -> None:
    _delivered(lab)
    with pytest.raises(InputError, match="the login 'bob' is bob's on the course's machines") as info:
        _import(lab, "ann,ann@example.org,bob", "bob,bob@example.org,ann")
    assert info.value.where == "r.csv:2:3" and "nobody in the course has had" in (info.value.fix or "")
    assert _logins(lab) == {"ann": "ann", "bob": "bob"}


def test_after_an_apply_a_login_left_behind_stays_its_participants(lab: CourseStore) -> None:
    _delivered(lab)
    _import(lab, "ann,ann@example.org,ann2", "bob,bob@example.org,bob")
    with pytest.raises(InputError, match="the login 'ann' is ann's") as info:  # a newcomer
        _import(lab, "ann,ann@example.org,ann2", "bob,bob@example.org,bob", "cat,cat@example.org,ann")
    assert info.value.where == "r.csv:4:3"
    with pytest.raises(InputError, match="the login 'ann' is ann's") as info:  # someone who had another
        _import(lab, "ann,ann@example.org,ann2", "bob,bob@example.org,ann")
    assert info.value.where == "r.csv:3:3"
    assert _logins(lab) == {"ann": "ann2", "bob": "bob"}
    _import(lab, "ann,ann@example.org,ann", "bob,bob@example.org,bob")  # her own login back: hers
    assert _logins(lab) == {"ann": "ann", "bob": "bob"}


def test_two_participants_never_share_a_login(lab: CourseStore) -> None:
    """bob's unix_user is ann's login, ann's made from her key (the file has no unix_user for her)."""
    with pytest.raises(InputError, match="the login 'ann' would be both ann's and bob's") as info:
        _import(lab, "ann,ann@example.org,", "bob,bob@example.org,ann")
    assert info.value.where == "r.csv:3:3"
    assert _logins(lab) == {"ann": "ann", "bob": "bob"}


def test_the_logins_left_behind_are_what_the_engines_remove_when_the_course_is_deleted(lab: CourseStore) -> None:
    """``store.roster.logins_left``: the host engine adds these to the logins of a course being deleted (their
    accounts and homes go with it); before any apply nothing was left on a machine."""
    _import(lab, "ann,ann@example.org,ann0", "bob,bob@example.org,bob")  # a typo fixed before day one
    assert lab.roster.logins_left("lab") == {}
    _delivered(lab)
    _import(lab, "ann,ann@example.org,ann2", "bob,bob@example.org,bob")
    _import(lab, "ann,ann@example.org,ann3", "bob,bob@example.org,bob")
    assert lab.roster.logins_left("lab") == {"ann0": "ann", "ann2": "ann"}
