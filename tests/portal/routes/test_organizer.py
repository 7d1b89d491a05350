"""The organizer router: login and logout, the pages, the seat and link actions, and the CSVs.

Adversary's side: every page and download without a session, a guessed session cookie, a login or an
action without the form token (or with a participant link's token), a cross-site form, and a session
used after its logout are refused, and nothing changes.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest

from .served import Served

PAGES = ("/overview", "/roster", "/seats", "/alerts", "/bench", "/links", "/hours")
DOWNLOADS = ("/seats.csv", "/roster.csv", "/hours.csv", "/seats/live.json")


def test_without_a_session_pages_ask_for_the_login_and_downloads_get_401(served: Served) -> None:
    for path in PAGES:
        r = served.client.get(path, follow_redirects=False)
        assert (r.status_code, r.headers["location"]) == (303, f"/login?next={path}"), path
    for path in DOWNLOADS:
        assert served.client.get(path).status_code == 401, path
    served.client.cookies.set("gpuseat_session", "s" * 43)  # a guessed session cookie
    assert served.client.get("/overview", follow_redirects=False).status_code == 303
    assert served.client.get("/roster.csv").status_code == 401


def test_login_needs_the_forms_token_and_the_right_password(served: Served) -> None:
    no_token = served.client.post("/login", data={"username": "admin", "password": "a long enough passphrase"})
    assert no_token.status_code == 403 and "CSRF" in no_token.text
    assert served.login(password="wrong").status_code == 401
    link_csrf = served.csrf(f"/t/{served.links['ann']}")  # a participant's form token is not the login's
    r = served.client.post("/login", data={"csrf": link_csrf, "username": "admin", "password": "x"})
    assert r.status_code == 403
    ok = served.login()
    assert (ok.status_code, ok.headers["location"]) == (303, "/overview")
    assert "gpuseat_session" in ok.headers["set-cookie"] and "HttpOnly" in ok.headers["set-cookie"]
    assert any(e.action == "portal.login" and e.actor == "admin" for e in served.store.events.events("lab"))
    for path in PAGES:
        assert served.client.get(path).status_code == 200, path
    seats = served.client.get("/seats.csv")
    assert seats.headers["content-disposition"] == 'attachment; filename="seats.csv"'
    assert seats.text.splitlines()[0] == (
        "key,kind,host,device_uuid,profile,memory_gb,groups,engine,engine_ref,state,connect,participant"
    )
    assert served.client.get("/roster.csv").text.splitlines()[1].startswith("ann,Ann,ann@example.org,")
    assert served.client.get("/seats/live.json").json()["seats"][0]["seat"] == "mig-01"


def test_seat_actions_need_the_sessions_form_token(served: Served) -> None:
    form = {"action": "release", "seat": "mig-02"}
    assert served.client.post("/seats/action", data=form).status_code == 401  # no session
    assert served.login().status_code == 303
    assert served.client.post("/seats/action", data=form).status_code == 403  # no form token
    link_csrf = served.csrf(f"/t/{served.links['ben']}")
    assert served.client.post("/seats/action", data={"csrf": link_csrf, **form}).status_code == 403
    csrf = served.csrf("/seats")
    cross = served.client.post("/seats/action", data={"csrf": csrf, **form}, headers={"sec-fetch-site": "cross-site"})
    assert cross.status_code == 403
    assert served.store.seats.seat_of("lab", "ben").key == "mig-02"  # nothing moved
    bad = served.client.post("/seats/action", data={"csrf": csrf, "action": "steal"})
    assert bad.status_code == 400 and "unknown action" in bad.text
    done = served.client.post("/seats/action", data={"csrf": csrf, **form})
    assert done.status_code == 200 and "released seat mig-02 of ben" in done.text
    assert served.store.seats.seat_of("lab", "ben") is None


@pytest.mark.parametrize("action", ["rotate", "revoke"])
def test_links_rotate_and_revoke_and_the_old_link_stops(served: Served, action: str) -> None:
    assert served.login().status_code == 303
    csrf = served.csrf("/links")
    old = served.links["ann"]
    r = served.client.post("/links", data={"csrf": csrf, "action": action, "participant": "ann"})
    assert r.status_code == 200 and ("rotated 1 links" in r.text or "revoked 1 links" in r.text)
    assert served.client.get(f"/t/{old}").status_code == 404
    assert served.client.get(f"/t/{served.links['ben']}").status_code == 200
    csv = served.client.post("/links", data={"csrf": csrf, "action": "issue", "format": "csv"})
    assert csv.headers["content-disposition"] == 'attachment; filename="access-links.csv"'
    assert csv.text.splitlines()[0] == "participant,name,email,link"


def test_logout_ends_the_session_for_good(served: Served) -> None:
    assert served.login().status_code == 303
    cookie = served.client.cookies.get("gpuseat_session")
    assert cookie
    assert served.client.post("/logout", data={}).status_code == 403  # no form token: still logged in
    r = served.client.post("/logout", data={"csrf": served.csrf("/overview")}, follow_redirects=False)
    assert (r.status_code, r.headers["location"]) == (303, "/login")
    served.client.cookies.set("gpuseat_session", cookie)  # the old cookie, replayed
    assert served.client.get("/overview", follow_redirects=False).status_code == 303


def test_the_portals_seats_csv_is_the_clis_seats_export(served: Served, tmp_path: Path, cli: Any) -> None:
    """One seats CSV: the organizer's download and ``gpuseat seats export -f csv`` have the same columns and rows."""
    served.store.seats.add_seats("lab", [{"key": "spare", "kind": "gpu", "host": "gpu2", "engine": "host"}])
    assert served.login().status_code == 303
    portal = list(csv.reader(io.StringIO(served.client.get("/seats.csv").text)))
    exported = cli(
        "seats", "export", "--format", "csv", "--course", "lab", "--db", f"sqlite:///{tmp_path / 'course.db'}"
    )
    assert exported.code == 0, exported.err
    assert portal == list(csv.reader(io.StringIO(exported.out)))
    assert [r[0] for r in portal] == ["key", "mig-01", "mig-02", "spare"]
    assert portal[1][portal[0].index("device_uuid")] == "MIG-1" and portal[1][-1] == "ann"
