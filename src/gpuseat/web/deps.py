"""The portal's FastAPI dependencies: the portal (and its store), the organizer, the participant of a
link, and the checked form of a POST.

Each is a function a route names with ``Depends``; a refusal is an exception that one handler of
:func:`gpuseat.web.app.create_app` turns into the answer (a redirect to the login, a 401, a 403, or the
link's own 404/410/429). Dependencies that read the store are plain ``def`` (a worker thread, never
the event loop). The order is fixed by the signatures: a POST's form (and its origin check) is read
first, then who asks, then the CSRF token, as the portal always did.
"""

from __future__ import annotations

import logging
from urllib.parse import quote, unquote

from fastapi import Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpuseat.errors import GpuseatError, InputError, NotFound, StoreBusy
from gpuseat.store import ParticipantView
from gpuseat.web.pages import client_address, go, organizer_of, page, portal_of, root, session_secret, sessions_of
from gpuseat.web.portal import Portal
from gpuseat.web.security import CSRF_FIELD, SESSION_MAX_AGE_S, same_origin

MAX_FORM_FIELDS = 200
#: a JSON poll's 401: the session cookie is missing, ended (logged out) or expired
SESSION_ENDED = f"no live session (logged out, or older than {SESSION_MAX_AGE_S // 3600} hours): log in again"
#: the longest page a login returns to (a page's own path and query are far shorter)
MAX_NEXT = 1024
#: the header portal.js sends with a poll: the page that polls (location.pathname + location.search)
PAGE_HEADER = "x-gpuseat-page"
#: pages a login never returns to: they would log out again or loop back to the login
NOT_NEXT = ("/login", "/logout")
#: what a participant (anyone not logged in as an organizer) sees when the store failed: never the server's
#: paths, the processes that hold a lock, or SQL (the organizer and the server log get those)
BUSY = "The seat service is busy: try again in a minute. Nothing was changed."
STORE_FAILED = "The seat service cannot answer right now: try again later, or tell your organizer."
#: a busy store's ``Retry-After`` (seconds): the minute the page asks for
RETRY_AFTER_S = 60

log = logging.getLogger("gpuseat.web")


class Forbidden(Exception):
    """A request that is refused (bad CSRF token, a cross-site POST)."""


class LoginFirst(Exception):
    """An organizer route without a live session."""


class LinkRefused(Exception):
    """An access link that opens nothing: unknown, expired, archived, or too many guesses."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message, self.status = message, status


def safe_next(request: Request, value: object) -> str | None:
    """``value`` when it is a page of this portal to return to after the login, else None (ignored).

    Only a plain path under the root path passes: printable ASCII without backslashes (no CR/LF for a header),
    no ``//`` or dot segments even once percent-decoded (``/%2F%2Fevil.example`` would leave the site, ``..``
    the root path), and not the login or logout itself. What passes is a relative URL on this host, so the
    redirect can never leave it.
    """
    if not isinstance(value, str) or not 0 < len(value) <= MAX_NEXT:
        return None
    if any(not "!" <= c <= "~" for c in value) or "\\" in value or "#" in value:
        return None
    base = root(request)
    if not value.startswith(base + "/"):
        return None
    path = unquote(value[len(base) :].split("?", 1)[0])
    if "//" in path or "\\" in path or any(c < " " or c == "\x7f" for c in path):
        return None
    if any(part in (".", "..") for part in path.split("/")):
        return None
    if any(path == p or path.startswith(p + "/") for p in NOT_NEXT):
        return None
    return value


def login_path(request: Request, page: str | None) -> str:
    """The login page (below the root path), with ``?next=`` when ``page`` is one to return to."""
    back = safe_next(request, page)
    return "/login" + (f"?next={quote(back, safe='/')}" if back else "")


def this_page(request: Request) -> str:
    """The request's own path and query as the browser sent them (still percent-encoded), under the root path."""
    raw = request.scope.get("raw_path")
    path = raw.decode("latin-1") if isinstance(raw, bytes) else quote(request.scope["path"])
    base = root(request)
    if base and (path == base or path.startswith(base + "/")):  # uvicorn's paths hold the root path, TestClient's not
        path = path[len(base) :]
    query = request.scope.get("query_string", b"").decode("latin-1")
    return base + path + (f"?{query}" if query else "")


async def get_portal(request: Request) -> Portal:
    """The portal this app serves (its ``store`` is the course store)."""
    return portal_of(request)


def need_organizer(request: Request) -> str:
    """The organizer of the request's session; :class:`LoginFirst` without one."""
    user = organizer_of(request)
    if user is None:
        raise LoginFirst
    return user


async def read_form(request: Request) -> FormData:
    """The POSTed form (capped by :class:`~gpuseat.web.limits.BodyGuard`), refused early when cross-site."""
    if not same_origin(request.headers, request.url.scheme, portal_of(request).trusted_origins()):
        raise Forbidden("cross-site form refused: use the portal's own pages")
    return await request.form(max_files=1, max_fields=MAX_FORM_FIELDS)


def check_csrf(request: Request, data: FormData, bind: str | None) -> None:
    """:class:`Forbidden` unless the form's CSRF token is the one bound to ``bind``."""
    token = data.get(CSRF_FIELD)
    if not sessions_of(request).csrf_ok(bind, token if isinstance(token, str) else None):
        raise Forbidden("missing or wrong CSRF token: reload the page and send the form again")


def organizer_form(request: Request, data: FormData = Depends(read_form)) -> str:
    """The organizer of a POST whose CSRF token is bound to their session."""
    user = need_organizer(request)
    check_csrf(request, data, "s:" + (session_secret(request) or ""))
    return user


