"""The survey router: a participant's answers through their link, and the organizer's survey pages.

Adversary's side: an answer without a form token or with another link's token, and the organizer's
pages and CSV without a session or without the session's form token, are refused and store nothing.
"""

from __future__ import annotations

from .served import Served

ANSWERS = {"q_expectations": "8", "q_format": "7", "q_recommend": "9"}


def _open(served: Served) -> None:
    assert served.login().status_code == 303
    csrf = served.csrf("/survey")
    r = served.client.post("/survey", data={"csrf": csrf, "action": "open"}, follow_redirects=False)
    assert (r.status_code, r.headers["location"]) == (303, "/survey")
    served.client.cookies.clear()  # the rest happens as a participant


def test_a_participant_answers_and_the_organizer_exports_it(served: Served) -> None:
    _open(served)
    ann = served.links["ann"]
    page = served.client.get(f"/t/{ann}")
    assert 'name="q_recommend"' in page.text
    csrf = served.csrf(f"/t/{ann}")
    bad = served.client.post(f"/t/{ann}/survey", data={"csrf": csrf, **ANSWERS, "q_recommend": "11"})
    assert bad.status_code == 422 and 'name="q_recommend"' in bad.text  # the page again, with the message
    saved = served.client.post(f"/t/{ann}/survey", data={"csrf": csrf, **ANSWERS})
    assert saved.status_code == 200 and f"/t/{ann}" in saved.text
    assert served.login().status_code == 303
    lines = served.client.get("/survey.csv").text.splitlines()
    assert lines == ["response,expectations,result,apply,format,recommend", "1,8,,,7,9"]  # no name: anonymous
    assert served.client.get("/survey").status_code == 200


def test_answers_without_the_links_form_token_are_refused(served: Served) -> None:
    _open(served)
    ann, ben = served.links["ann"], served.links["ben"]
    csrf = served.csrf(f"/t/{ann}")
    assert served.client.post(f"/t/{ann}/survey", data=ANSWERS).status_code == 403
    assert served.client.post(f"/t/{ben}/survey", data={"csrf": csrf, **ANSWERS}).status_code == 403
    assert served.client.post(f"/t/{'q' * 43}/survey", data={"csrf": csrf, **ANSWERS}).status_code == 404
    served.store.courses.set_survey_state("lab", "closed")
    closed = served.client.post(f"/t/{ann}/survey", data={"csrf": csrf, **ANSWERS})
    assert closed.status_code == 422
    assert served.client.app.state.portal.surveys.export_csv("lab").count("\n") == 1  # type: ignore[attr-defined]


def test_the_organizers_survey_pages_need_a_session_and_its_form_token(served: Served) -> None:
    assert served.client.get("/survey", follow_redirects=False).headers["location"] == "/login?next=/survey"
    assert served.client.get("/survey.csv").status_code == 401
    link_csrf = served.csrf(f"/t/{served.links['ann']}")
    assert served.client.post("/survey", data={"csrf": link_csrf, "action": "open"}).status_code == 401
    assert served.login().status_code == 303
    assert served.client.post("/survey", data={"action": "open"}).status_code == 403  # no form token
    assert served.client.post("/survey", data={"csrf": link_csrf, "action": "open"}).status_code == 403
    csrf = served.csrf("/survey")
    assert served.client.post("/survey", data={"csrf": csrf, "action": "explode"}).status_code == 400
    assert served.client.app.state.portal.surveys.state("lab") != "open"  # type: ignore[attr-defined]
    edited = served.client.post("/survey/template", data={"csrf": csrf, "title": "Lab survey"}, follow_redirects=False)
    assert edited.status_code == 303
    assert served.client.app.state.portal.surveys.template("lab").title == "Lab survey"  # type: ignore[attr-defined]
