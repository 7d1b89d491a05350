"""A course that has lived (moves, a hand-over, releases, seat requests done, failed and pending, seat hours
with an hours stop, links issued, rotated and revoked, survey answers, a login renamed after the engines
applied it, engine settings) travels by ``course export`` / ``course import`` from SQLite to PostgreSQL and
back with the same reads; an archive edited by hand (two holders of a seat at once, a revoked link made active
again, a request for a seat the course never had) is refused naming the member and row, nothing stored."""

from __future__ import annotations

import hashlib
import json
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpuseat.core.roster import RosterText
from gpuseat.errors import InputError
from gpuseat.services.survey import SurveyService
from gpuseat.store import CourseStore, open_store
from gpuseat.store.export import export_course, import_course
from pg_schema import pg_schema_url

from .conftest import two_seat_lab

NOW = datetime(2030, 1, 1, tzinfo=UTC)  # one "now" for the hours on both stores


def lived(store: CourseStore) -> dict[str, str]:
    """Course ``lab`` after a few days; returns the links issued (participant key → token, ``ann-old``)."""
    ann, ben = two_seat_lab(store)
    cat = store.roster.participants("lab")[2].key
    store.seats.add_seats("lab", [{"key": "seat-03", "kind": "gpu", "engine": "host"}])
    store.agents.set_engine_settings("lab", "host", {"ssh_host": "gpu1.example.org"})
    store.events.log("lab", "engine.apply", detail={"engine": "host", "host": "gpu1", "done": ["+ account.add"]})
    store.seats.assign("lab", ann, "seat-01")
    store.seats.release("lab", participant=ann, reason="swap")
    store.seats.assign("lab", ben, "seat-01")  # seat-01: ann, then ben
    store.seats.assign("lab", ann, "seat-02")
    store.seats.move("lab", ann, "seat-03")
    store.seats.assign("lab", cat, "seat-02")
    done = store.requests.request_seat("lab", ann, "stop", actor=ann)
    store.requests.finish_request("lab", done.id, ok=True, reason="stopped")
    bad = store.requests.request_seat("lab", ben, "restart", actor=ben)
    store.requests.finish_request("lab", bad.id, ok=False, reason="the machine did not answer")
    store.requests.request_seat("lab", cat, "restart", actor=cat)  # pending at export
    store.requests.add_seat_hours("lab", ann, 10, kind="quota", actor=ann)
    store.requests.add_seat_hours("lab", ann, 2.5, actor="organizer", note="project week")
    store.requests.agent_stop("lab", ben, "no seat hours left")
    links = {t.participant: t.token for t in store.tokens.issue_tokens("lab")}
    links["ann-old"] = links[ann]
    links[ann] = store.tokens.rotate_tokens("lab", [ann])[0].token
    store.tokens.revoke_tokens("lab", [ben])
    survey = SurveyService(store)
    survey.set_state("lab", "open")
    survey.submit("lab", cat, {"q_expectations": ["4"], "q_format": ["7"], "q_recommend": ["9"]})
    email = store.roster.find_participant("lab", ann).email
    store.roster.import_roster("lab", RosterText(f"name,email,unix_user\nAnn,{email},ann2\n", where="r.csv"))
    return links


def reads(store: CourseStore, links: dict[str, str]) -> dict[str, Any]:
    """What the library reads of ``lab``: the history, links, requests, hours, answers, logins, settings."""
    people = [p.key for p in store.roster.participants("lab")]
    found = {who: store.tokens.participant_for_token(t, touch=False) for who, t in links.items()}
    return {
        "history": [
            (a.seat, a.participant, a.valid_from, a.valid_to, a.mode, a.ended_by) for a in store.seats.history("lab")
        ],
        "links": {who: v.key if v is not None else None for who, v in found.items()},
        "token_status": store.tokens.token_status("lab"),
        "requests": {
            who: [
                (r.seat, r.action, r.state, r.reason, r.requested_at, r.done_at)
                for r in store.requests.seat_requests("lab", participant=who)
            ]
            for who in people
        },
        "hours": {k: h.to_dict() for k, h in store.requests.seat_hours("lab", now=NOW).items()},
        "running": {k: r.running for k, r in store.requests.run_states("lab").items()},
        "answers": store.survey.answers("lab"),
        "logins": {p.key: p.unix_user for p in store.roster.participants("lab")},
        "settings": store.agents.all_engine_settings("lab"),
    }


def _failed_pending(got: dict[str, Any]) -> dict[str, Any]:
    """The reads with the request that was pending at export as the import stores it (failed)."""
    out = json.loads(json.dumps(got, default=str))
    for rows in out["requests"].values():
        for r in rows:
            if r[2] == "pending":
                r[2], r[3], r[5] = "failed", "*", None
    return out


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    a, b = _failed_pending(a), _failed_pending(b)
    for rows in (*a["requests"].values(), *b["requests"].values()):
        for r in rows:
            if r[2] == "failed" and r[3] != "the machine did not answer":
                r[3], r[5] = "*", None
    assert a == b


