"""The course portal: FastAPI + Jinja2, server-rendered, on the course store and the services.

:func:`create_app` takes a :class:`Portal` (the store, the services and the settings) and returns the
ASGI app that ``gpuseat serve`` hands to uvicorn. Routes only translate HTTP to service calls and
service results (or :class:`~gpuseat.errors.GpuseatError`) back to pages; they never touch tables.

Organizer pages need a session (``/login``); a participant's page is ``/t/<token>`` and shows only
that participant's seat. Every POST checks the CSRF token (see :mod:`gpuseat.web.security`).
"""

from __future__ import annotations

import csv
import io
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from gpuseat.core.roster import RosterText
from gpuseat.errors import GpuseatError, InputError
from gpuseat.services.accounts import Accounts
from gpuseat.services.activity import Activity, SeatLive
from gpuseat.services.report import build_digest, participant_view, seat_id
from gpuseat.services.survey import OPEN, SurveyService
from gpuseat.urls import base_url as check_base_url
from gpuseat.web.security import (
    CSRF_COOKIE,
    CSRF_FIELD,
    SESSION_COOKIE,
    SESSION_MAX_AGE_S,
    RateLimiter,
    SecurityHeaders,
    Sessions,
    new_csrf_cookie,
)

if TYPE_CHECKING:
    from gpuseat.bench.results import RecordedResult
    from gpuseat.catalog.bundle import Catalog
    from gpuseat.services.courses import CourseStore, ParticipantView
    from gpuseat.services.report import CourseDigest

HERE = Path(__file__).parent
TOKEN_CACHE_S = 10.0  # a link revoked elsewhere (CLI, another server process) stops working within this
LIVE_CACHE_S = 1.0  # live readings: the monitor samples every few seconds anyway
MAX_UPLOAD = 2 * 1024 * 1024  # a roster CSV of a large course is far below this
MAX_FORM_FIELDS = 200


