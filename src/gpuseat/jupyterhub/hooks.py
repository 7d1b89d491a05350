"""JupyterHub's ``pre_spawn_hook`` and ``post_stop_hook``: hand each server its participant's seat.

``pre_spawn_hook`` finds the participant for the hub user, takes their seat (assigned mode: the seat
they were given; pool mode: the first free seat that suits their group, through the store's race-free
``claim_seat``), refuses with an HTTP 503 that says why and whom to ask (no seat, seat held by another
server, GPU lost, store unreachable: never a bare 500 or a timeout), records the seat as ``requested``
by this server and puts the device on the spawner (:mod:`gpuseat.jupyterhub.spawners`). When the spawn
finishes the seat becomes ``running``.

``post_stop_hook`` also runs after a failed start and after a refusal (platform.md B1), so it is
owner-checked (only the seat this server took, by its engine reference) and idempotent: the seat
becomes ``released`` (or ``failed`` with the spawner's error), and a pool seat goes back to the pool.

The store work runs on gpuseat's own threads: the hub's event loop never waits for the database (a
burst of 50 starts froze the hub for 37 s when it did); on SQLite one thread, so this hub's claims run
one after another instead of queueing for the write lock. With ``sessions_only`` starts outside the
course's lab sessions are refused too, on the store's clock (the database's time, read once per start, as the
agent and the participant page read it): a hub host whose clock is off neither lets a participant in outside
a session nor refuses one in it.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, TypeVar

from gpuseat.engines import other_courses
from gpuseat.engines.host import others
from gpuseat.errors import GpuseatError, NoFreeSeat, NotFound
from gpuseat.jupyterhub.config import HubSettings
from gpuseat.jupyterhub.spawners import Grant, apply, flavour, missing_for
from gpuseat.store.health import lost_gpus

if TYPE_CHECKING:
    from gpuseat.engines.skypilot.tasks import Window
    from gpuseat.store import CourseStore, SeatView

log = logging.getLogger("gpuseat.jupyterhub")

T = TypeVar("T")
ENGINE: Final = "jupyterhub"
HELD = ("requested", "running")  # states in which a seat belongs to the server named by engine_ref


class Refusal(Exception):
    """A spawn gpuseat will not allow; ``message`` is what the user reads."""

    def __init__(self, message: str, *, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail or message


def spawner_ref(spawner: Any) -> str:
    """``user/server`` (server empty for the default one): how the store names this hub server, as the
    ``engine_ref`` of the seat it holds."""
    return f"{spawner.user.name}/{spawner.name or ''}"


def session_refusal(wins: Sequence[Window], now: datetime, *, course: str, timezone: str, contact: str) -> str | None:
    """Why a start at ``now`` (course-local, naive) is outside the lab sessions; None inside one."""
    if any(w.start <= now < w.stop for w in wins):
        return None
    upcoming = [w for w in wins if w.start > now]
    if upcoming:
        nxt = upcoming[0].session_start
        return (
            f"Outside the lab sessions of course {course}: the next one starts {nxt:%a %Y-%m-%d %H:%M} ({timezone}). "
            f"Come back then, or ask {contact}."
        )
    last = wins[-1].stop if wins else None
    ended = f" (the last one ended {last:%a %Y-%m-%d %H:%M}, {timezone})" if last else ""
    return f"Course {course} has no more lab sessions{ended}. Ask {contact}."


def _error_text(exc: BaseException | None) -> str:
    if exc is None:
        return "the server stopped while starting"
    text = getattr(exc, "log_message", None) or str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:500]


@dataclass
class HookTiming:
    """Seconds spent inside gpuseat per call (store work), and the hook's wall time including the queue."""

    pre_spawn: list[float] = field(default_factory=list)
    pre_spawn_wall: list[float] = field(default_factory=list)
    post_stop: list[float] = field(default_factory=list)


