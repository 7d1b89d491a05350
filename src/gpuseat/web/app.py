"""The course portal: FastAPI + Jinja2, server-rendered, on the course store and the services.

:func:`create_app` takes a :class:`~gpuseat.web.portal.Portal` and returns the ASGI app that
``gpuseat serve`` hands to uvicorn. Routes only translate HTTP to service calls and results (or
:class:`~gpuseat.errors.GpuseatError`) back to pages; they never touch tables.

Nothing blocks the event loop: every route that reads the store or checks a password is a plain
``def`` (Starlette runs it in its worker threads); only the capped form parsing and ``/healthz`` run
on the loop. Every URL a page, redirect or script uses starts with the request's root path, so the
portal works behind a proxy at a sub-path (``--root-path /gpuseat``).

Organizer pages need a session (``/login``); a participant's page is ``/t/<token>`` and shows only
that participant's seat. Every POST checks the browser's origin headers and a CSRF token bound to the
session or the access token (see :mod:`gpuseat.web.security`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.background import BackgroundTask
from starlette.datastructures import FormData

from gpuseat.errors import GpuseatError, InputError, NotFound
from gpuseat.services.courses import ParticipantView
from gpuseat.store.survey import OPEN
from gpuseat.web.exports import csv_text
from gpuseat.web.formats import course_time, money, timestamp
from gpuseat.web.limits import BodyGuard
from gpuseat.web.portal import Portal
from gpuseat.web.security import (
    CSRF_COOKIE,
    CSRF_FIELD,
    SECURE_PREFIX,
    SESSION_COOKIE,
    SESSION_MAX_AGE_S,
    SecurityHeaders,
    Sessions,
    new_csrf_cookie,
    same_origin,
)

__all__ = ["Portal", "create_app"]

HERE = Path(__file__).parent
MAX_FORM_FIELDS = 200


class Forbidden(Exception):
    """A request that is refused (bad CSRF token, a cross-site POST)."""


class LoginFirst(Exception):
    """An organizer route without a live session."""


def _client(request: Request) -> str:
    """The client's address (uvicorn puts the trusted proxy's ``X-Forwarded-For`` here)."""
    return request.client.host if request.client else "unknown"


def _root(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def create_app(portal: Portal) -> FastAPI:
    """The ASGI app (behind the body guard and the security-headers middleware)."""
    app = FastAPI(title="gpuseat portal", docs_url=None, redoc_url=None, openapi_url=None, redirect_slashes=False)
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.globals["poll_s"] = portal.poll_s
    templates.env.filters["timestamp"] = timestamp
    templates.env.filters["money"] = money
    sessions = Sessions(portal.store, portal.accounts.session_key())
    templates.env.filters["local"] = lambda value: course_time(value, portal.course_zone())
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    app.state.portal = portal

    @app.on_event("shutdown")
    def _stop_workers() -> None:
        from gpuseat.web.workers import shutdown

        shutdown()
        portal.close_visits()

    app.add_middleware(BodyGuard, receive_timeout_s=portal.receive_timeout_s)
    app.add_middleware(SecurityHeaders)

    # -- helpers ------------------------------------------------------------------------------------

    def https(request: Request) -> bool:
        return portal.secure_cookies or request.url.scheme == "https"

    def cookie_name(request: Request, base: str) -> str:
        # browsers accept a __Host- cookie only with Secure, so plain-http localhost uses the bare name
        return SECURE_PREFIX + base if https(request) else base

    def set_cookie(response: Response, request: Request, base: str, value: str, max_age: int | None = None) -> None:
        response.set_cookie(
            cookie_name(request, base),
            value,
            max_age=max_age,
            httponly=True,
            samesite="strict",
            secure=https(request),
            path="/",
        )

    def session_secret(request: Request) -> str | None:
        return request.cookies.get(cookie_name(request, SESSION_COOKIE))

    def organizer(request: Request) -> str | None:
        if not hasattr(request.state, "user"):
            request.state.user = sessions.user(session_secret(request))
        user: str | None = request.state.user
        return user

    def need_organizer(request: Request) -> str:
        user = organizer(request)
        if user is None:
            raise LoginFirst
        return user

    def anon_cookie(request: Request) -> tuple[str, bool]:
        value = request.cookies.get(cookie_name(request, CSRF_COOKIE))
        if value and 16 <= len(value) <= 64:
            return value, False
        return new_csrf_cookie(), True

    def page(request: Request, name: str, status: int = 200, *, bind: str | None = None, **ctx: Any) -> HTMLResponse:
        """A rendered page whose forms carry the CSRF token of ``bind`` (default: the session or a pre-login cookie)."""
        fresh = None
        if "user" not in ctx:
            ctx["user"] = organizer(request)
        if bind is None:
            if ctx["user"] is not None:
                bind = "s:" + (session_secret(request) or "")
            else:
                value, new = anon_cookie(request)
                bind, fresh = "a:" + value, value if new else None
        ctx.setdefault("error", None)
        ctx.setdefault("notice", None)
        response = templates.TemplateResponse(
            request,
            name,
            {
                "csrf": sessions.csrf_token(bind),
                "csrf_field": CSRF_FIELD,
                "root": _root(request),
                "tz": portal.course_zone_name(),
                **ctx,
            },
            status_code=status,
        )
        if fresh:
            set_cookie(response, request, CSRF_COOKIE, fresh)
        response.headers["cache-control"] = "no-store"
        return response

    async def read_form(request: Request) -> FormData:
        """The POSTed form (capped by :class:`BodyGuard`), refused early when the browser says it is cross-site."""
        if not same_origin(request.headers, request.url.scheme, portal.trusted_origins()):
            raise Forbidden("cross-site form refused: use the portal's own pages")
        return await request.form(max_files=1, max_fields=MAX_FORM_FIELDS)

    def check_csrf(data: FormData, bind: str | None) -> None:
        token = data.get(CSRF_FIELD)
        if not sessions.csrf_ok(bind, token if isinstance(token, str) else None):
            raise Forbidden("missing or wrong CSRF token: reload the page and send the form again")

    def organizer_form(request: Request, data: FormData) -> str:
        """The organizer of a POST whose CSRF token is bound to their session."""
        user = need_organizer(request)
        check_csrf(data, "s:" + (session_secret(request) or ""))
        return user

    def go(request: Request, path: str) -> Response:
        # a relative Location: the Host header is never reflected into a redirect
        return RedirectResponse(_root(request) + path, status_code=303)

    @app.exception_handler(Forbidden)
    async def _forbidden(request: Request, exc: Forbidden) -> Response:
        return PlainTextResponse(str(exc), status_code=403)

    @app.exception_handler(LoginFirst)
    async def _login_first(request: Request, exc: LoginFirst) -> Response:
        if request.method == "GET" and not request.url.path.endswith((".json", ".csv")):
            return go(request, "/login")
        return PlainTextResponse("log in first", status_code=401)

    @app.exception_handler(GpuseatError)
    def _gpuseat_error(request: Request, exc: GpuseatError) -> Response:
        # a course deleted under a page (or a link): 404 with the page, never a 500
        status = 404 if isinstance(exc, NotFound) else 400 if isinstance(exc, InputError) else 503
        if request.url.path.endswith(".json"):
            return JSONResponse({"error": exc.message}, status_code=status)
        return page(request, "error.html", status=status, message=exc.message)

    # -- organizer: login ---------------------------------------------------------------------------

    @app.get("/", response_class=HTMLResponse)
    def home(request: Request) -> Response:
        return go(request, "/login" if organizer(request) is None else "/overview")

    @app.get("/favicon.ico")
    async def favicon(request: Request) -> Response:
        return RedirectResponse(_root(request) + "/static/favicon.svg", status_code=301)

    @app.get("/healthz")
    async def healthz() -> Response:
        return PlainTextResponse("ok")

    @app.get("/login", response_class=HTMLResponse)
    def login_page(request: Request) -> Response:
        return page(request, "login.html", user=None)

    @app.post("/login")
    def login(request: Request, data: FormData = Depends(read_form)) -> Response:
        check_csrf(data, "a:" + (request.cookies.get(cookie_name(request, CSRF_COOKIE)) or ""))
        user, password = str(data.get("username", ""))[:64], str(data.get("password", ""))
        key = f"{_client(request)}|{user}"
        blocked = portal.login_limit.blocked(key)
        # the right password always gets in; failures count per address and account only
        if not portal.check_password(user, password):
            portal.login_limit.fail(key)
            if blocked:
                return PlainTextResponse("too many failed logins: wait a few minutes", status_code=429)
            return page(request, "login.html", status=401, user=None, error="wrong user name or password")
        portal.login_limit.forget(key)
        portal.store.log(portal.course_key, "portal.login", actor=user)
        response = go(request, "/overview")
        set_cookie(response, request, SESSION_COOKIE, sessions.issue(user), max_age=SESSION_MAX_AGE_S)
        return response

    @app.post("/logout")
    def logout(request: Request, data: FormData = Depends(read_form)) -> Response:
        organizer_form(request, data)
        sessions.end(session_secret(request))
        response = go(request, "/login")
        response.delete_cookie(cookie_name(request, SESSION_COOKIE), path="/", secure=https(request))
        return response

    @app.post("/logout/everywhere")
    def logout_everywhere(request: Request, data: FormData = Depends(read_form)) -> Response:
        user = organizer_form(request, data)
        n = sessions.end_all(user)
        portal.store.log(portal.course_key, "portal.logout-all", actor=user, detail={"sessions": n})
        response = go(request, "/login")
        response.delete_cookie(cookie_name(request, SESSION_COOKIE), path="/", secure=https(request))
        return response

    # -- organizer: pages ---------------------------------------------------------------------------

    from gpuseat.web.organizer import add_organizer_routes

    add_organizer_routes(
        app, portal, page=page, need=need_organizer, read_form=read_form, organizer_form=organizer_form, go=go
    )

    @app.get("/seats.csv")
    def seats_csv(request: Request) -> Response:
        need_organizer(request)
        rows = portal.store.seats(portal.course_key)
        cols = ["key", "kind", "engine", "state", "host", "profile", "memory_gb", "participant", "connect"]
        return download(csv_text(cols, ([getattr(s, c) for c in cols] for s in rows)), "seats.csv")

    @app.get("/roster.csv")
    def roster_csv(request: Request) -> Response:
        need_organizer(request)
        rows = portal.store.participants(portal.course_key)
        cols = ["key", "name", "email", "group", "unix_user", "seat"]
        return download(csv_text(cols, ([getattr(p, c) for c in cols] for p in rows)), "roster.csv")

    def download(text: str, name: str) -> Response:
        return Response(
            text,
            media_type="text/csv; charset=utf-8",
            headers={"content-disposition": f'attachment; filename="{name}"', "cache-control": "no-store"},
        )

    @app.post("/links")
    def links_action(request: Request, data: FormData = Depends(read_form)) -> Response:
        user = organizer_form(request, data)
        action, who = str(data.get("action", "")), str(data.get("participant", "")).strip()
        people = [who] if who else None
        key = portal.course_key
        if action == "issue":  # also the mail merge: links for those without one; sent links stay valid
            issued = portal.store.issue_tokens(key, people, actor=user)
            notice = f"issued {len(issued)} new links" + (
                "" if issued else " (everyone already has one: rotate a participant's link to replace it)"
            )
        elif action == "rotate":
            issued = portal.store.rotate_tokens(key, people, actor=user)
            notice = f"rotated {len(issued)} links: the old ones no longer open anything"
        elif action == "revoke":
            issued = []
            notice = f"revoked {portal.store.revoke_tokens(key, people, actor=user)} links"
        else:
            raise InputError(f"unknown action {action[:20]!r}", where="action", fix="use the page's buttons")
        portal.forget_tokens()
        rows = {p.key: p for p in portal.store.participants(key)}
        base = portal.public_url(_root(request))
        fresh = [
            {
                "participant": t.participant,
                "name": rows[t.participant].name if t.participant in rows else "",
                "email": rows[t.participant].email if t.participant in rows else "",
                "link": t.link(base),
            }
            for t in issued
        ]
        if data.get("format") == "csv":
            cols = ["participant", "name", "email", "link"]
            return download(csv_text(cols, ([f[c] for c in cols] for f in fresh)), "access-links.csv")
        return page(
            request, "links.html", tab="links", fresh=fresh, notice=notice, status_rows=portal.store.token_status(key)
        )

    @app.get("/report", response_class=HTMLResponse)
    def report(request: Request) -> Response:
        need_organizer(request)
        from gpuseat.web.report import render_report, report_csp

        html = render_report(portal.digest(with_alternatives=True))
        headers = {"cache-control": "no-store", "content-security-policy": report_csp(header=True)}
        if request.query_params.get("download") == "1":
            headers["content-disposition"] = f'attachment; filename="report-{portal.course_key}.html"'
        return HTMLResponse(html, headers=headers)

    # -- participant --------------------------------------------------------------------------------

    def participant(request: Request, token: str) -> ParticipantView | Response:
        """The token's participant; an unknown token counts as a guess of the client's address.

        A valid token is never refused: the guess limit answers only for unknown ones. Only reads:
        the visit is written after the response (:func:`visited`), so no page waits for a writer.
        """
        try:
            hit = portal.lookup(token)
            who = hit.participant if hit is not None else None
            expired = who is not None and portal.link_expired(who)
        except NotFound:  # the link's course was deleted after its lookup was cached
            portal.forget_tokens()
            hit, who, expired = None, None, False
        if who is not None and not expired:
            return who
        client = _client(request)
        blocked = portal.token_limit.blocked(client)
        portal.token_limit.fail(client)
        if blocked:
            return PlainTextResponse("too many unknown links from your address: wait a few minutes", status_code=429)
        if who is not None:
            message, status = "This link has expired: the course is over.", 410
        elif hit is not None and hit.archived:
            message, status = "This course has been archived: its links no longer open anything.", 410
        else:
            message, status = "This link is not valid (it may have been replaced).", 404
        if request.url.path.endswith("/live"):
            return JSONResponse({"error": message}, status_code=status)
        return page(request, "error.html", status=status, user=None, message=message)

    def visited(response: Response) -> Response:
        """The response, with the queued link visits written after it is sent (never before)."""
        if portal.visits_pending and response.background is None:
            response.background = BackgroundTask(portal.record_visits)
        return response

    def participant_page(request: Request, token: str, who: ParticipantView, status: int = 200, **ctx: Any) -> Response:
        key = who.course
        seat, d_bench, usage = portal.participant(who)
        state = portal.surveys.state(key)
        template = portal.surveys.template(key) if state == OPEN else None
        answers = ctx.pop("answers", None)
        if answers is None and template is not None:
            answers = portal.surveys.response(key, who.key) or {}
        way = check = None
        if seat is not None:
            from gpuseat.services.delivery import way_in

            way = way_in(portal.store, seat, who)
            check = portal.store.readiness_of(key).get(seat.key)
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
            token=token,
            survey=template,
            survey_state=state,
            answers=answers or {},
            course=portal.course_view(key),
            user=None,  # a participant page never shows the organizer's menu
            **ctx,
        )

    @app.get("/t/{token}", response_class=HTMLResponse)
    def participant_home(token: str, request: Request) -> Response:
        who = participant(request, token)
        return visited(who if isinstance(who, Response) else participant_page(request, token, who))

    @app.get("/t/{token}/live")
    def participant_live(token: str, request: Request) -> Response:
        who = participant(request, token)
        if isinstance(who, Response):
            return who
        body: dict[str, Any] = {"participant": who.key, "seat": who.seat, "live": None, "last_active": None}
        if who.seat is not None:
            live, last = portal.seat_live(who.course, who.seat)
            body["live"] = live.to_dict() if live else None
            body["last_active"] = last
        return visited(JSONResponse(body, headers={"cache-control": "no-store"}))

    @app.get("/t/{token}/ssh_config")
    def participant_ssh_config(token: str, request: Request) -> Response:
        who = participant(request, token)
        if isinstance(who, Response):
            return who
        from gpuseat.services.delivery import way_in

        seat = portal.store.seat_of(who.course, who.key)
        way = way_in(portal.store, seat, who) if seat is not None else None
        if seat is None or way is None or way.ssh_config is None:
            return PlainTextResponse("no SSH way in for your seat yet\n", status_code=404)
        return visited(
            PlainTextResponse(
                way.ssh_config,
                headers={"content-disposition": f'attachment; filename="gpuseat-{seat.key}.ssh_config"'},
            )
        )

    @app.post("/t/{token}/survey")
    def participant_survey(token: str, request: Request, data: FormData = Depends(read_form)) -> Response:
        who = participant(request, token)
        if isinstance(who, Response):
            return who
        check_csrf(data, "t:" + token)
        fields = {k: [v for v in data.getlist(k) if isinstance(v, str)] for k in data if k.startswith("q_")}
        try:
            portal.surveys.submit(who.course, who.key, fields)
        except InputError as exc:
            answers = {k.removeprefix("q_"): v[0] if len(v) == 1 else v for k, v in fields.items()}
            return participant_page(request, token, who, status=422, error=exc.message, answers=answers)
        # stored and committed; a small page answers (the seat page is heavier and one click away)
        return page(request, "saved.html", bind="t:" + token, token=token, course_name=who.course, user=None)

    from gpuseat.web.participant_controls import add_participant_controls  # the participant's seat controls

    add_participant_controls(app, portal, templates, participant, read_form, check_csrf, page, need_organizer)

    return app