@dataclass
class Portal:
    """What the portal serves: one course of one store, and how."""

    store: CourseStore
    catalog: Catalog
    course: str | None = None  # None: the store's only course
    base_url: str = "http://127.0.0.1:8000"
    secure_cookies: bool = False  # set on https deployments (the browser then sends cookies only over TLS)
    login_limit: RateLimiter = field(default_factory=lambda: RateLimiter(10, 300))
    token_limit: RateLimiter = field(default_factory=lambda: RateLimiter(20, 300))
    poll_s: int = 5  # how often pages refresh their live parts
    clock: datetime | None = None  # a fixed "now" (the demo course is half-way through 2016)
    bench_path: Path | None = None  # benchmark results store (default: the data dir's)
    surveys: SurveyService = field(init=False)
    accounts: Accounts = field(init=False)
    activity: Activity = field(init=False)

    _tokens: dict[str, tuple[float, ParticipantView]] = field(init=False, default_factory=dict)
    _seat_ids: dict[tuple[str, str], int | None] = field(init=False, default_factory=dict)
    _live: tuple[float, dict[int, SeatLive], dict[int, float | None]] = field(init=False, default=(0.0, {}, {}))
    _bench: tuple[tuple[str, float] | None, list[RecordedResult]] = field(init=False, default=(None, []))
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        check_base_url(self.base_url)  # the links it shows are BASE/t/TOKEN: never javascript: or worse
        self.surveys = SurveyService(self.store)
        self.accounts = Accounts(self.store)
        self.activity = Activity(self.store)

    # Participant pages are polled by everyone at once: what they read is cached for a moment.

    def participant_for_token(self, token: str) -> ParticipantView | None:
        """The store's answer, remembered for ``TOKEN_CACHE_S`` (links changed here forget it at once).

        Unknown tokens are never cached, so every guess reaches the store and the rate limit.
        """
        now = time.monotonic()
        hit = self._tokens.get(token)
        if hit is not None and now - hit[0] < TOKEN_CACHE_S:
            return hit[1]
        who = self.store.participant_for_token(token)
        if who is None:
            self._tokens.pop(token, None)
            return None
        if len(self._tokens) > 100_000:
            self._tokens.clear()
        self._tokens[token] = (now, who)
        return who

    def forget_tokens(self) -> None:
        """Drop cached token lookups (after issuing, rotating or revoking links)."""
        self._tokens.clear()

    def seat_live(self, course: str, seat: str) -> tuple[SeatLive | None, float | None]:
        """The seat's newest reading and last activity, from a course-wide read made at most once a second."""
        key = (course, seat)
        if key not in self._seat_ids:
            self._seat_ids[key] = seat_id(self.store, course, seat)
        sid = self._seat_ids[key]
        if sid is None:
            return None, None
        if time.monotonic() - self._live[0] >= LIVE_CACHE_S:
            with self._lock:
                if time.monotonic() - self._live[0] >= LIVE_CACHE_S:
                    self._live = (time.monotonic(), self.activity.live(), self.activity.last_active())
        _, live, last = self._live
        return live.get(sid), last.get(sid)

    def bench_results(self) -> list[RecordedResult]:
        """The benchmark store, re-read only when the file changes."""
        from gpuseat.bench.results import recorded_results, results_path

        path = self.bench_path or results_path()
        try:
            stamp: tuple[str, float] | None = (str(path), path.stat().st_mtime)
        except OSError:
            stamp = None
        if stamp is None or stamp != self._bench[0]:
            self._bench = (stamp, recorded_results(path))
        return self._bench[1]

    def digest(self, **kw: Any) -> CourseDigest:
        """The served course's digest (at the portal's clock, with its benchmark store)."""
        return build_digest(
            self.store,
            self.surveys,
            self.catalog,
            self.course,
            now=self.clock,
            bench_results=self.bench_results(),
            **kw,
        )

    def participant(self, who: ParticipantView) -> tuple[Any, Any, Any]:
        """A participant's seat, benchmark and usage (their rows only: this page is opened by many)."""
        return participant_view(self.store, self.catalog, who, bench_results=self.bench_results())

    @property
    def course_key(self) -> str:
        """The served course's key."""
        return self.store.get_course(self.course).key


class Forbidden(Exception):
    """A request that is refused (bad CSRF token, not logged in for an API call)."""


