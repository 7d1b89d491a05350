"""An index on ``events (course_key, id)``.

A monitor of one course (``gpuseat monitor --course``) asks on every tick whether its course changed: the
newest events row of that course, ``max(id) WHERE course_key = …``. The index on ``(course_key, at)`` does
not give that maximum: SQLite reads every index entry of the course (a course's months of events on every
tick), and PostgreSQL may walk the primary key backwards through every other course's rows written since.
With this index both read one entry.
"""

from __future__ import annotations

from gpuseat.db.migrations.columns import index_revision

revision = "0020"  # created 2026-12-07
down_revision = "0019"

upgrade, downgrade = index_revision("ix_events_course_id", "events", ["course_key", "id"])
