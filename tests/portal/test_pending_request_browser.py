"""A participant's page with a pending seat request, in Debian's Chromium against a live ``gpuseat serve``; the
request is carried out from another process, as the seat's agent does it (``finish_request``). The page polls
``/t/<token>/seat.json`` while a request is pending: when it is done the page says so where the pending line
was and, nothing being typed on it, reloads so its controls show the new state (Start, "Your seat is
stopped"); when one fails while the participant types, it says the store's reason and "reload", keeps what is
typed, and polls no more. Before, the pending line stayed until the participant reloaded by hand."""

from __future__ import annotations

from pathlib import Path

from .ann_page import ann_served, watched_page
from .test_a11y import AXE, audit
from .test_browser import _need_browser


def test_an_open_page_shows_what_became_of_a_pending_request(tmp_path: Path) -> None:
    sync_playwright = _need_browser()
    seats = [{"key": "mig-01", "kind": "mig", "host": "gpu1", "engine": "host"}]
    store, token, server = ann_served(tmp_path, seats)

    def pending_id() -> int:
        (request,) = store.requests.seat_requests("lab", participant="ann", pending=True)
        return request.id

    try:
        with sync_playwright() as pw:
            w = watched_page(pw, "/seat.json")
            browser, page, errors, polls = w.browser, w.page, w.errors, w.polls
            page.goto(f"{server.url}/t/{token}")
            with page.expect_navigation():  # the form's answer: the page again, the stop pending
                page.click("#seat-stop")
            assert page.locator("#requests").inner_text() == "stop: pending"
            page.evaluate("window.drawn = 1")  # gone once the page reloads
            assert store.requests.finish_request("lab", pending_id(), ok=True, reason="stopped: logins refused")
            page.clock.run_for(2_000)  # the first poll (2 s); the reload's 1.5 s then pass as they do
            # done: the page reloads by itself (nothing typed on it) and its controls say the seat is stopped
            page.locator("#seat-start").wait_for(timeout=20_000)
            assert page.evaluate("window.drawn") is None
            assert page.locator("#requests").inner_text() == "stop: done (stopped: logins refused)"
            assert "Your seat is stopped: logins refused" in page.locator("#stopped").inner_text()
            assert page.locator("#requests-pending").count() == 0 and polls and set(polls) == {200}

            # a start pending (made elsewhere), the participant typing their new key: it fails
            store.requests.request_seat("lab", "ann", "start", actor="participant:ann")
            page.reload()
            outcome = page.locator("#requests-pending")
            assert outcome.get_attribute("role") == "status"  # an aria-live region: read out when it changes
            page.fill("#new-key", "ssh-ed25519 AAAA half-pasted")
            page.evaluate("window.drawn = 2")
            seen = len(polls)
            assert store.requests.finish_request("lab", pending_id(), ok=False, reason="the host <b>did not</b> answer")
            page.clock.run_for(2_000)
            page.locator("#requests-pending", has_text="start: failed").wait_for(timeout=20_000)
            assert outcome.inner_text().startswith("start: failed (the host <b>did not</b> answer).")  # text, no HTML
            assert "Reload the page" in outcome.inner_text()
            if AXE.is_file():  # the outcome as axe-core sees it (test_a11y audits the pages without one)
                assert audit(page, AXE.read_text(encoding="utf-8")) == []
            assert page.locator("#requests li").first.inner_text() == "start: failed (the host <b>did not</b> answer)"
            page.clock.run_for(4_000)  # longer than the reload's delay and a poll's interval
            page.wait_for_timeout(1_000)  # (a reload or poll that went out would land within it)
            assert page.evaluate("window.drawn") == 2, "the page reloaded over what was typed"
            assert page.input_value("#new-key") == "ssh-ed25519 AAAA half-pasted"
            after = len(polls)
            assert after > seen
            page.clock.run_for(10_000)  # the next polls' intervals (3 s, then 4.5 s)
            page.wait_for_timeout(1_000)
            assert len(polls) == after, "it polls on after nothing is pending"
            assert errors == [], errors
            browser.close()
    finally:
        store.close()
        assert server.stop() == 0
