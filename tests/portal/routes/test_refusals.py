"""The organizer's refusals answer what the client can use.

- A JSON poll (the open Seats page's ``/seats/live.json``) of an ended session gets a JSON 401 naming the
  login page (under the proxy's sub-path), which the page's script follows; downloads and POSTs keep
  their plain 401 and pages their redirect.
- Logging out (this session, or everywhere) of a portal whose course was deleted under it (the portal
  keeps running) still ends the sessions, drops the cookie and goes to the login, not to "not found";
  logging in to it is one clear page and no session.
"""

from __future__ import annotations

import html
import logging
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from .served import PASSWORD, Served


def _delete_course(served: Served, tmp_path: Path) -> None:
    """``gpuseat course delete`` of the served course, while its portal keeps running."""
    done = served.store.lifecycle.delete_course("lab", export_to=tmp_path / "lab-export.zip", actor="cli")
    assert done["deferred"] is False and done["course"] == "lab"


def test_a_json_poll_of_an_ended_session_gets_json_naming_the_login(served: Served) -> None:
    never = served.client.get("/seats/live.json")  # never logged in
    assert never.status_code == 401 and never.headers["content-type"] == "application/json"
    assert never.json()["login"] == "/login" and "log in again" in never.json()["error"]
    assert served.login().status_code == 303
    assert served.client.get("/seats/live.json").status_code == 200
    cookie = served.client.cookies.get("gpuseat_session")
    r = served.client.post("/logout/everywhere", data={"csrf": served.csrf("/overview")}, follow_redirects=False)
    assert r.status_code == 303  # (from another browser: every session of admin ends)
    logged = [e for e in served.store.events.events("lab") if e.action == "portal.logout-all"]
    assert [(e.actor, e.detail) for e in logged] == [("admin", {"sessions": 1})]  # the course exists: recorded
    served.client.cookies.set("gpuseat_session", cookie)  # the open Seats page still sends the old cookie
    poll = served.client.get("/seats/live.json")
    assert poll.status_code == 401, poll.text[:300]
    assert poll.headers["content-type"] == "application/json"
    assert poll.headers["cache-control"] == "no-store"
    body = poll.json()
    assert body == {"error": body["error"], "login": "/login"}
    assert body["error"] == "no live session (logged out, or older than 12 hours): log in again"
    # the other refusals of the same cookie keep their answers: a plain 401 for downloads and POSTs
    for path in ("/seats.csv", "/roster.csv", "/hours.csv"):
        got = served.client.get(path)
        assert (got.status_code, got.text, got.headers["content-type"][:10]) == (401, "log in first", "text/plain"), (
            path
        )
    post = served.client.post("/seats/action", data={"action": "release", "seat": "mig-02"})
    assert (post.status_code, post.text) == (401, "log in first")
    assert served.client.get("/seats", follow_redirects=False).headers["location"] == "/login?next=/seats"
    assert served.store.seats.seat_of("lab", "ben").key == "mig-02"


def test_the_login_of_a_json_401_is_under_the_root_path(served: Served) -> None:
    """Behind a proxy at a sub-path the script is sent to the portal's login, not the host's."""
    behind = TestClient(served.client.app, root_path="/gpuseat")
    r = behind.get("/seats/live.json")
    assert r.status_code == 401 and r.json()["login"] == "/gpuseat/login"


def test_logging_out_of_a_deleted_course_logs_out(
    served: Served, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gpuseat.web")
    laptop = TestClient(served.client.app, base_url="http://testserver")  # a second session of admin
    for client in (served.client, laptop):
        login = Served(served.store, client, {}).login()
        assert login.status_code == 303
    csrf = {c: Served(None, c, {}).csrf("/seats") for c in (served.client, laptop)}
    _delete_course(served, tmp_path)
    r = laptop.post("/logout", data={"csrf": csrf[laptop]}, follow_redirects=False)
    assert (r.status_code, r.headers["location"]) == (303, "/login")
    assert "gpuseat_session" not in laptop.cookies
    old = served.client.cookies.get("gpuseat_session")
    r = served.client.post("/logout/everywhere", data={"csrf": csrf[served.client]}, follow_redirects=False)
    assert (r.status_code, r.headers.get("location")) == (303, "/login"), (r.status_code, r.text[:300])
    dropped = [c for c in r.headers.get_list("set-cookie") if c.startswith("gpuseat_session=")]
    assert dropped and "Max-Age=0" in dropped[0], r.headers.get_list("set-cookie")
    assert "gpuseat_session" not in served.client.cookies
    served.client.cookies.set("gpuseat_session", old)  # the old cookie, replayed: its session was ended
    assert served.client.get("/seats/live.json").status_code == 401
    # the course's log went with it: the server log says what was not recorded
    assert "portal.logout-all by admin not logged: course: no course 'lab'" in caplog.text
    laptop.close()


def test_logging_in_to_a_deleted_course_is_a_clear_page_and_no_session(served: Served, tmp_path: Path) -> None:
    form = served.csrf("/login")
    _delete_course(served, tmp_path)
    r = served.client.post(
        "/login", data={"csrf": form, "username": "admin", "password": PASSWORD}, follow_redirects=False
    )
    assert r.status_code == 404, (r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("text/html") and "<html" in r.text
    said = html.unescape(r.text)
    assert "the course this portal serves ('lab') has been deleted: there is nothing to log in to" in said
    assert "gpuseat course import" in said and "create one" not in said
    assert not any(c.startswith("gpuseat_session=") for c in r.headers.get_list("set-cookie"))
    assert "gpuseat_session" not in served.client.cookies
    wrong = served.client.post("/login", data={"csrf": form, "username": "admin", "password": "wrong"})
    assert wrong.status_code == 401 and "wrong user name or password" in wrong.text  # no hint without it
