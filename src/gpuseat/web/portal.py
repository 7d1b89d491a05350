"""What the portal serves and the caches in front of the store (participant pages are polled by everyone).

:class:`Portal` holds the store, the catalog and the deployment settings; :mod:`gpuseat.web.app`
turns HTTP into calls on it. Everything here is synchronous: the app runs it in worker threads.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from datetime import time as dtime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar
from zoneinfo import ZoneInfo

from gpuseat.core.roster import RosterText
from gpuseat.services.report import build_digest, participant_view, seat_id
from gpuseat.services.survey import SurveyService
from gpuseat.store.accounts import Accounts
from gpuseat.store.activity import Activity, SeatLive
from gpuseat.urls import base_url as check_base_url
from gpuseat.web.security import RateLimiter

if TYPE_CHECKING:
    from gpuseat.bench.results import RecordedResult
    from gpuseat.catalog.bundle import Catalog
    from gpuseat.services.report import CourseDigest, SeatRow
    from gpuseat.store import CourseStore, ParticipantView, SeatView
    from gpuseat.store.tokens import TokenHit

log = logging.getLogger("gpuseat.portal")

COURSE_CACHE_S = 10.0  # a course's dates and time zone, as links and pages show them (they rarely change)
LIVE_CACHE_S = 1.0  # live readings: the monitor samples every few seconds anyway
# password checks at once: each costs ~50 ms of one core and 64 MiB; half the cores stay free for the pages
ARGON2_SLOTS = max(1, min(4, (os.cpu_count() or 2) // 2))
VISIT_RETRY_S = 2.0  # a visit not recorded (another writer held the lock) is tried again this much later
#: queued visits are written together this long after the first (a rush of 30 links a second: one write a
#: second per server process, not one a page)
VISIT_FLUSH_S = 1.0
VISIT_EVERY_S = 60.0  # a link's last use is noted at most this often


@dataclass(frozen=True)
class SeatsPage:
    """What the organizer's Seats page shows: a fixed handful of queries, whatever the seat count."""

    participants: list[ParticipantView]
    seats: list[SeatRow]
    ways: list[dict[str, Any]]
    #: seat key → why its holder gets no access though its state may say running (``seats status``' note)
    notes: dict[str, str] = field(default_factory=dict)


class _PageReads:
    """The store, with the course-wide reads that one page repeats (per seat) made once.

    :func:`gpuseat.services.delivery.ways_in` asks the store for a course's access details once per
    seat; through this each course-wide answer is read once for the page (it lives as long as the page).
    """

    _ONCE: ClassVar[dict[str, tuple[str, ...]]] = {
        "delivery": ("access_of", "readiness_of"),
        "roster": ("participants",),
        "seats": ("seats",),
    }

    def __init__(self, store: CourseStore) -> None:
        self._store = store
        self._memo: dict[tuple[str, str | None], Any] = {}

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._store, name)
        return _ReadOnce(found, self._ONCE[name], self._memo) if name in self._ONCE else found


class _ReadOnce:
    """One concern of the store (``store.seats`` …) whose course-wide reads in ``names`` are made once."""

    def __init__(self, concern: Any, names: tuple[str, ...], memo: dict[tuple[str, str | None], Any]) -> None:
        self._concern, self._names, self._memo = concern, names, memo

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._concern, name)
        if name not in self._names:
            return found

        def once(course: str | None = None) -> Any:
            key = (name, course)
            if key not in self._memo:
                self._memo[key] = found(course)
            return self._memo[key]

        return once


