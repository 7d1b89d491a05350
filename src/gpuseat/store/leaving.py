"""A participant who drops out: ``store.roster.remove_participants`` (``gpuseat roster remove P...``).

One transaction, all or nothing: each one's open assignment is released as ``seats release`` does (its
history row closed with the reason, a ``seat.release`` events row), their access links are revoked, their
pending seat requests failed (as ``seats remove`` fails them), then their participant row is deleted (the
foreign keys take their links, requests, seat hours, assignment history and survey answers with it; monitor
samples keep the seat with no participant). One ``roster.remove`` events row keeps what went: the
participant rows as ``course export`` writes them and their past assignments, and, once an engine has applied
the course, their logins (``logins_left``: the accounts stay on the machines, locked, until the course is
deleted, and a login is never passed to another participant).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, func, select

from gpuseat.core.delivery import login_name
from gpuseat.db.models import AccessToken, Assignment, CourseRecord, Participant, Seat, SeatRequest, SurveyResponse
from gpuseat.errors import InputError
from gpuseat.store.claims import archived_error
from gpuseat.store.requests import fail_pending
from gpuseat.store.rows import _clock, _course, _delivered, _iso, _log, _participant, participant_record
from gpuseat.store.seats import _check_reason
from gpuseat.store.tokens import _revoke

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from gpuseat.store.db import Database


def remove_participants(
    database: Database, course: str | None, keys: Sequence[str], *, reason: str | None, actor: str, dry_run: bool
) -> list[dict[str, Any]]:
    """Remove the participants named (key, email or Unix user) in one transaction; with ``dry_run`` nothing is
    written. One dict per participant, in the order named: participant, seat (held now), past_seats, links
    (active), requests (pending) and survey_answers."""
    if not keys:
        raise InputError(
            "no participants named", where="P", fix="name the participants to remove (gpuseat roster list lists them)"
        )
    reason = "removed from the roster" if reason is None else reason
    _check_reason(reason)
    with database.read() if dry_run else database.write() as s:
        crow = _course(s, course)
        if crow.archived_at is not None:
            raise archived_error(crow.key)
        people = list({p.id: p for p in (_participant(s, crow, who) for who in keys)}.values())
        found = _what_goes(s, people)
        if dry_run:
            return found
        _remove(s, crow, people, reason, actor)
    return found


def _what_goes(s: Session, people: list[Participant]) -> list[dict[str, Any]]:
    ids = [p.id for p in people]
    held = dict(
        s.execute(
            select(Assignment.participant_id, Seat.key)
            .join(Seat, Seat.id == Assignment.seat_id)
            .where(Assignment.participant_id.in_(ids), Assignment.valid_to.is_(None))
        ).all()
    )

    def counts(column: Any, *where: Any) -> dict[int, int]:
        q = select(column, func.count()).where(column.in_(ids), *where).group_by(column)
        return {pid: int(n) for pid, n in s.execute(q)}

    past = counts(Assignment.participant_id, Assignment.valid_to.is_not(None))
    links = counts(AccessToken.participant_id, AccessToken.revoked_at.is_(None))
    pending = counts(SeatRequest.participant_id, SeatRequest.state == "pending")
    answers = counts(SurveyResponse.participant_id)
    return [
        {
            "participant": p.key,
            "seat": held.get(p.id),
            "past_seats": past.get(p.id, 0),
            "links": links.get(p.id, 0),
            "requests": pending.get(p.id, 0),
            "survey_answers": answers.get(p.id, 0),
        }
        for p in people
    ]


def _remove(s: Session, crow: CourseRecord, people: list[Participant], reason: str, actor: str) -> None:
    ids = [p.id for p in people]
    key_of = {p.id: p.key for p in people}
    now = _clock(s, crow.key, actor)
    released = []
    for a, seat in s.execute(
        select(Assignment, Seat.key)
        .join(Seat, Seat.id == Assignment.seat_id)
        .where(Assignment.participant_id.in_(ids), Assignment.valid_to.is_(None))
    ).all():
        a.valid_to, a.ended_by = now, reason
        released.append({"participant": key_of[a.participant_id], "seat": seat})
        _log(s, crow.key, actor, "seat.release", participant=key_of[a.participant_id], seat=seat,
             detail={"reason": reason})  # fmt: skip
    s.flush()
    past = s.execute(
        select(Seat.key, Assignment.participant_id, Assignment.valid_from, Assignment.valid_to, Assignment.mode)
        .add_columns(Assignment.ended_by)
        .join(Seat, Seat.id == Assignment.seat_id)
        .where(Assignment.participant_id.in_(ids))
        .order_by(Assignment.id)
    ).all()
    revoked = _revoke(s, ids, datetime.now(UTC))
    failed = fail_pending(s, crow, "not carried out: the participant was removed from the roster", actor,
                          participants=ids)  # fmt: skip
    detail: dict[str, Any] = {
        "reason": reason,
        "participants": [participant_record(p) for p in people],
        "past_assignments": [
            {"seat": sk, "participant": key_of[pid], "from": _iso(f), "to": _iso(t), "mode": m, "ended_by": e}
            for sk, pid, f, t, m, e in past
        ],
        "released": released,
        "tokens_revoked": revoked,
        "requests_failed": failed,
    }
    if _delivered(s, crow):  # their accounts stay on the machines, locked, until the course is deleted
        detail["logins_left"] = {login_name(p.key, p.unix_user): p.key for p in people}
    s.flush()
    s.execute(delete(Participant).where(Participant.id.in_(ids)))
    _log(s, crow.key, actor, "roster.remove", detail=detail)
    s.flush()
