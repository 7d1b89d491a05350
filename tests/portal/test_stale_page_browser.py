"""A participant's page left open while the organizer moves them, then revokes their link, in Debian's Chromium
against a live ``gpuseat serve``, the changes made by another process (as the CLI would). The page's poll of
``/t/<token>/live`` finds the seat changed and says so at the top (before, it showed the new seat's readings
under the old seat's way in, without a word), then finds the link gone, says the link's own words and polls
no more (before, a 404 poll was ignored and the page polled on, stale)."""

from __future__ import annotations

from pathlib import Path

from .ann_page import ann_served, watched_page
from .test_browser import _need_browser


def test_an_open_participant_page_says_when_its_seat_changed_or_its_link_is_gone(tmp_path: Path) -> None:
    sync_playwright = _need_browser()
    seats = [
        {"key": f"mig-0{i}", "kind": "mig", "host": "gpu1", "engine": "host", "device_uuid": f"MIG-{i}"} for i in (1, 3)
    ]
    store, token, server = ann_served(tmp_path, seats)
    try:
        with sync_playwright() as pw:
            w = watched_page(pw, "/live")
            browser, page, errors, polls = w.browser, w.page, w.errors, w.polls
            with page.expect_response("**/live") as first:
                page.goto(f"{server.url}/t/{token}")
            assert first.value.status == 200
            stale = page.locator("#page-stale")
            assert page.locator("#seat-key").inner_text() == "mig-01" and stale.is_hidden()

            store.seats.move("lab", "ann", "mig-03")  # another process: the CLI
            page.clock.run_for(5_000)  # the next poll (every 5 s)
            stale.wait_for(state="visible", timeout=30_000)
            assert "it is now mig-03" in stale.inner_text() and "reload the page" in stale.inner_text()

            store.tokens.revoke_tokens("lab", ["ann"])
            page.clock.run_for(5_000)
            page.locator("#page-stale", has_text="This link is not valid").wait_for(timeout=30_000)
            seen = len(polls)
            page.clock.run_for(12_000)  # two polls' intervals: none goes out after the link was found gone
            page.wait_for_timeout(1_000)  # (one that went out would be answered within it)
            assert polls[-1] == 404 and len(polls) == seen, polls
            # the only console error is Chromium's own line for the 404 (no CSP violation, no script error)
            assert [e for e in errors if "status of 404" not in e] == [], errors
            browser.close()
    finally:
        store.close()
        assert server.stop() == 0
