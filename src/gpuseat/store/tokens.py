"""Access tokens: issued once, stored as SHA-256, looked up in constant time, revoked and rotated."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import and_, select, update
from sqlalchemy.orm import Session

from gpuseat.db.models import AccessToken, CourseRecord, Participant
from gpuseat.store.base import StoreBase
from gpuseat.store.rows import DEFAULT_ACTOR, _course, _log, _open_seat_key, _participant_view, _people
from gpuseat.store.views import IssuedToken, ParticipantView, _jsonable, _utc

TOKEN_BYTES = 32
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{20,128}$")
_TOUCH_EVERY = timedelta(minutes=1)  # last-used time is written at most once a minute per token


def token_hash(token: str) -> str:
    """SHA-256 of a token (hex). Tokens carry 256 random bits, so a fast hash is enough."""
    return hashlib.sha256(token.encode()).hexdigest()


class TokenMethods(StoreBase):
    # -- access tokens -----------------------------------------------------------------------------

    def issue_tokens(
        self, course: str | None = None, participants: Sequence[str] | None = None, *, actor: str = DEFAULT_ACTOR
    ) -> list[IssuedToken]:
        """A new token for each participant (all by default) who has no active one; shown only here."""
        now = datetime.now(UTC)
        with self._write() as s:
            crow = _course(s, course)
            people = _people(s, crow, participants)
            active = set(
                s.scalars(
                    select(AccessToken.participant_id).where(
                        AccessToken.participant_id.in_([p.id for p in people]), AccessToken.revoked_at.is_(None)
                    )
                )
            )
            out = [_new_token(s, crow.key, p, now) for p in people if p.id not in active]
            if out:
                _log(s, crow.key, actor, "token.issue", detail={"participants": [t.participant for t in out]})
            return out

    def rotate_tokens(
        self, course: str | None = None, participants: Sequence[str] | None = None, *, actor: str = DEFAULT_ACTOR
    ) -> list[IssuedToken]:
        """Revoke the active tokens of the participants (all by default) and issue new ones."""
        now = datetime.now(UTC)
        with self._write() as s:
            crow = _course(s, course)
            people = _people(s, crow, participants)
            _revoke(s, [p.id for p in people], now)
            out = [_new_token(s, crow.key, p, now) for p in people]
            _log(s, crow.key, actor, "token.rotate", detail={"participants": [t.participant for t in out]})
            return out

    def revoke_tokens(
        self, course: str | None, participants: Sequence[str] | None = None, *, actor: str = DEFAULT_ACTOR
    ) -> int:
        """Revoke the active tokens of the participants (all by default); returns how many."""
        now = datetime.now(UTC)
        with self._write() as s:
            crow = _course(s, course)
            people = _people(s, crow, participants)
            count = _revoke(s, [p.id for p in people], now)
            _log(s, crow.key, actor, "token.revoke", detail={"participants": [p.key for p in people], "tokens": count})
            return count

    def participant_for_token(self, token: str) -> ParticipantView | None:
        """The participant an access token belongs to (None when unknown or revoked); notes its use.

        The lookup is by SHA-256 of the token (an index lookup, so timing reveals nothing about the
        token itself), then compared in constant time.
        """
        if not isinstance(token, str) or not _TOKEN.match(token):
            return None
        digest = token_hash(token)
        now = datetime.now(UTC)
        with self._read() as s:
            row = s.execute(
                select(AccessToken, Participant, CourseRecord.key)
                .join(Participant, Participant.id == AccessToken.participant_id)
                .join(CourseRecord, CourseRecord.id == Participant.course_id)
                .where(AccessToken.token_hash == digest, AccessToken.revoked_at.is_(None))
            ).first()
            if row is None or not hmac.compare_digest(row[0].token_hash, digest):
                return None
            tok, p, ckey = row
            tok_id, last = tok.id, _utc(tok.last_used_at)
            view = _participant_view(ckey, p, _open_seat_key(s, p.id))
        if last is None or now - last >= _TOUCH_EVERY:
            with self._write() as w:
                w.execute(update(AccessToken).where(AccessToken.id == tok_id).values(last_used_at=now))
        return view

    def token_status(self, course: str | None = None) -> list[dict[str, Any]]:
        """Per participant: whether an active token exists, when it was made and last used."""
        with self._read() as s:
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
