"""The routes anyone may call: the liveness probe, the front door and the favicon."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from gpuseat.web.pages import go, organizer_of, root

router = APIRouter()


@router.get("/", response_class=HTMLResponse)
def home(request: Request) -> Response:
    """The organizer's overview once logged in, the login page before."""
    return go(request, "/login" if organizer_of(request) is None else "/overview")


@router.get("/favicon.ico")
async def favicon(request: Request) -> Response:
    """Browsers ask for /favicon.ico whatever the page says; the icon is the static SVG."""
    return RedirectResponse(root(request) + "/static/favicon.svg", status_code=301)


@router.api_route("/healthz", methods=["GET", "HEAD"])
async def healthz() -> Response:
    """On the event loop and touching nothing: a proxy's probe says whether the server answers at all
    (``HEAD`` too: load balancers and ``curl -I`` probe with it)."""
    return PlainTextResponse("ok")
