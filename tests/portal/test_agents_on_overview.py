"""The organizer's overview shows what the agents did: last apply, pending and failed steps of this
course, the seats still being prepared, or that no agent has reported yet."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from gpuseat.catalog.bundle import load_catalog
from gpuseat.services.demo import seed_demo
from gpuseat.store import open_store
from gpuseat.web.app import Portal, create_app

CSRF = re.compile(r'name="csrf" value="([0-9a-f]{64})"')


def _login(client: TestClient, password: str) -> None:
    page = client.get("/login")
    r = client.post(
        "/login",
        data={"csrf": CSRF.search(page.text).group(1), "username": "admin", "password": password},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text[:300]


def test_the_overview_names_agents_and_their_failed_steps(tmp_path: Path) -> None:
    demo = seed_demo(tmp_path / "demo")
    with open_store(demo.db_url) as store:
        portal = Portal(store, load_catalog(), demo.course, link_days_after_end=None)
        with TestClient(create_app(portal)) as client:
            _login(client, demo.password)
            first = client.get("/overview").text
            assert 'id="no-agent"' in first  # nobody applies yet: said, with what to run
            store.agents.take_lease("agent:host:gpu1", "gpu1:7:ab", 15)
            store.agents.save_agent_status(
                "agent:host:gpu1", holder="gpu1:7:ab", role="leader", cursor=3, applied=True, pending=1,
                failed=[
                    {"course": demo.course, "engine": "host", "step": "host:gpu1:key.set:ann", "error": "disk full <b>",
                     "exit_code": 1},
                    {"course": "another-course", "engine": "host", "step": "x", "error": "not yours", "exit_code": 1},
                ],
            )  # fmt: skip
            page = client.get("/overview").text
    table = page[page.index('id="agents"') :]
    assert "agent:host:gpu1" in table and "leader" in table
    assert "disk full &lt;b&gt;" in table  # escaped
    assert "not yours" not in table  # another course's failure is not shown here
