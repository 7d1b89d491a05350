"""The append-only events log: read a course's lines, append one for engines and front ends."""

from __future__ import annotations

import re
import warnings
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import func, select

from gpuseat.db.models import Event
from gpuseat.errors import InputError
from gpuseat.store.base import Concern
from gpuseat.store.rows import DEFAULT_ACTOR, _course, _log, db_now
from gpuseat.store.views import EventView, _utc


class Events(Concern):
    """``store.events``: a course's log lines, read and appended."""

    def __call__(self, course: str | None = None, *, after_id: int = 0, limit: int = 1000) -> list[EventView]:
        """The old facade's ``store.events(…)`` (deprecated): warns once, then :meth:`events`."""
        warnings.warn("store.events(…) is deprecated: use store.events.events(…)", DeprecationWarning, stacklevel=2)
        return self.events(course, after_id=after_id, limit=limit)

    def events(self, course: str | None = None, *, after_id: int = 0, limit: int = 1000) -> list[EventView]:
        """Log lines of a course, oldest first, after ``after_id`` (to follow the log)."""
        with self._database.read() as s:
            crow = _course(s, course)
            q = (
                select(Event)
                .where(Event.course_key == crow.key, Event.id > after_id)
                .order_by(Event.id)
                .limit(max(1, min(limit, 100_000)))
            )
            return [
                EventView(
                    e.id, cast(datetime, _utc(e.at)), e.course_key, e.actor, e.action, e.participant, e.seat, e.detail
                )
                for e in s.scalars(q)
            ]

    def log(
        self,
        course: str | None,
        action: str,
        *,
        participant: str | None = None,
        seat: str | None = None,
        detail: dict[str, Any] | None = None,
        actor: str = DEFAULT_ACTOR,
        gone_ok: bool = False,
        at_most: tuple[int, timedelta] | None = None,
    ) -> bool:
        """Append a line to the log (for engines and front ends: e.g. ``portal.login``). ``gone_ok``: write
        ``course`` as the key given, stored or not (the agent's lines for a course deleted meanwhile: its
        revocation, its last pass), where a plain line names a stored course. ``at_most=(n, window)``: not
        written (False) when ``n`` lines of this action and actor are in the window already (by the store's
        clock), so a line anyone can make at will (a refused attempt) cannot grow the log or wake the agents
        without end. True: written."""
        if not re.fullmatch(r"[a-z][a-z0-9_.-]{0,31}", action):
            raise InputError(f"action {action!r}", where="action", fix="a short lower-case word like portal.login")
        with self._database.write() as s:
            key = course if gone_ok and course else _course(s, course).key
            if at_most is not None:
                n, window = at_most
                recent = s.scalar(
                    select(func.count())
                    .select_from(Event)
                    .where(
                        Event.course_key == key,
                        Event.at > db_now(s) - window,
                        Event.action == action,
                        Event.actor == actor[:128],
                    )
                )
                if (recent or 0) >= n:
                    return False
            _log(s, key, actor, action, participant=participant, seat=seat, detail=detail)
            return True