def participant(token: str, request: Request) -> ParticipantView:
    """The link's participant; an unknown token counts as a guess from the client's address.

    A valid token is never refused: the guess limit answers only for unknown ones. Only reads: the
    visit is written a moment later with others (Portal.record_visits), so no page waits for a writer.
    """
    portal = portal_of(request)
    try:
        hit = portal.lookup(token)
        who = hit.participant if hit is not None else None
        expired = who is not None and portal.link_expired(who)
    except NotFound:  # the link's course was deleted between its lookup and the read of the course
        hit, who, expired = None, None, False
    if who is not None and not expired:
        return who
    client = client_address(request)
    blocked = portal.token_limit.blocked(client)
    portal.token_limit.fail(client)
    if blocked:
        raise LinkRefused("too many unknown links from your address: wait a few minutes", 429)
    if who is not None:
        raise LinkRefused("This link has expired: the course is over.", 410)
    if hit is not None and hit.archived:
        raise LinkRefused("This course has been archived: its links no longer open anything.", 410)
    raise LinkRefused("This link is not valid (it may have been replaced).", 404)


async def participant_form(
    token: str,
    request: Request,
    data: FormData = Depends(read_form),
    who: ParticipantView = Depends(participant),
) -> ParticipantView:
    """The link's participant, for a POST whose CSRF token is bound to that link (async: an HMAC
    check only, so it runs on the event loop instead of taking a worker thread for it)."""
    check_csrf(request, data, "t:" + token)
    return who


# -- the answers to the refusals above (registered by create_app) ------------------------------------


async def forbidden(request: Request, exc: Forbidden) -> Response:
    """403 with the reason."""
    return PlainTextResponse(str(exc), status_code=403)


async def login_first(request: Request, exc: LoginFirst) -> Response:
    """A page asks for the login, which returns to it (``?next=``); a download or a POST gets a plain 401; a
    JSON poll a JSON 401 that names the login page (returning to the page that polled, which portal.js names
    in a header: no Referer is ever sent), so the open page's script can send the browser there."""
    path = request.url.path
    if path.endswith(".json"):
        return JSONResponse(
            {"error": SESSION_ENDED, "login": root(request) + login_path(request, request.headers.get(PAGE_HEADER))},
            status_code=401,
            headers={"cache-control": "no-store"},
        )
    if request.method == "GET" and not path.endswith(".csv"):
        return go(request, login_path(request, this_page(request)))
    return PlainTextResponse("log in first", status_code=401)


def link_refused(request: Request, exc: LinkRefused) -> Response:
    """A link that opens nothing: 429 in plain text, JSON for the page's polls, else the error page."""
    if exc.status == 429:
        return PlainTextResponse(exc.message, status_code=429)
    if request.url.path.endswith(("/live", ".json")):  # the page's polls read JSON
        return JSONResponse({"error": exc.message}, status_code=exc.status)
    return page(request, "error.html", status=exc.status, user=None, message=exc.message)


def http_error(request: Request, exc: StarletteHTTPException) -> Response:
    """Starlette's own refusals (an unknown path, a method the route does not take, a form it cannot parse:
    too many fields or files, no multipart boundary) in the route's format: JSON for a poll, else the page."""
    headers = dict(exc.headers or {})
    if request.url.path.endswith((".json", "/live")):
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code, headers=headers)
    link = request.url.path.startswith(root(request) + "/t/")  # a participant's page never shows the organizer's menu
    response = page(
        request, "error.html", status=exc.status_code, message=str(exc.detail), **({"user": None} if link else {})
    )
    response.headers.update(headers)
    return response


def gpuseat_error(request: Request, exc: GpuseatError) -> Response:
    """A course deleted under a page (or a link) is a 404 with the page, never a 500; bad input a 400.

    On a link's routes the error may come from a course archived or deleted after the request's lookup of the
    link: the link then answers as it now would (410 archived, 404 not valid), not with the store's message
    for the organizer ("export it (gpuseat course export)")."""
    link = request.url.path.startswith(root(request) + "/t/")
    token = request.path_params.get("token")
    if link and isinstance(token, str):
        try:
            participant(token, request)
        except LinkRefused as refused:
            return link_refused(request, refused)
        except GpuseatError:  # the lookup failed too (a lock on PostgreSQL that even reads wait for): as below
            pass
    status = 404 if isinstance(exc, NotFound) else 400 if isinstance(exc, InputError) else 503
    message, headers = exc.message, {}
    if status == 503:  # the store failed (a lock held past the wait, a full disk): nothing was changed
        route = getattr(request.scope.get("route"), "path", "?")  # /t/{token}/…: the link itself is never logged
        log.warning("%s %s: %s", request.method, route, " ".join(exc.message.split()))
        if isinstance(exc, StoreBusy):
            headers["retry-after"] = str(RETRY_AFTER_S)
        if link or not _organizer(request):  # the details (database path, pids, commands) for the organizer only
            message = BUSY if isinstance(exc, StoreBusy) else STORE_FAILED
    if request.url.path.endswith((".json", "/live")):
        return JSONResponse({"error": message}, status_code=status, headers=headers)
    response = page(request, "error.html", status=status, message=message, **({"user": None} if link else {}))
    response.headers.update(headers)
    return response


def _organizer(request: Request) -> bool:
    """Whether an organizer is logged in (False when even that cannot be read)."""
    try:
        return organizer_of(request) is not None
    except GpuseatError:
        return False
