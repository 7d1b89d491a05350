"""What one client may cost the portal: body size, time to send a request, idle sockets.

- :class:`BodyGuard` (ASGI middleware) counts the bytes of every request body as they arrive,
  chunked or not, and answers 413 as soon as a route's cap is passed: nothing beyond the cap is read,
  parsed or spooled. It also answers 408 when the client stops sending mid-body, and a client that
  hangs up mid-body ends its request quietly (no traceback in the log).
- :class:`GuardedH11Protocol` (uvicorn's h11 protocol) closes a connection that has not sent a whole
  request head within ``timeout_keep_alive`` seconds: uvicorn itself only times out idle connections
  *after* a first response, so 1,000 silent sockets would otherwise hold every file descriptor.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import anyio
from uvicorn.protocols.http.h11_impl import H11Protocol

from gpuseat.web.security import ASGIApp, Message, Receive, Scope, Send

MAX_FORM = 64 * 1024  # every anonymous or participant form (login, survey) is far below this
MAX_UPLOAD = 2 * 1024 * 1024  # a roster CSV of a large course is far below this
UPLOAD_PATHS = ("/roster/import",)
RECEIVE_TIMEOUT_S = 30.0  # between two chunks of one body

log = logging.getLogger("gpuseat.web")


class BodyTooLarge(Exception):
    """The body passed its route's cap."""


class ReceiveTimeout(Exception):
    """The client stopped sending its body."""


def body_cap(path: str) -> int:
    """The byte cap of a request body on ``path`` (route path, without the root path)."""
    return MAX_UPLOAD + 64 * 1024 if path.endswith(UPLOAD_PATHS) else MAX_FORM


class BodyGuard:
    """Cap, time and watch every request body (see the module doc)."""

    def __init__(self, app: ASGIApp, *, receive_timeout_s: float = RECEIVE_TIMEOUT_S) -> None:
        self.app = app
        self.receive_timeout_s = receive_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        root = scope.get("root_path", "")
        path = scope["path"][len(root) :] if scope["path"].startswith(root) else scope["path"]
        cap = body_cap(path)
        started = False

        async def reply(status: int, text: str) -> None:
            if started:
                return
            body = text.encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [
                        (b"content-type", b"text/plain; charset=utf-8"),
                        (b"content-length", str(len(body)).encode()),
                        (b"connection", b"close"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})

        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await reply(400, "bad Content-Length")
                    return
                if declared > cap:
                    await reply(413, f"the request body is larger than {cap // 1024} KiB")
                    return

        seen = 0

        async def counted() -> Message:
            nonlocal seen
            try:
                with anyio.fail_after(self.receive_timeout_s):
                    message = await receive()
            except TimeoutError:
                raise ReceiveTimeout from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > cap:
                    raise BodyTooLarge
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        from starlette.requests import ClientDisconnect

        try:
            await self.app(scope, counted, watched)
        except BodyTooLarge:
            await reply(413, f"the request body is larger than {cap // 1024} KiB")
        except ReceiveTimeout:
            await reply(408, "the request body did not arrive in time")
        except ClientDisconnect:
            log.info("client left during its request to %s", path)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, plus a deadline for the first request head of a connection."""

    _head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_deadline = self.loop.call_later(self.timeout_keep_alive, self._no_request)

    def _no_request(self) -> None:
        if self.cycle is None and not self.transport.is_closing():
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
        super().connection_lost(exc)


def uvicorn_settings(fd_limit: int | None = None) -> dict[str, Any]:
    """The uvicorn settings the portal (and its benchmark's framework floor) run under."""
    import resource

    soft = fd_limit or resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    # keep descriptors for the database, static files and the log: past this uvicorn answers 503
    limit = max(16, min(2048, soft - 64)) if soft > 0 else 2048
    return {
        "http": GuardedH11Protocol,
        "timeout_keep_alive": 5,
        "h11_max_incomplete_event_size": 16 * 1024,
        "limit_concurrency": limit,
        "backlog": 512,
    }
