"""More of the participant's controls in Chromium (Playwright), with ``gpuseat serve`` and ``gpuseat agent``
as their own processes on a stand-in host with a real sshd (issue 40), in one browser session.

As ann: "X of Y h left" is what the store computes, and drops by the span her seat ran; Restart ends
her processes; Reset needs the typed confirmation, then her home is the skeleton. As an adversary with
ann's page: a form naming ben's seat or ben, ann's form sent to ben's link, and an unknown link are
refused and ben's seat gets no request; the same form sent twice makes one request; a form from an old
(rotated) link and a form posted from another site are refused.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from portal.live import start

from .hostlab import Lab
from .test_agent import MIG, AgentProcess, _alive_of, _seat_of, _settings, until
from .test_selfservice import _held_since, _uid
from .test_selfservice_browser import ARGS, CHROMIUM, playwright_or_skip

POST = """async ([url, fields]) => {
  const r = await fetch(url, {method: "POST", body: new URLSearchParams(fields), redirect: "manual"});
  return r.type === "opaqueredirect" ? 303 : r.status;
}"""


def test_restart_reset_hours_and_forged_or_replayed_forms_in_the_browser(
    hostcourse: tuple[Lab, str], cli: Callable[..., Any], tmp_path: Path
) -> None:
    sync_playwright = playwright_or_skip()
    from gpuseat.store import open_store

    lab, db = hostcourse
    _settings(cli, lab, db)
    skeleton = tmp_path / "skel"
    skeleton.mkdir()
    (skeleton / "README.txt").write_text("welcome to the lab\n")
    skeleton.chmod(0o755)
    assert cli("engines", "settings", "host", f"skeleton={skeleton}", "--course", "lab", "--db", db).code == 0
    by_uuid = _seat_of(cli, db)
    seat = {"ann": by_uuid[MIG[0]], "ben": by_uuid[MIG[1]]}
    for who, key in seat.items():
        assert cli("seats", "assign", "--participant", who, "--seat", key, "--db", db).code == 0
    assert cli("seat", "quota", "--participant", "ann", "--hours", "40", "--db", db).code == 0
    with open_store(db) as store:
        links = {t.participant: t.token for t in store.tokens.issue_tokens("lab")}

    def left() -> str:
        with open_store(db) as store:
            return f"{store.requests.seat_hours('lab', participant='ann')['ann'].left:.1f}"

    def rows(who: str) -> list[Any]:
        with open_store(db) as store:
            return store.requests.seat_requests("lab", participant=who, limit=100)

    agent = AgentProcess(db, tmp_path / "agent.log").start()
    server = start(["--db", db, "--links-expire", "never"], tmp_path / "serve.log")
    try:
        until(lambda: Path(lab.settings()["sshd_dropin"]).exists())
        lab.start_sshd()
        until(lambda: lab.ssh("ann", "true").returncode == 0)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1000, "height": 1400})
            url = f"{server.url}/t/{links['ann']}"

            def shown_hours() -> str:
                page.goto(url)
                m = re.match(r"(\d+\.\d) of 40 h left", page.inner_text("#hours"))
                assert m is not None, page.inner_text("#hours")
                return m[1]

            def says(text: str) -> bool:
                page.goto(url)
                return text in page.inner_text("#requests")

            # hours left: what the store computes, and 2 h less once her seat has run 2 h more
            before = shown_hours()
            assert before == left() and float(before) > 39.5
            _held_since(db, 120)
            after = shown_hours()
            assert after == left() and 1.9 <= float(before) - float(after) <= 2.1

            # restart: her processes end, she can log in
            stray = subprocess.Popen(["runuser", "-u", lab.people["ann"].user, "--", "sleep", "600"])
            try:
                until(lambda: _alive_of(_uid(lab, "ann")))
                page.goto(url)
                page.click("#seat-restart")
                until(lambda: says("restart: done"), every=0.3)
                until(lambda: not _alive_of(_uid(lab, "ann")))
            finally:
                stray.kill()
                stray.wait()
            assert lab.ssh("ann", "true").returncode == 0

            # reset: refused until she types "reset"; then her home is the skeleton
            assert lab.ssh("ann", "echo mine > ~/notes.txt").returncode == 0
            page.goto(url)
            with page.expect_navigation():
                page.click("#seat-reset")
            assert "type reset in the box to confirm" in page.inner_text("body")
            assert [r.action for r in rows("ann")] == ["restart"]
            page.goto(url)
            page.fill("#reset-confirm", "reset")
            with page.expect_navigation():
                page.click("#seat-reset")
            until(lambda: says("reset: done"), every=0.3)
            listing = lab.ssh("ann", "ls -A ~; cat ~/README.txt")
            assert "notes.txt" not in listing.stdout and "welcome to the lab" in listing.stdout, listing

            # forged forms: ann's page naming ben's seat or ben, ann's form on ben's link, an unknown link
            page.goto(url)
            csrf = page.input_value("#controls form input[name=csrf]")
            mine = f"{url}/seat"
            assert page.evaluate(POST, [mine, {"csrf": csrf, "action": "stop", "seat": seat["ben"]}]) == 403
            assert page.evaluate(POST, [mine, {"csrf": csrf, "action": "stop", "participant": "ben"}]) == 403
            bens = f"{server.url}/t/{links['ben']}/seat"
            assert page.evaluate(POST, [bens, {"csrf": csrf, "action": "stop"}]) == 403
            unknown = f"{server.url}/t/{'x' * len(links['ben'])}/seat"
            assert page.evaluate(POST, [unknown, {"csrf": csrf, "action": "stop"}]) == 404
            assert rows("ben") == [] and lab.ssh("ben", "true").returncode == 0

            # a form posted from another site (an attacker's page that knows the form) is refused
            evil = "http://evil.example/"
            page.route(evil, lambda route: route.fulfill(content_type="text/html", body=(
                f"<form id=f method=post action='{mine}'><input name=csrf value='{csrf}'>"
                "<input name=action value=stop></form><script>document.getElementById('f').submit()</script>"
            )))  # fmt: skip
            with page.expect_response(mine) as got:
                page.goto(evil)
            assert got.value.status == 403 and "cross-site" in got.value.text()
            assert [r.action for r in rows("ann")] == ["reset", "restart"]

            # the same form twice (the agent stopped: the first is still pending) makes one request
            agent.stop()
            page.goto(url)
            assert page.evaluate(POST, [mine, {"csrf": csrf, "action": "stop"}]) == 303
            assert page.evaluate(POST, [mine, {"csrf": csrf, "action": "stop"}]) == 400
            assert (rows("ann")[0].action, rows("ann")[0].state) == ("stop", "pending")
            assert len(rows("ann")) == 3
            # an old form: the organizer gave ann a new link (from the CLI: the portal forgets the old one
            # within its 10 s token cache); the old link and its form token act no more
            with open_store(db) as store:
                (new,) = store.tokens.rotate_tokens("lab", ["ann"])
            until(lambda: page.request.get(url).status == 404, timeout=15, every=0.5)
            assert page.evaluate(POST, [mine, {"csrf": csrf, "action": "start"}]) == 404
            assert page.evaluate(POST, [f"{server.url}/t/{new.token}/seat", {"csrf": csrf, "action": "start"}]) == 403
            assert len(rows("ann")) == 3 and rows("ben") == []
            browser.close()
    finally:
        assert server.stop() == 0
        agent.stop()
