"""Downloads and answers of the portal: defused CSV cells, the report's own CSP, survey errors, link expiry."""

from __future__ import annotations

import base64
import csv
import hashlib
import html
import io
import re

import httpx
import pytest

from gpuseat.services.demo import seed_demo

from .live import csrf_of, demo_credentials, login, start

#: the tests on the module's demo server run on one xdist worker, so the server starts once
SHARED = pytest.mark.xdist_group(name="portal-exports-demo")

HOSTILE = ['=HYPERLINK("http://x")', "+SUM(1)", "-2+3", "@cmd", "\t=1", " =2"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    server = start(["--demo"], tmp_path_factory.mktemp("exports") / "serve.log")
    password, token = demo_credentials(server.printed)
    server.extra.update(password=password, token=token)
    yield server
    assert server.stop() == 0


@pytest.fixture
def organizer(demo):
    with httpx.Client(base_url=demo.url) as c:
        assert login(c, demo.url, demo.extra["password"]).status_code == 303
        yield c


def cells(text: str) -> list[str]:
    return [cell for row in csv.reader(io.StringIO(text)) for cell in row]


@SHARED
def test_every_csv_download_defuses_formulas(organizer):
    roster = io.StringIO()
    writer = csv.writer(roster)
    writer.writerow(["name", "email", "group"])
    writer.writerows([n, f"evil{i}@example.org", ""] for i, n in enumerate(HOSTILE))
    csrf = csrf_of(organizer.get("/roster").text)
    r = organizer.post(
        "/roster/import",
        data={"csrf": csrf},
        files={"file": ("hostile.csv", roster.getvalue().encode(), "text/csv")},
    )
    assert r.status_code == 200, r.text
    # mail merge: links for those without one; the links already sent keep working
    csrf = csrf_of(organizer.get("/links").text)
    links = organizer.post("/links", data={"csrf": csrf, "action": "issue", "format": "csv"})
    assert links.status_code == 200 and "attachment" in links.headers["content-disposition"]
    exports = {
        "access-links.csv": links.text,
        "roster.csv": organizer.get("/roster.csv").text,
        "seats.csv": organizer.get("/seats.csv").text,
    }
    for name, text in exports.items():
        for cell in cells(text):
            assert cell.lstrip(" ")[:1] not in ("=", "+", "-", "@", "\t", "\r"), (name, cell)
    assert '\'=HYPERLINK("http://x")' in cells(exports["access-links.csv"])
    assert '\'=HYPERLINK("http://x")' in cells(exports["roster.csv"])


@SHARED
def test_report_is_styled_under_a_csp_that_allows_only_its_own_style(organizer):
    r = organizer.get("/report")
    style = re.search(r"<style>(.*?)</style>", r.text, re.S).group(1)
    digest = "'sha256-" + base64.b64encode(hashlib.sha256(style.encode()).digest()).decode() + "'"
    csp = r.headers["content-security-policy"]
    assert f"style-src {digest}" in csp and "unsafe-inline" not in csp and "script-src" not in csp
    meta = html.unescape(re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)"', r.text).group(1))
    assert f"style-src {digest}" in meta  # the downloaded file carries the same rule
    assert r.text.count("<style>") == 1 and " style=" not in r.text


@SHARED
def test_survey_validation_errors_answer_4xx(demo):
    token = demo.extra["token"]
    with httpx.Client(base_url=demo.url) as p:
        csrf = csrf_of(p.get(f"/t/{token}").text)
        bad = p.post(f"/t/{token}/survey", data={"csrf": csrf, "q_recommend": "99", "q_format": "x"})
        assert bad.status_code == 422 and 'role="alert"' in bad.text


def test_access_links_expire_after_the_course_by_default(tmp_path):
    seeded = seed_demo(tmp_path / "demo")  # a 2016 course, served at today's date
    token = next(iter(seeded.links.values()))
    for extra, status in (([], 410), (["--links-expire", "never"], 200), (["--links-expire", "5000"], 200)):
        server = start(["--db", seeded.db_url, "--course", seeded.course, *extra], tmp_path / "serve.log")
        try:
            assert httpx.get(f"{server.url}/t/{token}").status_code == status, extra
            assert ("--links-expire never keeps them" in server.output()) == (status == 410)  # the organizer is told
        finally:
            assert server.stop() == 0
