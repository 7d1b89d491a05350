"""A refused user in the browser: Chromium (Playwright) logs in to a real hub + configurable-http-proxy and
reads gpuseat's reason and contact on the hub's own page, not "Failed to start your server" alone.

The hub runs from ``gpuseat jupyterhub config`` output plus the test harness's site lines, with JupyterHub's
dummy authenticator so that the browser can log in as any user.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hubcourse import make_course
from realhub import HubMissing, find_hub, find_proxy, running_hub

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(name="jupyterhub")]
REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
CONTACT = "the course team (gpu-help@example.edu)"
LOGIN = "c.JupyterHub.authenticator_class = 'dummy'\nc.Authenticator.allow_all = True\n"


def _need_browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("playwright is not installed (scripts/setup.sh --dev installs it)")
        pytest.skip("playwright is not installed")
    if not shutil.which(CHROMIUM):
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is missing (Debian package chromium)")
        pytest.skip(f"{CHROMIUM} is missing")
    try:
        find_hub()
        find_proxy()
    except HubMissing as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    return sync_playwright


def _config(url: str, *flags: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "gpuseat", "jupyterhub", "config", "--db", url, "--course", "lab", *flags],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_refused_user_reads_gpuseats_reason_and_contact_on_the_hub_page(tmp_path):
    sync_playwright = _need_browser()
    url = f"sqlite:///{tmp_path / 'course.db'}"
    store = make_course(url, tmp_path, key="lab", people=["ada", "dee"], seats=1, assign=1)
    text = _config(url, "--spawner", "local", "--contact", CONTACT, "--cull-idle-hours", "0")
    env = {"PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]), "GPUSEAT_DB_URL": url}
    shots = tmp_path / "screenshots"
    shots.mkdir()
    try:
        with running_hub(text, tmp_path / "hub", env=env, tiny=True, http_timeout=30, extra=LOGIN) as hub:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                try:
                    page = browser.new_page()
                    page.goto(hub.url + "/hub/login")
                    page.fill("input[name=username]", "dee")
                    page.fill("input[name=password]", "any")
                    page.click("input[type=submit], button[type=submit]")
                    reason = "No GPU seat for dee: no seat has been assigned to you in course lab"
                    page.wait_for_selector(f"text={reason}", timeout=30_000)
                    body = page.inner_text("body")
                    page.screenshot(path=shots / "refused.png", full_page=True)
                    assert reason in body and CONTACT in body, body
                    # a second try from the home page gives the same clear page, not a generic error
                    page.goto(hub.url + "/hub/spawn/dee")
                    page.wait_for_selector(f"text={reason}", timeout=30_000)
                    assert CONTACT in page.inner_text("body")
                finally:
                    browser.close()
            assert store.seats.seat_of("lab", "dee") is None
            assert "dee" not in hub.servers()
    finally:
        store.close()
