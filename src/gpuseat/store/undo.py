"""Undo: remove seats added by mistake, archive a finished course (read-only), delete a course.

Each is one transaction with its ``events`` row. Removing is for seats nobody holds now, in state
``planned``, ``released`` or ``failed`` (an engine refused or lost it), or in any state when asked with
``force`` (a seat its engine set up: what the engine made for it is taken down at its next pass, as for
every seat no longer in the course); the removed rows and their past assignments are kept in the
event's detail. An archived course is read-only: the
database refuses inserts and updates of its rows (migration 0010's triggers), its access links are
revoked in the same transaction, and its rows stay readable. Deleting writes an export first
(:mod:`gpuseat.store.export`), so a course is never gone without a copy; the events log keeps its lines
(it is append-only) and records the deletion with the export's path and checksum.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import DBAPIError

from gpuseat.db.models import AccessToken, Assignment, Course, Participant, Seat
from gpuseat.errors import InputError, NotFound, did_you_mean
from gpuseat.store.claims import archived_error, forget_course
from gpuseat.store.requests import fail_pending
from gpuseat.store.rows import _course, _log

if TYPE_CHECKING:
    from sqlalchemy.engine import CursorResult
    from sqlalchemy.orm import Session

    from gpuseat.store.facade import Store

__all__ = [
    "ARCHIVED_MARK",
    "archive_course",
    "delete_course",
    "drop_course",
    "install",
    "is_archived",
    "refusing_archived",
    "remove_seats",
]

ARCHIVED_MARK = "gpuseat: course is archived"  # the triggers' message (migration 0010)
REMOVABLE = ("planned", "released", "failed")  # nobody holds it and its engine runs nothing for it


def course_row(s: Session, key: str | None) -> Course:
    """The course named ``key`` (None: the only one), or the store's NotFound/InputError."""
    return _course(s, key)


def log(s: Session, course: str | None, actor: str, action: str, **fields: Any) -> None:
    """Append an events row in this transaction (:func:`gpuseat.store.rows._log`, the one writer)."""
    _log(s, course, actor, action, **fields)


@contextmanager
def refusing_archived(course: str | None) -> Iterator[None]:
    """Turn the triggers' refusal (a database error) into the store's one clear message."""
    try:
        yield
    except DBAPIError as exc:
        if ARCHIVED_MARK in str(exc.orig):
            raise archived_error(course) from None
        raise


def install(engine: Any) -> None:
    """Make every write the triggers refuse (an archived course) raise the store's clear InputError,
    whatever method tried it (roster import, assign, tokens, survey answers)."""
    from sqlalchemy import event

    if not event.contains(engine, "handle_error", _archived):
        event.listen(engine, "handle_error", _archived)


def _archived(context: Any) -> None:
    if ARCHIVED_MARK in str(context.original_exception):
        raise archived_error(None) from None


def _check_writable(row: Course) -> None:
    if row.archived_at is not None:
        raise archived_error(row.key)


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()


