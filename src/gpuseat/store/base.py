"""What every concern of the store shares: the store it belongs to and that store's one database handle."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuseat.store.db import Database
    from gpuseat.store.facade import Store


class Concern:
    """One concern of the store (``store.courses``, ``store.seats`` …): it reads and writes through the
    store's one :class:`~gpuseat.store.db.Database` and reaches the other concerns through the store."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._database: Database = store.database
