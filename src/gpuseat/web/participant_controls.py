"""The participant's own seat controls (issue 40): start, stop, restart, reset, add or replace the SSH
key, and their seat hours, on their page ``/t/<token>``.

Each button writes a request row (:meth:`~gpuseat.store.requests.RequestMethods.request_seat`); the
seat's agent carries it out and the page shows it pending, then done or failed with the reason.
Nothing here touches a machine. A request acts only on the token holder's own seat: the form's CSRF
token is bound to the link's token, and a form that names another seat or participant is refused
before anything is written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.datastructures import FormData

from gpuseat.errors import InputError
from gpuseat.services.courses import ParticipantView


def seat_controls(portal: Any, who: ParticipantView) -> dict[str, Any]:
    """What the page's controls show: the seat's run state, hours, and the latest requests."""
    store = portal.store
    out: dict[str, Any] = {"requests": [], "hours": None, "running": True, "stopped_reason": None, "enabled": False}
    out["idle_warning"] = None
    try:
        out["requests"] = [r.to_dict() for r in store.seat_requests(who.course, participant=who.key, limit=5)]
        hours = store.seat_hours(who.course, participant=who.key).get(who.key)
        out["hours"] = hours.to_dict() if hours is not None else None
        warned = store.idle_warning(who.course, who.key)
        out["idle_warning"] = warned[1] if warned is not None else None
        state = store.run_states(who.course).get(who.key)
        if state is not None:
            out["running"], out["stopped_reason"] = state.running, state.reason
    except InputError:
        return out
    seat = store.seat_of(who.course, who.key)
    from gpuseat.store.requests import SELF_SERVICE_ENGINES

    out["enabled"] = seat is not None and seat.engine in SELF_SERVICE_ENGINES
    return out


def add_participant_controls(
    app: FastAPI,
    portal: Any,
    templates: Any,
    participant: Callable[[Request, str], ParticipantView | Response],
    read_form: Callable[..., Any],
    check_csrf: Callable[[FormData, str | None], None],
    page: Callable[..., Response],
    need_organizer: Callable[[Request], str],
) -> None:
    """Add ``POST /t/{token}/seat`` and ``GET /t/{token}/seat.json`` (the page's partial reads
    ``seat_controls(who)``), and the organizer's ``/hours`` and ``/hours.csv``."""
    from gpuseat.web.seat_hours import add_hours_routes

    templates.env.globals["seat_controls"] = lambda who: seat_controls(portal, who)
    add_hours_routes(app, portal, page, need_organizer)

    @app.post("/t/{token}/seat")
    def participant_seat(token: str, request: Request, data: FormData = Depends(read_form)) -> Response:
        who = participant(request, token)
        if isinstance(who, Response):
            return who
        check_csrf(data, "t:" + token)
        # the form may only name the token holder's own seat and self: anything else is an attempt
        named_seat, named_who = str(data.get("seat", "") or ""), str(data.get("participant", "") or "")
        if (named_seat and named_seat != (who.seat or "")) or (named_who and named_who != who.key):
            portal.store.log(
                who.course, "portal.refused", participant=who.key, detail={"seat": named_seat[:64]}, actor=who.key
            )
            return PlainTextResponse("you can act on your own seat only", status_code=403)
        action = str(data.get("action", ""))
        if action == "reset" and str(data.get("confirm", "")).strip().lower() != "reset":
            raise InputError(
                "a reset deletes every file in your home", where="reset", fix="type reset in the box to confirm"
            )
        key = str(data.get("key", "")) if action == "key" else None
        from gpuseat.store.requests import RateLimited

        try:
            portal.store.request_seat(who.course, who.key, action, actor=f"participant:{who.key}", key=key)
        except RateLimited as exc:
            return PlainTextResponse(exc.message, status_code=429)
        root = str(request.scope.get("root_path", "")).rstrip("/")
        return RedirectResponse(f"{root}/t/{token}#controls", status_code=303)

    @app.get("/t/{token}/seat.json")
    def participant_seat_json(token: str, request: Request) -> Response:
        who = participant(request, token)
        if isinstance(who, Response):
            return who
        return JSONResponse(seat_controls(portal, who), headers={"cache-control": "no-store"})
