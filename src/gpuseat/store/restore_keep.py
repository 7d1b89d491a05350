"""What keeps people out survives a ``db restore`` over a live store (see :mod:`gpuseat.store.backup`).

Before the backup replaces a store, :func:`read_kept` reads from it the access links it had revoked or
rotated away (by their stored SHA-256) and the organizers' password hashes with when each was set. After
the restore, :func:`apply_kept` writes in one transaction: each of those links that the backup brings back
is revoked again (a link only in the backup is left as it is), an organizer whose password was changed
after the backup keeps the newer hash, and every portal login of the restored store ends; one events row
(``token.revoke``) per course whose links were revoked again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import delete, inspect, select, update

from gpuseat.db.models import AccessToken, CourseRecord, Participant, PortalSession, PortalUser
from gpuseat.store.rows import _log
from gpuseat.store.views import _utc

if TYPE_CHECKING:
    from sqlalchemy.engine import CursorResult

    from gpuseat.store.facade import Store

__all__ = ["Kept", "apply_kept", "read_kept"]

RESTORE_ACTOR = "gpuseat db restore"


@dataclass(frozen=True, slots=True)
class Kept:
    """What the replaced store held that keeps people out."""

    revoked: dict[str, datetime] = field(default_factory=dict)  # token hash → when it was revoked
    passwords: dict[str, tuple[str, datetime]] = field(default_factory=dict)  # organizer → (hash, set at)


def read_kept(url: str) -> Kept | None:
    """Revoked links and organizer passwords of the store at ``url``; None when it is no gpuseat store yet
    (a new, empty database: the restore then changes nothing)."""
    from gpuseat.db import make_engine

    engine = make_engine(url, create=True)
    try:
        tables = set(inspect(engine).get_table_names())
        if "alembic_version" not in tables:
            return None
        kept = Kept()
        with engine.connect() as conn:
            if "access_tokens" in tables:
                for digest, at in conn.execute(
                    select(AccessToken.token_hash, AccessToken.revoked_at).where(AccessToken.revoked_at.is_not(None))
                ):
                    kept.revoked[digest] = cast(datetime, _utc(at))
            if "portal_users" in tables:  # an older gpuseat's store may have no portal yet
                for user, digest, at in conn.execute(
                    select(PortalUser.username, PortalUser.password_hash, PortalUser.updated_at)
                ):
                    kept.passwords[user] = (digest, cast(datetime, _utc(at)))
    finally:
        engine.dispose()
    return kept


def apply_kept(store: Store, kept: Kept) -> dict[str, Any]:
    """Write ``kept`` into the restored ``store`` in one transaction; returns the counts
    (``revoked``: links revoked again, ``passwords``: newer passwords kept, ``sessions``: logins ended)."""
    with store.database.write() as s:
        rows = s.execute(
            select(AccessToken, Participant.key, CourseRecord.key)
            .join(Participant, Participant.id == AccessToken.participant_id)
            .join(CourseRecord, CourseRecord.id == Participant.course_id)
            .where(AccessToken.revoked_at.is_(None), AccessToken.token_hash.in_(list(kept.revoked)))
            .order_by(CourseRecord.key, Participant.key)
        ).all()
        per_course: dict[str, list[str]] = {}
        for token, person, course in rows:
            token.revoked_at = kept.revoked[token.token_hash]
            per_course.setdefault(course, []).append(person)
        for course, people in per_course.items():
            detail = {"participants": sorted(set(people)), "tokens": len(people), "kept_from": "the replaced store"}
            _log(s, course, RESTORE_ACTOR, "token.revoke", detail=detail)
        newer = 0
        accounts = s.execute(select(PortalUser.username, PortalUser.password_hash, PortalUser.updated_at)).all()
        for user, digest, at in accounts:
            mine = kept.passwords.get(user)
            if mine is not None and mine[0] != digest and mine[1] > cast(datetime, _utc(at)):
                s.execute(
                    update(PortalUser)
                    .where(PortalUser.username == user)
                    .values(password_hash=mine[0], updated_at=mine[1])
                )
                newer += 1
        ended = cast("CursorResult[Any]", s.execute(delete(PortalSession)))
    return {"revoked": len(rows), "passwords": newer, "sessions": int(ended.rowcount or 0)}
