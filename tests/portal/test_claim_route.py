"""A participant takes a pool seat from their page (``POST /t/<token>/claim``, issue 38 item 19), through
the ASGI app with httpx, on SQLite and PostgreSQL.

From the participant's side: the button on a seatless page takes a seat and the page then shows it; a
double click is one seat. From the adversary's side: another's link with one's own CSRF token, no CSRF
token, a cross-site post, a made-up link, a link of an archived course and a burst are refused, and
nobody's seat changes. Under a rush, 50 claims at once on 20 seats give 20 distinct seats and 30 clear
"no seat left" answers.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpuseat.catalog.bundle import load_catalog
from gpuseat.core.roster import RosterText
from gpuseat.store import open_store
from gpuseat.store.requests import RATE_LIMIT
from gpuseat.web.app import Portal, create_app
from gpuseat.web.routes.claim import NO_SEAT_LEFT

COURSE = 'name = "Rush"\nparticipants = {n}\n[schedule]\nstart = 2026-09-07\ndays = 5\n'
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def _served(db_url: str, tmp_path: Path, people: int, seats: int) -> tuple[Any, Portal, dict[str, str]]:
    store = open_store(db_url, create=True)
    (tmp_path / "rush.toml").write_text(COURSE.format(n=people))
    store.courses.create_course(tmp_path / "rush.toml", key="rush")
    rows = "name,email\n" + "".join(f"P{i},p{i:02d}@example.org\n" for i in range(people))
    store.roster.import_roster("rush", RosterText(rows, where="roster"))
    store.seats.add_seats("rush", [{"key": f"s{i:02d}", "kind": "gpu", "host": "gpu1"} for i in range(seats)])
    links = {t.participant: t.token for t in store.tokens.issue_tokens("rush")}
    return store, Portal(store, load_catalog(), "rush", link_days_after_end=None), links


@pytest.fixture
def served(db_url: str, tmp_path: Path) -> Iterator[tuple[Any, TestClient, dict[str, str]]]:
    store, portal, links = _served(db_url, tmp_path, people=3, seats=2)
    client = TestClient(create_app(portal), base_url="http://testserver")
    yield store, client, links
    client.close()
    store.close()


def _csrf(client: TestClient, token: str) -> str:
    page = client.get(f"/t/{token}")
    assert page.status_code == 200, page.text[:300]
    found = CSRF.search(page.text)
    assert found, page.text
    return found.group(1)


def _claim(client: TestClient, token: str, **form: str) -> Any:
    return client.post(f"/t/{token}/claim", data=form, follow_redirects=False)


def _held(store: Any) -> dict[str, str]:
    return {s.participant: s.key for s in store.seats.seats("rush") if s.participant}


def test_a_participant_takes_a_seat_and_sees_it_on_their_page(served: Any) -> None:
    store, client, links = served
    first = client.get(f"/t/{links['p00']}").text
    assert 'id="no-seat"' in first and 'id="seat-claim"' in first
    r = _claim(client, links["p00"], csrf=_csrf(client, links["p00"]))
    assert r.status_code == 303 and r.headers["location"] == f"/t/{links['p00']}#seat"
    seat = _held(store)["p00"]
    # the page the redirect lands on shows the seat at once (its link's lookup was cached without one)
    page = client.get(r.headers["location"]).text
    assert f'<dd id="seat-key">{seat}</dd>' in page and 'id="seat-claim"' not in page
    claims = [e for e in store.events.events("rush") if e.action == "seat.claim"]
    assert [(e.participant, e.seat, e.actor) for e in claims] == [("p00", seat, "participant:p00")]


def test_a_double_click_is_one_seat(served: Any) -> None:
    store, client, links = served
    csrf = _csrf(client, links["p00"])
    answers = [_claim(client, links["p00"], csrf=csrf) for _ in range(2)]
    assert [a.status_code for a in answers] == [303, 303]
    assert list(_held(store)) == ["p00"]
    assert sum(e.action == "seat.claim" for e in store.events.events("rush")) == 1


def test_another_link_no_token_cross_site_or_a_made_up_link_take_nothing(served: Any) -> None:
    store, client, links = served
    mine = _csrf(client, links["p00"])
    # p00's form token on p01's link (she learnt his link's URL but not his page's form token)
    assert _claim(client, links["p01"], csrf=mine).status_code == 403
    assert _claim(client, links["p01"]).status_code == 403  # no CSRF token at all
    assert _claim(client, "x" * 43, csrf=mine).status_code == 404
    cross = client.post(
        f"/t/{links['p00']}/claim",
        data={"csrf": mine},
        headers={"origin": "https://evil.example.org", "sec-fetch-site": "cross-site"},
        follow_redirects=False,
    )
    assert cross.status_code == 403
    assert _held(store) == {}
    # a form that names someone else still claims for the link's own participant only
    assert _claim(client, links["p00"], csrf=mine, participant="p01").status_code == 303
    assert list(_held(store)) == ["p00"]


def test_an_archived_courses_link_claims_nothing(served: Any) -> None:
    store, client, links = served
    csrf = _csrf(client, links["p00"])  # the page is open (its link's lookup cached) when the course is archived
    store.lifecycle.archive_course("rush", actor="organizer")
    r = _claim(client, links["p00"], csrf=csrf)
    assert r.status_code == 410 and "archived" in r.text
    assert _held(store) == {}


def test_a_burst_of_claims_is_refused(served: Any) -> None:
    _store, client, links = served
    csrf = _csrf(client, links["p02"])
    codes = [_claim(client, links["p02"], csrf=csrf).status_code for _ in range(RATE_LIMIT + 2)]
    assert codes == [303] * RATE_LIMIT + [429] * 2, codes


def test_the_last_participant_hears_no_seat_is_left(served: Any) -> None:
    store, client, links = served
    for who in ("p00", "p01"):
        assert _claim(client, links[who], csrf=_csrf(client, links[who])).status_code == 303
    late = _claim(client, links["p02"], csrf=_csrf(client, links["p02"]))
    assert late.status_code == 409 and NO_SEAT_LEFT in late.text and 'id="seat-claim"' in late.text
    assert sorted(_held(store)) == ["p00", "p01"]


def test_fifty_claims_at_once_on_twenty_seats(db_url: str, tmp_path: Path) -> None:
    store, portal, links = _served(db_url, tmp_path, people=50, seats=20)
    app = create_app(portal)
    clients = {who: TestClient(app, base_url="http://testserver") for who in links}
    forms = {who: {"csrf": _csrf(clients[who], token)} for who, token in links.items()}
    answers: dict[str, Any] = {}
    start = threading.Barrier(len(links))

    def claim(who: str) -> None:
        start.wait()
        answers[who] = _claim(clients[who], links[who], **forms[who])

    threads = [threading.Thread(target=claim, args=(who,)) for who in links]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    try:
        codes = sorted(a.status_code for a in answers.values())
        assert codes == [303] * 20 + [409] * 30, codes
        assert all(NO_SEAT_LEFT in a.text for a in answers.values() if a.status_code == 409)
        held = _held(store)
        seated = {who for who, a in answers.items() if a.status_code == 303}
        assert set(held) == seated and len(set(held.values())) == 20
    finally:
        for c in clients.values():
            c.close()
        store.close()
