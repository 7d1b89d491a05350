"""The one span-of-time type that schedules, billing and counted hours share (no imports: store reads load it)."""

from datetime import datetime

#: a half-open span of time, [start, stop)
Interval = tuple[datetime, datetime]
