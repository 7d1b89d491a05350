"""After a login the organizer comes back to the page they asked for (``/login?next=``), never elsewhere.

Participant's side: every page sent to the login carries its own path and query; the login form keeps it
(also after a wrong password) and the right password lands there, under a proxy's sub-path too. The open
Seats page's poll names its page, so its JSON 401's login returns to it.

Adversary's side: a ``next`` that would leave the portal (another host, a scheme, ``//`` or ``/\\`` tricks,
encoded slashes, dot segments, a path outside the root path), inject a header (CR/LF), loop (the login,
the logout) or is huge is dropped without a word: the form has no ``next`` and the login lands on the
overview. What passes is escaped in the page and in the Location header.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from gpuseat.store import Store

from .conftest import course_store, serving
from .served import CSRF, PASSWORD, Served

PAGES = ("/overview", "/roster", "/seats", "/alerts", "/bench", "/links", "/hours", "/report", "/survey")
PAGES += ("/course/settings",)
NEXT_FIELD = re.compile(r'<input type="hidden" name="next" value="([^"]*)">')
HOSTILE = [
    "https://evil.example",
    "https://evil.example/seats",
    "//evil.example",
    "//evil.example/seats",
    "/\\evil.example",
    "\\\\evil.example",
    "/%2F%2Fevil.example",
    "/%2f%2Fevil.example/seats",
    "/%5Cevil.example",
    "/seats/../../evil",
    "/%2E%2E/evil",
    "javascript:alert(document.cookie)",
    "JavaScript://%0aalert(1)",
    "/seats\r\nSet-Cookie: evil=1",
    "/seats%0d%0aSet-Cookie:%20evil=1",
    "/seats\tx",
    "/seats x",
    "/" + "s" * 5000,
    "/login",
    "/login?next=/seats",
    "/login/",
    "/logout",
    "/logout/everywhere",
    "seats",
    "",
]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, dict[str, str]]]:
    """One course for this module's logins: they only log in and read pages, and building a course per case
    was most of their time."""
    store, links = course_store(tmp_path_factory.mktemp("lab"))
    yield store, links
    store.close()


@pytest.fixture
def served(lab: tuple[Store, dict[str, str]]) -> Iterator[Served]:
    """The portal over the module's course, an app of its own per test (its own sessions and login limits:
    the wrong passwords of one case never block another's logins)."""
    with serving(*lab) as s:
        yield s


def _login(client: TestClient, next_: str | None, password: str = PASSWORD, form_next: bool = True) -> tuple:
    """GET the login (with ``?next=`` when given) and post its form as a browser would: the hidden field as
    the page gave it (``form_next``), or ``next_`` itself as a hand-made form. Returns (page, answer)."""
    page = client.get("/login", params={"next": next_} if next_ is not None else None)
    assert page.status_code == 200, page.text[:300]
    data = {"csrf": CSRF.search(page.text).group(1), "username": "admin", "password": password}  # type: ignore[union-attr]
    shown = NEXT_FIELD.search(page.text)
    if form_next and shown:
        data["next"] = html.unescape(shown.group(1))
    elif not form_next and next_ is not None:
        data["next"] = next_
    return page, client.post("/login", data=data, follow_redirects=False)


@pytest.mark.parametrize("path", PAGES)
def test_each_page_sends_to_a_login_that_comes_back_to_it(served: Served, path: str) -> None:
    r = served.client.get(path, follow_redirects=False)
    assert (r.status_code, r.headers["location"]) == (303, f"/login?next={path}")
    page, done = _login(served.client, served.client.get(r.headers["location"]).url.params["next"])
    assert NEXT_FIELD.search(page.text).group(1) == path  # type: ignore[union-attr]
    assert (done.status_code, done.headers["location"]) == (303, path)
    assert served.client.get(path).status_code == 200  # the session is there: the page opens


def test_the_query_comes_back_too_and_a_wrong_password_keeps_it(served: Served) -> None:
    page, done = _login(served.client, None)  # a login of its own lands on the overview, as before
    assert NEXT_FIELD.search(page.text) is None
    assert (done.status_code, done.headers["location"]) == (303, "/overview")
    served.client.cookies.clear()
    r = served.client.get("/seats?sort=state&x=%2F", follow_redirects=False)
    assert r.headers["location"] == "/login?next=/seats%3Fsort%3Dstate%26x%3D%252F"
    wanted = served.client.get(r.headers["location"]).url.params["next"]
    assert wanted == "/seats?sort=state&x=%2F"
    page, wrong = _login(served.client, wanted, password="not the password")
    assert wrong.status_code == 401 and "wrong user name or password" in wrong.text
    kept = NEXT_FIELD.search(wrong.text)
    assert kept and html.unescape(kept.group(1)) == wanted  # the form after the error still returns there
    data = {"csrf": CSRF.search(wrong.text).group(1), "username": "admin", "password": PASSWORD}  # type: ignore[union-attr]
    done = served.client.post("/login", data={**data, "next": wanted}, follow_redirects=False)
    assert (done.status_code, done.headers["location"]) == (303, "/seats?sort=state&x=%2F")


