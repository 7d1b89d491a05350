"""Every portal page, at 1280 px and on a 390 px phone, in Chromium: axe-core finds nothing critical or
serious, and nothing is wider than the screen (tables scroll inside their own labelled region).

axe-core comes from npm (``scripts/setup.sh --dev`` puts it in ``.npm/``) and is injected by
Playwright. Screenshots of each page go to the test's tmp folder; with ``PORTAL_SCREENSHOTS=DIR``
they are also written there (docs/screenshots holds the committed ones).
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from .live import csrf_of, demo_credentials, login, start
from .test_browser import ARGS, CHROMIUM, _need_browser

AXE = Path(__file__).resolve().parents[2] / ".npm" / "node_modules" / "axe-core" / "axe.min.js"
ORGANIZER = ["overview", "roster", "seats", "alerts", "bench", "links", "survey", "report", "course/settings"]
WIDTHS = {"desktop": 1280, "phone": 390}
#: the module's tests share one demo server: one xdist worker runs them, so it starts once
pytestmark = pytest.mark.xdist_group(name="portal-a11y-demo")


def _need_axe() -> str:
    if not AXE.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{AXE} is missing (scripts/setup.sh --dev installs axe-core)")
        pytest.skip("axe-core is not installed")
    return AXE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    server = start(["--demo"], tmp_path_factory.mktemp("a11y") / "serve.log")
    password, token = demo_credentials(server.printed)
    server.extra.update(password=password, token=token)
    yield server
    assert server.stop() == 0


def audit(page, axe: str) -> list[str]:
    """axe-core's critical and serious findings on the open page, one line each."""
    page.evaluate(axe + "\n;0")  # through the DevTools protocol: the page's own CSP stays in force
    found = page.evaluate(
        """async () => {
            const r = await axe.run(document, {resultTypes: ["violations"]});
            return r.violations.filter(v => v.impact === "critical" || v.impact === "serious")
                .map(v => v.impact + " " + v.id + ": " + v.nodes.map(n => n.target.join(" ")).join(", "));
        }"""
    )
    return list(found)


@pytest.mark.parametrize("size", list(WIDTHS))
def test_every_page_is_accessible_and_fits(demo, size, tmp_path):
    sync_playwright = _need_browser()
    axe = _need_axe()
    width = WIDTHS[size]
    out = Path(os.environ.get("PORTAL_SCREENSHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    token = demo.extra["token"]
    problems: dict[str, list[str]] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = browser.new_context(viewport={"width": width, "height": 900})
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)

        def check(name: str, url: str | None = None) -> None:
            if url is not None:
                page.goto(url)
            findings = audit(page, axe)
            wide = page.evaluate("document.documentElement.scrollWidth")
            if wide > width:
                findings.append(f"page is {wide} px wide at {width} px")
            if findings:
                problems[name] = findings
            page.screenshot(path=out / f"{name}-{size}.png", full_page=False)

        check("login", demo.url + "/login")
        page.fill("input[name=username]", "admin")
        page.fill("input[name=password]", demo.extra["password"])
        page.click("button[type=submit]")
        page.wait_for_url("**/overview")
        for name in ORGANIZER:
            check(name.replace("/", "-"), f"{demo.url}/{name}")
        page.goto(f"{demo.url}/roster")
        page.click("button[form=roster-remove]")  # the Roster page's question before a removal (nothing goes yet)
        page.wait_for_selector("#remove-confirm")
        check("roster-remove")
        who = context.new_page()
        who.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page = who
        check("participant", f"{demo.url}/t/{token}")
        check("unknown-link", f"{demo.url}/t/{'x' * 43}")
        browser.close()
    assert problems == {}
    assert errors == [] or all("404" in e for e in errors)  # the unknown link's own 404 is expected


def test_destructive_actions_ask_first(demo):
    """Revoke all, rotate all and release carry a confirmation (portal.js asks before sending)."""
    with httpx.Client(base_url=demo.url) as c:
        assert login(c, demo.url, demo.extra["password"]).status_code == 303
        links = c.get("/links").text
        seats = c.get("/seats").text
        csrf_of(links)
    for button in ("links-revoke", "links-rotate"):
        assert f'id="{button}" data-confirm="' in links, button
    assert 'class="small" data-confirm="' in seats
