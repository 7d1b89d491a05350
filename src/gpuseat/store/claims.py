"""Claims: a participant takes the best free seat that suits them, race-free under many callers."""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import exists, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpuseat.core.needs import SeatNeed
from gpuseat.core.seating import ASSIGNABLE_STATES, CLAIM_MODES, ClaimMode, misfit, preference
from gpuseat.db.models import Assignment, CourseRecord, Participant, Seat
from gpuseat.errors import InputError, NoFreeSeat, StoreError
from gpuseat.store.base import StoreBase
from gpuseat.store.rows import DEFAULT_ACTOR, _log, _needs, _participant_and_seat, _seat_view
from gpuseat.store.views import SeatView

_CLAIM_RETRIES = 20
_LOCK_WINDOW = 32  # candidates offered to one FOR UPDATE SKIP LOCKED statement


class ClaimMethods(StoreBase):
    def claim_seat(
        self, course: str | None, participant: str, *, mode: ClaimMode = "assigned", actor: str = DEFAULT_ACTOR
    ) -> SeatView:
        """The participant's seat: the one they hold, else the best free seat that suits their group.

        Safe under any number of concurrent callers: the chosen seat row is locked (``FOR UPDATE SKIP
        LOCKED``, so concurrent claims take different seats instead of queueing) and the partial unique
        indexes reject a double assignment, which is retried. Raises :class:`NoFreeSeat` when no
        suitable seat is free. ``mode``: ``assigned`` (kept until released) or ``pool`` (handed back
        when the participant's server stops).
        """
        if mode not in CLAIM_MODES:
            raise InputError(f"unknown mode {mode!r}", where="mode", fix=f"one of {', '.join(CLAIM_MODES)}")
        sqlite = self._engine.dialect.name == "sqlite"
        for _attempt in range(_CLAIM_RETRIES):
            try:
                if sqlite:  # look without the write lock, then hold it only to take the seat
                    with self._read() as s:
                        crow = self._course_cached(s, course)
                        p, held, open_a = _participant_and_seat(s, crow, participant)
                        if held is not None:
                            return _seat_view(crow.key, held, (p.key, open_a))
                        candidates = _free_suitable(s, crow, p.group_name, _needs(crow))
                        if not candidates:
                            raise _no_free_seat(s, crow, p)
                        pid, pkey = p.id, p.key
                    with self._write() as s:
                        chosen = _still_free(s, candidates)
                        if chosen is None:
                            continue  # all taken meanwhile: look again
                        view = self._take(s, crow, pid, pkey, chosen, mode, actor)
                    return view
                with self._write() as s:
                    crow = self._course_cached(s, course)
                    p, held, open_a = _participant_and_seat(s, crow, participant)
                    if held is not None:
                        return _seat_view(crow.key, held, (p.key, open_a))
                    candidates = _free_suitable(s, crow, p.group_name, _needs(crow))
                    if not candidates:
                        raise _no_free_seat(s, crow, p)
                    chosen = _lock_first(s, candidates)
                    if chosen is None:
                        time.sleep(random.uniform(0.002, 0.02))  # all candidates are being claimed right now
                        continue
                    view = self._take(s, crow, p.id, p.key, chosen, mode, actor)
                return view
            except IntegrityError:
                continue  # someone else took that seat, or this participant's other claim won: look again
        raise StoreError(
            f"could not claim a seat after {_CLAIM_RETRIES} tries (heavy contention)",
            where=f"participant {participant}",
            fix="try again",
        )

    def _take(self, s: Session, crow: CourseRecord, pid: int, pkey: str, seat: Seat, mode: str, actor: str) -> SeatView:
        """Insert the assignment and its event (written at commit, where a double assignment fails)."""
        a = Assignment(seat_id=seat.id, participant_id=pid, valid_from=datetime.now(UTC), mode=mode)
        s.add(a)
        _log(s, crow.key, actor, "seat.claim", participant=pkey, seat=seat.key, detail={"mode": mode})
        return _seat_view(crow.key, seat, (pkey, a))


def _is_taken(seat_id: Any) -> Any:
    return exists().where(Assignment.seat_id == seat_id, Assignment.valid_to.is_(None))


def _free_suitable(s: Session, crow: CourseRecord, group: str | None, needs: dict[str, SeatNeed]) -> list[int]:
    """Ids of free seats that suit the group, best first (nothing locked yet)."""
    rows = s.execute(
        select(Seat.id, Seat.key, Seat.kind, Seat.memory_gb, Seat.engine, Seat.groups).where(
            Seat.course_id == crow.id, Seat.state.in_(ASSIGNABLE_STATES), ~_is_taken(Seat.id)
        )
    ).all()
    need = needs.get(group) if group is not None else None
    ranked = []
    for sid, key, kind, memory_gb, engine, groups in rows:
        reserved = tuple(groups or ())
        if misfit(kind=kind, memory_gb=memory_gb, engine=engine, reserved_for=reserved, group=group, need=need):
            continue
        rank = preference(key=key, kind=kind, memory_gb=memory_gb, reserved_for=reserved, group=group)
        ranked.append((rank, sid))
    return [sid for _, sid in sorted(ranked)]


def _still_free(s: Session, candidates: list[int], window: int = 64) -> Seat | None:
    """The best of the first ``window`` candidates that is still free and assignable (one query)."""
    head = candidates[:window]
    rows = s.scalars(
        select(Seat).where(Seat.id.in_(head), Seat.state.in_(ASSIGNABLE_STATES), ~_is_taken(Seat.id))
    ).all()
    order = {sid: i for i, sid in enumerate(head)}
    return min(rows, key=lambda r: order[r.id], default=None)


def _lock_first(s: Session, candidates: list[int]) -> Seat | None:
    """The first candidate seat that is still free, locked for this transaction (None if all are busy).

    SQLite: the transaction began with ``BEGIN IMMEDIATE``, so nobody else writes and the first
    candidate is free. PostgreSQL: one statement locks the best free candidate and skips the rows
    other claims hold (``FOR UPDATE SKIP LOCKED``, ordered by the candidates' rank).
    """
    if s.get_bind().dialect.name == "sqlite":
        return s.get(Seat, candidates[0])
    if s.get_bind().dialect.name == "postgresql":
        from sqlalchemy import Integer, bindparam
        from sqlalchemy.dialects.postgresql import ARRAY

        for start in range(0, len(candidates), _LOCK_WINDOW):  # small arrays: array_position is linear
            ids = bindparam("ids", candidates[start : start + _LOCK_WINDOW], type_=ARRAY(Integer))
            row = s.scalar(
                select(Seat)
                .where(Seat.id == func.any(ids), ~_is_taken(Seat.id))
                .order_by(func.array_position(ids, Seat.id))
                .limit(1)
                .with_for_update(skip_locked=True)
            )
            if row is not None:
                return row
        return None
    for sid in candidates:  # other databases: one row at a time
        row = s.scalar(select(Seat).where(Seat.id == sid, ~_is_taken(Seat.id)).with_for_update(skip_locked=True))
        if row is not None:
            return row
    return None


def _no_free_seat(s: Session, crow: CourseRecord, p: Participant) -> NoFreeSeat:
    total = s.scalar(select(func.count()).where(Seat.course_id == crow.id)) or 0
    return NoFreeSeat(
        f"no free seat suits {p.key} (group {p.group_name or '-'}); the course has {total} seat(s)",
        where=f"course {crow.key}",
        fix="add seats (gpuseat seats add) or release one (gpuseat seats release)",
    )
