"""The new holder's page, watched in Chromium through a hand-over the agent carries out: it says "being
prepared" and then shows their own login, and never, for one poll, the previous holder's."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .hostlab import Lab
from .test_agent import MIG, AgentProcess, _env, _seat_of, _settings, until

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from portal.live import start
from portal.test_browser import ARGS, CHROMIUM, _need_browser


def test_the_new_holders_page_never_shows_the_old_login(
    hostcourse: tuple[Lab, str], cli: Callable[..., Any], tmp_path: Path
) -> None:
    sync_playwright = _need_browser()
    lab, db = hostcourse
    _settings(cli, lab, db)
    by_uuid = _seat_of(cli, db)
    seat = by_uuid[MIG[0]]
    assert cli("seats", "assign", "--participant", "ann", "--seat", seat, "--db", db).code == 0
    from gpuseat.store import open_store

    with open_store(db) as store:
        tokens = {t.participant: t.token for t in store.tokens.issue_tokens("lab", ["ann", "dan"])}
    agent = AgentProcess(db, tmp_path / "agent.log").start()
    server = start(["--db", db, "--links-expire", "never"], tmp_path / "serve.log")
    try:
        until(lambda: Path(lab.settings()["sshd_dropin"]).exists() and (lab.keys_dir / lab.people["ann"].user).exists())
        lab.start_sshd()
        until(lambda: _env(lab, "ann") == MIG[0])
        ann, dan = lab.people["ann"].user, lab.people["dan"].user
        seen: dict[str, list[str]] = {"ann": [], "dan": []}
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            pages = {who: browser.new_context().new_page() for who in seen}
            for who, page in pages.items():
                page.goto(f"{server.url}/t/{tokens[who]}")
            # the hand-over: ann moves to another seat, dan gets hers; the agent does the rest
            assert cli("seats", "move", "--participant", "ann", "--seat", by_uuid[MIG[2]], "--db", db).code == 0
            assert cli("seats", "assign", "--participant", "dan", "--seat", seat, "--db", db).code == 0

            def both_shown() -> bool:
                for who, page in pages.items():
                    page.reload()
                    seen[who].append(page.inner_text("body"))
                return f"{dan}@127.0.0.1" in seen["dan"][-1] and MIG[2] in seen["ann"][-1]

            until(both_shown, every=0.05)
            pages["dan"].screenshot(path=tmp_path / "dan-ready.png", full_page=True)
            browser.close()
        assert all(f"{ann}@" not in text for text in seen["dan"]), "dan was shown ann's login"
        assert all(f"{dan}@" not in text for text in seen["ann"]), "ann was shown dan's login"
        # one ssh login each (a single try failed once on a loaded CI machine, the pin already in place)
        until(lambda: _env(lab, "dan") == MIG[0])
        until(lambda: _env(lab, "ann") == MIG[2])  # the mover keeps her login, on her new seat
    finally:
        agent.stop()
        server.stop()