def _timestamp(ts: float) -> str:
    """Unix seconds as ``2016-06-06 14:05 UTC``."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _client(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def create_app(portal: Portal) -> FastAPI:
    """The ASGI app (wrapped in the security-headers middleware)."""
    app = FastAPI(title="gpuseat portal", docs_url=None, redoc_url=None, openapi_url=None)
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.globals["poll_s"] = portal.poll_s
    templates.env.filters["timestamp"] = _timestamp
    sessions = Sessions(portal.accounts.session_key())
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    app.state.portal = portal
    app.add_middleware(SecurityHeaders)

    # -- helpers ------------------------------------------------------------------------------------

    def csrf_cookie(request: Request) -> tuple[str, bool]:
        value = request.cookies.get(CSRF_COOKIE)
        if value and 16 <= len(value) <= 64:
            return value, False
        return new_csrf_cookie(), True

    def page(request: Request, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        value, fresh = csrf_cookie(request)
        ctx.setdefault("user", sessions.user(request.cookies.get(SESSION_COOKIE)))
        ctx.setdefault("error", None)
        ctx.setdefault("notice", None)
        response = templates.TemplateResponse(
            request, name, {"csrf": sessions.csrf_token(value), "csrf_field": CSRF_FIELD, **ctx}, status_code=status
        )
        if fresh:
            response.set_cookie(
                CSRF_COOKIE, value, httponly=True, samesite="strict", secure=portal.secure_cookies, path="/"
            )
        response.headers["cache-control"] = "no-store"
        return response

    async def form(request: Request) -> Any:
        """The POSTed form after its CSRF check (403 without a matching token)."""
        length = int(request.headers.get("content-length") or 0)
        if length > MAX_UPLOAD:
            raise InputError("the upload is too large", where="request body", fix="send a file under 2 MiB")
        data = await request.form(max_files=1, max_fields=MAX_FORM_FIELDS)
        token = data.get(CSRF_FIELD)
        if not sessions.csrf_ok(request.cookies.get(CSRF_COOKIE), token if isinstance(token, str) else None):
            raise Forbidden("missing or wrong CSRF token: reload the page and send the form again")
        return data

    def organizer(request: Request) -> str | None:
        return sessions.user(request.cookies.get(SESSION_COOKIE))

    def login_first(request: Request) -> Response:
        if request.method == "GET" and not request.url.path.endswith((".json", ".csv")):
            return RedirectResponse("/login", status_code=303)
        return PlainTextResponse("log in first", status_code=401)

    def participant(token: str, request: Request) -> ParticipantView | None:
        return portal.participant_for_token(token)

    @app.exception_handler(Forbidden)
    async def _forbidden(request: Request, exc: Forbidden) -> Response:
        return PlainTextResponse(str(exc), status_code=403)

    @app.exception_handler(GpuseatError)
    async def _gpuseat_error(request: Request, exc: GpuseatError) -> Response:
        status = 400 if isinstance(exc, InputError) else 503
        if request.url.path.endswith(".json"):
            return JSONResponse({"error": exc.message}, status_code=status)
        return page(request, "error.html", status=status, message=exc.message)

    # -- organizer: login ---------------------------------------------------------------------------

    @app.get("/", response_class=HTMLResponse)
    def home(request: Request) -> Response:
        if organizer(request) is None:
            return RedirectResponse("/login", status_code=303)
        return RedirectResponse("/overview", status_code=303)

    @app.get("/favicon.ico")
    def favicon() -> Response:
        return RedirectResponse("/static/favicon.svg", status_code=301)

    @app.get("/healthz")
    def healthz() -> Response:
        return PlainTextResponse("ok")

    @app.get("/login", response_class=HTMLResponse)
    def login_page(request: Request) -> Response:
        return page(request, "login.html")

    @app.post("/login")
    async def login(request: Request) -> Response:
        client = _client(request)
        if portal.login_limit.blocked(client):
            return PlainTextResponse("too many failed logins: wait a few minutes", status_code=429)
        data = await form(request)
        user, password = str(data.get("username", ""))[:64], str(data.get("password", ""))
        if not portal.accounts.verify(user, password):
            portal.login_limit.fail(client)
            return page(request, "login.html", status=401, error="wrong user name or password")
        portal.store.log(portal.course_key, "portal.login", actor=user)
        response = RedirectResponse("/overview", status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            sessions.issue(user),
            max_age=SESSION_MAX_AGE_S,
            httponly=True,
            samesite="strict",
            secure=portal.secure_cookies,
            path="/",
        )
        return response

    @app.post("/logout")
    async def logout(request: Request) -> Response:
        await form(request)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    # -- organizer: pages ---------------------------------------------------------------------------

    def digest(**kw: Any) -> Any:
        return portal.digest(**kw)

    def seats_page(request: Request, status: int = 200, **ctx: Any) -> Response:
        d = digest()
        free = [r.seat.key for r in d.seats if r.seat.participant is None and r.seat.state != "released"]
        waiting = [p.key for p in d.participants if p.seat is None]
        from gpuseat.services.delivery import ways_in

        ways = ways_in(portal.store, portal.course_key)
        return page(
            request, "seats.html", status=status, tab="seats", d=d, free=free, waiting=waiting, ways=ways, **ctx
        )

    @app.get("/overview", response_class=HTMLResponse)
    def overview(request: Request) -> Response:
        if (user := organizer(request)) is None:
            return login_first(request)
        from gpuseat.services.delivery import checklist

        ready = checklist(portal.store, portal.course_key)
        return page(request, "overview.html", d=digest(), user=user, tab="overview", checklist=ready)

    @app.get("/roster", response_class=HTMLResponse)
    def roster(request: Request) -> Response:
        if organizer(request) is None:
            return login_first(request)
        key = portal.course_key
        return page(
            request,
            "roster.html",
            tab="roster",
            course=portal.store.get_course(key),
            people=portal.store.participants(key),
        )

    @app.post("/roster/import")
    async def roster_import(request: Request) -> Response:
        if (user := organizer(request)) is None:
            return login_first(request)
        data = await form(request)
        upload = data.get("file")
        key = portal.course_key
        ctx: dict[str, Any] = {"tab": "roster"}
        if upload is None or isinstance(upload, str) or not upload.filename:
            ctx["error"] = "choose a CSV file to import"
        else:
            raw = await upload.read(MAX_UPLOAD + 1)
            name = Path(upload.filename).name[:120]
            try:
                if len(raw) > MAX_UPLOAD:
                    raise InputError("the file is larger than 2 MiB", where=name, fix="split the roster")
                try:
                    text = raw.decode("utf-8-sig")
                except UnicodeDecodeError as exc:
                    raise InputError(
                        f"not UTF-8 text (byte {exc.start})", where=name, fix="save as UTF-8 CSV"
                    ) from None
                report = portal.store.import_roster(key, RosterText(text, where=name), actor=user)
                ctx["notice"] = (
                    f"imported {name}: {report.added} added, {report.updated} updated, {report.unchanged} unchanged"
                    + (f", {len(report.absent)} no longer listed (kept)" if report.absent else "")
                )
                ctx["changes"] = report.changes
            except InputError as exc:
                ctx["error"] = exc.message
        status = 400 if ctx.get("error") else 200
        return page(
            request,
            "roster.html",
            status=status,
            course=portal.store.get_course(key),
            people=portal.store.participants(key),
            **ctx,
        )

    @app.get("/seats", response_class=HTMLResponse)
    def seats(request: Request) -> Response:
        if organizer(request) is None:
            return login_first(request)
        return seats_page(request)

    @app.get("/seats/live.json")
    def seats_live(request: Request) -> Response:
        if organizer(request) is None:
            return login_first(request)
        d = digest()
        return JSONResponse(
            {
                "seats": [
                    {
                        "seat": r.seat.key,
                        "participant": r.seat.participant,
                        "state": r.seat.state,
                        "live": r.live.to_dict() if r.live else None,
                        "last_active": r.last_active,
                    }
                    for r in d.seats
                ]
            },
            headers={"cache-control": "no-store"},
        )

    @app.post("/seats/action")
    async def seat_action(request: Request) -> Response:
        if (user := organizer(request)) is None:
            return login_first(request)
        data = await form(request)
        action = str(data.get("action", ""))
        who, seat = str(data.get("participant", "")).strip(), str(data.get("seat", "")).strip()
        key = portal.course_key
        try:
            if action == "assign-all":
                rep = portal.store.assign_all(key, partial=True, actor=user)
                notice = f"assigned {len(rep.assigned)} seats" + (
                    f"; no seat for {', '.join(rep.unassigned)}" if rep.unassigned else ""
                )
            elif action == "assign":
                portal.store.assign(key, who, seat, actor=user)
                notice = f"{who} now holds seat {seat}"
            elif action == "move":
                portal.store.move(key, who, seat, actor=user)
                notice = f"{who} moved to seat {seat}"
            elif action == "release":
                done = portal.store.release(key, seat=seat or None, participant=None if seat else who, actor=user)
                notice = f"released seat {done.seat} of {done.participant}" if done else "nothing to release"
            else:
                raise InputError(f"unknown action {action[:20]!r}", where="action", fix="use the page's buttons")
        except InputError as exc:
            return seats_page(request, status=400, error=exc.message)
        return seats_page(request, notice=notice)

    @app.post("/seats/connect")
    async def seat_connect(request: Request) -> Response:
        if (user := organizer(request)) is None:
            return login_first(request)
        from gpuseat.services.delivery import build_access

        data = await form(request)
        value = {k: str(data.get(k, "")).strip() or None for k in ("seat", "ssh", "jump", "url", "note")}
        try:
            seat = portal.store.get_seat(portal.course_key, value["seat"] or "")
            notes = [value["note"]] if value["note"] else []
            made = build_access(
                value["ssh"], value["url"], value["jump"], notes, None, seat.device_uuid, server_name=seat.host
            )
            portal.store.record_delivery(seat.course, seat.key, access=made, actor=user)
        except InputError as exc:
            return seats_page(request, status=400, error=exc.message)
        return seats_page(request, notice=f"seat {seat.key}: way in saved")

    @app.get("/alerts", response_class=HTMLResponse)
    def alerts(request: Request) -> Response:
        if organizer(request) is None:
            return login_first(request)
        return page(request, "alerts.html", tab="alerts", d=digest())

    @app.get("/bench", response_class=HTMLResponse)
    def bench(request: Request) -> Response:
        if organizer(request) is None:
            return login_first(request)
        return page(request, "bench.html", tab="bench", d=digest())

    @app.get("/links", response_class=HTMLResponse)
    def links(request: Request) -> Response:
        if organizer(request) is None:
            return login_first(request)
        return page(request, "links.html", tab="links", status_rows=portal.store.token_status(portal.course_key))

    @app.post("/links")
    async def links_action(request: Request) -> Response:
        if (user := organizer(request)) is None:
            return login_first(request)
        data = await form(request)
        action, who = str(data.get("action", "")), str(data.get("participant", "")).strip()
        people = [who] if who else None
        key = portal.course_key
        issued = []
        notice = ""
        if action == "issue":
            issued = portal.store.issue_tokens(key, people, actor=user)
            notice = f"issued {len(issued)} new links" + (
                "" if issued else " (everyone already has one: rotate to replace)"
            )
        elif action == "rotate":
            issued = portal.store.rotate_tokens(key, people, actor=user)
            notice = f"rotated {len(issued)} links: the old ones no longer open anything"
        elif action == "revoke":
            n = portal.store.revoke_tokens(key, people, actor=user)
            notice = f"revoked {n} links"
        else:
            raise InputError(f"unknown action {action[:20]!r}", where="action", fix="use the page's buttons")
        portal.forget_tokens()
        rows = {p.key: p for p in portal.store.participants(key)}
        fresh = [
            {
                "participant": t.participant,
                "name": rows[t.participant].name if t.participant in rows else "",
                "email": rows[t.participant].email if t.participant in rows else "",
                "link": t.link(portal.base_url),
            }
            for t in issued
        ]
        if data.get("format") == "csv":
            out = io.StringIO()
            writer = csv.DictWriter(out, ["participant", "name", "email", "link"])
            writer.writeheader()
            writer.writerows(fresh)
            return Response(
                out.getvalue(),
                media_type="text/csv; charset=utf-8",
                headers={"content-disposition": 'attachment; filename="access-links.csv"', "cache-control": "no-store"},
            )
        return page(
            request, "links.html", tab="links", fresh=fresh, notice=notice, status_rows=portal.store.token_status(key)
        )

    @app.get("/survey", response_class=HTMLResponse)
    def survey_results(request: Request) -> Response:
        if organizer(request) is None:
            return login_first(request)
        return page(request, "survey_results.html", tab="survey", d=digest())

    @app.post("/survey")
    async def survey_state(request: Request) -> Response:
        if (user := organizer(request)) is None:
            return login_first(request)
        data = await form(request)
        state = {"open": "open", "close": "closed"}.get(str(data.get("action", "")))
        if state is None:
            raise InputError("unknown survey action", where="action", fix="use the page's buttons")
        portal.surveys.set_state(portal.course_key, state, actor=user)
        return RedirectResponse("/survey", status_code=303)

    @app.get("/survey.csv")
    def survey_csv(request: Request) -> Response:
        if organizer(request) is None:
            return login_first(request)
        return Response(
            portal.surveys.export_csv(portal.course_key),
            media_type="text/csv; charset=utf-8",
            headers={"content-disposition": 'attachment; filename="survey.csv"', "cache-control": "no-store"},
        )

    @app.get("/report", response_class=HTMLResponse)
    def report(request: Request) -> Response:
        if organizer(request) is None:
            return login_first(request)
        from gpuseat.web.report import render_report

        html = render_report(digest(with_alternatives=True))
        download = request.query_params.get("download") == "1"
        headers = {"cache-control": "no-store"}
        if download:
            headers["content-disposition"] = f'attachment; filename="report-{portal.course_key}.html"'
        return HTMLResponse(html, headers=headers)

    # -- participant --------------------------------------------------------------------------------

    def guess_refused(request: Request) -> Response | None:
        if portal.token_limit.blocked(_client(request)):
            return PlainTextResponse("too many unknown links from your address: wait a few minutes", status_code=429)
        return None

    def unknown_link(request: Request) -> Response:
        portal.token_limit.fail(_client(request))
        return page(request, "error.html", status=404, message="This link is not valid (it may have been replaced).")

    def participant_page(request: Request, token: str, who: ParticipantView, **ctx: Any) -> Response:
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
            who=who,
            seat=seat,
            way=way,
            check=check,
            bench=d_bench,
            usage=usage,
            token=token,
            survey=template,
            survey_state=state,
            answers=answers or {},
            course=portal.store.get_course(key),
            user=None,  # a participant page never shows the organizer's menu
            **ctx,
        )

    @app.get("/t/{token}", response_class=HTMLResponse)
    def participant_home(token: str, request: Request) -> Response:
        if (refused := guess_refused(request)) is not None:
            return refused
        who = participant(token, request)
        if who is None:
            return unknown_link(request)
        return participant_page(request, token, who)

    @app.get("/t/{token}/ssh_config")
    def participant_ssh_config(token: str, request: Request) -> Response:
        if (refused := guess_refused(request)) is not None:
            return refused
        who = participant(token, request)
        if who is None:
            return unknown_link(request)
        from gpuseat.services.delivery import way_in

        seat = portal.store.seat_of(who.course, who.key)
        way = way_in(portal.store, seat, who) if seat is not None else None
        if way is None or way.ssh_config is None:
            return PlainTextResponse("no SSH way in for your seat yet\n", status_code=404)
        return PlainTextResponse(
            way.ssh_config,
            headers={"content-disposition": f'attachment; filename="gpuseat-{seat.key}.ssh_config"'},  # type: ignore[union-attr]
        )

    @app.get("/t/{token}/live")
    def participant_live(token: str, request: Request) -> Response:
        if (refused := guess_refused(request)) is not None:
            return refused
        who = participant(token, request)
        if who is None:
            portal.token_limit.fail(_client(request))
            return JSONResponse({"error": "unknown link"}, status_code=404)
        body: dict[str, Any] = {"participant": who.key, "seat": who.seat, "live": None, "last_active": None}
        if who.seat is not None:
            live, last = portal.seat_live(who.course, who.seat)
            body["live"] = live.to_dict() if live else None
            body["last_active"] = last
        return JSONResponse(body, headers={"cache-control": "no-store"})

    @app.post("/t/{token}/survey")
    async def participant_survey(token: str, request: Request) -> Response:
        if (refused := guess_refused(request)) is not None:
            return refused
        who = participant(token, request)
        if who is None:
            return unknown_link(request)
        data = await form(request)
        fields = {k: [v for v in data.getlist(k) if isinstance(v, str)] for k in data if k.startswith("q_")}
        try:
            portal.surveys.submit(who.course, who.key, fields)
        except InputError as exc:
            answers = {k.removeprefix("q_"): v[0] if len(v) == 1 else v for k, v in fields.items()}
            return participant_page(request, token, who, error=exc.message, answers=answers)
        # stored and committed; a small page answers (the seat page is heavier and one click away)
        return page(request, "saved.html", token=token, course_name=who.course, user=None)

    return app