@dataclass
class Portal:
    """What the portal serves: one course of one store, and how."""

    store: CourseStore
    catalog: Catalog
    course: str | None = None  # None: the store's only course
    root_path: str = ""  # the sub-path a proxy serves the portal under ("/gpuseat"), "" at the root
    base_url: str = "http://127.0.0.1:8000"
    base_url_given: bool = False  # True: base_url came from --base-url and already holds the public sub-path
    secure_cookies: bool = False  # set on https deployments (the browser then sends cookies only over TLS)
    login_limit: RateLimiter = field(default_factory=lambda: RateLimiter(10, 300))  # per address + account
    token_limit: RateLimiter = field(default_factory=lambda: RateLimiter(20, 300))  # unknown links per address
    link_days_after_end: int | None = 0  # links stop working this many days after the course ends (None: never)
    receive_timeout_s: float = 30.0  # the longest pause inside one request body before a 408
    poll_s: int = 5  # how often pages refresh their live parts
    clock: datetime | None = None  # a fixed "now" (the demo course is half-way through 2016)
    bench_path: Path | None = None  # benchmark results store (default: the data dir's)
    surveys: SurveyService = field(init=False)
    accounts: Accounts = field(init=False)
    activity: Activity = field(init=False)

    _visits: dict[int, datetime] = field(init=False, default_factory=dict)  # token row id → visit not yet stored
    _noted: dict[int, float] = field(init=False, default_factory=dict)  # token row id → when a visit was queued
    _visit_lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    _flush: threading.Timer | None = field(init=False, default=None)  # the next write of queued visits
    _key: str | None = field(init=False, default=None)
    _courses: dict[str, tuple[float, Any]] = field(init=False, default_factory=dict)
    _seat_ids: dict[tuple[str, str], int | None] = field(init=False, default_factory=dict)
    _live: tuple[float, dict[int, SeatLive], dict[int, float | None]] = field(init=False, default=(0.0, {}, {}))
    _bench: tuple[tuple[str, float] | None, list[RecordedResult]] = field(init=False, default=(None, []))
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    _argon2: threading.BoundedSemaphore = field(
        init=False, default_factory=lambda: threading.BoundedSemaphore(ARGON2_SLOTS)
    )

    def __post_init__(self) -> None:
        self.surveys = SurveyService(self.store)
        check_base_url(self.base_url)  # the links it shows are BASE/t/TOKEN: never javascript: or worse
        self.accounts = self.store.accounts
        self.activity = self.store.activity
        from gpuseat.db import web_busy_timeout

        # a person waits at a browser: a request's write behind another writer's lock gives up after a few
        # seconds (the page says busy, Retry-After), so a rush behind a held lock never takes every thread
        self.store.database.wait_at_most(web_busy_timeout())

    # Participant pages are polled by everyone at once: what the link opens is read on every request (a link
    # rotated, revoked or archived anywhere, by the CLI or another server process, stops at once), its visit
    # is written a moment later with others.

    def participant_for_token(self, token: str) -> ParticipantView | None:
        """The link's participant (None: unknown or revoked); see :meth:`lookup`."""
        hit = self.lookup(token)
        return None if hit is None else hit.participant

    def lookup(self, token: str) -> TokenHit | None:
        """The store's answer now: one indexed read that writes nothing, so the page never waits for a writer.

        Never cached: a link rotated, revoked or archived in another process (the CLI, another server worker)
        stops at its next request, and the participant's seat is the one held now (the ten-second cache this
        replaced saved nothing measurable: bench_portal.py, CHANGELOG). The visit is queued and written with
        others a moment later (:meth:`record_visits`). A link of another course in the same store opens its own
        participant's page (one server can serve the links of every course: a registration rush of several
        courses, benchmarks/bench_rush.py), under this portal's link expiry for that course.
        """
        hit = self.store.tokens.find_token(token)
        if hit is not None and hit.participant is not None:
            self._note_visit(hit, time.monotonic())
        return hit

    def _note_visit(self, hit: TokenHit, now: float) -> None:
        """Queue this visit for :meth:`record_visits` (at most one a minute per link)."""
        noted = self._noted.get(hit.token_id)
        if noted is not None and now - noted < VISIT_EVERY_S:
            return
        at = datetime.now(UTC)
        if noted is None and hit.last_used_at is not None and not hit.visit_due(at):
            # noted lately (by another server process, or before a restart): due a minute after that
            self._noted[hit.token_id] = now - (at - hit.last_used_at).total_seconds()
            return
        with self._visit_lock:
            if len(self._noted) > 100_000:
                self._noted.clear()
            self._noted[hit.token_id] = now
            self._visits[hit.token_id] = at
            self._flush_in(VISIT_FLUSH_S)

    def _flush_in(self, delay: float) -> None:
        """Have :meth:`record_visits` run in ``delay`` seconds unless a run is already due (lock held)."""
        if self._flush is None or not self._flush.is_alive():
            self._flush = threading.Timer(delay, self.record_visits)
            self._flush.daemon = True
            self._flush.start()

    def record_visits(self) -> None:
        """Write the queued visits (on a timer, :data:`VISIT_FLUSH_S` after the first), waiting at most a
        moment for another writer; when one holds the lock, keep them and try again in ``VISIT_RETRY_S``
        (a page view never waits for a write)."""
        with self._visit_lock:
            pending, self._visits = self._visits, {}
            self._flush = None  # a visit noted from now on arms the next write
        if not pending:
            return
        try:
            done = self.store.tokens.record_visits(pending)
        except Exception:  # a visit is a hint for the organizer, never worth a failed page or thread
            log.warning("could not record %d link visits", len(pending), exc_info=True)
            return
        if done:
            return
        with self._visit_lock:
            for tid, at in pending.items():
                self._visits.setdefault(tid, at)
            self._flush_in(VISIT_RETRY_S)

    def close_visits(self) -> None:
        """At shutdown: one last try to write the queued visits (no retry after it)."""
        flush = self._flush
        if flush is not None:
            flush.cancel()
        with self._visit_lock:
            pending, self._visits = self._visits, {}
        if pending:
            try:
                self.store.tokens.record_visits(pending)
            except Exception:
                log.warning("could not record %d link visits at shutdown", len(pending), exc_info=True)

    def check_password(self, user: str, password: str) -> bool:
        """The argon2 check, at most ``ARGON2_SLOTS`` at once (a login storm queues here, not on the CPU)."""
        with self._argon2:
            return self.accounts.verify(user, password)

    def import_roster(self, text: str, *, where: str, actor: str) -> Any:
        """A roster import: in a worker process for a file-backed or server database (see web.workers)."""
        if self.store.in_memory:
            return self.store.roster.import_roster(self.course_key, RosterText(text, where=where), actor=actor)
        from gpuseat.web.workers import import_roster

        return import_roster(self.store.url, self.course_key, text, where=where, actor=actor)

    def now(self) -> datetime:
        """The portal's "now" (the demo's fixed clock, else the real time)."""
        return self.clock or datetime.now(UTC)

    def link_expired(self, who: ParticipantView) -> bool:
        """True when the course ended more than ``link_days_after_end`` days ago (in the course's time zone)."""
        return self.link_expired_on(who.course)

    def link_expired_on(self, key: str) -> bool:
        """True when links of course ``key`` no longer open anything (see :meth:`link_expired`)."""
        if self.link_days_after_end is None:
            return False
        course = self.course_view(key)
        if course.ends_on is None:
            return False
        try:
            zone = ZoneInfo(course.timezone)
        except (KeyError, ValueError):
            zone = ZoneInfo("UTC")
        last = datetime.combine(course.ends_on + timedelta(days=self.link_days_after_end + 1), dtime(), zone)
        return self.now() >= last

    def course_view(self, key: str) -> Any:
        """A course's stored view, cached for :data:`COURSE_CACHE_S` (dates and time zone rarely change)."""
        hit = self._courses.get(key)
        if hit is not None and time.monotonic() - hit[0] < COURSE_CACHE_S:
            return hit[1]
        view = self.store.courses.get_course(key)
        self._courses[key] = (time.monotonic(), view)
        return view

    def course_zone(self) -> tzinfo:
        """The served course's time zone (UTC when it names none the system knows)."""
        name = self.course_zone_name()
        return UTC if name == "UTC" else ZoneInfo(name)

    def course_zone_name(self) -> str:
        """The served course's IANA time zone name ("UTC" when it names none the system knows, or the
        course is gone: a page about a deleted course still renders)."""
        from gpuseat.errors import GpuseatError

        try:
            name = str(self.course_view(self.course_key).timezone or "UTC")
        except GpuseatError:
            return "UTC"
        try:
            ZoneInfo(name)
        except (KeyError, ValueError):
            return "UTC"
        return name

    def trusted_origins(self) -> tuple[str, ...]:
        """Origins a POST may come from besides the request's own host (the public URL's)."""
        from urllib.parse import urlsplit

        parts = urlsplit(self.base_url)
        return (f"{parts.scheme}://{parts.netloc}",) if parts.scheme and parts.netloc else ()

    def public_url(self, root: str = "") -> str:
        """The base of access links: ``--base-url`` (which names its own sub-path), else this server plus ``root``."""
        return self.base_url if self.base_url_given else self.base_url + root

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

    def seats_page(self) -> SeatsPage:
        """The Seats page's rows: participants, seats with their live reading and last activity, ways in.

        Each course-wide read is made once (no query per seat): the page costs the same handful of
        statements at 10 seats as at 1,000 (``tests/portal/test_seats_page_queries.py``).
        """
        from typing import cast

        from gpuseat.services.delivery import ways_in
        from gpuseat.services.report import SeatRow
        from gpuseat.store.lite import SeatStatus, for_notes

        key = self.course_key
        reads = cast("CourseStore", _PageReads(self.store))
        participants = reads.roster.participants(key)
        seats: list[SeatView] = reads.seats.seats(key)
        ids = [s.id for s in seats]  # seat keys are unique only within a course: go by id
        live = self.activity.live(seat_ids=ids) if ids else {}
        last = self.activity.last_active(seat_ids=ids) if ids else {}
        rows = [SeatRow(s, live.get(s.id), last.get(s.id), None) for s in seats]
        notes = SeatStatus(seats, last, *for_notes(self.store, seats)).notes()
        return SeatsPage(participants, rows, ways_in(reads, key), notes)

    def participant(self, who: ParticipantView, seat: Any, days: Any = None) -> tuple[Any, Any]:
        """The benchmark and usage of ``who``'s seat (their rows only: this page is opened by many);
        ``days``: the seat's daily use when the page read it with its other rows."""
        if seat is None:  # a seatless page (what a registration rush opens) shows neither
            return None, None
        return participant_view(self.store, self.catalog, who, seat, bench_results=self.bench_results(), days=days)

    @property
    def course_key(self) -> str:
        """The served course's key (looked up once: a course is never renamed)."""
        if self._key is None:
            self._key = self.store.courses.get_course(self.course).key
        return self._key
