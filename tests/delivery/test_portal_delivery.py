"""Connect details and the readiness checklist in the portal, in Debian's Chromium (Playwright).

The participant copies their SSH command and downloads an ``~/.ssh/config`` entry; the organizer
sets a seat's way in on the seats page and sees "seats ready N/M" on the overview.
"""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from gpuseat.core.readiness import Access, Readiness
from gpuseat.store import open_store
from portal.live import start

from .conftest import COURSE_TOML

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
PASSWORD = "correct horse battery"
DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture
def served(tmp_path: Path):  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'course.db'}"
    store = open_store(url, create=True)
    (tmp_path / "lab.toml").write_text(COURSE_TOML)
    store.courses.create_course(tmp_path / "lab.toml", key="lab")
    (tmp_path / "r.csv").write_text(
        "name;email;unix_user\nAnn Li;ann@example.org;ann\nBen Ode;ben@example.org;ben\nCat Ro;cat@example.org;cat\n"
    )
    store.roster.import_roster("lab", tmp_path / "r.csv")
    store.seats.add_seats(
        "lab",
        [
            {"key": f"mig-0{i}", "kind": "mig", "host": "h200-2x", "engine": "host", "device_uuid": f"MIG-{i}aaa"}
            for i in (1, 2, 3)
        ],
    )
    for who, seat in (("ann", "mig-01"), ("ben", "mig-02"), ("cat", "mig-03")):
        store.seats.assign("lab", who, seat)
    access = Access(kind="ssh", host="gpu1.example.org", port=2222, jump_host="gw.example.org", device_uuid="MIG-1aaa")
    store.delivery.record_delivery("lab", "mig-01", access=access, state="running")
    now = datetime.now(UTC)
    store.delivery.record_readiness(
        [
            Readiness("lab", "mig-01", "ann", "ready", None, "", ("MIG-1aaa",), now, "host"),
            Readiness("lab", "mig-02", "ben", "broken", "no GPU visible to the participant", "", (), now, "host"),
        ]
    )
    links = {t.participant: t.token for t in store.tokens.issue_tokens("lab")}
    store.accounts.set_password("admin", PASSWORD)
    store.close()
    server = start(["--db", url, "--links-expire", "never"], tmp_path / "serve.log")  # a 2016 course, today
    yield server, links
    assert server.stop() == 0


def test_connect_details_and_readiness_checklist(served, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    server, links = served
    # without a browser: the page and the ~/.ssh/config download
    ann = httpx.get(f"{server.url}/t/{links['ann']}")
    assert "ssh -p 2222 -J gw.example.org ann@gpu1.example.org" in ann.text
    assert "MIG-1aaa" in ann.text and "ready" in ann.text
    conf = httpx.get(f"{server.url}/t/{links['ann']}/ssh_config")
    assert conf.status_code == 200 and "ProxyJump gw.example.org" in conf.text and "User ann" in conf.text
    ben = httpx.get(f"{server.url}/t/{links['ben']}").text
    assert "h200-2x" not in ben and "h200-2x" not in ann.text  # the inventory's name is never shown as a host
    # what is missing, not the organizer's commands (their views name ssh_host: tests/store/test_newcomer.py)
    assert "no GPU visible" in ben and "no reachable address yet: your organizer has to set it" in ben
    assert "`gpuseat " not in ben and "ssh_host" not in ben
    assert httpx.get(f"{server.url}/t/{links['ben']}/ssh_config").status_code == 404

    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("playwright is not installed")
        pytest.skip("playwright is not installed")
    if not shutil.which(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing")
    shots = tmp_path / "shots"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        ctx = browser.new_context(viewport={"width": 1100, "height": 900})
        ctx.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.url)
        p = ctx.new_page()
        p.goto(f"{server.url}/t/{links['ann']}")
        p.click("#copy-connect")
        p.wait_for_selector("#copy-connect:text('Copied')")
        assert p.evaluate("navigator.clipboard.readText()") == "ssh -p 2222 -J gw.example.org ann@gpu1.example.org"
        p.screenshot(path=shots / "participant.png", full_page=True)

        org = ctx.new_page()
        org.goto(server.url + "/")
        org.fill("input[name=username]", "admin")
        org.fill("input[name=password]", PASSWORD)
        org.click("button[type=submit]")
        org.wait_for_url("**/overview")
        assert org.inner_text("#seats-ready") == "1/3"
        assert "mig-02: no GPU visible" in org.inner_text("#broken-seats")
        org.locator("#readiness").screenshot(path=shots / "readiness.png")
        org.click("nav >> text=Seats")
        org.select_option("#seat-connect select[name=seat]", "mig-03")
        org.fill("#seat-connect input[name=ssh]", "gpu1.example.org:2222")
        org.click("#seat-connect-save")
        assert "mig-03: way in saved" in org.inner_text(".notice")
        assert "ssh -p 2222 cat@gpu1.example.org" in org.inner_text("#ways-in tr[data-seat=mig-03]")
        assert "broken: no GPU visible" in org.inner_text("#ways-in tr[data-seat=mig-02]")
        org.fill("#seat-connect input[name=url]", "javascript:alert(1)")
        org.click("#seat-connect-save")
        assert "--url" in org.inner_text(".error")
        browser.close()
    cat = httpx.get(f"{server.url}/t/{links['cat']}").text
    assert "ssh -p 2222 cat@gpu1.example.org" in cat
    if os.environ.get("GPUSEAT_DOCS_SCREENSHOTS") == "1":  # refresh the picture in docs/
        shutil.copy(shots / "readiness.png", DOCS / "readiness.png")
        shutil.copy(shots / "participant.png", DOCS / "participant-connect.png")
