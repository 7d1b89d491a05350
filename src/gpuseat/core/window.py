"""Whether a course's seats are open now: the one rule the engines carry out (``CourseState.closed``) and the
participant's page shows, so a page never says "running" with an ssh line that the machine refuses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

if TYPE_CHECKING:
    from gpuseat.core.course import Course

#: seats open (and are checked) this long before each access window or session, unless ``[policy] lead_minutes``
LEAD = timedelta(minutes=15)


def access_now(course: Course, timezone: str, now: datetime) -> tuple[str | None, datetime | None, datetime | None]:
    """(why access is closed at ``now``, or None; when the access window next opens or closes; when a pass next
    plans differently: that, or a lab session's lead time or end), from the course file's schedule, in UTC."""
    sched = course.schedule
    tz = ZoneInfo(timezone)
    local = now.astimezone(tz).replace(tzinfo=None)
    minutes = course.policy.lead_minutes  # [policy] lead_minutes: ready (and checked) this long before
    lead = LEAD if minutes is None else timedelta(minutes=minutes)

    def utc(at: datetime | None) -> datetime | None:
        return at.replace(tzinfo=tz).astimezone(UTC) if at else None

    # a lab session changes a pass even where access never closes: its lead time starts the checks before
    # it and the seat-hours exemption, its end ends the exemption
    marks = [t for b, e in sched.session_intervals() for t in (b - lead, e)] if sched.has_sessions else []
    wins = [] if sched.always_on else [(b - lead, e) for b, e in sched.access_intervals()]
    nxt = min((t for w in wins for t in w if t > local), default=None)
    wake = min((t for t in (*marks, nxt) if t is not None and t > local), default=None)
    if sched.always_on or any(b <= local < e for b, e in wins):
        return None, utc(nxt), utc(wake)
    opens = min((b for b, _e in wins if b > local), default=None)
    why = (
        f"outside the course's access hours (next opens {opens:%Y-%m-%d %H:%M})"
        if opens
        else "the course's schedule has ended"
    )
    return why, utc(nxt), utc(wake)
