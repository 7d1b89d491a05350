"""The participant's routes, all under their access link ``/t/<token>``: their page, its live readings,
their SSH config, and their seat controls (start, stop, restart, reset, a new key).

A link shows and acts on its own participant's seat only: the participant comes from the token
(:func:`~gpuseat.web.deps.participant`), and a form's CSRF token is bound to that link. Each seat
control writes a request row that the seat's agent carries out; nothing here touches a machine.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.datastructures import FormData

from gpuseat.errors import InputError
from gpuseat.store import ParticipantView
from gpuseat.store.survey import OPEN
from gpuseat.web.deps import get_portal, participant, participant_form, read_form
from gpuseat.web.pages import page, portal_of, root
from gpuseat.web.participant_controls import seat_controls
from gpuseat.web.portal import Portal

router = APIRouter()
#: what every answer under a link carries (its page, its polls, its ssh_config): nothing of a seat is cached
NO_STORE = {"cache-control": "no-store"}


def participant_page(request: Request, token: str, who: ParticipantView, status: int = 200, **ctx: Any) -> Response:
    """The participant's page: their seat, its way in and check, their benchmark, use and the open survey."""
    portal = portal_of(request)
    key = who.course
    # one read: the seat, its hours, controls, way in, check and use
    reading = portal.store.requests.page_of(key, who.key)
    seat = reading.seat
    d_bench, usage = portal.participant(who, seat, reading.days)
    state = reading.survey_state
    template = portal.surveys.template(key) if state == OPEN else None
    answers = ctx.pop("answers", None)
    if answers is None and template is not None:
        answers = portal.surveys.response(key, who.key) or {}
    way = check = None
    if seat is not None:
        from gpuseat.services.delivery import way_in

        way = way_in(portal.store, seat, who, logins=reading.logins, stored=reading.access)
        check = reading.readiness
    return page(
        request,
        "participant.html",
        way=way,
        check=check,
        status=status,
        bind="t:" + token,
        who=who,
        seat=seat,
        bench=d_bench,
        usage=usage,
        controls=seat_controls(reading),
        token=token,
        survey=template,
        survey_state=state,
        answers=answers or {},
        course=portal.course_view(key),
        user=None,  # a participant page never shows the organizer's menu
        **ctx,
    )


@router.get("/t/{token}", response_class=HTMLResponse)
def participant_home(
    token: str, request: Request, who: ParticipantView = Depends(participant), portal: Portal = Depends(get_portal)
) -> Response:
    """The participant's own page."""
    return participant_page(request, token, who)


@router.get("/t/{token}/live")
def participant_live(who: ParticipantView = Depends(participant), portal: Portal = Depends(get_portal)) -> Response:
    """The seat's live reading, polled by the open page: of the seat held now (the link's lookup of this
    request read it; after a move the old seat may already be someone else's)."""
    seat = who.seat
    body: dict[str, Any] = {"participant": who.key, "seat": seat, "live": None, "last_active": None}
    if seat is not None:
        live, last = portal.seat_live(who.course, seat)
        body["live"] = live.to_dict() if live else None
        body["last_active"] = last
    return JSONResponse(body, headers=NO_STORE)


@router.get("/t/{token}/ssh_config")
def participant_ssh_config(
    who: ParticipantView = Depends(participant), portal: Portal = Depends(get_portal)
) -> Response:
    """An ``ssh_config`` block for the seat's way in, as a download (404 while there is none)."""
    from gpuseat.services.delivery import way_in

    seat = portal.store.seats.seat_of(who.course, who.key)
    way = way_in(portal.store, seat, who) if seat is not None else None
    if seat is None or way is None or way.ssh_config is None:
        return PlainTextResponse("no SSH way in for your seat yet\n", status_code=404, headers=NO_STORE)
    # no-store as the link's page: no cache keeps the seat's login and host after a move, release or rotation
    return PlainTextResponse(
        way.ssh_config,
        headers={"content-disposition": f'attachment; filename="gpuseat-{seat.key}.ssh_config"', **NO_STORE},
    )


