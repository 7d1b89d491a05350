"""The report router: ``/report`` for the organizer only, with its own CSP and a download form."""

from __future__ import annotations

from gpuseat.web.report import report_csp

from .served import Served


def test_the_organizer_reads_and_downloads_the_report(served: Served) -> None:
    assert served.login().status_code == 303
    r = served.client.get("/report")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "<html" in r.text and "Lab" in r.text
    assert r.headers["cache-control"] == "no-store" and "content-disposition" not in r.headers
    assert r.headers["content-security-policy"] == report_csp(header=True)  # its inline style, nothing else
    d = served.client.get("/report?download=1")
    assert d.headers["content-disposition"] == 'attachment; filename="report-lab.html"'


def test_the_report_is_refused_without_a_session(served: Served) -> None:
    r = served.client.get("/report", follow_redirects=False)
    assert (r.status_code, r.headers["location"]) == (303, "/login?next=/report")
    served.client.cookies.set("gpuseat_session", "y" * 43)  # a guessed session
    assert served.client.get("/report", follow_redirects=False).status_code == 303
    # a participant's link opens their page, never the report
    served.client.cookies.clear()
    assert served.client.get(f"/t/{served.links['ann']}").status_code == 200
    assert served.client.get("/report", follow_redirects=False).status_code == 303
    assert served.client.post("/report").status_code == 405
    # a failed login is no session either
    assert served.login(password="wrong").status_code == 401
    assert served.client.get("/report", follow_redirects=False).status_code == 303
