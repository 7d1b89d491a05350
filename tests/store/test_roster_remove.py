"""``gpuseat roster remove P... --yes``: a participant who drops out after day one is taken off the course, all or
nothing: her seat released (the history's reason), her link opens nothing (the portal's token lookup, through the
ASGI app), her pending request failed, her row and survey answer gone; a plain ``seats assign`` seats the others and
not her, the course can shrink by her (``course update``), and the ``roster.remove`` events row keeps her row and
past seats, and wakes a running agent (a revoking action). Refused (exit 2, nothing changed): without ``--yes``
(saying what would go), an unknown participant (did you mean), an archived course. The real CLI on SQLite and
PostgreSQL (the foreign keys' cascades on both)."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from gpuseat.catalog.bundle import load_catalog
from gpuseat.core.roster import RosterText
from gpuseat.services.survey import SurveyService
from gpuseat.store import open_store
from gpuseat.web.app import Portal, create_app

from .test_course_update import ok, refused

ROSTER = "name,email,unix_user\nAnn,ann@example.org,ann\nBen,ben@example.org,ben\nCid,cid@example.org,cid\n"


def course_text(count: int) -> str:
    return f'name = "lab"\nparticipants = {count}\n\n[schedule]\nstart = 2026-09-07\ndays = 5\n'


def test_a_participant_removed_from_the_roster_is_gone_and_the_log_keeps_her(cli, url: str, tmp_path: Path) -> None:
    path = tmp_path / "lab.toml"
    path.write_text(course_text(3))
    ok(cli("course", "create", path, "--key", "lab", "--db", url))
    db = ("--course", "lab", "--db", url)
    with open_store(url) as store:
        store.roster.import_roster("lab", RosterText(ROSTER, where="r.csv"))
        store.seats.add_seats("lab", [{"key": f"seat-0{i}", "kind": "gpu", "engine": "host"} for i in (1, 2, 3)])
        store.seats.assign("lab", "ann", "seat-01")
        links = {t.participant: t.token for t in store.tokens.issue_tokens("lab")}
        SurveyService(store).set_state("lab", "open")
        store.survey.submit("lab", "ann", lambda _key, _text: {"overall": "5"})
        store.requests.request_seat("lab", "ann", "restart", actor="ann")

    refused(
        cli("roster", "remove", "ann", *db),
        "would remove ann (holds seat-01, 1 survey answer, 1 pending request) from course lab",
        "gpuseat roster remove ann --course lab --yes",
    )
    refused(cli("roster", "remove", "ann", "bne", "--yes", *db), "P: no participant 'bne'", "Did you mean ben?")
    refused(cli("roster", "remove", "ann", "--reason", "x" * 33, "--yes", *db), "--reason", "at most 32")
    path.write_text(course_text(2))
    refused(cli("course", "update", path, "--key", "lab", "--db", url), "plans 2 seat(s)", "gpuseat roster remove P")
    with open_store(url) as store:  # nothing changed by the refusals
        assert [p.key for p in store.roster.participants("lab")] == ["ann", "ben", "cid"]
        assert store.roster.find_participant("lab", "ann").seat == "seat-01"
        head = store.agents.events_head()

    assert ok(cli("roster", "remove", "ann", "--yes", *db)).out.startswith("removed ann (released seat-01)")
    with open_store(url) as store:
        portal = Portal(store, load_catalog(), "lab", link_days_after_end=None)
        with TestClient(create_app(portal), base_url="http://testserver") as client:
            gone = client.get(f"/t/{links['ann']}")
            assert gone.status_code == 404 and "not valid" in gone.text and "Ann" not in gone.text
            assert client.get(f"/t/{links['ben']}").status_code == 200
        assert store.tokens.find_token(links["ann"]) is None
        assert store.survey.count("lab") == 0  # her answer went with her
        events = [e for e in store.events.events("lab", after_id=head)]
        assert [(e.action, e.participant) for e in events] == [
            ("seat.release", "ann"),
            ("seat.request.failed", "ann"),
            ("roster.remove", None),
        ]
        assert events[0].seat == "seat-01" and events[0].detail == {"reason": "removed from the roster"}
        detail = events[2].detail
        assert [(p["key"], p["email"], p["unix_user"]) for p in detail["participants"]] == [
            ("ann", "ann@example.org", "ann")
        ]
        past = detail["past_assignments"]
        assert [(a["seat"], a["participant"], a["ended_by"]) for a in past] == [
            ("seat-01", "ann", "removed from the roster")
        ]
        assert past[0]["to"] is not None and detail["tokens_revoked"] == 1 and detail["requests_failed"] == 1
        assert "logins_left" not in detail  # no engine applied the course: no account of hers anywhere
        assert store.agents.revoking_after(head, ["lab"], exclude_actor="agent") == events[0].id

    assigned = ok(cli("seats", "assign", *db)).out
    assert "ann" not in assigned, assigned
    with open_store(url) as store:
        seated = {p.key: p.seat for p in store.roster.participants("lab")}
        assert set(seated) == {"ben", "cid"} and all(seated.values()), seated
        head = store.agents.events_head()
    ok(cli("course", "update", path, "--key", "lab", "--db", url))  # the group one smaller: accepted now

    # a participant without a seat: the roster.remove row alone wakes a running agent
    ok(cli("seats", "release", "--participant", "cid", *db))
    ok(cli("roster", "remove", "cid@example.org", "--yes", *db))
    with open_store(url) as store:
        (removal,) = [e for e in store.events.events("lab", after_id=head) if e.action == "roster.remove"]
        after = max(e.id for e in store.events.events("lab", after_id=head) if e.action == "seat.release")
        assert store.agents.revoking_after(after, ["lab"], exclude_actor="agent") == removal.id

    ok(cli("course", "archive", "lab", "--db", url))
    refused(cli("roster", "remove", "ben", "--yes", *db), "archived")
    with open_store(url) as store:
        assert [p.key for p in store.roster.participants("lab")] == ["ben"]
