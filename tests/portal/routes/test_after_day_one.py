"""The portal after day one: a participant's page stays open while the organizer moves them, releases them,
rotates or revokes their link, archives or deletes the course — in this server, or in another process (the
CLI, a second server worker) whose change this one learns only from the store.

From the participant's side each next request answers as it now should: the new seat's way in and never the
old seat's, a clear 404/410 page (JSON for the page's polls), never a 500. From the adversary's side a form
from a page loaded before the change (naming the old seat, or carrying the old link's CSRF token) is refused,
never applied to the old seat or to whoever holds it now. A link's error page, shown in a browser where the
organizer is logged in, has no organizer menu and nothing of the course. Uptime monitors' ``HEAD`` gets what
``GET`` would, without a body.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuseat.store import Store, open_store

from .served import CSRF, Served

#: each seat's way in, set by the organizer on the Seats page (a port per seat: the page names only its own)
PORTS = {"mig-01": 2201, "mig-02": 2202, "mig-03": 2203}


def _names_port(text: str, port: int | str) -> bool:
    """Whether ``text`` names ``port`` as a number of its own: a page's 64 hex digits of CSRF token or a link's
    random characters hold "2201" or "220" now and then (a substring test failed at random)."""
    return re.search(rf"(?<![0-9A-Za-z]){port}(?![0-9A-Za-z])", text) is not None


@pytest.fixture
def elsewhere(served: Served) -> Iterator[Store]:
    """The same course store opened a second time: what the CLI or another server worker changes, which this
    portal's caches never hear of."""
    other = open_store(str(served.store.url))
    yield other
    other.close()


@pytest.fixture
def ways(served: Served) -> Served:
    """A third seat, and each seat's way in saved through the organizer's Seats page (then logged out)."""
    served.store.seats.add_seats(
        "lab", [{"key": "mig-03", "kind": "mig", "host": "gpu1", "engine": "host", "device_uuid": "MIG-3"}]
    )
    assert served.login().status_code == 303
    csrf = served.csrf("/seats")
    for seat, port in PORTS.items():
        saved = served.client.post(
            "/seats/connect", data={"csrf": csrf, "seat": seat, "ssh": f"gpu1.example.org:{port}"}
        )
        assert saved.status_code == 200 and "way in saved" in saved.text, saved.text[:300]
    served.client.post("/logout", data={"csrf": csrf})
    return served


def _organizer_move(served: Served, who: str, seat: str) -> None:
    csrf = served.csrf("/seats")
    done = served.client.post("/seats/action", data={"csrf": csrf, "action": "move", "participant": who, "seat": seat})
    assert done.status_code == 200 and f"{who} moved to seat {seat}" in done.text, done.text[:300]


def _stop(served: Served, token: str, csrf: str, seat: str) -> int:
    return served.client.post(
        f"/t/{token}/seat", data={"csrf": csrf, "action": "stop", "seat": seat}, follow_redirects=False
    ).status_code


def _shows_only(served: Served, token: str, seat: str) -> None:
    """Every participant route of ``token`` names ``seat`` and its way in, and no other seat or port."""
    page = served.client.get(f"/t/{token}")
    assert page.status_code == 200, page.text[:300]
    assert _names_port(page.text, PORTS[seat]) and seat in page.text
    for other, port in PORTS.items():
        if other != seat:
            assert other not in page.text and not _names_port(page.text, port)
    assert served.client.get(f"/t/{token}/live").json()["seat"] == seat
    config = served.client.get(f"/t/{token}/ssh_config")
    assert config.status_code == 200 and f"Port {PORTS[seat]}" in config.text and f"gpuseat-{seat}" in config.text
    assert served.client.get(f"/t/{token}/seat.json").status_code == 200


