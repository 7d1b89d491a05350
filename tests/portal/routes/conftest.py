"""One served course for the per-router tests: a real SQLite store, two participants on two seats,
their access links, an organizer account, and the portal's ASGI app behind Starlette's TestClient."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuseat.catalog.bundle import load_catalog
from gpuseat.store import Store, open_store
from gpuseat.web.app import Portal, create_app

from .served import COURSE, PASSWORD, Served


def course_store(folder: Path) -> tuple[Store, dict[str, str]]:
    """The served course in a real SQLite file in ``folder``, and its participants' access links."""
    store = open_store(f"sqlite:///{folder / 'course.db'}", create=True)
    (folder / "lab.toml").write_text(COURSE)
    store.courses.create_course(folder / "lab.toml", key="lab")
    (folder / "r.csv").write_text("name,email,unix_user\nAnn,ann@example.org,ann\nBen,ben@example.org,ben\n")
    store.roster.import_roster("lab", folder / "r.csv")
    store.seats.add_seats(
        "lab",
        [
            {"key": f"mig-0{i}", "kind": "mig", "host": "gpu1", "engine": "host", "device_uuid": f"MIG-{i}"}
            for i in (1, 2)
        ],
    )
    store.seats.assign("lab", "ann", "mig-01")
    store.seats.assign("lab", "ben", "mig-02")
    links = {t.participant: t.token for t in store.tokens.issue_tokens("lab")}
    store.accounts.set_password("admin", PASSWORD)
    return store, links


@contextmanager
def serving(store: Store, links: dict[str, str]) -> Iterator[Served]:
    """The portal over ``store`` (an app of its own: its own sessions and login limits) behind a TestClient."""
    portal = Portal(store, load_catalog(), "lab", link_days_after_end=None)
    client = TestClient(create_app(portal), base_url="http://testserver")
    try:
        yield Served(store, client, links)
    finally:
        client.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """A fresh course on its own SQLite file (no server process: the ASGI app is called in-process)."""
    store, links = course_store(tmp_path)
    with serving(store, links) as s:
        yield s
    store.close()
