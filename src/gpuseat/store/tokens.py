"""Access tokens: issued once, stored as SHA-256, looked up in constant time, revoked and rotated."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any, cast

from sqlalchemy import Select, Table, Update, and_, bindparam, select, text, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from gpuseat.db import busy_timeout
from gpuseat.db.models import AccessToken, Assignment, CourseRecord, Participant, Seat
from gpuseat.errors import StoreError
from gpuseat.store.base import Concern
from gpuseat.store.rows import DEFAULT_ACTOR, _course, _log, _participant_view, _people
from gpuseat.store.views import IssuedToken, ParticipantView, _jsonable, _utc

TOKEN_BYTES = 32
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{20,128}$")
_TOUCH_EVERY = timedelta(minutes=1)  # last-used time is written at most once a minute per token
VISIT_WAIT_S = 0.25  # how long recording a visit waits for another writer before it gives up (and retries later)


@dataclass(frozen=True, slots=True)
class TokenHit:
    """What a link opens, read without writing anything (see :meth:`Tokens.find_token`)."""

    participant: ParticipantView | None  # None: the link was revoked (or its course archived)
    token_id: int
    last_used_at: datetime | None
    archived: bool  # the link's course is archived (archiving revokes its links)

    def visit_due(self, now: datetime) -> bool:
        """True when this visit should be recorded (last-used is kept to the minute)."""
        return self.participant is not None and (self.last_used_at is None or now - self.last_used_at >= _TOUCH_EVERY)


def token_hash(token: str) -> str:
    """SHA-256 of a token (hex). Tokens carry 256 random bits, so a fast hash is enough."""
    return hashlib.sha256(token.encode()).hexdigest()


@cache
def _token_query() -> Select[Any]:
    """A link's token row, its participant's columns, course and the seat held now by the token's hash
    (bound ``digest``), the active token first; columns only (Core rows, no ORM loading), built once:
    every page opens a link, the rush every link at once."""
    return (
        select(
            AccessToken.id.label("token_id"),
            AccessToken.token_hash,
            AccessToken.revoked_at,
            AccessToken.last_used_at,
            *cast(Table, Participant.__table__).c,
            CourseRecord.key.label("course_key"),
            CourseRecord.archived_at,
            Seat.key.label("seat_key"),
        )
        .select_from(AccessToken)
        .join(Participant, Participant.id == AccessToken.participant_id)
        .join(CourseRecord, CourseRecord.id == Participant.course_id)
        .outerjoin(Assignment, and_(Assignment.participant_id == Participant.id, Assignment.valid_to.is_(None)))
        .outerjoin(Seat, Seat.id == Assignment.seat_id)
        .where(AccessToken.token_hash == bindparam("digest"))
        .order_by(AccessToken.revoked_at.is_not(None))
        .limit(1)
    )


@cache
def _visit_update() -> Update:
    """Set one link's last use (bound ``tid``, ``at``); built once, run for many links at a time."""
    # the Core table: an ORM update() takes no executemany of bound ids
    table = cast(Table, AccessToken.__table__)
    return update(table).where(table.c.id == bindparam("tid")).values(last_used_at=bindparam("at"))


