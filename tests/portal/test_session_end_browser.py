"""An open Seats page whose session ends elsewhere goes to the login page by itself, in Debian's Chromium
against a live ``gpuseat serve``: its poll of ``/seats/live.json`` gets a JSON 401 naming the login, and
portal.js follows it (before, the poll's 401 was plain text and the page went stale without a word). The
poll names its page, so logging in again comes back to the Seats page (before, always to the overview)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuseat.store import open_store

from .live import start
from .routes.served import COURSE
from .test_browser import ARGS, CHROMIUM, _need_browser

PASSWORD = "correct horse battery"


def _log_in(page: Any, url: str, lands: str = "/overview") -> None:
    """Log in on the login page open in ``page`` (else a fresh one) and wait to land on ``lands``."""
    if "/login" not in page.url:
        page.goto(url + "/login")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(url + lands)


def test_an_open_seats_page_goes_to_the_login_when_the_session_ends_elsewhere(tmp_path: Path) -> None:
    sync_playwright = _need_browser()
    url = f"sqlite:///{tmp_path / 'course.db'}"
    store = open_store(url, create=True)
    (tmp_path / "lab.toml").write_text(COURSE)
    store.courses.create_course(tmp_path / "lab.toml", key="lab")
    store.seats.add_seats(
        "lab", [{"key": "mig-01", "kind": "mig", "host": "gpu1", "engine": "host", "device_uuid": "MIG-1"}]
    )
    store.accounts.set_password("admin", PASSWORD)
    store.close()
    server = start(["--db", url, "--links-expire", "never"], tmp_path / "serve.log")
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            desk = browser.new_context().new_page()
            errors: list[str] = []
            desk.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            _log_in(desk, server.url)
            polls: list[int] = []
            desk.on("response", lambda r: polls.append(r.status) if r.url.endswith("/seats/live.json") else None)
            named: list[str | None] = []  # the page each poll named (X-Gpuseat-Page)
            desk.on(
                "request", lambda r: named.append(r.headers.get("x-gpuseat-page")) if "/live.json" in r.url else None
            )
            with desk.expect_response("**/seats/live.json") as first:
                desk.goto(server.url + "/seats")  # the page polls at once
            assert first.value.status == 200

            laptop = browser.new_context().new_page()  # the organizer's other session
            _log_in(laptop, server.url)
            laptop.on("dialog", lambda d: d.accept())  # "End every session of admin, on every device?"
            laptop.click("button[formaction$='/logout/everywhere']")
            laptop.wait_for_url("**/login")

            # the next poll (every 5 s) finds the session ended and goes to the login, which returns to /seats
            desk.wait_for_url(server.url + "/login?next=/seats", timeout=60_000)
            assert polls[0] == 200 and polls[-1] == 401 and polls.count(401) == 1, polls
            assert set(named) == {"/seats"}, named  # each poll named its page (no Referer is ever sent)
            assert desk.locator("input[name=password]").count() == 1
            assert desk.locator("input[name=next]").get_attribute("value") == "/seats"
            _log_in(desk, server.url, lands="/seats")  # back where the organizer was
            assert desk.title() == "Seats · gpuseat" and desk.locator("tr[data-seat='mig-01']").count() >= 1
            # the only console errors are Chromium's own line for the 401 (no CSP violation, no script error)
            assert [e for e in errors if "status of 401" not in e] == []
            browser.close()
    finally:
        assert server.stop() == 0