@pytest.mark.parametrize("where", ["portal", "elsewhere"])
def test_a_move_shows_the_new_seats_way_in_and_an_old_form_touches_no_seat(
    ways: Served, elsewhere: Store, where: str
) -> None:
    """Ann's page is open on mig-01; the organizer moves her to mig-03 and gives her old seat to Ben. Her next
    requests show mig-03 only; her old page's Stop (naming mig-01, now Ben's) is answered "reload" and nothing
    is requested for Ben's seat or hers."""
    served, ann = ways, ways.links["ann"]
    _shows_only(served, ann, "mig-01")
    old_csrf = CSRF.search(served.client.get(f"/t/{ann}").text).group(1)  # type: ignore[union-attr]
    if where == "portal":
        assert served.login().status_code == 303
        _organizer_move(served, "ann", "mig-03")
        _organizer_move(served, "ben", "mig-01")
    else:
        elsewhere.seats.move("lab", "ann", "mig-03")
        elsewhere.seats.move("lab", "ben", "mig-01")
    _shows_only(served, ann, "mig-03")
    _shows_only(served, served.links["ben"], "mig-01")
    assert _stop(served, ann, old_csrf, "mig-01") == 409
    assert served.store.requests.seat_requests("lab") == []
    assert _stop(served, ann, old_csrf, "mig-03") == 303  # the same link's form token, her seat now: taken
    assert [(r.participant, r.seat) for r in served.store.requests.seat_requests("lab")] == [("ann", "mig-03")]


@pytest.mark.parametrize("where", ["portal", "elsewhere"])
def test_a_release_leaves_a_seatless_page_and_an_old_form_touches_nothing(
    ways: Served, elsewhere: Store, where: str
) -> None:
    served, ann = ways, ways.links["ann"]
    old_csrf = CSRF.search(served.client.get(f"/t/{ann}").text).group(1)  # type: ignore[union-attr]
    if where == "portal":
        assert served.login().status_code == 303
        done = served.client.post(
            "/seats/action", data={"csrf": served.csrf("/seats"), "action": "release", "participant": "ann"}
        )
        assert done.status_code == 200 and "released seat mig-01 of ann" in done.text
    else:
        elsewhere.seats.release("lab", participant="ann")
    page = served.client.get(f"/t/{ann}")
    assert page.status_code == 200 and "mig-0" not in page.text and not _names_port(page.text, r"220\d")
    assert served.client.get(f"/t/{ann}/live").json()["seat"] is None
    assert served.client.get(f"/t/{ann}/ssh_config").status_code == 404
    assert served.client.get(f"/t/{ann}/seat.json").json()["requests"] == []
    stale = served.client.post(
        f"/t/{ann}/seat", data={"csrf": old_csrf, "action": "stop", "seat": "mig-01"}, follow_redirects=False
    )
    assert stale.status_code == 409 and "you hold no seat now" in stale.text
    assert served.store.requests.seat_requests("lab") == []


def _links_action(served: Served, action: str, who: str) -> None:
    done = served.client.post("/links", data={"csrf": served.csrf("/links"), "action": action, "participant": who})
    assert done.status_code == 200, done.text[:300]


@pytest.mark.parametrize("where", ["portal", "elsewhere"])
@pytest.mark.parametrize("action", ["rotate", "revoke"])
def test_a_rotated_or_revoked_link_stops_at_once_in_every_process(
    served: Served, elsewhere: Store, where: str, action: str
) -> None:
    """The link was opened (and cached) just before; the change made in this server or in another process
    answers the very next request: 404 for the page, JSON 404 for its polls, and its old form refused."""
    ann = served.links["ann"]
    old_csrf = CSRF.search(served.client.get(f"/t/{ann}").text).group(1)  # type: ignore[union-attr]
    new: str | None = None
    if where == "portal":
        assert served.login().status_code == 303
        _links_action(served, action, "ann")
        assert served.client.post("/logout", data={"csrf": served.csrf("/overview")}).status_code in (200, 303)
    elif action == "rotate":
        new = elsewhere.tokens.rotate_tokens("lab", ["ann"])[0].token
    else:
        assert elsewhere.tokens.revoke_tokens("lab", ["ann"]) == 1
    page = served.client.get(f"/t/{ann}")
    assert page.status_code == 404 and "not valid" in page.text
    for poll in ("live", "seat.json"):
        answer = served.client.get(f"/t/{ann}/{poll}")
        assert answer.status_code == 404 and "not valid" in answer.json()["error"]
    assert served.client.get(f"/t/{ann}/ssh_config").status_code == 404
    assert _stop(served, ann, old_csrf, "mig-01") == 404
    if new is not None:  # the new link opens her page; the old page's form token is not its own
        assert served.client.get(f"/t/{new}").status_code == 200
        assert _stop(served, new, old_csrf, "mig-01") == 403
    assert served.store.requests.seat_requests("lab") == []
    assert served.client.get(f"/t/{served.links['ben']}").status_code == 200  # ben's link is untouched


