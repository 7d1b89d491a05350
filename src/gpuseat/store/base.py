"""The course store's sessions: one read or one write transaction per call, queued writers on SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Self

from sqlalchemy.orm import Session

from gpuseat.db import immediate
from gpuseat.store.turns import Turns

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


class StoreBase:
    """Courses, roster, seats, assignments, tokens and events in one database (see the module doc)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._writer = immediate(engine)  # SQLite: BEGIN IMMEDIATE; PostgreSQL: unchanged
        database = engine.url.database if engine.dialect.name == "sqlite" else None
        self._lock_path = f"{database}.lock" if database and database != ":memory:" else None
        from gpuseat.store.undo import install

        install(engine)  # writes to an archived course: one clear error

    @property
    def url(self) -> str:
        """The database URL, password included (to open the same store in a worker process)."""
        return self._engine.url.render_as_string(hide_password=False)

    @property
    def in_memory(self) -> bool:
        """True for an in-memory SQLite store, which no other process can open."""
        url = self._engine.url
        return url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")

    def close(self) -> None:
        """Release pooled connections (and the claims' own PostgreSQL pool)."""
        from gpuseat.store.claims import close

        close(self)
        self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[Session]:
        with self._queue(), Session(self._writer, expire_on_commit=False) as session, session.begin():
            yield session

    @contextmanager
    def _queue(self) -> Iterator[None]:
        """SQLite: writers of this file take turns, first come first served, before ``BEGIN IMMEDIATE``.

        SQLite's own busy handler polls with growing sleeps, so under 16 busy processes one writer can
        wait many seconds while others keep winning; the queue (:mod:`gpuseat.store.turns`) hands the
        turn to the next writer as soon as it is free. PostgreSQL (row locks) needs none of this. Seat
        claims take the same turns (``store.claims._begin``).
        """
        if self._lock_path is None:
            yield
            return
        turns = self._turns()
        try:
            from gpuseat.db.waiting import waiting

            with waiting(self._lock_path.removesuffix(".lock")):  # after 2 s: says who is writing
                turns.take()
            try:
                yield
            finally:
                turns.give()
        finally:
            turns.close()

    def _turns(self) -> Turns:
        """A new place in the writer queue of this file (SQLite; ``_queue`` and the claim lanes use it)."""
        assert self._lock_path is not None
        return Turns(self._lock_path)

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with Session(self._engine, expire_on_commit=False) as session, session.begin():
            yield session
