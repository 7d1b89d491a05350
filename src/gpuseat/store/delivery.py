"""``store.delivery``: a seat's access details and readiness checks (the SQL is in :mod:`gpuseat.store.access`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gpuseat.store.base import Concern
from gpuseat.store.rows import DEFAULT_ACTOR


class Delivery(Concern):
    """How participants reach their seats, and whether they can: written with an events row each time."""

    def record_delivery(self, course: str | None, seat: str, **changes: Any) -> bool:
        """Set a seat's access and/or state with one event (see :func:`gpuseat.store.access.record_delivery`)."""
        from gpuseat.store.access import record_delivery

        return record_delivery(self._store, course, seat, **changes)

    def record_readiness(self, results: list[Any], *, actor: str = DEFAULT_ACTOR) -> int:
        """Keep seats' latest readiness checks (see :func:`gpuseat.store.access.record_readiness`)."""
        from gpuseat.store.access import record_readiness

        return record_readiness(self._store, results, actor=actor)

    def access_of(self, course: str | None = None) -> dict[str, dict[str, Any]]:
        """Seat key → stored access details."""
        from gpuseat.store.access import access_of

        return access_of(self._store, course)

    def readiness_of(self, course: str | None = None) -> dict[str, dict[str, Any]]:
        """Seat key → the last readiness check."""
        from gpuseat.store.access import readiness_of

        return readiness_of(self._store, course)

    def checked_since(self, course: str | None, since: datetime) -> dict[str, datetime]:
        """Seat key → when its last check since ``since`` was stored, on the store's clock."""
        from gpuseat.store.access import checked_since

        return checked_since(self._store, course, since)
