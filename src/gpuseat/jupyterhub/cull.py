"""GPU-aware culling: stop hub servers whose seat's GPU did no compute for N hours, never a busy one.

jupyterhub-idle-culler judges by browser and kernel activity, so it stops a training run whose tab was
closed and keeps an idle GPU whose tab stays open (jupyterhub#1498, idle-culler#10). This culler judges
by the monitor's store (:mod:`gpuseat.store.activity`): a server is stopped only when

* its seat (found by the server's engine reference, ``user/server``) has a monitor reading from the
  last few minutes (no reading: the monitor is down or the seat unknown, so nothing is stopped),
* that reading is not busy, and
* neither the seat's last GPU activity nor the server's start is more recent than ``idle_hours``.

Just before stopping, the seat is read again, so one that became busy meanwhile is kept. It runs as a
JupyterHub service whose token holds only ``list:users``, ``read:servers`` and ``delete:servers``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from gpuseat.errors import EngineError, InputError
from gpuseat.jupyterhub.hooks import ENGINE, HELD
from gpuseat.store.activity import LIVE_WINDOW_S, SeatLive

if TYPE_CHECKING:
    import httpx

    from gpuseat.store import CourseStore

log = logging.getLogger("gpuseat.jupyterhub.cull")


@dataclass(frozen=True, slots=True)
class HubServer:
    """One server as the Hub REST API lists it."""

    user: str
    name: str  # "" for the default server
    ready: bool
    pending: str | None
    started: float | None  # Unix seconds

    @property
    def ref(self) -> str:
        """The engine reference the hooks stored on the seat."""
        return f"{self.user}/{self.name}"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the culler decided about one server, and why."""

    server: HubServer
    seat: str | None
    stop: bool
    reason: str

    def to_dict(self) -> dict[str, object]:
        """The JSON shape of ``gpuseat jupyterhub cull --once``."""
        return {"server": self.server.ref, "seat": self.seat, "stop": self.stop, "reason": self.reason}


def decide(
    server: HubServer,
    seat: str | None,
    *,
    live: SeatLive | None,
    last_active: float | None,
    now: float,
    idle_s: float,
) -> Verdict:
    """Stop or keep one server (pure: every input is passed in)."""
    if server.pending or not server.ready:
        return Verdict(server, seat, False, f"server is {server.pending or 'not ready'}")
    if seat is None:
        return Verdict(server, None, False, "no gpuseat seat is held by this server")
    if live is None:
        return Verdict(server, seat, False, "no recent monitor reading for the seat: cannot tell, not stopping")
    if live.active:
        return Verdict(server, seat, False, "GPU busy now")
    marks = [t for t in (last_active, server.started) if t is not None]
    if not marks:
        return Verdict(server, seat, False, "no start time and no GPU activity known")
    quiet = now - max(marks)
    hours = quiet / 3600
    if quiet < idle_s:
        return Verdict(server, seat, False, f"GPU quiet for {hours:.2f} h, under {idle_s / 3600:g} h")
    what = "since the server started" if last_active is None or last_active < (server.started or 0) else ""
    return Verdict(server, seat, True, f"no GPU compute for {hours:.2f} h {what}".strip())


def _parse_time(value: object) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def servers_of(users: list[dict[str, Any]]) -> list[HubServer]:
    """Every server in a ``GET /users`` answer (models filtered by the token's scopes)."""
    out = []
    for user in users:
        for name, server in (user.get("servers") or {}).items():
            out.append(
                HubServer(
                    user=str(user["name"]),
                    name=str(name),
                    ready=bool(server.get("ready")),
                    pending=server.get("pending"),
                    started=_parse_time(server.get("started")),
                )
            )
    return out


