"""Survey templates: ``gpuseat survey template apply FILE`` and the portal's editor before the survey opens."""

from __future__ import annotations

from pathlib import Path

import httpx

from gpuseat.core.roster import RosterText
from gpuseat.core.survey import Template
from gpuseat.services.survey import SurveyService, parse_template, template_text
from gpuseat.store import open_store
from gpuseat.web.survey_edit import edited, to_toml

from .live import csrf_of, login, start

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PASSWORD = "survey editor 2016"


def test_to_toml_round_trips_the_bundled_template():
    template = parse_template(template_text("course-2016"), where="course-2016")
    again = parse_template(to_toml(template), where="again")
    assert again == template
    tricky = edited(template, {"format.text": 'How was "one \\\\ day"?\nReally?', "title": "Ünïcode ✓"})
    assert parse_template(to_toml(tricky), where="tricky") == tricky


def test_cli_applies_a_template_file(cli, tmp_path):
    db = f"sqlite:///{tmp_path / 'course.db'}"
    store = open_store(db, create=True)
    store.courses.create_course(EXAMPLES / "course-2016.toml", key="dl-2016")
    store.close()
    template = parse_template(template_text("course-2016"), where="x")
    own = Template.model_validate(
        {**template.model_dump(), "key": "course-2026", "question": template.model_dump()["question"][:2]}
    )
    path = tmp_path / "course-2026.toml"
    path.write_text(to_toml(own), encoding="utf-8")
    r = cli("survey", "template", "apply", path, "--db", db)
    assert r.code == 0 and "2 questions" in r.out, r.err
    store = open_store(db)
    assert SurveyService(store).template("dl-2016").key == "course-2026"
    store.close()
    bad = tmp_path / "bad.toml"
    bad.write_text('key = "x"\n', encoding="utf-8")
    r = cli("survey", "template", "apply", bad, "--db", db)
    assert r.code == 2 and "bad.toml" in r.err and "Traceback" not in r.err


def test_the_portal_edits_questions_until_someone_answers(tmp_path):
    db = f"sqlite:///{tmp_path / 'course.db'}"
    store = open_store(db, create=True)
    store.courses.create_course(EXAMPLES / "course-2016.toml", key="dl-2016")
    store.roster.import_roster("dl-2016", RosterText("name,email\nAda,ada@example.org\n", where="roster"))
    token = store.tokens.issue_tokens("dl-2016")[0].token
    store.accounts.set_password("admin", PASSWORD)
    store.close()
    server = start(["--db", db, "--links-expire", "never"], tmp_path / "serve.log")
    try:
        with httpx.Client(base_url=server.url) as c:
            assert login(c, server.url, PASSWORD).status_code == 303
            page = c.get("/survey").text
            # the default survey asks about the course's own format, not the 2016 course's in-person days
            assert 'id="survey-editor"' in page and "the course&#39;s format" in page
            assert "in-person" not in page
            form = {
                "csrf": csrf_of(page),
                "title": "How did the course go?",
                "format.text": "How did you like the 3-day online format?",
            }
            assert c.post("/survey/template", data=form).status_code == 303
            assert "3-day online format" in c.get("/survey").text
            empty = {"csrf": csrf_of(page), "format.text": ""}
            assert c.post("/survey/template", data=empty).status_code == 400
            page = c.get("/survey").text
            assert c.post("/survey", data={"csrf": csrf_of(page), "action": "open"}).status_code == 303
            assert 'id="survey-editor"' not in c.get("/survey").text  # open: the editor is gone
            with httpx.Client(base_url=server.url) as p:
                mine = p.get(f"/t/{token}").text
                assert "3-day online format" in mine
                answers = {"csrf": csrf_of(mine), "q_expectations": "8", "q_format": "7", "q_recommend": "9"}
                assert p.post(f"/t/{token}/survey", data=answers).status_code == 200
            # someone answered: a new wording would change the meaning of their answer
            assert c.post("/survey/template", data=form | {"format.text": "Other"}).status_code == 400
    finally:
        assert server.stop() == 0
