"""One served course for the per-router tests: a real SQLite store, two participants on two seats,
their access links, an organizer account, and the portal's ASGI app behind Starlette's TestClient."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuseat.catalog.bundle import load_catalog
from gpuseat.store import open_store
from gpuseat.web.app import Portal, create_app

from .served import COURSE, PASSWORD, Served


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """A fresh course on its own SQLite file (no server process: the ASGI app is called in-process)."""
    store = open_store(f"sqlite:///{tmp_path / 'course.db'}", create=True)
    (tmp_path / "lab.toml").write_text(COURSE)
    store.courses.create_course(tmp_path / "lab.toml", key="lab")
    (tmp_path / "r.csv").write_text("name,email,unix_user\nAnn,ann@example.org,ann\nBen,ben@example.org,ben\n")
    store.roster.import_roster("lab", tmp_path / "r.csv")
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
    portal = Portal(store, load_catalog(), "lab", link_days_after_end=None)
    client = TestClient(create_app(portal), base_url="http://testserver")
    yield Served(store, client, links)
    client.close()
    store.close()
