"""The participant's own claim of a pool seat: ``POST /t/<token>/claim`` (the page's "Take a seat" button).

At 09:00 on day one every participant of a course with more people than pre-assigned seats opens their
link and asks for a seat; the store's claim (:meth:`~gpuseat.store.claiming.Claims.claim_seat`,
one SQL statement, safe under any number of concurrent callers) picks the best free seat that suits
their group, or answers the seat they already hold, so a double click is one seat. A claim acts on the
link's own participant only: the form's CSRF token is bound to the link, like the page's other forms,
and a link of an archived course opens nothing (410).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, RedirectResponse, Response

from gpuseat.errors import InputError, NoFreeSeat
from gpuseat.store.requests import RATE_LIMIT, RATE_WINDOW
from gpuseat.web.deps import participant
from gpuseat.web.pages import root
from gpuseat.web.routes import LinkPost, PortalDep
from gpuseat.web.routes.participant import participant_page
from gpuseat.web.security import RateLimiter

router = APIRouter()

#: claims per link, counted like the seat controls' requests (per server process: a claim that finds the
#: participant's seat is idempotent, so the limit only stops a script from hammering the store)
CLAIMS = RateLimiter(RATE_LIMIT, RATE_WINDOW.total_seconds())
NO_SEAT_LEFT = "No seat is left for you right now: every seat that suits you is taken. Ask your organizer."


@router.post("/t/{token}/claim")
def participant_claim(token: str, request: Request, who: LinkPost, portal: PortalDep) -> Response:
    """Claim a pool seat for the link's participant (theirs if they hold one), then back to their page."""
    if CLAIMS.blocked(token):
        return PlainTextResponse(f"{RATE_LIMIT} claims in {RATE_WINDOW.seconds // 60} minutes already", 429)
    CLAIMS.fail(token)
    try:
        portal.store.claims.claim_seat(who.course, who.key, mode="pool", actor=f"participant:{who.key}")
    except NoFreeSeat:
        return participant_page(request, token, who, status=409, error=NO_SEAT_LEFT)
    except InputError:
        # the link's course was archived since this request's lookup: the link answers as it now would
        participant(token, request)
        raise
    return RedirectResponse(f"{root(request)}/t/{token}#seat", status_code=303)