def remove_seats(
    store: Store, course: str | None, keys: Sequence[str], *, actor: str, force: bool = False
) -> list[str]:
    """Remove seats nobody holds, in state planned, released or failed (any state with ``force``); all or
    nothing. Returns the keys removed."""
    from gpuseat.store.export import seat_record

    if not keys:
        raise InputError(
            "no seats named", where="SEAT", fix="name the seats to remove (gpuseat seats status lists them)"
        )
    bad = [k for k in keys if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", k)]
    if bad:
        raise InputError(f"not a seat key: {bad[0]!r}", where="SEAT", fix="give seat keys as seats status lists them")
    wanted = list(dict.fromkeys(keys))
    with store.database.write() as s:
        crow = course_row(s, course)
        _check_writable(crow)
        rows = {x.key: x for x in s.scalars(select(Seat).where(Seat.course_id == crow.id, Seat.key.in_(wanted)))}
        missing = [k for k in wanted if k not in rows]
        if missing:
            known = list(s.scalars(select(Seat.key).where(Seat.course_id == crow.id)))
            raise NotFound(
                f"no seat {missing[0]!r} in course {crow.key!r}.{did_you_mean(missing[0], known)}",
                where="SEAT",
                fix="gpuseat seats status lists the seats; nothing was removed",
            )
        ids = [x.id for x in rows.values()]
        held = dict(
            s.execute(
                select(Seat.key, Participant.key)
                .join(Assignment, Assignment.seat_id == Seat.id)
                .join(Participant, Participant.id == Assignment.participant_id)
                .where(Seat.id.in_(ids), Assignment.valid_to.is_(None))
            ).all()
        )
        for k in wanted:
            x = rows[k]
            if k in held:
                raise InputError(
                    f"seat {k} is held by {held[k]}",
                    where=f"seat {k}",
                    fix=f"release it first (`gpuseat seats release --seat {k} --course {crow.key}`); "
                    "nothing was removed",
                )
            if x.state not in REMOVABLE and not force:
                raise InputError(
                    f"seat {k} is {x.state} (engine {x.engine}); without --force only planned, released or "
                    "failed seats are removed",
                    where=f"seat {k}",
                    fix=f"nobody holds it: `gpuseat seats remove {k} --course {crow.key} --force` removes it and "
                    "its engine takes down what it made for it at its next pass (a VM and its disk, a cloud "
                    "cluster); nothing was removed",
                )
        past = s.execute(
            select(Seat.key, Participant.key, Assignment.valid_from, Assignment.valid_to, Assignment.mode)
            .join(Assignment, Assignment.seat_id == Seat.id)
            .join(Participant, Participant.id == Assignment.participant_id)
            .where(Seat.id.in_(ids))
            .order_by(Assignment.id)
        ).all()
        detail: dict[str, Any] = {
            "seats": [seat_record(rows[k]) for k in wanted],
            "past_assignments": [
                {"seat": sk, "participant": pk, "from": _iso(f), "to": _iso(t), "mode": m} for sk, pk, f, t, m in past
            ],
        }
        forced = [k for k in wanted if rows[k].state not in REMOVABLE]
        if forced:
            detail["forced"] = forced  # removed in a state their engine set up (seats remove --force)
        with refusing_archived(crow.key):
            fail_pending(s, crow, "not carried out: the seat was removed from the course", actor, seats=wanted)
            s.execute(delete(Seat).where(Seat.id.in_(ids)))
            log(s, crow.key, actor, "seats.remove", detail=detail)
            s.flush()
    return wanted


def archive_course(store: Store, course: str | None, *, actor: str) -> dict[str, Any]:
    """Make a course read-only and revoke its access links (again: nothing changes)."""
    now = datetime.now(UTC)
    with store.database.write() as s:
        crow = course_row(s, course)
        if crow.archived_at is not None:
            return {"course": crow.key, "archived_at": _iso(crow.archived_at), "tokens_revoked": 0, "already": True}
        people = select(Participant.id).where(Participant.course_id == crow.id)
        revoked = cast(
            "CursorResult[Any]",
            s.execute(
                update(AccessToken)
                .where(AccessToken.participant_id.in_(people), AccessToken.revoked_at.is_(None))
                .values(revoked_at=now)
            ),
        ).rowcount
        fail_pending(s, crow, "not carried out: the course was archived", actor)  # no engine carries them out
        crow.archived_at, crow.updated_at = now, now
        log(s, crow.key, actor, "course.archive", detail={"tokens_revoked": int(revoked or 0)})
        key = crow.key
    forget_course(store.database, key)
    return {"course": key, "archived_at": _iso(now), "tokens_revoked": int(revoked or 0), "already": False}


def is_archived(store: Store, course: str | None) -> bool:
    """True when the course is archived (read-only)."""
    with store.database.read() as s:
        return course_row(s, course).archived_at is not None


def delete_course(store: Store, course: str | None, *, export_to: Path, actor: str) -> dict[str, Any]:
    """Export the course to ``export_to`` (refused if it exists), then delete it and all its rows.

    While an engine still holds access for the course on some machine (accounts, keys, jobs: what the
    agent last observed), the course is archived instead and its deletion is asked for: the agent takes
    every access away first and deletes the rows once nothing is held (``deferred`` in the result).
    """
    from gpuseat.store.export import export_course

    written = export_course(store, course, export_to, actor=actor)
    key = written["course"]
    held = store.agents.holdings(key)
    if held:
        archive_course(store, key, actor=actor)
        store.agents.request_deletion(key, export_path=str(written["path"]), sha256=written["sha256"], actor=actor)
        logins = sorted({h["login"] for h in held})
        where = sorted({f"{h['engine']}" + (f" on {h['host']}" if h["host"] else "") for h in held})
        return {
            "course": key,
            "export": written["path"],
            "sha256": written["sha256"],
            "deferred": True,
            "held_by": where,
            "logins": logins,
        }
    return {
        **drop_course(store, key, export=str(written["path"]), sha256=written["sha256"], actor=actor),
        "export": written["path"],
        "deferred": False,
    }


def drop_course(store: Store, course: str, *, export: str, sha256: str, actor: str) -> dict[str, Any]:
    """Delete the course's rows (its export is written already) with the ``course.delete`` events row."""
    with store.database.write() as s:
        crow = course_row(s, course)
        counts = {
            "participants": s.scalar(select(func.count()).where(Participant.course_id == crow.id)) or 0,
            "seats": s.scalar(select(func.count()).where(Seat.course_id == crow.id)) or 0,
        }
        s.execute(delete(Course).where(Course.id == crow.id))  # cascades to its rows (foreign keys)
        log(s, crow.key, actor, "course.delete", detail={"export": export, "sha256": sha256, **counts})
        key = crow.key
    forget_course(store.database, key)
    return {"course": key, "export": export, "sha256": sha256, **counts}
