"""The course settings page in Debian's Chromium against a live ``gpuseat serve``: the organizer goes from
the overview to the settings, is told a wrong field by name (nothing stored), then lowers quota_hours,
and the participant's page counts the new hours."""

from __future__ import annotations

from pathlib import Path

from .ann_page import ann_store
from .live import start
from .test_browser import ARGS, CHROMIUM, _need_browser

PASSWORD = "correct horse battery"


def test_an_organizer_changes_quota_hours_and_the_participant_page_shows_them(tmp_path: Path) -> None:
    sync_playwright = _need_browser()
    seat = {"key": "mig-01", "kind": "mig", "host": "gpu1", "engine": "host", "device_uuid": "MIG-1"}
    store, url, token = ann_store(tmp_path, [seat], "name,email,unix_user\nAnn,ann@example.org,ann\n")
    store.accounts.set_password("admin", PASSWORD)
    store.close()
    server = start(["--db", url, "--links-expire", "never"], tmp_path / "serve.log")
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            who = browser.new_page()
            who.goto(f"{server.url}/t/{token}")
            assert "40.0 of 40 h left" in who.inner_text("#controls")

            page = browser.new_context().new_page()
            page.goto(server.url + "/login")
            page.fill("input[name=username]", "admin")
            page.fill("input[name=password]", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_url("**/overview")
            page.click("#course-settings")
            page.wait_for_url("**/course/settings")
            assert page.input_value("input[name='policy.quota_hours']") == "40.0"
            page.fill("input[name='policy.quota_hours']", "-1")
            page.click("#settings-save")
            assert "quota_hours: Input should be greater than or equal to 0" in page.inner_text(".field-error")
            assert "nothing was saved" in page.inner_text(".error[role=alert]")
            page.fill("input[name='policy.quota_hours']", "25")
            page.click("#settings-save")
            assert "saved 1 change" in page.inner_text(".notice")
            assert page.input_value("input[name='policy.quota_hours']") == "25.0"

            who.reload()
            assert "25.0 of 25 h left" in who.inner_text("#controls")
            browser.close()
    finally:
        assert server.stop() == 0
