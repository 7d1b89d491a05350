"""A participant's page left open while the organizer moves them, then revokes their link, in Debian's Chromium
against a live ``gpuseat serve``, the changes made by another process (as the CLI would). The page's poll of
``/t/<token>/live`` finds the seat changed and says so at the top (before, it showed the new seat's readings
under the old seat's way in, without a word), then finds the link gone, says the link's own words and polls
no more (before, a 404 poll was ignored and the page polled on, stale)."""

from __future__ import annotations

from pathlib import Path

from gpuseat.store import open_store

from .live import start
from .routes.served import COURSE
from .test_browser import ARGS, CHROMIUM, _need_browser


def test_an_open_participant_page_says_when_its_seat_changed_or_its_link_is_gone(tmp_path: Path) -> None:
    sync_playwright = _need_browser()
    url = f"sqlite:///{tmp_path / 'course.db'}"
    store = open_store(url, create=True)
    (tmp_path / "lab.toml").write_text(COURSE)
    store.courses.create_course(tmp_path / "lab.toml", key="lab")
    (tmp_path / "r.csv").write_text("name,email\nAnn,ann@example.org\n")
    store.roster.import_roster("lab", tmp_path / "r.csv")
    store.seats.add_seats(
        "lab",
        [
            {"key": f"mig-0{i}", "kind": "mig", "host": "gpu1", "engine": "host", "device_uuid": f"MIG-{i}"}
            for i in (1, 3)
        ],
    )
    store.seats.assign("lab", "ann", "mig-01")
    token = store.tokens.issue_tokens("lab")[0].token
    server = start(["--db", url, "--links-expire", "never"], tmp_path / "serve.log")
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_context().new_page()
            # the page's own clock, still ticking, moved on by a poll's interval where the test would wait one
            page.clock.install()
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            polls: list[int] = []
            page.on("response", lambda r: polls.append(r.status) if r.url.endswith("/live") else None)
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
