"""The survey: a participant's answers (``POST /t/<token>/survey``) and the organizer's survey pages
(results, open/close, the wording editor, the CSV of answers)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from gpuseat.errors import InputError
from gpuseat.web.deps import need_organizer
from gpuseat.web.pages import download, go, page
from gpuseat.web.routes import Form, LinkPost, OrganizerPost, PortalDep
from gpuseat.web.routes.participant import participant_page

router = APIRouter()


@router.post("/t/{token}/survey")
def participant_survey(token: str, request: Request, data: Form, who: LinkPost, portal: PortalDep) -> Response:
    """The participant's answers; a bad answer shows their page again with the message and what they typed."""
    fields = {k: [v for v in data.getlist(k) if isinstance(v, str)] for k in data if k.startswith("q_")}
    try:
        portal.surveys.submit(who.course, who.key, fields)
    except InputError as exc:
        answers = {k.removeprefix("q_"): v[0] if len(v) == 1 else v for k, v in fields.items()}
        return participant_page(request, token, who, status=422, error=exc.message, answers=answers)
    # stored and committed; a small page answers (the seat page is heavier and one click away)
    return page(request, "saved.html", bind="t:" + token, token=token, course_name=who.course, user=None)


@router.get("/survey", response_class=HTMLResponse, dependencies=[Depends(need_organizer)])
def survey_results(request: Request, portal: PortalDep) -> Response:
    """The answers so far, the NPS, and the survey's state."""
    return page(request, "survey_results.html", tab="survey", d=portal.digest())


@router.post("/survey")
def survey_state(request: Request, data: Form, user: OrganizerPost, portal: PortalDep) -> Response:
    """Open or close the survey."""
    state = {"open": "open", "close": "closed"}.get(str(data.get("action", "")))
    if state is None:
        raise InputError("unknown survey action", where="action", fix="use the page's buttons")
    portal.surveys.set_state(portal.course_key, state, actor=user)
    return go(request, "/survey")


@router.post("/survey/template")
def survey_template(request: Request, data: Form, user: OrganizerPost, portal: PortalDep) -> Response:
    """The editor: new wording for the questions, accepted only while nobody has answered."""
    import tempfile

    from pydantic import ValidationError

    from gpuseat.web.survey_edit import edited, to_toml

    key = portal.course_key
    form = {k: v for k, v in data.items() if isinstance(v, str)}
    try:
        template = edited(portal.surveys.template(key), form)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InputError(f"{first['msg']} ({where})", where="survey editor", fix="shorten or fill the text") from None
    with tempfile.TemporaryDirectory(prefix="gpuseat-survey-") as folder:
        path = Path(folder) / f"{template.key}.toml"
        path.write_text(to_toml(template), encoding="utf-8")
        portal.surveys.set_template(key, str(path))
    portal.store.events.log(key, "survey.template", actor=user, detail={"template": template.key})
    return go(request, "/survey")


@router.get("/survey.csv", dependencies=[Depends(need_organizer)])
def survey_csv(portal: PortalDep) -> Response:
    """Every answer, one row per participant."""
    return download(portal.surveys.export_csv(portal.course_key), "survey.csv")
