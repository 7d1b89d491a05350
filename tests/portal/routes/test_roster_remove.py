"""The Roster page takes a participant who dropped out off the course (``store.roster.remove_participants``, as
``gpuseat roster remove`` does): each row's Remove… button answers the page with what would go (the store's dry
run) and a reason field; only the confirm button removes. Refused, nothing changed: no session, a participant's
link (its form token, its page), a missing or cross-site form token, a participant of another course, an unknown
key, a reason the store refuses (the question again), an archived course."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from gpuseat.core.roster import RosterText

from .served import COURSE, Served


def _said(r: Any) -> str:
    return html.unescape(r.text)


def _keys(served: Served, course: str = "lab") -> list[str]:
    return [p.key for p in served.store.roster.participants(course)]


def test_remove_asks_first_then_takes_ann_off_the_course(served: Served) -> None:
    assert served.login().status_code == 303
    roster = served.client.get("/roster").text
    assert 'form="roster-remove" name="participant" value="ann"' in roster
    csrf = served.csrf("/roster")
    asked = served.client.post("/roster/remove", data={"csrf": csrf, "participant": "ann@example.org"})
    assert asked.status_code == 200
    assert "would remove ann (holds mig-01) from course lab, with their access links" in asked.text
    assert 'name="participant" value="ann"' in asked.text and ">Remove ann from the course</button>" in asked.text
    assert _keys(served) == ["ann", "ben"] and served.store.seats.seat_of("lab", "ann").key == "mig-01"

    confirm = {"csrf": csrf, "participant": "ann", "confirm": "yes"}
    long = served.client.post("/roster/remove", data={**confirm, "reason": "x" * 33})
    assert long.status_code == 400 and "at most 32" in _said(long) and 'id="remove-yes"' in long.text
    assert "would remove ann (holds mig-01)" in _said(long) and 'value="' + "x" * 33 + '"' in _said(long)
    assert _keys(served) == ["ann", "ben"]

    head = served.store.agents.events_head()
    done = served.client.post("/roster/remove", data={**confirm, "reason": "dropped out"})
    assert done.status_code == 200 and "removed ann (released seat mig-01)" in done.text
    assert 'value="ann"' not in done.text and 'id="remove-yes"' not in done.text
    assert _keys(served) == ["ben"]
    events = served.store.events.events("lab", after_id=head)
    assert [(e.action, e.actor) for e in events] == [("seat.release", "admin"), ("roster.remove", "admin")]
    assert events[0].detail == {"reason": "dropped out"}
    gone = served.client.get(f"/t/{served.links['ann']}")
    assert gone.status_code == 404 and "not valid" in gone.text and "Ann" not in gone.text
    again = served.client.post("/roster/remove", data=confirm)  # the browser sends the form again
    assert again.status_code == 400 and "no participant 'ann'" in _said(again)
    assert [e.action for e in served.store.events.events("lab", after_id=head)].count("roster.remove") == 1


def test_remove_is_refused_without_the_organizer_and_for_what_the_portal_does_not_serve(
    served: Served, tmp_path: Path
) -> None:
    (tmp_path / "other.toml").write_text(COURSE)
    served.store.courses.create_course(tmp_path / "other.toml", key="other")
    served.store.roster.import_roster("other", RosterText("name,email\nCid,cid@example.org\n", where="o.csv"))
    ann = served.links["ann"]
    link_page = served.client.get(f"/t/{ann}").text
    assert "/roster/remove" not in link_page
    link_csrf = served.csrf(f"/t/{ann}")
    form = {"participant": "ben", "confirm": "yes"}
    assert served.client.post("/roster/remove", data={"csrf": link_csrf, **form}).status_code == 401  # no session
    assert served.login().status_code == 303
    assert served.client.post("/roster/remove", data=form).status_code == 403  # no form token
    assert served.client.post("/roster/remove", data={"csrf": link_csrf, **form}).status_code == 403
    csrf = served.csrf("/roster")
    cross = served.client.post("/roster/remove", data={"csrf": csrf, **form}, headers={"sec-fetch-site": "cross-site"})
    assert cross.status_code == 403
    other = served.client.post("/roster/remove", data={"csrf": csrf, "participant": "cid", "confirm": "yes"})
    assert other.status_code == 400 and "no participant 'cid'" in _said(other)
    unknown = served.client.post("/roster/remove", data={"csrf": csrf, "participant": "bne"})
    assert unknown.status_code == 400 and "Did you mean ben?" in _said(unknown)
    served.store.lifecycle.archive_course("lab", actor="cli")
    for confirm in ({}, {"confirm": "yes"}):
        archived = served.client.post("/roster/remove", data={"csrf": csrf, "participant": "ben", **confirm})
        assert archived.status_code == 400 and "archived (read-only)" in _said(archived)
    assert _keys(served) == ["ann", "ben"] and _keys(served, "other") == ["cid"]
    assert not [e for e in served.store.events.events("lab") if e.action.startswith(("roster.remove", "seat.release"))]