class SeatHooks:
    """The two hooks, bound to one course in one store (built once in ``jupyterhub_config.py``)."""

    def __init__(
        self, settings: HubSettings, *, store: CourseStore | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = settings
        self._store = store
        # the hub's own clock, in seconds: only when to read the schedule again; whether a session is on is
        # the store's clock's to say
        self.clock = clock
        self._sessions: tuple[float, list[Window], str] | None = None  # (read at by self.clock, windows, time zone)
        self._refused: set[str] = set()
        self.timing = HookTiming()
        # SQLite: one thread, so this hub's claims run one after another instead of queueing for the write
        # lock; PostgreSQL locks rows (FOR UPDATE SKIP LOCKED), so claims may run side by side
        threads = 1 if settings.db_url.startswith("sqlite") else 8
        self._worker = ThreadPoolExecutor(threads, thread_name_prefix="gpuseat-hub")
        if store is None:
            self._worker.submit(self._warm)  # the first start should not pay for opening the store

    def _warm(self) -> None:
        """Open the store and ready the claim on gpuseat's thread while the hub starts (best effort: an
        unreachable database is tried again, and refused clearly, by the first spawn)."""
        try:
            self.store.claims.warm_claims(self.settings.course)
        except Exception:  # the first spawn reports it
            log.debug("gpuseat: store not ready at hub start", exc_info=True)

    def __deepcopy__(self, memo: dict[int, Any]) -> SeatHooks:
        """One object for the whole hub: traitlets deep-copies the config (and these bound hooks) into
        every spawner, which would give each its own store, thread and bookkeeping."""
        return self

    def __copy__(self) -> SeatHooks:
        return self

    @property
    def store(self) -> CourseStore:
        """The course store, opened on first use (the hub may start before the database is reachable)."""
        if self._store is None:
            from gpuseat.store import open_store

            self._store = open_store(self.settings.db_url)
        return self._store

    # -- the hooks -------------------------------------------------------------------------------

    def pre_spawn_hook(self, spawner: Any) -> Awaitable[None]:
        """Take the user's seat and give its device to ``spawner``, or raise HTTPError(503, why)."""
        ref, user, kind = spawner_ref(spawner), spawner.user.name, flavour(spawner)
        future = getattr(spawner, "_spawn_future", None)  # JupyterHub's spawn-and-proxy future, pending now
        self._refused.discard(ref)

        async def run() -> None:
            from tornado.web import HTTPError

            started = time.perf_counter()
            try:
                seat, busy_s = await self._in_worker(self._take, user, ref, kind)
            except Refusal as no:
                self._refused.add(ref)
                spawner.log.warning("gpuseat: refused %s: %s", ref, no.detail)
                refused = HTTPError(503, no.message)
                # what the hub's pages and API show instead of "Failed to start your server"
                refused.jupyterhub_message = no.message  # type: ignore[attr-defined]
                raise refused from None
            apply(spawner, _grant(seat), mig_strategy=self.settings.mig_strategy)
            if future is not None and hasattr(future, "add_done_callback"):
                future.add_done_callback(self._on_spawned(seat.key, ref))
            wall = time.perf_counter() - started
            self.timing.pre_spawn.append(busy_s)
            self.timing.pre_spawn_wall.append(wall)
            spawner.log.info(
                "gpuseat: %s gets seat %s (%s) in %.1f ms (%.1f ms queued)",
                ref,
                seat.key,
                seat.device_uuid or seat.host or seat.kind,
                1000 * busy_s,
                1000 * (wall - busy_s),
            )

        return run()

    def post_stop_hook(self, spawner: Any) -> Awaitable[None]:
        """Hand back what this server took: released (or failed with the start's error); pool seats freed.

        What happened is read now, before the first ``await``: a stop during a pending spawn is a failed
        start, and the exception JupyterHub is handling at this moment is the spawner's error.
        """
        ref, user = spawner_ref(spawner), spawner.user.name
        future = getattr(spawner, "_spawn_future", None)
        failed = future is not None and hasattr(future, "done") and not future.done()
        error = _error_text(sys.exc_info()[1]) if failed else None
        refused = ref in self._refused  # refused by pre_spawn_hook: it took nothing
        self._refused.discard(ref)

        async def run() -> None:
            if refused:
                return
            try:
                _, busy_s = await self._in_worker(self._give_back, user, ref, error)
                self.timing.post_stop.append(busy_s)
            except Exception:  # a stop must never fail because of gpuseat; the reason is in the hub's log
                spawner.log.exception("gpuseat: could not record the stop of %s", ref)

        return run()

    async def _in_worker(self, fn: Callable[..., T], *args: Any) -> tuple[T, float]:
        """Run store work on gpuseat's own thread (the hub's event loop never waits for the database);
        returns the result and the seconds it took there."""

        def timed() -> tuple[T, float]:
            started = time.perf_counter()
            return fn(*args), time.perf_counter() - started

        return await asyncio.get_running_loop().run_in_executor(self._worker, timed)

    # -- the work (store calls only) ---------------------------------------------------------------

    def _who(self, user: str) -> str:
        """The participant key for a hub user (matched by email or Unix user: one lookup in the store)."""
        s = self.settings
        if s.match_by == "key":
            return user  # claim_seat / seat_of look the participant up themselves
        p = self.store.roster.find_participant(s.course, user)
        field = p.email if s.match_by == "email" else p.unix_user
        if (field or "").lower() != user.lower():
            raise NotFound(f"{user} matches participant {p.key} by another field than {s.match_by}")
        return p.key

    def _take(self, user: str, ref: str, kind: str) -> SeatView:
        s = self.settings
        actor = f"jupyterhub:{ref}"
        try:
            store = self.store
            now = store.requests.now() if s.sessions_only else None  # the store's clock, once per start
            if now is not None:
                self._check_session(now)
            who = self._who(user)
            self._check_stopped(store, who, now)
            for _attempt in range(5):
                if s.mode == "pool":
                    seat = store.claims.claim_seat(s.course, who, mode="pool", actor=actor)
                else:
                    held = store.seats.seat_of(s.course, who)
                    if held is None:
                        raise Refusal(
                            f"No GPU seat for {user}: no seat has been assigned to you in course {s.course}. "
                            f"Ask {s.contact}.",
                            detail=f"{who} holds no seat",
                        )
                    seat = held
                if s.match_by == "key" and seat.participant != user:
                    # the store matched another participant's email or Unix user: not this hub user
                    if s.mode == "pool" and seat.state not in HELD:
                        store.seats.release(s.course, participant=seat.participant, reason="not this user", actor=actor)
                    raise NotFound(f"{user} matches participant {seat.participant} by another field than key")
                if seat.state == "failed":  # the organiser (or an engine) took this seat out of service
                    if s.mode == "pool":
                        store.seats.release(s.course, participant=who, reason="seat failed", actor=actor)
                        continue
                    raise Refusal(
                        f"Your GPU seat {seat.key} is out of order ({seat.state_reason or 'marked failed'}). "
                        f"Ask {s.contact} to move you to another seat.",
                        detail=f"seat {seat.key} is failed",
                    )
                lost = lost_gpus(store, [seat.device_uuid] if seat.device_uuid else [])
                if lost:
                    if s.mode == "pool":  # take that seat out of the pool and claim another one
                        store.seats.release(s.course, participant=who, reason="gpu lost", actor=actor)
                        store.seats.set_seat_state(
                            s.course, seat.key, "failed", reason=f"GPU lost: {lost[0]}", actor=actor
                        )
                        continue
                    raise Refusal(
                        f"Your GPU seat {seat.key} is out of order (the monitor lost its GPU). "
                        f"Ask {s.contact} to move you to another seat.",
                        detail=f"seat {seat.key}: {lost[0]}",
                    )
                other = other_courses.yielded(store, s.course, [seat]).get(seat.key)
                if other is not None:  # another course's older holder keeps this GPU (the engine's rule)
                    if s.mode == "pool":
                        store.seats.release(s.course, participant=who, reason="gpu of another course", actor=actor)
                    raise Refusal(
                        f"Your GPU seat {seat.key} is on a GPU that another course still uses. Ask {s.contact}.",
                        detail=others.refusal(seat.key, who, other)[0],
                    )
                owner = (seat.engine_ref or "").split("/")[0]
                if seat.state in HELD and seat.engine == ENGINE and owner and owner != user:
                    # a hand-over the engine has not applied yet: never name the previous holder
                    raise Refusal(
                        f"Your GPU seat {seat.key} is still held by its previous holder's server; gpuseat stops it "
                        f"and hands the seat to you shortly. Try again in a minute, or ask {s.contact}.",
                        detail=f"seat {seat.key} held by {seat.engine}:{seat.engine_ref} (hand-over not applied yet)",
                    )
                if seat.state in HELD and seat.engine_ref not in (None, ref):
                    raise Refusal(
                        f"Your GPU seat {seat.key} is in use by another server ({seat.engine} {seat.engine_ref}). "
                        f"Stop that server first, or ask {s.contact}.",
                        detail=f"seat {seat.key} held by {seat.engine}:{seat.engine_ref}",
                    )
                problem = missing_for(_grant(seat), kind)  # type: ignore[arg-type]
                if problem:
                    raise Refusal(f"Your GPU seat cannot be started here: {problem}. Ask {s.contact}.")
                return store.seats.set_seat_state(
                    s.course,
                    seat.key,
                    "requested",
                    reason=f"server {ref} starting",
                    engine=ENGINE,
                    engine_ref=ref,
                    actor=actor,
                )
            raise Refusal(f"No working GPU seat is free for {user} right now. Ask {s.contact}.")
        except NotFound as exc:
            raise Refusal(
                f"No GPU seat for {user}: you are not on the roster of course {s.course}. Ask {s.contact} to add you.",
                detail=exc.message,
            ) from None
        except NoFreeSeat as exc:
            raise Refusal(
                f"No free GPU seat for {user} right now: every seat of course {s.course} that suits you is in use. "
                f"Try again later or ask {s.contact}.",
                detail=exc.message,
            ) from None
        except GpuseatError as exc:
            raise Refusal(
                f"The GPU seat service cannot hand out seats at the moment. Ask {s.contact}.", detail=exc.message
            ) from None
        except Refusal:
            raise
        except Exception as exc:  # an unreachable database must be a clear 503, not a 500
            log.exception("gpuseat: seat lookup for %s failed", ref)
            raise Refusal(
                f"The GPU seat service cannot hand out seats at the moment. Ask {s.contact}.", detail=repr(exc)
            ) from None

    def _check_stopped(self, store: CourseStore, who: str, now: datetime | None) -> None:
        """A seat its holder stopped (or the agent stopped: hours used up, idle, never connected) stays
        stopped: the hub's own *Start* button is refused until a start (or restart/reset) request is being
        carried out, which the engine does through this same hook. A seat stopped for hours runs near
        and in a lab session (the rule of :mod:`gpuseat.engines.hours`), at ``now`` (None: the store's clock)."""
        s = self.settings
        state = store.requests.run_states(s.course).get(who)
        if state is None or state.running:
            return
        from gpuseat.engines import hours

        if hours.stopped_for_hours(state.reason) and hours.read(store, s.course, now).of(who).runs(state):
            return
        asked = store.requests.seat_requests(s.course, participant=who, pending=True, limit=5)
        if any(r.action in ("start", "restart", "reset") for r in asked):
            return
        raise Refusal(
            f"Your GPU seat is stopped ({state.reason}). Start it from your gpuseat page, or ask {s.contact}.",
            detail=f"{who}'s seat is stopped: {state.reason}",
        )

    def _check_session(self, now: datetime) -> None:
        """Refuse a start at ``now`` (the store's clock) outside the course's lab sessions (the schedule is
        read again every 10 minutes of the hub's clock)."""
        s, read_at = self.settings, self.clock()
        if self._sessions is None or not 0 <= read_at - self._sessions[0] <= 600:
            from gpuseat.engines.skypilot.tasks import windows

            course = self.store.courses.get_course(s.course)
            schedule = self.store.courses.course_file(s.course).schedule
            wins = [] if schedule.always_on else windows(schedule.intervals(), lead_min=s.session_lead_min)
            self._sessions = (read_at, wins, course.timezone)
        _, wins, tz = self._sessions
        if not wins:
            return  # a 24/7 course
        from gpuseat.engines.skypilot.tasks import check_timezone

        local = now.astimezone(check_timezone(tz)).replace(tzinfo=None)
        why = session_refusal(wins, local, course=s.course, timezone=tz, contact=s.contact)
        if why:
            raise Refusal(why)

    def _mine(self, user: str, ref: str) -> tuple[str, SeatView] | None:
        """The participant and the seat this server holds (by its engine reference), if any."""
        s = self.settings
        try:
            who = self._who(user)
            seat = self.store.seats.seat_of(s.course, who)
        except NotFound:
            return None
        if seat is None or seat.engine != ENGINE or seat.engine_ref != ref:
            return None
        return who, seat

    def _give_back(self, user: str, ref: str, error: str | None) -> None:
        s, actor = self.settings, f"jupyterhub:{ref}"
        found = self._mine(user, ref)
        if found is None:
            return
        who, seat = found
        if seat.state in HELD:
            if error is not None:
                self.store.seats.set_seat_state(s.course, seat.key, "failed", reason=error[:2000], actor=actor)
            else:
                self.store.seats.set_seat_state(
                    s.course, seat.key, "released", reason=f"server {ref} stopped", actor=actor
                )
        if s.mode == "pool" and seat.participant == who:
            self.store.seats.release(s.course, participant=who, reason="server stopped", actor=actor)
            self.store.seats.set_seat_state(s.course, seat.key, "planned", reason="back in the pool", actor=actor)
        log.debug("gpuseat: %s gave back seat %s%s", ref, seat.key, f" ({error})" if error else "")

    def _on_spawned(self, seat: str, ref: str) -> Callable[[Any], None]:
        def mark_running() -> None:
            try:
                current = self.store.seats.get_seat(self.settings.course, seat)
                if current.engine_ref == ref and current.state == "requested":
                    self.store.seats.set_seat_state(
                        self.settings.course, seat, "running", reason=f"server {ref} ready", actor=f"jupyterhub:{ref}"
                    )
            except Exception:
                log.exception("gpuseat: could not record %s as running", ref)

        def done(future: Any) -> None:
            if not future.cancelled() and future.exception() is None:  # a failure: post_stop_hook recorded it
                self._worker.submit(mark_running)

        return done


def _grant(seat: SeatView) -> Grant:
    return Grant(seat=seat.key, kind=seat.kind, device_uuid=seat.device_uuid, host=seat.host, profile=seat.profile)
