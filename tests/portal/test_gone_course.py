"""Issue 38, item 16: a link to a course that was archived or deleted answers 410 or 404 with a page, never a 500.

The course is archived or deleted by the real CLI (``gpuseat course archive`` / ``course delete --yes``)
while the portal serving it keeps running, with its caches warm and then expired.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import gpuseat.web.portal as portal_module
from gpuseat.catalog.bundle import load_catalog
from gpuseat.services.demo import Demo, seed_demo
from gpuseat.store import open_store
from gpuseat.web.app import Portal, create_app

from .live import copy_demo

PASSWORD = "a long enough passphrase"


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """The demo, seeded once for the module; each test serves its own copy (they archive or delete it)."""
    return seed_demo(tmp_path_factory.mktemp("seeded") / "demo")


@pytest.fixture
def served(seeded: Demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    demo = copy_demo(seeded, tmp_path / "demo")
    store = open_store(demo.db_url)
    portal = Portal(store, load_catalog(), demo.course, link_days_after_end=None)
    client = TestClient(create_app(portal), raise_server_exceptions=False)
    yield demo, portal, client
    client.close()
    store.close()


def _expire_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if ten seconds had passed: the portal reads the course again (links are read on every request)."""
    monkeypatch.setattr(portal_module, "COURSE_CACHE_S", 0.0)


def _is_page(r, status: int, words: str) -> None:
    assert r.status_code == status, (r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("text/html") and "<html" in r.text and words in r.text


def test_archived_course_link_answers_410_with_a_page(served, cli, monkeypatch, tmp_path) -> None:
    demo, _portal, client = served
    token = next(iter(demo.links.values()))
    assert client.get(f"/t/{token}").status_code == 200  # warm: the link's lookup is cached
    done = cli("course", "archive", demo.course, "--db", demo.db_url)
    assert done.code == 0, done.err
    _expire_caches(monkeypatch)
    _is_page(client.get(f"/t/{token}"), 410, "archived")
    live = client.get(f"/t/{token}/live")
    assert live.status_code == 410 and "archived" in live.json()["error"]
    # an unknown link stays a plain 404 page
    _is_page(client.get("/t/" + "x" * 43), 404, "not valid")


def test_deleted_course_link_answers_404_with_a_page(served, cli, monkeypatch, tmp_path) -> None:
    demo, _portal, client = served
    token = next(iter(demo.links.values()))
    assert client.get(f"/t/{token}").status_code == 200  # warm caches: the link and the course
    _portal.store.accounts.set_password("admin", PASSWORD)  # an organizer logged in before the deletion
    csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', client.get("/login").text).group(1)  # type: ignore[union-attr]
    assert client.post("/login", data={"csrf": csrf, "username": "admin", "password": PASSWORD}).status_code == 200
    assert client.get("/seats").status_code == 200
    done = cli("course", "delete", demo.course, "--yes", "--export-to", tmp_path / "export.json", "--db", demo.db_url)
    assert done.code == 0, done.err
    _expire_caches(monkeypatch)
    for path in (f"/t/{token}", f"/t/{token}/ssh_config"):
        r = client.get(path)
        assert r.status_code in (404, 410), (path, r.status_code, r.text[:300])
        assert r.status_code != 500
    _is_page(client.get(f"/t/{token}"), 404, "not valid")
    assert client.get(f"/t/{token}/live").status_code == 404
    # the organizer's pages of the served course, deleted under them: 404 pages, never a 500
    for path in ("/overview", "/seats", "/roster", "/links", "/survey", "/report", "/seats/live.json", "/seats.csv"):
        r = client.get(path)
        assert r.status_code == 404, (path, r.status_code, r.text[:300])


def test_deleted_course_while_the_link_is_cached_is_not_a_500(served, cli, tmp_path) -> None:
    demo, portal, client = served
    token = next(iter(demo.links.values()))
    assert client.get(f"/t/{token}").status_code == 200
    done = cli("course", "delete", demo.course, "--yes", "--export-to", tmp_path / "export.json", "--db", demo.db_url)
    assert done.code == 0, done.err
    portal._courses.clear()  # the course's cached view expired, the link's lookup not yet
    r = client.get(f"/t/{token}")
    assert r.status_code in (404, 410) and "<html" in r.text, (r.status_code, r.text[:300])
