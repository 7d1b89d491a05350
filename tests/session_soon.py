"""A lab session a few minutes from now, as a course file's ``[schedule]`` table (access 24/7, the course
from yesterday for three days): what the tests of seat hours and of the checks before a session build on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def session_soon(minutes: int = 10) -> tuple[datetime, str]:
    """The start of a session ``minutes`` from now (whole minutes, UTC) and the ``[schedule]`` text with it;
    the session ends by 23:59 of its day (a session may not cross midnight)."""
    at = (datetime.now(UTC) + timedelta(minutes=minutes)).replace(second=0, microsecond=0)
    at = min(at, at.replace(hour=23, minute=58))
    end = min(at + timedelta(minutes=30), at.replace(hour=23, minute=59))
    return at, (
        f'[schedule]\nstart = {(at - timedelta(days=1)).date()}\ndays = 3\naccess = "24/7"\n'
        f'[[schedule.session]]\ndate = {at.date()}\nhours = "{at:%H:%M}-{end:%H:%M}"\n'
    )
