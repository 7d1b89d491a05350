"""The portal's security rules in one place: sessions, CSRF, rate limits, headers, log redaction.

- Organizer sessions are signed (itsdangerous, key from the store), HttpOnly, SameSite=Strict cookies
  that expire after ``SESSION_MAX_AGE_S``.
- CSRF: every visitor gets a random ``gpuseat_csrf`` cookie; every form carries the HMAC of it under
  the server key, and a POST without the matching field is refused (403). A forged cross-site form
  cannot read the cookie, and SameSite=Strict keeps the cookie off cross-site requests anyway.
- Guessing is rate-limited per client address: failed logins and unknown participant tokens.
- Every response carries a CSP without inline scripts or styles, X-Frame-Options DENY, no-referrer
  (participant links hold their token and must not leak through Referer) and nosniff.
- Access-log lines show ``/t/[token]`` instead of a participant's token.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuseat.store import CourseStore

SESSION_COOKIE = "gpuseat_session"
CSRF_COOKIE = "gpuseat_csrf"
SECURE_PREFIX = "__Host-"  # https only: the browser refuses such a cookie from a sub-domain or without Secure
CSRF_FIELD = "csrf"
SESSION_MAX_AGE_S = 12 * 3600
TOKEN_PATH = re.compile(r"/t/[A-Za-z0-9_-]+")

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HSTS = (b"strict-transport-security", b"max-age=31536000")
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=()"),
]


class Sessions:
    """Organizer sessions (rows in the store, see :mod:`gpuseat.store.sessions`) and CSRF tokens.

    A CSRF token is the HMAC, under the store's key, of what the form is bound to: the organizer's
    session secret, the participant's access token, or (login form only) a random pre-login cookie.
    A cookie tossed in from a sibling sub-domain is no session, so a token made from it is worthless.
    """

    def __init__(self, store: CourseStore, key: str) -> None:
        self.store = store
        self._key = key.encode()

    def issue(self, username: str) -> str:
        """A new session's secret (for the cookie)."""
        from gpuseat.store.sessions import open_session

        return open_session(self.store, username, SESSION_MAX_AGE_S)

    def user(self, cookie: str | None) -> str | None:
        """The organizer of a live session; None otherwise (unknown, ended, expired)."""
        from gpuseat.store.sessions import session_user

        return session_user(self.store, cookie)

    def end(self, cookie: str | None) -> None:
        """End one session (logout)."""
        from gpuseat.store.sessions import end_session

        end_session(self.store, cookie)

    def end_all(self, username: str) -> int:
        """End every session of ``username`` ("log out everywhere")."""
        from gpuseat.store.sessions import end_user_sessions

        return end_user_sessions(self.store, username)

    def csrf_token(self, binding: str) -> str:
        """The form token for ``binding`` (``s:<session>``, ``t:<access token>`` or ``a:<pre-login cookie>``)."""
        return hmac.new(self._key, b"csrf:" + binding.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, binding: str | None, form_value: str | None) -> bool:
        """True when the form's token matches ``binding`` (constant-time compare).

        The form's value is compared as bytes: ``hmac.compare_digest`` raises on a str with a non-ASCII
        character, so 64 characters such as ``é`` were a 500 instead of the 403.
        """
        if not binding or not form_value or len(form_value) != 64:
            return False
        return hmac.compare_digest(self.csrf_token(binding).encode(), form_value.encode("utf-8", "replace"))


def same_origin(headers: Mapping[str, str], scheme: str, trusted: Iterable[str] = ()) -> bool:
    """True unless the browser says the request comes from another site (``Sec-Fetch-Site``, ``Origin``).

    ``Sec-Fetch-Site`` decides when present (a sibling sub-domain is "same-site", not "same-origin",
    and is refused). Without it, an ``Origin`` must name this host; ``Origin: null`` is what our own
    pages send under ``Referrer-Policy: no-referrer``, so it passes like a request without either header
    (curl, scripts, old browsers): the session-bound CSRF token still guards all of those.
    """
    site = headers.get("sec-fetch-site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = headers.get("origin")
    if origin is None or origin == "null":
        return True
    host = headers.get("host", "")
    return origin == f"{scheme}://{host}" or origin in trusted


def new_csrf_cookie() -> str:
    """A fresh random pre-login cookie value (binds the login form's CSRF token)."""
    return secrets.token_urlsafe(24)


class RateLimiter:
    """At most ``limit`` failures per client address in ``window_s`` (a sliding window, in memory).

    Each server process counts on its own; the portal runs one process by default.
    """

    def __init__(self, limit: int, window_s: float) -> None:
        self.limit = limit
        self.window_s = window_s
        self._hits: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, client: str, now: float) -> deque[float]:
        hits = self._hits.setdefault(client, deque())
        while hits and hits[0] <= now - self.window_s:
            hits.popleft()
        return hits

    def blocked(self, client: str) -> bool:
        """True when ``client`` has used up its failures."""
        with self._lock:
            return len(self._recent(client, time.monotonic())) >= self.limit

    def forget(self, client: str) -> None:
        """Clear ``client``'s failures (after a success)."""
        with self._lock:
            self._hits.pop(client, None)

    def fail(self, client: str) -> None:
        """Count one failure of ``client``."""
        with self._lock:
            now = time.monotonic()
            self._recent(client, now).append(now)
            if len(self._hits) > 100_000:  # a flood of addresses: forget the quiet ones
                for key in [k for k, v in self._hits.items() if not v]:
                    del self._hits[key]


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class SecurityHeaders:
    """Pure ASGI middleware adding :data:`HEADERS` to every HTTP response (cheaper than BaseHTTPMiddleware)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", [])}
                extra = [*HEADERS, HSTS] if scope.get("scheme") == "https" else HEADERS
                message["headers"] = [
                    *message.get("headers", []),
                    *((k, v) for k, v in extra if k not in present),
                ]
            await send(message)

        await self.app(scope, receive, with_headers)


def redact(text: str) -> str:
    """``/t/<token>/live`` → ``/t/[token]/live``."""
    return TOKEN_PATH.sub("/t/[token]", text)


class RedactTokens(logging.Filter):
    """Logging filter: participant tokens never reach a log line (uvicorn's access log passes the path as an arg)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        return True


def install_log_redaction(level: str = "info") -> None:
    """Attach :class:`RedactTokens` to uvicorn's loggers, and give gpuseat's own portal loggers a redacted
    handler at ``level`` so their lines (a client that left mid-request, a failed visit write) reach the same
    server log as uvicorn's instead of Python's warnings-only fallback (idempotent)."""
    for name in ("uvicorn.access", "uvicorn.error", "uvicorn"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactTokens) for f in logger.filters):
            logger.addFilter(RedactTokens())
    ours = logging.getLogger("gpuseat")
    known = logging.getLevelName(level.upper())  # uvicorn checks the name it is given; an unknown one: info
    ours.setLevel(known if isinstance(known, int) else logging.INFO)
    if not any(any(isinstance(f, RedactTokens) for f in h.filters) for h in ours.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(name)s: %(message)s"))
        handler.addFilter(RedactTokens())  # a handler's filter also sees the records of child loggers
        ours.addHandler(handler)
