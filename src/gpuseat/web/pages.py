"""How the portal answers: its templates, cookies, rendered pages, redirects and downloads.

The routes (:mod:`gpuseat.web.routes`) and the dependencies (:mod:`gpuseat.web.deps`) share these, so
every page carries a CSRF token bound the same way, every cookie has the same flags and every URL
starts with the request's root path (the portal may live behind a proxy at a sub-path).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from gpuseat.core.amounts import hours_text
from gpuseat.core.delivery import for_participant
from gpuseat.web.formats import course_time, money_or_dash, timestamp
from gpuseat.web.security import CSRF_COOKIE, CSRF_FIELD, SECURE_PREFIX, SESSION_COOKIE, Sessions, new_csrf_cookie

if TYPE_CHECKING:
    from gpuseat.web.portal import Portal

HERE = Path(__file__).parent


def make_templates(portal: Portal) -> Jinja2Templates:
    """The page templates, with the filters and globals they use (the course's zone)."""
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.globals["poll_s"] = portal.poll_s
    templates.env.filters["timestamp"] = timestamp
    templates.env.filters["money"] = money_or_dash
    templates.env.filters["hours"] = hours_text
    templates.env.filters["for_participant"] = for_participant
    templates.env.filters["local"] = lambda value: course_time(value, portal.course_zone())
    return templates


def portal_of(request: Request) -> Portal:
    """The app's portal (set once by :func:`gpuseat.web.app.create_app`)."""
    found: Portal = request.app.state.portal
    return found


def sessions_of(request: Request) -> Sessions:
    """The app's organizer sessions and CSRF signer."""
    found: Sessions = request.app.state.sessions
    return found


def client_address(request: Request) -> str:
    """The client's address (uvicorn puts the trusted proxy's ``X-Forwarded-For`` here)."""
    return request.client.host if request.client else "unknown"


def root(request: Request) -> str:
    """The sub-path the portal is served under ("" at the host's root)."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def https(request: Request) -> bool:
    """True when cookies must be Secure (an https deployment, or the request came over TLS)."""
    return portal_of(request).secure_cookies or request.url.scheme == "https"


def cookie_name(request: Request, base: str) -> str:
    """``base`` with the ``__Host-`` prefix where the browser accepts it (only with Secure)."""
    return SECURE_PREFIX + base if https(request) else base


def set_cookie(response: Response, request: Request, base: str, value: str, max_age: int | None = None) -> None:
    """An HttpOnly, SameSite=Strict, host-wide cookie (Secure on https)."""
    response.set_cookie(
        cookie_name(request, base),
        value,
        max_age=max_age,
        httponly=True,
        samesite="strict",
        secure=https(request),
        path="/",
    )


def drop_session_cookie(response: Response, request: Request) -> None:
    """Remove the organizer's session cookie (logout)."""
    response.delete_cookie(cookie_name(request, SESSION_COOKIE), path="/", secure=https(request))


def session_secret(request: Request) -> str | None:
    """The organizer's session cookie, if the browser sent one."""
    return request.cookies.get(cookie_name(request, SESSION_COOKIE))


def organizer_of(request: Request) -> str | None:
    """The organizer of the request's live session (read once per request), or None."""
    if not hasattr(request.state, "user"):
        request.state.user = sessions_of(request).user(session_secret(request))
    user: str | None = request.state.user
    return user


def anon_cookie(request: Request) -> tuple[str, bool]:
    """The pre-login CSRF cookie and whether it is new (the login form is bound to it)."""
    value = request.cookies.get(cookie_name(request, CSRF_COOKIE))
    if value and 16 <= len(value) <= 64:
        return value, False
    return new_csrf_cookie(), True


def page(request: Request, name: str, status: int = 200, *, bind: str | None = None, **ctx: Any) -> HTMLResponse:
    """A rendered page whose forms carry the CSRF token of ``bind`` (default: the session or a pre-login cookie).

    The course's time zone (``data-tz``) is on the organizer's pages and a link's own (``bind`` ``t:…``) only.
    """
    portal = portal_of(request)
    fresh = None
    if "user" not in ctx:
        ctx["user"] = organizer_of(request)
    if bind is None:
        if ctx["user"] is not None:
            bind = "s:" + (session_secret(request) or "")
        else:
            value, new = anon_cookie(request)
            bind, fresh = "a:" + value, value if new else None
    ctx.setdefault("error", None)
    ctx.setdefault("notice", None)
    # the course's zone only for its organizer or a valid link's holder: a stranger's page (the login, an
    # unknown or revoked link's 404, an archived course's 410) carries nothing of the course
    tz = portal.course_zone_name() if ctx["user"] is not None or bind.startswith("t:") else None
    templates: Jinja2Templates = request.app.state.templates
    response = templates.TemplateResponse(
        request,
        name,
        {
            "csrf": sessions_of(request).csrf_token(bind),
            "csrf_field": CSRF_FIELD,
            "root": root(request),
            "tz": tz,
            **ctx,
        },
        status_code=status,
    )
    if fresh:
        set_cookie(response, request, CSRF_COOKIE, fresh)
    response.headers["cache-control"] = "no-store"
    return response


def go(request: Request, path: str) -> Response:
    """A 303 to ``path`` under the root path (a relative Location: the Host header is never reflected)."""
    return RedirectResponse(root(request) + path, status_code=303)


def download(text: str, name: str) -> Response:
    """A CSV attachment that no cache keeps."""
    return Response(
        text,
        media_type="text/csv; charset=utf-8",
        headers={"content-disposition": f'attachment; filename="{name}"', "cache-control": "no-store"},
    )
