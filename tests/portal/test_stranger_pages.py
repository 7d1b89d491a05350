"""Pages shown to a stranger (neither a logged-in organizer nor the holder of a valid link) carry nothing of
the course: no time zone, name or key anywhere in the answer (its HTML, data attributes, headers). The
organizer's and the participant's own pages keep the course's zone (their times are shown in it).

A real SQLite store behind the ASGI app (Starlette's TestClient).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpuseat.catalog.bundle import load_catalog
from gpuseat.web.app import Portal, create_app

from .routes.served import CSRF

ZONE = "Pacific/Chatham"  # a zone no default and no other word of a page holds
NAME = "Quokka Optics Lab"
KEY = "quokka-optics-7"
PASSWORD = "a long enough passphrase"
COURSE = f"""name = "{NAME}"
participants = 2

[needs]
min_gpu_memory_gb = 16

[schedule]
start = 2026-09-07
days = 21
"""


@pytest.fixture
def course(tmp_path: Path) -> Iterator[tuple[Any, TestClient, dict[str, str]]]:
    from gpuseat.store import open_store

    store = open_store(f"sqlite:///{tmp_path / 'course.db'}", create=True)
    (tmp_path / "c.toml").write_text(COURSE)
    store.courses.create_course(tmp_path / "c.toml", key=KEY, timezone=ZONE)
    (tmp_path / "r.csv").write_text("name,email,unix_user\nAnn,ann@example.org,ann\nBen,ben@example.org,ben\n")
    store.roster.import_roster(KEY, tmp_path / "r.csv")
    links = {t.participant: t.token for t in store.tokens.issue_tokens(KEY)}
    store.accounts.set_password("admin", PASSWORD)
    client = TestClient(create_app(Portal(store, load_catalog(), KEY, link_days_after_end=None)))
    yield store, client, links
    client.close()
    store.close()


def _leaks(answer: Any) -> list[str]:
    """What of the course the whole answer (headers and body) shows."""
    whole = answer.text + "\n" + "\n".join(f"{k}: {v}" for k, v in answer.headers.items())
    return [w for w in (ZONE, "Chatham", NAME, "Quokka", KEY, "data-tz") if w in whole]


def test_an_unknown_links_404_and_the_login_carry_nothing_of_the_course(course: Any) -> None:
    _store, client, _links = course
    unknown = client.get("/t/" + "x" * 40)
    assert unknown.status_code == 404, unknown.text[:300]
    assert _leaks(unknown) == [], unknown.text
    login = client.get("/login")
    assert login.status_code == 200
    assert _leaks(login) == [], login.text
    nowhere = client.get("/no-such-page")  # Starlette's own 404 for a stranger
    assert nowhere.status_code == 404
    assert _leaks(nowhere) == [], nowhere.text


def test_a_revoked_link_and_an_archived_courses_link_carry_nothing_of_the_course(course: Any) -> None:
    store, client, links = course
    assert client.get(f"/t/{links['ann']}").status_code == 200
    store.tokens.revoke_tokens(KEY, ["ann"])
    revoked = client.get(f"/t/{links['ann']}")
    assert revoked.status_code == 404, revoked.text[:300]
    assert _leaks(revoked) == [], revoked.text
    store.lifecycle.archive_course(KEY)
    archived = client.get(f"/t/{links['ben']}")
    assert archived.status_code == 410, archived.text[:300]
    assert _leaks(archived) == [], archived.text


def test_the_participants_and_the_organizers_pages_keep_the_courses_zone(course: Any) -> None:
    _store, client, links = course
    own = client.get(f"/t/{links['ann']}")
    assert own.status_code == 200
    assert f'data-tz="{ZONE}"' in own.text
    csrf = CSRF.search(client.get("/login").text)
    assert csrf is not None
    data = {"csrf": csrf.group(1), "username": "admin", "password": PASSWORD}
    assert client.post("/login", data=data, follow_redirects=False).status_code == 303
    for path in ("/overview", "/seats", "/no-such-page"):
        assert f'data-tz="{ZONE}"' in client.get(path).text, path