@router.post("/t/{token}/seat")
def participant_seat(
    token: str,
    request: Request,
    data: FormData = Depends(read_form),
    who: ParticipantView = Depends(participant_form),
    portal: Portal = Depends(get_portal),
) -> Response:
    """One seat control: a request row for the seat's agent, then back to the page's controls."""
    # the form may only name the token holder's own seat and self: anything else is an attempt
    mine = who.seat or ""  # held now: this request's lookup of the link read it (the write checks it again)
    named_seat, named_who = _named(data, "seat", mine), _named(data, "participant", who.key)
    if named_seat and named_seat != mine and named_who in ("", who.key):
        # the page's forms name the seat it showed: one loaded before a move or release names a seat this
        # participant held, and a stop or a reset must not land on the seat they hold now unseen
        held = {a.seat for a in portal.store.seats.history(who.course, participant=who.key)}
        if named_seat not in held:  # or one removed since (a broken GPU's seat, its holder moved first)
            held |= portal.store.seats.removed_held(who.course, who.key)
        if named_seat in held:
            now = f"; you now hold {mine}" if mine else "; you hold no seat now"
            return PlainTextResponse(
                f"this page was about seat {named_seat}, which you no longer hold{now}: "
                "reload the page and try again\n",
                status_code=409,
            )
    if (named_seat and named_seat != mine) or (named_who and named_who != who.key):
        from gpuseat.store.requests import RATE_LIMIT, RATE_WINDOW

        # logged as a request is counted: past the limit nothing is written (each row would wake the agents)
        if not portal.store.events.log(
            who.course,
            "portal.refused",
            participant=who.key,
            detail={"seat": named_seat[:64]},
            actor=who.key,
            at_most=(RATE_LIMIT, RATE_WINDOW),
        ):
            return PlainTextResponse(
                f"{RATE_LIMIT} refused attempts in {RATE_WINDOW.seconds // 60} minutes already: wait a few minutes",
                status_code=429,
            )
        return PlainTextResponse("you can act on your own seat only", status_code=403)
    action = _one(data, "action")
    if action == "reset" and _one(data, "confirm").strip().lower() != "reset":
        raise InputError(
            "a reset deletes what you wrote on your seat", where="reset", fix="type reset in the box to confirm"
        )
    key = _one(data, "key") if action == "key" else None
    from gpuseat.store.requests import RateLimited, SeatChanged

    try:  # the seat read above is checked again in the write: a move in between refuses the request
        portal.store.requests.request_seat(
            who.course, who.key, action, actor=f"participant:{who.key}", key=key, expect_seat=mine
        )
    except RateLimited as exc:
        return PlainTextResponse(exc.message, status_code=429)
    except SeatChanged as exc:
        return PlainTextResponse(exc.message, status_code=409)
    return RedirectResponse(f"{root(request)}/t/{token}#controls", status_code=303)


def _named(data: FormData, name: str, own: str) -> str:
    """What the form names in ``name``: a value other than ``own`` when any of its values is one (a second
    value must not hide it: of two, the last was taken, so ``seat=mig-02&seat=mig-01`` passed), else
    ``own``, or "" when it names none."""
    values = [v if isinstance(v, str) else "(a file)" for v in data.getlist(name)]
    return next((v for v in values if v and v != own), own if any(values) else "")


def _one(data: FormData, name: str) -> str:
    """The form's one text value of ``name`` ("" when absent): a field sent twice (which of the two would
    count?) or as a file is refused, naming the field."""
    values = data.getlist(name)
    if len(values) > 1:
        raise InputError(f"sent {len(values)} times", where=name, fix="send it once, as the page's form does")
    if not values:
        return ""
    if not isinstance(values[0], str):
        raise InputError("sent as a file", where=name, fix="paste the text (a key: the one line of its .pub file)")
    return values[0]


@router.get("/t/{token}/seat.json")
def participant_seat_json(
    who: ParticipantView = Depends(participant), portal: Portal = Depends(get_portal)
) -> Response:
    """What the page's controls show, polled while a request is pending."""
    reading = portal.store.requests.page_of(who.course, who.key)
    return JSONResponse(seat_controls(reading), headers=NO_STORE)
