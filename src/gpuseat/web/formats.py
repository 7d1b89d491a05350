"""How the portal writes times and money: one format each, everywhere (pages, report, charts' labels).

Times are shown in the course's time zone, to the minute (``2016-06-06 14:05 CEST``); money is
``$1,143.38`` (US dollars, the catalog's currency), negative as ``-$3.00``.
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from typing import Any

from gpuseat.core import cost


def money_or_dash(value: Any) -> str:
    """A template value (a number, a numeric string) as :func:`gpuseat.core.cost.money`; an empty one is an em dash."""
    if value is None or value == "":
        return "—"
    return cost.money(float(value))


def course_time(value: Any, zone: tzinfo | None) -> str:
    """A datetime, ISO string or Unix time in the course's zone, to the minute (empty for nothing)."""
    if value is None or value == "":
        return ""
    if isinstance(value, (int, float)):
        moment = datetime.fromtimestamp(value, UTC)
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return value
    elif isinstance(value, datetime):
        moment = value
    else:
        return str(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(zone or UTC).strftime("%Y-%m-%d %H:%M %Z")


def timestamp(ts: float) -> str:
    """Unix seconds as ``2016-06-06 14:05 UTC`` (pages use :func:`course_time` with the course's zone)."""
    return course_time(ts, UTC)
