"""The course portal: FastAPI + Jinja2, server-rendered, on the course store and the services.

:func:`create_app` takes a :class:`~gpuseat.web.portal.Portal` and returns the ASGI app that
``gpuseat serve`` hands to uvicorn. It only wires: the middleware, the answers to refusals, and one
router per concern (:mod:`gpuseat.web.routes`). Routes only translate HTTP to service calls and results
(or :class:`~gpuseat.errors.GpuseatError`) back to pages; they never touch tables. What a route needs
(the portal, the organizer, the link's participant, a checked form) comes from :mod:`gpuseat.web.deps`.

Nothing blocks the event loop: every route that reads the store or checks a password is a plain
``def`` (Starlette runs it in its worker threads); only the capped form parsing and ``/healthz`` run
on the loop. Every URL a page, redirect or script uses starts with the request's root path, so the
portal works behind a proxy at a sub-path (``--root-path /gpuseat``).

Organizer pages need a session (``/login``); a participant's page is ``/t/<token>`` and shows only
that participant's seat. Every POST checks the browser's origin headers and a CSRF token bound to the
session or the access token (see :mod:`gpuseat.web.security`).
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpuseat.errors import GpuseatError
from gpuseat.web import deps
from gpuseat.web.limits import BodyGuard
from gpuseat.web.pages import HERE, make_templates
from gpuseat.web.portal import Portal
from gpuseat.web.routes import claim, health, organizer, participant, report, settings, survey
from gpuseat.web.security import SecurityHeaders, Sessions

__all__ = ["Portal", "create_app"]


def create_app(portal: Portal) -> FastAPI:
    """The ASGI app (behind the body guard and the security-headers middleware)."""

    def stop_workers() -> None:
        from gpuseat.web.workers import shutdown

        shutdown()
        portal.close_visits()

    app = FastAPI(
        title="gpuseat portal",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        redirect_slashes=False,
        on_shutdown=[stop_workers],
    )
    app.state.portal = portal
    app.state.templates = make_templates(portal)
    app.state.sessions = Sessions(portal.store, portal.accounts.session_key())
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    app.add_middleware(BodyGuard, receive_timeout_s=portal.receive_timeout_s)
    app.add_middleware(SecurityHeaders)

    app.exception_handler(deps.Forbidden)(deps.forbidden)
    app.exception_handler(deps.LoginFirst)(deps.login_first)
    app.exception_handler(deps.LinkRefused)(deps.link_refused)
    app.exception_handler(GpuseatError)(deps.gpuseat_error)
    app.exception_handler(StarletteHTTPException)(deps.http_error)

    # the participant's routes first: a link's page and its claim are what a registration rush asks
    for concern in (participant, claim, survey, health, organizer, settings, report):
        # HEAD wherever GET is taken, answered as the GET without its body (uvicorn drops it): uptime monitors
        # and link checkers probe with it. Starlette's own routes do this, FastAPI's not (fastapi#1773, open);
        # set on the router's routes before it is included (the app copies their methods)
        for route in concern.router.routes:
            methods = route.methods if isinstance(route, APIRoute) else None
            if methods is not None and "GET" in methods:
                methods.add("HEAD")
        app.include_router(concern.router)
    return app
