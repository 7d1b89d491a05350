"""The participant's controls in Debian's Chromium (Playwright), with ``gpuseat serve`` and ``gpuseat agent``
as their own processes on a stand-in host with a real sshd (issue 40).

As ann: Stop → the page says done, ssh refused; Start → in again; a new key pasted → the agent installs it,
she logs in with it and the old key is refused. With ``GPUSEAT_TEST_DOCS_SCREENSHOTS=1`` the picture in
docs/participant.md is refreshed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from portal.live import Server, start

from .hostlab import Lab
from .test_agent import AGENT_WAIT_S, MIG, AgentProcess, _seat_of, _settings, until

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
DOCS = Path(__file__).resolve().parents[2] / "docs"


def playwright_or_skip() -> Any:
    """Playwright's ``sync_playwright`` (missing, or no Chromium: fails on CI, skips elsewhere)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("playwright is not installed")
        pytest.skip("playwright is not installed")
    if not shutil.which(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing")
    return sync_playwright


def test_a_participant_stops_starts_and_replaces_their_key_in_the_browser(
    hostcourse: tuple[Lab, str], cli: Callable[..., Any], tmp_path: Path
) -> None:
    sync_playwright = playwright_or_skip()
    lab, db = hostcourse
    _settings(cli, lab, db)
    r = cli("engines", "settings", "host", "ssh_host=gpu1.example.org", "--course", "lab", "--db", db)
    assert r.code == 0, r.err
    by_uuid = _seat_of(cli, db)
    for who, uuid in (("ann", MIG[0]), ("ben", MIG[1])):
        assert cli("seats", "assign", "--participant", who, "--seat", by_uuid[uuid], "--db", db).code == 0
    assert cli("seat", "quota", "--participant", "ann", "--hours", "40", "--db", db).code == 0
    from gpuseat.store import open_store

    with open_store(db) as store:
        links = {t.participant: t.token for t in store.tokens.issue_tokens("lab")}
    shots = tmp_path / "shots"
    agent = AgentProcess(db, tmp_path / "agent.log").start()
    server: Server | None = None
    # each wait on the agent is a deadline, not a timing (it ends as soon as its condition holds): the agent's
    # start-up and passes beside Chromium, the portal and other tests on a loaded 2-core machine are not held
    # to issue 37's 20 s
    try:
        server = start(["--db", db, "--links-expire", "never"], tmp_path / "serve.log")
        until(lambda: Path(lab.settings()["sshd_dropin"]).exists(), AGENT_WAIT_S, why=agent.text)
        lab.start_sshd()
        until(lambda: lab.ssh("ann", "true").returncode == 0, AGENT_WAIT_S, why=agent.text)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1000, "height": 1400})
            url = f"{server.url}/t/{links['ann']}"
            page.goto(url)
            assert "of 40 h left" in page.inner_text("#hours")
            with page.expect_navigation():  # the form's answer is loaded before the page is read or left
                page.click("#seat-stop")
            assert "stop: pending" in page.inner_text("#requests") or "stop: done" in page.inner_text("#requests")

            def says(text: str) -> bool:
                page.goto(url)
                return text in page.inner_text("#requests")

            until(lambda: says("stop: done"), AGENT_WAIT_S, every=0.3, why=agent.text)
            assert lab.ssh("ann", "true").returncode == 255
            assert "Your seat is stopped" in page.inner_text("#stopped")
            with page.expect_navigation():
                page.click("#seat-start")
            assert "start: " in page.inner_text("#requests"), page.inner_text("main")
            until(lambda: says("start: done"), AGENT_WAIT_S, every=0.3, why=agent.text)
            assert lab.ssh("ann", "true").returncode == 0

            new = tmp_path / "newkey"
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ann@new", "-f", str(new)], check=True)
            page.fill("#new-key", new.with_suffix(".pub").read_text())
            with page.expect_navigation():
                page.click("#save-key")
            assert "key: " in page.inner_text("#requests"), page.inner_text("main")
            until(lambda: says("key: done"), AGENT_WAIT_S, every=0.3, why=agent.text)
            assert lab.ssh("ann", "true", key=new).returncode == 0
            assert lab.ssh("ann", "true").returncode == 255
            page.locator("#controls").screenshot(path=shots / "participant-controls.png")
            # ben's seat was never touched
            assert lab.ssh("ben", "true").returncode == 0
            browser.close()
    finally:
        agent.stop()
        if server is not None:
            assert server.stop() == 0
    if os.environ.get("GPUSEAT_TEST_DOCS_SCREENSHOTS") == "1":
        shutil.copy(shots / "participant-controls.png", DOCS / "participant-controls.png")