def _no_menu_nor_course(text: str) -> None:
    """A link's error page: no organizer menu, no logout form, nothing of the course or its people."""
    for said in ("/overview", "/logout", "Log out", "/roster", "admin", "Lab", "Ann", "Ben", "mig-0"):
        assert said not in text, said


def test_a_links_error_pages_show_no_organizer_menu_while_the_organizer_is_logged_in(
    served: Served, tmp_path: Path
) -> None:
    """The organizer tries a participant's link in their own browser (logged in): whatever the link answers
    (unknown, revoked, a wrong path under it, a wrong method, bad input, archived, deleted), the page is the
    participant's error page, never the organizer's menu."""
    assert served.login().status_code == 303
    assert "Log out admin" in served.client.get("/overview").text  # logged in: the menu is there
    ann, ben = served.links["ann"], served.links["ben"]
    served.store.tokens.revoke_tokens("lab", ["ben"])
    answers = {
        f"/t/{'x' * 43}": 404,
        f"/t/{ben}": 404,
        f"/t/{ann}/nothing-here": 404,
        f"/t/{ann}/": 404,
    }
    for path, status in answers.items():
        r = served.client.get(path)
        assert r.status_code == status, (path, r.status_code)
        _no_menu_nor_course(r.text)
    wrong_method = served.client.put(f"/t/{ann}")
    assert wrong_method.status_code == 405
    _no_menu_nor_course(wrong_method.text)
    csrf = CSRF.search(served.client.get(f"/t/{ann}").text).group(1)  # type: ignore[union-attr]
    bad = served.client.post(f"/t/{ann}/seat", data={"csrf": csrf, "action": "reset", "confirm": "no"})
    assert bad.status_code == 400 and "type reset" in bad.text
    assert "Log out" not in bad.text and "/overview" not in bad.text
    served.store.lifecycle.archive_course("lab", actor="cli")
    archived = served.client.get(f"/t/{ann}")
    assert archived.status_code == 410 and "archived" in archived.text
    _no_menu_nor_course(archived.text)
    done = served.store.lifecycle.delete_course("lab", export_to=tmp_path / "lab.zip", actor="cli")
    assert done
    deleted = served.client.get(f"/t/{ann}")
    assert deleted.status_code == 404 and "not valid" in deleted.text
    _no_menu_nor_course(deleted.text)


@pytest.mark.parametrize("where", ["portal", "elsewhere"])
def test_an_open_page_of_an_archived_then_deleted_course_answers_410_then_404(
    served: Served, elsewhere: Store, tmp_path: Path, where: str
) -> None:
    ann = served.links["ann"]
    assert served.client.get(f"/t/{ann}").status_code == 200  # open (and cached)
    store = served.store if where == "portal" else elsewhere
    store.lifecycle.archive_course("lab", actor="cli")
    for path in (f"/t/{ann}", f"/t/{ann}/live", f"/t/{ann}/seat.json"):
        assert served.client.get(path).status_code == 410, path
    store.lifecycle.delete_course("lab", export_to=tmp_path / "lab.zip", actor="cli")
    for path in (f"/t/{ann}", f"/t/{ann}/live", f"/t/{ann}/seat.json", f"/t/{ann}/ssh_config"):
        assert served.client.get(path).status_code == 404, path


def test_head_answers_as_get_without_a_body(served: Served) -> None:
    """Uptime monitors and link checkers probe with HEAD: the status and headers of the GET, no body."""
    ann = served.links["ann"]
    for path in ("/", f"/t/{ann}", f"/t/{ann}/live", "/login", f"/t/{'x' * 43}"):
        get = served.client.get(path, follow_redirects=False)
        head = served.client.head(path, follow_redirects=False)
        assert head.status_code == get.status_code, (path, head.status_code, get.status_code)
        assert head.content == b""
        assert head.headers.get("content-type") == get.headers.get("content-type")
        assert head.headers.get("location") == get.headers.get("location")
        assert head.headers["content-security-policy"] == get.headers["content-security-policy"]
    # a route that takes only POST still refuses HEAD
    assert served.client.head(f"/t/{ann}/seat").status_code == 405
