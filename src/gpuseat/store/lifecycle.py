"""``store.lifecycle``: undo, export and import (SQL in :mod:`gpuseat.store.undo`, :mod:`gpuseat.store.export`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpuseat.store.base import Concern
from gpuseat.store.rows import DEFAULT_ACTOR


class Lifecycle(Concern):
    """Remove seats, archive or delete a course, export and import one: each with an events row."""

    def remove_seats(
        self, course: str | None, seats: Sequence[str], *, actor: str = DEFAULT_ACTOR, force: bool = False
    ) -> list[str]:
        """Remove seats nobody holds: planned, released or failed ones, any state with ``force`` (all or
        nothing, with an events row)."""
        from gpuseat.store.undo import remove_seats

        return remove_seats(self._store, course, seats, actor=actor, force=force)

    def archive_course(self, course: str | None, *, actor: str = DEFAULT_ACTOR) -> dict[str, Any]:
        """Make a course read-only (writes are refused from then on) and revoke its access links."""
        from gpuseat.store.undo import archive_course

        return archive_course(self._store, course, actor=actor)

    def delete_course(self, course: str | None, *, export_to: Path, actor: str = DEFAULT_ACTOR) -> dict[str, Any]:
        """Write an export of the course to ``export_to``, then delete the course and its rows."""
        from gpuseat.store.undo import delete_course

        return delete_course(self._store, course, export_to=export_to, actor=actor)

    def export_course(
        self, course: str | None, path: Path, *, force: bool = False, actor: str = DEFAULT_ACTOR
    ) -> dict[str, Any]:
        """Write the course (roster, seats, assignments, events, tokens' hashes, survey) to one zip file."""
        from gpuseat.store.export import export_course

        return export_course(self._store, course, path, force=force, actor=actor)

    def import_course(self, path: Path, *, key: str | None = None, actor: str = DEFAULT_ACTOR) -> dict[str, Any]:
        """Store the course of an export file (one transaction; an existing course key is refused)."""
        from gpuseat.store.export import import_course

        return import_course(self._store, path, key=key, actor=actor)
