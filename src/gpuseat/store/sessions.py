"""Organizer sessions of the portal, kept in the course database (the SQL side of ``gpuseat.web.security``).

A session is a random secret in the browser's cookie and its SHA-256 here. Ending a session deletes
its row, so a copied cookie stops working at once in every server process: logout ends one,
``admin set-password`` and "log out everywhere" end all of a user's.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import delete, select

from gpuseat.db.models import PortalSession

if TYPE_CHECKING:
    from sqlalchemy.engine import CursorResult

    from gpuseat.store.facade import Store

SECRET_BYTES = 32


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def open_session(store: Store, username: str, lifetime_s: float, *, now: datetime | None = None) -> str:
    """A new session for ``username``; returns the secret for the cookie (stored only as its hash)."""
    now = now or datetime.now(UTC)
    secret = secrets.token_urlsafe(SECRET_BYTES)
    with store.database.write() as s:
        # expired rows of anyone go on each login: the table stays as small as the number of live logins
        s.execute(delete(PortalSession).where(PortalSession.expires_at < now))
        s.add(
            PortalSession(
                id_hash=_digest(secret),
                username=username,
                created_at=now,
                expires_at=now + timedelta(seconds=lifetime_s),
            )
        )
    return secret


def session_user(store: Store, secret: str | None, *, now: datetime | None = None) -> str | None:
    """The organizer of a live session; None for an unknown, ended or expired one."""
    if not secret or not 20 <= len(secret) <= 128:
        return None
    now = now or datetime.now(UTC)
    with store.database.read() as s:
        row = s.execute(
            select(PortalSession.username, PortalSession.expires_at).where(PortalSession.id_hash == _digest(secret))
        ).first()
    if row is None:
        return None
    user, expires = row
    if expires.tzinfo is None:  # SQLite hands back naive UTC
        expires = expires.replace(tzinfo=UTC)
    return user if expires > now else None


def end_session(store: Store, secret: str | None) -> bool:
    """End one session (logout); True when it existed."""
    if not secret:
        return False
    with store.database.write() as s:
        done = cast(
            "CursorResult[Any]", s.execute(delete(PortalSession).where(PortalSession.id_hash == _digest(secret)))
        )
        return bool(done.rowcount)


def end_user_sessions(store: Store, username: str) -> int:
    """End every session of ``username`` (a new password, "log out everywhere"); returns how many."""
    with store.database.write() as s:
        done = cast("CursorResult[Any]", s.execute(delete(PortalSession).where(PortalSession.username == username)))
        return int(done.rowcount or 0)
