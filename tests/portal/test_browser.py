"""The whole portal flow in Debian's Chromium, driven by Playwright against a live server.

The organizer logs in, imports a roster, assigns seats, issues and copies a link; the participant
opens it, sees their seat and answers the survey; the organizer sees the NPS and downloads the report.
Screenshots go to the test's temporary folder.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from gpuseat.store import open_store

from .live import start

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PASSWORD = "correct horse battery"
LONG_NAME = "Wolfeschlegelsteinhausenbergerdorff" * 7 + "W" * 11  # 256 characters, no space to break at


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
    return sync_playwright


@pytest.fixture
def course_server(tmp_path):
    url = f"sqlite:///{tmp_path / 'course.db'}"
    store = open_store(url, create=True)
    store.courses.create_course(EXAMPLES / "course-2016.toml", key="dl-2016")
    store.seats.add_seats(
        "dl-2016",
        [
            {
                "key": f"m60-{i}",
                "kind": "gpu",
                "host": "gpu-server.example.org",
                "profile": "M60",
                "memory_gb": 8.0,
                "state": "running",
            }
            for i in range(1, 5)
        ]
        + [{"key": f"aws-{i:02d}", "kind": "cloud", "memory_gb": 4.0, "engine": "skypilot"} for i in range(1, 13)],
    )
    store.accounts.set_password("admin", PASSWORD)
    store.close()
    roster = tmp_path / "roster-16.csv"
    rows = ["name,email,unix_user"] + [f"Student {i:02d},student{i:02d}@example.org,stud{i:02d}" for i in range(1, 16)]
    rows.append(f"{LONG_NAME},student16@example.org,stud16")  # one unbroken name of the longest a roster takes
    roster.write_text("\ufeff" + "\n".join(rows) + "\n", encoding="utf-8")  # a BOM, as spreadsheets write it
    server = start(["--db", url, "--links-expire", "never"], tmp_path / "serve.log")  # a 2016 course, run today
    yield server, roster
    assert server.stop() == 0


def test_organizer_and_participant_flow(course_server, tmp_path):
    sync_playwright = _need_browser()
    server, roster = course_server
    shots = tmp_path / "screenshots"
    shots.mkdir()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        org = browser.new_context(accept_downloads=True, viewport={"width": 1280, "height": 900})
        org.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.url)
        page = org.new_page()
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)

        page.goto(server.url + "/")
        page.fill("input[name=username]", "admin")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url("**/overview")
        page.screenshot(path=shots / "1-overview.png", full_page=True)

        page.click("nav >> text=Roster")
        page.set_input_files("input[name=file]", str(roster))
        page.click("#import")
        assert "16 added" in page.inner_text(".notice")
        assert page.locator("#roster tbody tr").count() == 16
        page.screenshot(path=shots / "2-roster.png", full_page=True)

        page.click("nav >> text=Seats")
        page.click("#assign-all")
        assert "assigned 16 seats" in page.inner_text(".notice")
        assert page.locator("#seats td.who", has_text="stud01").count() == 1
        page.screenshot(path=shots / "3-seats.png", full_page=True)

        page.click("nav >> text=Survey")
        page.click("#survey-open")
        page.click("nav >> text=Access links")
        page.click("#links-issue")
        row = page.locator("#fresh-links tr", has_text="stud01")
        row.locator("button.copy").click()
        page.wait_for_selector("#fresh-links tr[data-participant=stud01] button[data-copied='1']")
        link = page.evaluate("navigator.clipboard.readText()")
        assert link == row.locator("code.link").inner_text() and "/t/" in link
        page.screenshot(path=shots / "4-links.png", full_page=True)

        who = browser.new_context(viewport={"width": 1000, "height": 900})
        p = who.new_page()
        p.goto(link)
        assert p.inner_text("h1") == "Hello Student 01"
        seat = p.inner_text("#seat-key")
        assert seat.startswith(("m60-", "aws-"))
        assert "Student 02" not in p.content()
        p.check("fieldset[data-question=expectations] input[value='9']")
        p.check("fieldset[data-question=result] input[value=other]")
        p.fill("input[name=q_result_other]", "a working model of my own data")
        p.check("fieldset[data-question=format] input[value='8']")
        p.check("fieldset[data-question=recommend] input[value='10']")
        p.screenshot(path=shots / "5-participant.png", full_page=True)

        phone = browser.new_context(viewport={"width": 390, "height": 844}).new_page()  # the longest name, on a phone
        phone.goto(page.locator("#fresh-links tr[data-participant=stud16] code.link").inner_text())
        assert phone.inner_text("h1") == f"Hello {LONG_NAME}"
        assert phone.evaluate("document.documentElement.scrollWidth") <= 390
        p.click("#survey-send")
        assert "your answers are saved" in p.inner_text(".notice")
        p.click("#back")
        assert p.is_checked("fieldset[data-question=recommend] input[value='10']")  # shown again, editable

        page.goto(server.url + "/survey")
        nps = page.inner_text("#nps")
        assert "+100" in nps and "1 promoters" in nps
        assert "a working model of my own data" in page.inner_text("[data-question=result]")
        page.screenshot(path=shots / "6-survey.png", full_page=True)
        with page.expect_download() as dl:
            page.click("#download-report")
        report = tmp_path / "report.html"
        dl.value.save_as(report)
        text = report.read_text(encoding="utf-8")
        assert "Net Promoter Score" in text and "<script" not in text
        rp = org.new_page()
        rp.goto(report.as_uri())
        assert rp.locator("svg.chart").count() >= 5
        rp.screenshot(path=shots / "7-report.png", full_page=True)
        assert errors == []  # no console errors (CSP violations show up here)
        browser.close()
    assert len(list(shots.glob("*.png"))) == 7
