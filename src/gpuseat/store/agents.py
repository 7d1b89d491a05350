"""What engines and agents keep in the store: per-course engine settings, agent leases and status, the
access engines hold on their machines, course deletions waiting for revocation, and the events head
that agents follow.

Leases are rows (River's pattern, which works on SQLite and PostgreSQL alike): a holder takes an
expired or free lease, or renews its own, in one write; everyone else waits as standby.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import bindparam, delete, func, or_, select, text

from gpuseat.db.models import (
    AgentLease,
    AgentPresence,
    AgentStatus,
    CourseDeletion,
    EngineHolding,
    EngineSetting,
    Event,
)
from gpuseat.store.base import Concern
from gpuseat.store.rows import DEFAULT_ACTOR, _course, _log, clock_sql

# what an agent reads each poll (store.agents.events_head_marked), built once, on the table's columns (not the
# ORM's: a third of the cost of a read this small)
_EVENTS = Event.__table__
_MARK_COLUMNS = select(_EVENTS.c.id, _EVENTS.c.at, _EVENTS.c.course_key, _EVENTS.c.actor, _EVENTS.c.action)
_HEAD_ID = select(func.max(_EVENTS.c.id)).scalar_subquery()
_HEAD_ROW = _MARK_COLUMNS.where(_EVENTS.c.id == _HEAD_ID)
_HEAD_AND_CURSOR_ROWS = _MARK_COLUMNS.where(or_(_EVENTS.c.id == _HEAD_ID, _EVENTS.c.id == bindparam("cursor")))


#: the events actions that can take access away from someone: a release, a move, seats removed, a course
#: archived or deleted, a roster changed (a login or key) or a participant removed from it, the policy or a person's
#: quota changed (hours lowered below what was used), the course file updated (a window or session shortened). A plan
#: made before one may still grant that access.
REVOKING_ACTIONS = (
    "seat.release",
    "seat.move",
    "seats.remove",
    "course.archive",
    "course.delete",
    "course.delete.asked",
    "roster.update",
    "roster.import",
    "roster.remove",
    "course.policy",
    "course.update",
    "hours.quota",
)
#: the events actions no engine plans from, written from the portal as often as anyone likes: an organizer's login
#: or log-out-everywhere, a participant's refused form. An agent does not plan a course again for them (a pass per
#: page view); any other action, one added later included, is planned again.
UNPLANNED_ACTIONS = ("portal.login", "portal.logout-all", "portal.refused")


class Agents(Concern):
    """Engine settings, leases, agent status, holdings, deferred deletions (see the module doc)."""

    # -- engine settings -----------------------------------------------------------------------------

    def engine_settings(self, course: str | None, engine: str) -> dict[str, Any]:
        """The stored settings of ``engine`` for ``course`` (empty when none were set)."""
        with self._database.read() as s:
            crow = _course(s, course)
            row = s.scalar(
                select(EngineSetting).where(EngineSetting.course_id == crow.id, EngineSetting.engine == engine)
            )
            return dict(row.values) if row else {}

    def all_engine_settings(self, course: str | None) -> dict[str, dict[str, Any]]:
        """Engine name → stored settings, for every engine with settings in ``course``."""
        with self._database.read() as s:
            crow = _course(s, course)
            rows = s.scalars(select(EngineSetting).where(EngineSetting.course_id == crow.id))
            return {r.engine: dict(r.values) for r in rows}

    def set_engine_settings(
        self, course: str | None, engine: str, values: Mapping[str, Any], *, actor: str = DEFAULT_ACTOR
    ) -> bool:
        """Store ``values`` (already validated by the engine's model) with an events row; False when
        they were already so. A value of None removes that setting."""
        with self._database.write() as s:
            crow = _course(s, course)
            row = s.scalar(
                select(EngineSetting).where(EngineSetting.course_id == crow.id, EngineSetting.engine == engine)
            )
            old = dict(row.values) if row else {}
            new = {**old, **{k: v for k, v in values.items() if v is not None}}
            for k, v in values.items():
                if v is None:
                    new.pop(k, None)
            if new == old and row is not None:
                return False
            now = datetime.now(UTC)
            if row is None:
                s.add(EngineSetting(course_id=crow.id, engine=engine, values=new, updated_at=now))
            else:
                row.values, row.updated_at = new, now
            changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
            _log(s, crow.key, actor, "engine.settings", detail={"engine": engine, "changed": changed})
            return True

    # -- the events head (what agents follow) ----------------------------------------------------------

    def events_head(self) -> int:
        """The id of the newest events row of any course (0 when there are none)."""
        with self._database.read() as s:
            return int(s.scalar(select(func.max(Event.id))) or 0)

    def events_head_marked(self, cursor: int | None = None, holes: Iterable[int] = ()) -> tuple[int, dict[int, str]]:
        """The events head, and what marks the rows ``cursor``, ``holes`` and head as they are now (id → its time,
        course, actor and action; a row that is not there has none), in one read by primary key.
        An agent compares the mark of its cursor's row with the one it kept: rows are never updated or
        deleted (events are append-only), so a mark that differs or is gone means the store was replaced
        (``gpuseat db restore``), even where writes since took the head past the cursor again. ``holes``: ids
        below the cursor the agent has not seen yet (:attr:`ids_follow_commits`); the ones marked are there now."""
        with self._database.read() as s:
            if holes := list(holes):
                ids = or_(_EVENTS.c.id == _HEAD_ID, _EVENTS.c.id == cursor, _EVENTS.c.id.in_(holes))
                rows = s.execute(_MARK_COLUMNS.where(ids))
            elif cursor is None:
                rows = s.execute(_HEAD_ROW)
            else:
                rows = s.execute(_HEAD_AND_CURSOR_ROWS, {"cursor": cursor})
            marks = {int(r.id): f"{r.at.isoformat()} {r.course_key} {r.actor} {r.action}" for r in rows}
        return max(marks, default=0), marks

    def changed_courses(self, after_id: int, *, exclude_actor: str | None = None) -> set[str]:
        """Keys of the courses with events after ``after_id`` (not counting ``exclude_actor``'s own)."""
        with self._database.read() as s:
            q = select(Event.course_key).where(Event.id > after_id, Event.course_key.is_not(None)).distinct()
            if exclude_actor is not None:
                q = q.where(Event.actor != exclude_actor)
            return {k for k in s.scalars(q) if k}

    def revoking_after(self, after_id: int, courses: Iterable[str] | None, *, exclude_actor: str) -> int | None:
        """The first events id past ``after_id`` of an action that can take access away from someone
        (:data:`REVOKING_ACTIONS`), of one of ``courses`` (None: any course), not ``exclude_actor``'s; None when
        there is none. An agent asks it during a long pass, whose plan may still grant what such a row took away."""
        with self._database.read() as s:
            q = select(func.min(Event.id)).where(
                Event.id > after_id, Event.action.in_(REVOKING_ACTIONS), Event.actor != exclude_actor
            )
            if courses is not None:
                q = q.where(Event.course_key.in_(sorted(courses)))
            found = s.scalar(q)
            return None if found is None else int(found)

    @property
    def ids_follow_commits(self) -> bool:
        """True where an events id is taken in commit order (SQLite: one writer at a time), so no id below the
        head can appear later; False on PostgreSQL, whose sequence gives ids at INSERT: a transaction that took
        id 100 may commit after one that took 101 (or roll back, and 100 never appears)."""
        return self._database.dialect == "sqlite"

    def events_after(self, after_id: int, *, ids: Iterable[int] = ()) -> list[tuple[int, str | None, str]]:
        """Id, course key and actor of each events row past ``after_id`` or in ``ids`` (what an agent follows);
        the course key is None for a row no engine plans from (:data:`UNPLANNED_ACTIONS`)."""
        with self._database.read() as s:
            where = _EVENTS.c.id > after_id
            if ids := list(ids):
                where = or_(where, _EVENTS.c.id.in_(ids))
            q = select(_EVENTS.c.id, _EVENTS.c.course_key, _EVENTS.c.actor, _EVENTS.c.action).where(where)
            return [(int(r.id), None if r.action in UNPLANNED_ACTIONS else r.course_key, r.actor) for r in s.execute(q)]

    def log_any(self, course_key: str, action: str, **row: Any) -> None:
        """The old name of ``store.events.log(course_key, action, gone_ok=True, …)``."""
        self._store.events.log(course_key, action, gone_ok=True, **row)

    def listener(self, channel: str) -> Any:
        """PostgreSQL: an autocommit psycopg connection LISTENing on ``channel`` of this store's schema,
        ``<channel>_<schema>`` cut to 63 bytes as migration 0016's trigger names it (its ``notifies()``
        wakes an agent at once; a store in another schema of the database never does); None on SQLite or
        when it cannot connect (the agent then polls)."""
        url = self._database.engine.url
        if url.get_backend_name() != "postgresql":
            return None
        try:
            import psycopg

            params: dict[str, Any] = {
                "host": url.host, "port": url.port, "user": url.username, "password": url.password,
                "dbname": url.database,
            }  # fmt: skip
            params.update({k: str(v) for k, v in url.query.items()})  # e.g. host=/socket/dir, options=…
            from psycopg import sql

            conn = psycopg.connect(autocommit=True, **{k: v for k, v in params.items() if v is not None})
            row = conn.execute("SELECT left(%s || '_' || current_schema(), 63)", (channel,)).fetchone()
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(row[0] if row else channel)))
            return conn
        except Exception:  # no listener: polling still finds every change, a little later
            return None

    # -- leases ------------------------------------------------------------------------------------------
    # Lease times are the database's clock, not the agent's: agents on several machines (or one whose clock
    # was just stepped) then agree on when a lease runs out, and a leader whose clock jumped ahead cannot
    # hold it for the size of the jump after it died.

    def _clock(self, s: Any) -> float:
        """Seconds since the epoch by the database's clock (:func:`clock_sql`)."""
        return float(s.scalar(text(f"SELECT {clock_sql(self._database.dialect)}")))

    def lease(self, name: str) -> tuple[str, float, float] | None:
        """Lease ``name`` as its row is now: holder, expiry and seconds left (the database's clock); None when free."""
        with self._database.read() as s:
            row = s.get(AgentLease, name)
            return None if row is None else (row.holder, row.expires_at, row.expires_at - self._clock(s))

    def take_lease(
        self,
        name: str,
        holder: str,
        ttl_s: float,
        *,
        now: float | None = None,
        unchanged: tuple[str, float] | None = None,
    ) -> bool:
        """Take or renew the lease ``name`` for ``holder`` for ``ttl_s`` seconds; False while another
        holder's lease has not expired (``now``: a time to use instead of the database's clock, in tests).
        ``unchanged``: another holder's row (holder, expiry) as the caller saw it unrenewed for longer than that
        holder renews it, by the caller's own clock: taken over if the row is still exactly that, whatever the
        database's clock says (stepped back, it shows a dead holder's lease as running on for the step)."""
        with self._database.write() as s:
            t = self._clock(s) if now is None else now
            row = s.get(AgentLease, name, with_for_update=True)
            if unchanged is not None:
                if row is None or (row.holder, row.expires_at) != unchanged:
                    return False  # renewed or taken meanwhile: its holder is alive
                row.holder, row.acquired_at, row.expires_at = holder, t, t + ttl_s
                return True
            if row is None:  # agents starting at once all find no row: one insert wins, the others read it
                new = {"name": name, "holder": holder, "acquired_at": t, "expires_at": t + ttl_s}
                won = s.execute(self._database.insert(AgentLease).values(**new).on_conflict_do_nothing())
                if won.rowcount == 1:  # type: ignore[attr-defined]
                    return True
                row = s.get(AgentLease, name, with_for_update=True, populate_existing=True)
                if row is None:  # the winner dropped it again at once: it is free
                    return False
            if row.holder != holder and row.expires_at > t:
                return False
            if row.holder != holder:
                row.holder, row.acquired_at = holder, t
            row.expires_at = t + ttl_s
            return True

    def holds_lease(self, name: str, holder: str, *, now: float | None = None) -> bool:
        """True while ``holder`` holds an unexpired lease ``name`` (asked before each apply step)."""
        with self._database.read() as s:
            t = self._clock(s) if now is None else now
            row = s.get(AgentLease, name)
            return row is not None and row.holder == holder and row.expires_at > t

    def drop_lease(self, name: str, holder: str) -> None:
        """Give the lease up (a standby takes it at once)."""
        with self._database.write() as s:
            s.execute(delete(AgentLease).where(AgentLease.name == name, AgentLease.holder == holder))

    def leases(self) -> list[dict[str, Any]]:
        """Every lease: name, holder, seconds left."""
        with self._database.read() as s:
            now = self._clock(s)
            return [
                {"name": r.name, "holder": r.holder, "expires_in_s": round(r.expires_at - now, 1)}
                for r in s.scalars(select(AgentLease).order_by(AgentLease.name))
            ]

    # -- running agents (leaders and standbys) -----------------------------------------------------------

    def report_agent(self, name: str, holder: str, role: str, ttl_s: float, *, now: float | None = None) -> None:
        """``holder`` runs as ``role`` for lease ``name``: shown for ``ttl_s`` seconds (the database's clock,
        ``now`` in tests); reports of any agent past their time are deleted here."""
        with self._database.write() as s:
            t = self._clock(s) if now is None else now
            s.execute(delete(AgentPresence).where(AgentPresence.expires_at < t))
            row = s.get(AgentPresence, (name, holder))
            if row is None:
                row = AgentPresence(name=name, holder=holder)
                s.add(row)
            row.role, row.reported_at, row.expires_at = role[:16], t, t + ttl_s

    def forget_agent(self, name: str, holder: str) -> None:
        """``holder`` stopped (it is no longer listed)."""
        with self._database.write() as s:
            s.execute(delete(AgentPresence).where(AgentPresence.name == name, AgentPresence.holder == holder))

    def live_agents(self, *, now: float | None = None) -> dict[str, list[dict[str, Any]]]:
        """Lease name → its running agents whose report has not run out (holder, role, when it reported and
        how many seconds ago), the lease holder first, then by holder."""
        with self._database.read() as s:
            t = self._clock(s) if now is None else now
            holders = {r.name: r.holder for r in s.scalars(select(AgentLease).where(AgentLease.expires_at > t))}
            rows = s.scalars(select(AgentPresence).where(AgentPresence.expires_at > t))
            out: dict[str, list[dict[str, Any]]] = {}
            for r in sorted(rows, key=lambda r: (r.name, r.holder != holders.get(r.name), r.holder)):
                out.setdefault(r.name, []).append(
                    {
                        "holder": r.holder,
                        "role": r.role,
                        "reported_at": datetime.fromtimestamp(r.reported_at, UTC).isoformat(),
                        "reported_s_ago": round(max(0.0, t - r.reported_at), 1),
                    }
                )
            return out

    # -- agent status ------------------------------------------------------------------------------------

    def save_agent_status(
        self,
        name: str,
        *,
        holder: str,
        role: str,
        cursor: int | None,
        applied: bool = False,
        resynced: bool = False,
        pending: int = 0,
        failed: list[dict[str, Any]] | None = None,
    ) -> None:
        """Record what agent ``name`` did last (one row per agent name); ``cursor`` None keeps the events id
        the row holds (what the last leader applied up to: a standby or a new leader has applied nothing)."""
        now = datetime.now(UTC)
        with self._database.write() as s:
            row = s.get(AgentStatus, name)
            if row is None:
                row = AgentStatus(
                    name=name, holder=holder, role=role, cursor=cursor or 0, pending=0, failed=[], updated_at=now
                )
                s.add(row)
            row.holder, row.role, row.updated_at = holder, role, now
            if cursor is not None:
                row.cursor = cursor
            if applied:
                row.last_apply_at, row.pending, row.failed = now, pending, list(failed or [])
            if resynced:
                row.last_resync_at = now

    def agent_statuses(self) -> list[dict[str, Any]]:
        """Every agent's last status, with its lease and (``agents``) the agents of that lease running now,
        leader and standbys (:meth:`live_agents`)."""
        leases = {x["name"]: x for x in self.leases()}
        live = self.live_agents()
        with self._database.read() as s:
            out = []
            for r in s.scalars(select(AgentStatus).order_by(AgentStatus.name)):
                lease = leases.get(r.name)
                out.append(
                    {
                        "name": r.name,
                        "holder": r.holder,
                        "role": r.role,
                        "lease_holder": lease["holder"] if lease else None,
                        "lease_expires_in_s": lease["expires_in_s"] if lease else None,
                        "cursor": r.cursor,
                        "last_apply_at": _iso(r.last_apply_at),
                        "last_resync_at": _iso(r.last_resync_at),
                        "pending": r.pending,
                        "failed": list(r.failed or []),
                        "updated_at": _iso(r.updated_at),
                        "agents": live.get(r.name, []),
                    }
                )
            return out

    # -- holdings ----------------------------------------------------------------------------------------

    def set_holdings(self, course_key: str, engine: str, host: str | None, found: Iterable[Mapping[str, Any]]) -> None:
        """Replace what ``engine`` on ``host`` holds for ``course_key`` by ``found`` (``Holding.to_dict``). Rows
        that are ``found`` already are left as they are, with no write: every pass records what it observed, and a
        pass with nothing to do deleted and wrote again two rows per seat (its holder's account and key)."""
        now = datetime.now(UTC)
        rows = Counter((str(h["what"])[:32], str(h["login"])[:64], h.get("participant"), h.get("seat")) for h in found)
        mine = (
            EngineHolding.course_key == course_key,
            EngineHolding.engine == engine,
            EngineHolding.host == (host or ""),
        )
        columns = (EngineHolding.what, EngineHolding.login, EngineHolding.participant, EngineHolding.seat)
        with self._database.read() as s:
            if Counter(tuple(r) for r in s.execute(select(*columns).where(*mine))) == rows:
                return
        with self._database.write() as s:
            s.execute(delete(EngineHolding).where(*mine))
            for what, login, participant, seat in rows.elements():
                s.add(
                    EngineHolding(
                        course_key=course_key,
                        engine=engine,
                        host=host or "",
                        what=what,
                        login=login,
                        participant=participant,
                        seat=seat,
                        updated_at=now,
                    )
                )

    def holdings(self, course_key: str | None = None) -> list[dict[str, Any]]:
        """What engines hold on machines (of one course, or all), as last observed."""
        with self._database.read() as s:
            q = select(EngineHolding).order_by(EngineHolding.course_key, EngineHolding.engine, EngineHolding.login)
            if course_key is not None:
                q = q.where(EngineHolding.course_key == course_key)
            return [
                {
                    "course": r.course_key,
                    "engine": r.engine,
                    "host": r.host or None,
                    "what": r.what,
                    "login": r.login,
                    "participant": r.participant,
                    "seat": r.seat,
                }
                for r in s.scalars(q)
            ]

    # -- deletions waiting for the engines ---------------------------------------------------------------

    def request_deletion(self, course_key: str, *, export_path: str, sha256: str, actor: str) -> None:
        """Mark ``course_key`` for deletion once its engines hold nothing (the export is written already)."""
        with self._database.write() as s:
            if s.get(CourseDeletion, course_key) is None:
                s.add(
                    CourseDeletion(
                        course_key=course_key,
                        export_path=export_path,
                        sha256=sha256,
                        actor=actor[:128],
                        requested_at=datetime.now(UTC),
                    )
                )
            _log(s, course_key, actor, "course.delete.asked", detail={"export": export_path, "sha256": sha256})

    def pending_deletions(self) -> dict[str, dict[str, Any]]:
        """Course key → the deletion asked for (export path, checksum, who)."""
        with self._database.read() as s:
            return {
                r.course_key: {"export": r.export_path, "sha256": r.sha256, "actor": r.actor}
                for r in s.scalars(select(CourseDeletion))
            }

    def forget_deletion(self, course_key: str) -> None:
        """The deletion is done (or was for a course already gone)."""
        with self._database.write() as s:
            s.execute(delete(CourseDeletion).where(CourseDeletion.course_key == course_key))


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.isoformat()