def test_a_lived_course_travels_sqlite_postgresql_sqlite(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    pg = pg_schema_url(request)
    with (
        open_store(f"sqlite:///{tmp_path / 'a.db'}", create=True) as a,
        open_store(pg, create=True) as b,
        open_store(f"sqlite:///{tmp_path / 'c.db'}", create=True) as c,
    ):
        links = lived(a)
        before = reads(a, links)
        assert before["links"]["ann-old"] is None and before["settings"] == {"host": {"ssh_host": "gpu1.example.org"}}
        export_course(a, "lab", tmp_path / "a.zip")
        import_course(b, tmp_path / "a.zip")
        export_course(b, "lab", tmp_path / "b.zip")
        import_course(c, tmp_path / "b.zip")
        for there in (b, c):
            _same(reads(there, links), before)
        # the login rule came along: ann's login before the rename (amartin) is given to nobody else there
        ben = c.roster.participants("lab")[1]
        with pytest.raises(InputError, match="the login 'amartin' is"):
            c.roster.import_roster("lab", RosterText(f"name,email,unix_user\nBen,{ben.email},amartin\n", where="r"))


# -- an archive edited by hand --------------------------------------------------------------------------


def edited(good: Path, dst: Path, name: str, change: Any) -> Path:
    """A copy of ``good`` whose member ``name`` is ``change(rows)`` (checksum made to match)."""
    with zipfile.ZipFile(good) as z:
        rows = json.loads(z.read(name))
        manifest = json.loads(z.read("manifest.json"))
        blob = json.dumps(change(rows)).encode()
        manifest["sha256"][name] = hashlib.sha256(blob).hexdigest()
        with zipfile.ZipFile(dst, "w") as out:
            for member in z.namelist():
                new = {name: blob, "manifest.json": json.dumps(manifest).encode()}.get(member)
                out.writestr(member, new if new is not None else z.read(member))
    return dst


def _overlap(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ann's closed hold of seat-01 runs on past ben's start there: two holders at once."""
    first = next(r for r in rows if r["seat"] == "seat-01" and r["valid_to"] is not None)
    first["valid_to"] = "2099-01-01T00:00:00+00:00"
    return rows


def _revived(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ann's rotated (old) link made active again beside her new one."""
    active = {r["participant"] for r in rows if r["revoked_at"] is None}
    return [{**r, "revoked_at": None} if r["participant"] in active else r for r in rows]


def _ben_revived(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ben's link (revoked, none issued since) made active again."""
    ben = sorted({r["participant"] for r in rows})[1]
    return [{**r, "revoked_at": None} if r["participant"] == ben else r for r in rows]


def _bad_setting(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The host engine's ssh_host edited into an ssh option."""
    return [{**r, "values": {**r["values"], "ssh_host": "-oProxyCommand=sh"}} for r in rows]


def _other_seat(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A request for a seat of another course."""
    return [{**rows[0], "seat": "gpu-of-another-course"}, *rows[1:]]


@pytest.mark.parametrize(
    ("name", "change", "message", "row"),
    [
        ("assignments.json", _overlap, "seat-01 held by", "assignments.json["),
        ("access_tokens.json", _revived, "two active links", "access_tokens.json["),
        ("access_tokens.json", _ben_revived, "revoked", "access_tokens.json["),
        ("engine_settings.json", _bad_setting, "ssh_host", "engine_settings.json[0]"),
        ("seat_requests.json", _other_seat, "gpu-of-another-course", "seat_requests.json[0]"),
    ],
)
def test_an_edited_archive_is_refused_naming_the_row(
    store: CourseStore, tmp_path: Path, name: str, change: Any, message: str, row: str
) -> None:
    lived(store)
    good = tmp_path / "lab.zip"
    store.lifecycle.delete_course("lab", export_to=good)
    bad = edited(good, tmp_path / "bad.zip", name, change)
    with pytest.raises(InputError, match=message) as info:
        import_course(store, bad)
    assert row in (info.value.where or ""), info.value.where
    assert [c.key for c in store.courses.list_courses()] == []  # nothing stored
    import_course(store, good)  # the intact one imports


def test_an_archived_course_keeps_its_links_revoked(store: CourseStore, tmp_path: Path) -> None:
    links = lived(store)
    cat = store.roster.participants("lab")[2].key  # her link was active until the course was archived
    store.lifecycle.archive_course("lab")
    good = tmp_path / "lab.zip"
    store.lifecycle.delete_course("lab", export_to=good)
    bad = edited(
        good,
        tmp_path / "bad.zip",
        "access_tokens.json",
        lambda rows: [{**r, "revoked_at": None} if r["participant"] == cat else r for r in rows],
    )
    with pytest.raises(InputError, match="an active link in an archived course") as info:
        import_course(store, bad)
    assert "access_tokens.json[" in (info.value.where or "") and store.courses.list_courses() == []
    import_course(store, good)
    assert all(store.tokens.participant_for_token(t, touch=False) is None for t in links.values())