class Tokens(Concern):
    """``store.tokens``: participants' access links (issued, rotated, revoked, resolved, visits kept)."""

    def issue_tokens(
        self, course: str | None = None, participants: Sequence[str] | None = None, *, actor: str = DEFAULT_ACTOR
    ) -> list[IssuedToken]:
        """A new token for each participant (all by default) who has no active one; shown only here."""
        return self._issue(course, participants, actor, rotate=False)

    def rotate_tokens(
        self, course: str | None = None, participants: Sequence[str] | None = None, *, actor: str = DEFAULT_ACTOR
    ) -> list[IssuedToken]:
        """Revoke the active tokens of the participants (all by default) and issue new ones."""
        return self._issue(course, participants, actor, rotate=True)

    def _issue(
        self, course: str | None, participants: Sequence[str] | None, actor: str, *, rotate: bool
    ) -> list[IssuedToken]:
        """New tokens for the participants without an active one; ``rotate`` revokes theirs first, so all
        get one (and is logged even when it names nobody)."""
        now = datetime.now(UTC)
        with self._database.write() as s:
            crow = _course(s, course)
            people = _people(s, crow, participants)
            ids = [p.id for p in people]
            if rotate:
                _revoke(s, ids, now)
                active: set[int] = set()
            else:
                active = set(
                    s.scalars(
                        select(AccessToken.participant_id).where(
                            AccessToken.participant_id.in_(ids), AccessToken.revoked_at.is_(None)
                        )
                    )
                )
            out = [_new_token(s, crow.key, p, now) for p in people if p.id not in active]
            if out or rotate:
                detail = {"participants": [t.participant for t in out]}
                _log(s, crow.key, actor, "token.rotate" if rotate else "token.issue", detail=detail)
            return out

    def revoke_tokens(
        self, course: str | None, participants: Sequence[str] | None = None, *, actor: str = DEFAULT_ACTOR
    ) -> int:
        """Revoke the active tokens of the participants (all by default); returns how many."""
        now = datetime.now(UTC)
        with self._database.write() as s:
            crow = _course(s, course)
            people = _people(s, crow, participants)
            count = _revoke(s, [p.id for p in people], now)
            _log(s, crow.key, actor, "token.revoke", detail={"participants": [p.key for p in people], "tokens": count})
            return count

    def participant_for_token(self, token: str, *, touch: bool = True) -> ParticipantView | None:
        """The participant an access token belongs to (None when unknown or revoked).

        ``touch`` notes its use (at most once a minute), waiting at most :data:`VISIT_WAIT_S` for
        another writer: a visit that cannot be noted at once is not noted (the portal queues and
        retries it, see :meth:`find_token` and :meth:`record_visits`).
        """
        hit = self.find_token(token)
        if hit is None or hit.participant is None:
            return None
        now = datetime.now(UTC)
        if touch and hit.visit_due(now):
            self.record_visits({hit.token_id: now})
        return hit.participant

    def find_token(self, token: str) -> TokenHit | None:
        """The link's participant, token row and last use, in one read that writes nothing (None: unknown).

        The lookup is by SHA-256 of the token (an index lookup, so timing reveals nothing about the
        token itself), then compared in constant time. A revoked link is found too (``participant``
        None), so a page can say why it no longer opens anything (``archived``: its course was archived).
        """
        if not isinstance(token, str) or not _TOKEN.fullmatch(token):
            return None
        digest = token_hash(token)
        with self._database.read() as s:
            row = s.connection().execute(_token_query(), {"digest": digest}).first()
            if row is None or not hmac.compare_digest(row.token_hash, digest):
                return None
            # the row carries the participant's columns by name, as a Participant does
            who = cast(Participant, row)
            view = None if row.revoked_at is not None else _participant_view(row.course_key, who, row.seat_key)
            return TokenHit(view, row.token_id, _utc(row.last_used_at), row.archived_at is not None)

    def record_visits(self, visits: Mapping[int, datetime], *, wait_s: float = VISIT_WAIT_S) -> bool:
        """Note when links were last used (token row id → time), waiting at most ``wait_s`` for the write lock.

        Returns False, having written nothing, when another writer holds the lock that long (SQLite's
        write lock, or a PostgreSQL row lock): the caller may try again later. It does not queue
        behind the store's other writers (a page view is never worth a place in that queue).
        """
        if not visits:
            return True
        with self._database.writer.connect() as conn:
            sqlite = conn.dialect.name == "sqlite"
            raw = conn.connection.driver_connection if sqlite else None
            if raw is not None:
                raw.execute(f"PRAGMA busy_timeout={max(0, int(wait_s * 1000))}")
            try:
                with conn.begin():
                    if not sqlite:
                        conn.execute(text(f"SET LOCAL lock_timeout = '{max(1, int(wait_s * 1000))}ms'"))
                    conn.execute(_visit_update(), [{"tid": tid, "at": at} for tid, at in visits.items()])
            except (OperationalError, StoreError) as exc:
                if _locked(exc):
                    return False
                raise
            finally:
                if raw is not None:  # back to the writers' timeout before the connection goes back to the pool
                    try:
                        raw.execute(f"PRAGMA busy_timeout={int(busy_timeout() * 1000)}")
                    except Exception:
                        conn.invalidate()  # never pooled with the short timeout
        return True

    def token_status(self, course: str | None = None) -> list[dict[str, Any]]:
        """Per participant: whether an active token exists, when it was made and last used."""
        with self._database.read() as s:
            crow = _course(s, course)
            q = (
                select(Participant.key, AccessToken.created_at, AccessToken.last_used_at)
                .outerjoin(
                    AccessToken,
                    and_(AccessToken.participant_id == Participant.id, AccessToken.revoked_at.is_(None)),
                )
                .where(Participant.course_id == crow.id)
                .order_by(Participant.key)
            )
            return [
                {
                    "participant": k,
                    "active": c is not None,
                    "created_at": _jsonable(_utc(c)),
                    "last_used_at": _jsonable(_utc(u)),
                }
                for k, c, u in s.execute(q)
            ]


def _locked(exc: Exception) -> bool:
    """True for "another writer holds the lock" (SQLite's busy, PostgreSQL's lock timeout)."""
    message = str(getattr(exc, "orig", None) or exc).lower()
    return any(m in message for m in ("locked", "another writer", "lock timeout", "could not obtain lock"))


def _new_token(s: Session, course: str, p: Participant, now: datetime) -> IssuedToken:
    token = secrets.token_urlsafe(TOKEN_BYTES)
    s.add(AccessToken(participant_id=p.id, token_hash=token_hash(token), created_at=now))
    return IssuedToken(course, p.key, token, now)


def _revoke(s: Session, participant_ids: list[int], now: datetime) -> int:
    rows = list(
        s.scalars(
            select(AccessToken).where(AccessToken.participant_id.in_(participant_ids), AccessToken.revoked_at.is_(None))
        )
    )
    for row in rows:
        row.revoked_at = now
    return len(rows)
