"""The health router: ``/healthz``, the front door ``/`` and ``/favicon.ico``, for anyone."""

from __future__ import annotations

from fastapi.testclient import TestClient

from .served import Served


def test_healthz_answers_ok_with_the_security_headers(served: Served) -> None:
    r = served.client.get("/healthz")
    assert r.status_code == 200 and r.text == "ok" and r.headers["content-type"].startswith("text/plain")
    assert r.headers["x-frame-options"] == "DENY" and "default-src" in r.headers["content-security-policy"]
    assert served.client.post("/healthz").status_code == 405  # a probe reads, never writes
    head = served.client.head("/healthz")  # a load balancer's or `curl -I`'s probe (it got 405)
    assert head.status_code == 200 and head.content == b"" and head.headers["x-frame-options"] == "DENY"


def test_the_front_door_sends_a_visitor_to_the_login_and_an_organizer_to_the_overview(served: Served) -> None:
    first = served.client.get("/", follow_redirects=False)
    assert (first.status_code, first.headers["location"]) == (303, "/login")
    served.client.cookies.set("gpuseat_session", "x" * 43)  # a made-up session is no session
    assert served.client.get("/", follow_redirects=False).headers["location"] == "/login"
    served.client.cookies.clear()
    assert served.login().status_code == 303
    after = served.client.get("/", follow_redirects=False)
    assert (after.status_code, after.headers["location"]) == (303, "/overview")


def test_the_favicon_is_the_static_svg_under_the_root_path(served: Served) -> None:
    r = served.client.get("/favicon.ico", follow_redirects=False)
    assert (r.status_code, r.headers["location"]) == (301, "/static/favicon.svg")
    assert served.client.get("/static/favicon.svg").headers["content-type"].startswith("image/svg")
    behind = TestClient(served.client.app, root_path="/gpuseat")
    moved = behind.get("/favicon.ico", follow_redirects=False)
    assert moved.headers["location"] == "/gpuseat/static/favicon.svg"
    assert behind.get("/", follow_redirects=False).headers["location"] == "/gpuseat/login"