@pytest.mark.parametrize("hostile", HOSTILE, ids=lambda h: repr(h[:40]))
def test_a_hostile_next_is_dropped_and_the_login_lands_on_the_overview(served: Served, hostile: str) -> None:
    page, done = _login(served.client, "/roster", form_next=False)  # the same form with a page of the portal
    assert (done.status_code, done.headers["location"]) == (303, "/roster")
    served.client.cookies.clear()
    page, done = _login(served.client, hostile)
    assert NEXT_FIELD.search(page.text) is None, page.text  # never shown in the form
    assert (done.status_code, done.headers["location"]) == (303, "/overview")
    served.client.cookies.clear()
    # a hand-made form with the hostile next (the page never sent it): the same overview, no extra cookie
    page, done = _login(served.client, hostile, form_next=False)
    assert (done.status_code, done.headers["location"]) == (303, "/overview")
    assert "evil" not in str(done.headers.get_list("set-cookie"))
    # and a wrong password re-shows the form without it
    served.client.cookies.clear()
    page, wrong = _login(served.client, hostile, password="nope", form_next=False)
    assert wrong.status_code == 401 and NEXT_FIELD.search(wrong.text) is None


def test_a_next_that_could_break_out_is_escaped_in_the_page_and_the_location(served: Served) -> None:
    odd = "/seats?q=\"><script>alert(1)</script>&x='y'"
    page, done = _login(served.client, odd)
    assert "<script>alert(1)" not in page.text
    shown = NEXT_FIELD.search(page.text)
    assert shown and '"' not in shown.group(1) and "<" not in shown.group(1)
    assert html.unescape(shown.group(1)) == odd
    location = done.headers["location"]
    assert done.status_code == 303 and location.startswith("/seats?q=")
    assert not set('"<> \r\n') & set(location)


def test_under_a_sub_path_next_stays_within_the_portals_root(served: Served) -> None:
    behind = TestClient(served.client.app, root_path="/gpuseat")
    r = behind.get("/seats?x=1", follow_redirects=False)
    assert (r.status_code, r.headers["location"]) == (303, "/gpuseat/login?next=/gpuseat/seats%3Fx%3D1")
    page, done = _login(behind, "/gpuseat/seats?x=1")
    assert (done.status_code, done.headers["location"]) == (303, "/gpuseat/seats?x=1")
    for outside in ("/seats", "/elsewhere", "/gpuseatx/seats", "/gpuseat", "/gpuseat/../seats", "/gpuseat/login"):
        behind.cookies.clear()
        page, done = _login(behind, outside, form_next=False)
        assert NEXT_FIELD.search(page.text) is None, outside
        assert (done.status_code, done.headers["location"]) == (303, "/gpuseat/overview"), outside
    behind.cookies.clear()
    poll = behind.get("/seats/live.json", headers={"x-gpuseat-page": "/gpuseat/seats"})
    assert poll.status_code == 401 and poll.json()["login"] == "/gpuseat/login?next=/gpuseat/seats"
    poll = behind.get("/seats/live.json", headers={"x-gpuseat-page": "/seats"})  # outside the root path
    assert poll.json()["login"] == "/gpuseat/login"


def test_the_polls_json_401_returns_to_the_page_that_polled(served: Served) -> None:
    poll = served.client.get("/seats/live.json", headers={"x-gpuseat-page": "/seats?x=1"})
    assert poll.status_code == 401 and poll.json()["login"] == "/login?next=/seats%3Fx%3D1"
    wanted = served.client.get(poll.json()["login"]).url.params["next"]
    _, done = _login(served.client, wanted)
    assert (done.status_code, done.headers["location"]) == (303, "/seats?x=1")
    served.client.cookies.clear()
    for hostile in ("//evil.example", "https://evil.example", "/login", "/seats\\x"):
        poll = served.client.get("/seats/live.json", headers={"x-gpuseat-page": hostile})
        assert poll.json()["login"] == "/login", hostile
    assert served.client.get("/seats/live.json").json()["login"] == "/login"  # no header: no next