class Culler:
    """One course's servers on one hub; :meth:`run_once` judges them all and stops the idle ones."""

    def __init__(
        self,
        store: CourseStore,
        course: str,
        *,
        api_url: str,
        token: str,
        idle_hours: float,
        client: httpx.Client | None = None,
        clock: Callable[[], float] = time.time,
        dry_run: bool = False,
    ) -> None:
        import httpx

        if not (math.isfinite(idle_hours) and 0 < idle_hours <= 24 * 366):
            raise InputError(
                f"--idle-hours {idle_hours!r} is not a number of hours", where="--idle-hours", fix="give 0 < H ≤ 8784"
            )
        self.store, self.course = store, course
        self.idle_s = idle_hours * 3600.0
        self.api_url = api_url.rstrip("/")
        self.client = client or httpx.Client(headers={"Authorization": f"token {token}"}, timeout=30.0)
        self.clock = clock
        self.dry_run = dry_run
        self.activity = store.activity

    def _hub(self, method: str, path: str) -> httpx.Response:
        import httpx

        try:
            r = self.client.request(method, self.api_url + path)
        except httpx.HTTPError as exc:
            raise EngineError(f"the Hub API did not answer: {exc}", where=self.api_url, fix="is the hub up?") from None
        if r.status_code == 403:
            raise EngineError(
                f"the Hub API refused {method} {path}: {r.text[:200]}",
                where=self.api_url,
                fix="give the culler's service the role with list:users, read:servers, delete:servers",
            )
        return r

    def servers(self) -> list[HubServer]:
        """The hub's ready servers."""
        r = self._hub("GET", "/users?state=ready")
        if r.status_code != 200:
            raise EngineError(f"GET /users answered {r.status_code}: {r.text[:200]}", where=self.api_url)
        return servers_of(r.json())

    def _seats(self) -> dict[str, tuple[int, str]]:
        """engine_ref → (seat id, seat key) for the course's seats this hub's servers hold."""
        return {
            s.engine_ref: (s.id, s.key)
            for s in self.store.seats.seats(self.course)
            if s.engine == ENGINE and s.state in HELD and s.engine_ref
        }

    def _look(self, seat_ids: list[int], now: float) -> tuple[dict[int, SeatLive], dict[int, float | None]]:
        live = self.activity.live(seat_ids=seat_ids, now=now, window_s=LIVE_WINDOW_S)
        return live, self.activity.last_active(seat_ids=seat_ids)

    def run_once(self) -> list[Verdict]:
        """Judge every ready server; stop those idle for too long (after a fresh look at their seat)."""
        servers = self.servers()
        seats = self._seats()
        now = self.clock()
        ids = [seats[s.ref][0] for s in servers if s.ref in seats]
        live, last = self._look(ids, now)
        verdicts = []
        for server in servers:
            sid, key = seats.get(server.ref, (None, None))
            v = decide(
                server,
                key,
                live=live.get(sid) if sid is not None else None,
                last_active=last.get(sid) if sid is not None else None,
                now=now,
                idle_s=self.idle_s,
            )
            if v.stop and sid is not None:
                again_live, again_last = self._look([sid], self.clock())
                v = decide(
                    server,
                    key,
                    live=again_live.get(sid),
                    last_active=again_last.get(sid),
                    now=self.clock(),
                    idle_s=self.idle_s,
                )
            if v.stop and not self.dry_run:
                self._stop(server)
            log.info("%s %s (seat %s): %s", "stop" if v.stop else "keep", server.ref, v.seat or "-", v.reason)
            verdicts.append(v)
        return verdicts

    def _stop(self, server: HubServer) -> None:
        user = quote(server.user, safe="")
        path = f"/users/{user}/server" if not server.name else f"/users/{user}/servers/{quote(server.name, safe='')}"
        r = self._hub("DELETE", path)
        if r.status_code not in (202, 204, 400, 404):  # 400/404: already stopped or gone
            raise EngineError(f"DELETE {path} answered {r.status_code}: {r.text[:200]}", where=self.api_url)

    def run(self, every_s: float, *, stop: Callable[[], bool] = lambda: False) -> None:
        """Judge every ``every_s`` seconds until ``stop()``; a failing round is logged, not fatal."""
        while not stop():
            try:
                self.run_once()
            except EngineError as exc:
                log.warning("cull round failed: %s", exc.message)
            except Exception:
                log.exception("cull round failed")
            deadline = time.monotonic() + every_s
            while time.monotonic() < deadline and not stop():
                time.sleep(min(1.0, every_s))
