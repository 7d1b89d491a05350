"""The one handle on the course database: its engine, the SQLite writer queue and one session per call.

Every concern of the store (``store.courses``, ``store.seats`` …) reads and writes through the
:class:`Database` of its :class:`~gpuseat.store.facade.Store`; nothing else opens sessions on it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

from gpuseat.db import immediate
from gpuseat.store.turns import Turns

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


class Database:
    """One SQLAlchemy engine with its writer (``BEGIN IMMEDIATE`` on SQLite) and the file's writer queue."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.writer = immediate(engine)  # SQLite: BEGIN IMMEDIATE; PostgreSQL: unchanged
        database = engine.url.database if engine.dialect.name == "sqlite" else None
        self.lock_path = f"{database}.lock" if database and database != ":memory:" else None
        from gpuseat.store.undo import install

        install(engine)  # writes to an archived course: one clear error
        from gpuseat.db import busy_timeout

        #: how long a write waits for another writer's lock (seconds; :meth:`wait_at_most` lowers it): one
        #: value, shared with the engine's listeners and the claim lanes
        self._wait = {"s": busy_timeout()}
        self._left = threading.local()  # SQLite: what is left of this thread's wait once its turn came
        if engine.dialect.name == "postgresql":
            _lock_timeout(engine, self._wait)
        elif engine.dialect.name == "sqlite":
            _sqlite_wait(engine, self._wait, self._left)

    @property
    def wait_s(self) -> float:
        """How long a write of this store waits for a lock another writer holds, in seconds: SQLite's busy
        timeout, PostgreSQL's ``lock_timeout`` (the claims' own connections too); then :class:`StoreBusy`."""
        return self._wait["s"]

    @property
    def wait_ms(self) -> int:
        """:attr:`wait_s` in whole milliseconds (at least 1), as both databases take it."""
        return max(1, round(self._wait["s"] * 1000))

    def wait_at_most(self, seconds: float) -> None:
        """Writes of this store wait at most ``seconds`` for a lock (never longer than the busy timeout):
        the portal's requests, where a person waits at a browser. Connections already open take it at their
        next use; the claims' own connections are opened again."""
        from gpuseat.db import busy_timeout

        self._wait["s"] = min(seconds, busy_timeout())
        from gpuseat.store.claims import close

        close(self)  # claim lanes were opened with the old wait

    @property
    def url(self) -> str:
        """The database URL, password included (to open the same store in a worker process)."""
        return self.engine.url.render_as_string(hide_password=False)

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``: the few statements that differ choose by it."""
        return self.engine.dialect.name

    def insert(self, table: Any) -> Any:
        """The dialect's own INSERT of ``table``, which has ``ON CONFLICT`` on SQLite and PostgreSQL alike
        (an insert that another process may win: the loser does nothing or updates, never fails)."""
        if self.dialect == "postgresql":
            from sqlalchemy.dialects import postgresql

            return postgresql.insert(table)
        if self.dialect == "sqlite":
            from sqlalchemy.dialects import sqlite

            return sqlite.insert(table)
        from gpuseat.errors import StoreError

        raise StoreError(f"unsupported database {self.dialect}", fix="use SQLite or PostgreSQL")

    @property
    def in_memory(self) -> bool:
        """True for an in-memory SQLite store, which no other process can open."""
        url = self.engine.url
        return url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")

    def close(self) -> None:
        """Release pooled connections (and the claims' own connections)."""
        from gpuseat.store.claims import close

        close(self)
        self.engine.dispose()

    @contextmanager
    def write(self) -> Iterator[Session]:
        """One write transaction: on SQLite after this file's writers before it (see :meth:`queue`)."""
        with self.queue(), Session(self.writer, expire_on_commit=False) as session, session.begin():
            yield session

    def check_writable(self) -> None:
        """Take the write lock and let it go at once (SQLite: ``BEGIN IMMEDIATE``, after this file's writers before
        it): :class:`~gpuseat.errors.StoreBusy` while another writer holds it past the busy timeout. A caller that
        is about to change something outside the store (a machine) asks first, so that it changes nothing there
        when the store could not record it."""
        with self.write() as session:
            session.connection()

    @contextmanager
    def read(self) -> Iterator[Session]:
        """One read transaction (never waits for a writer)."""
        with Session(self.engine, expire_on_commit=False) as session, session.begin():
            yield session

    @contextmanager
    def queue(self) -> Iterator[None]:
        """SQLite: writers of this file take turns, first come first served, before ``BEGIN IMMEDIATE``.

        SQLite's own busy handler polls with growing sleeps, so under 16 busy processes one writer can
        wait many seconds while others keep winning; the queue (:mod:`gpuseat.store.turns`) hands the
        turn to the next writer as soon as it is free. PostgreSQL (row locks) needs none of this. Seat
        claims take the same turns (``store.claims._begin``).
        """
        if self.lock_path is None:
            yield
            return
        turns = self.turns()
        try:
            from gpuseat.db.waiting import waiting

            with waiting(self.lock_path.removesuffix(".lock")):  # after 2 s: says who is writing
                self._left.s = self.take_turn(turns)[1]  # the busy timeout of this write's connection
            try:
                yield
            finally:
                del self._left.s
                turns.give()
        finally:
            turns.close()

    def take_turn(self, turns: Turns, ask: Callable[[], bytes] | None = None) -> tuple[bytes | None, float]:
        """Wait for this writer's turn in the file's queue (:meth:`Turns.take`): the answer, if the writer
        before did this one's request, and the seconds left for the write lock itself. The whole wait, queue
        and lock, is one :attr:`wait_s`: behind a held lock the k-th queued writer waited k of them (a
        registration rush held the portal's threads for minutes). Past it, :class:`StoreBusy`."""
        deadline = time.monotonic() + self.wait_s
        try:
            answer = turns.take(ask, deadline)
        except TimeoutError:
            from gpuseat.db import sqlite_error

            busy = sqlite_error("database is locked", self.engine.url.database, self.wait_s)
            assert busy is not None  # the held-lock error, StoreBusy
            raise busy from None
        return answer, max(0.0, deadline - time.monotonic())

    def turns(self) -> Turns:
        """A new place in the writer queue of this file (SQLite; :meth:`queue` and the claim lanes use it)."""
        assert self.lock_path is not None
        return Turns(self.lock_path)


def _sqlite_wait(engine: Engine, wait: dict[str, float], left: threading.local) -> None:
    """SQLite: each connection taken from the pool waits ``wait["s"]`` for the write lock, or in a write
    (:meth:`Database.queue`) what its turn left of it, ``left.s`` (its busy timeout was set when it connected; a
    pragma costs a microsecond, and a visit's write may have changed it), and the held-lock error says how long
    it waited."""
    from sqlalchemy import event

    from gpuseat.db import sqlite_error
    from gpuseat.errors import StoreBusy

    def checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        ms = max(1, round(getattr(left, "s", wait["s"]) * 1000))
        dbapi_connection.execute(f"PRAGMA busy_timeout={ms}").close()

    def handle_error(context: Any) -> Exception | None:
        if not isinstance(getattr(context, "chained_exception", None), StoreBusy):  # set by an earlier listener
            return None
        return sqlite_error(str(context.original_exception), engine.url.database, wait["s"])

    event.listen(engine, "checkout", checkout)
    event.listen(engine, "handle_error", handle_error)


def _lock_timeout(engine: Engine, wait: dict[str, float]) -> None:
    """PostgreSQL: a statement waits for another transaction's lock (``LOCK TABLE``, ``SELECT … FOR UPDATE``
    left open in a ``psql``) at most ``wait["s"]`` (the busy timeout, or the portal's shorter wait), as SQLite's
    writers do, then fails with one clear error naming the transactions open that long; it waited forever,
    without a word."""
    from sqlalchemy import event

    def checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        ms = max(1, round(wait["s"] * 1000))
        if record.info.get("gpuseat_lock_timeout") != ms:  # once per connection (pooled before this handle too)
            with dbapi_connection.cursor() as cursor:
                cursor.execute(f"SET lock_timeout = {ms}")
            dbapi_connection.commit()
            record.info["gpuseat_lock_timeout"] = ms

    def handle_error(context: Any) -> Exception | None:
        if getattr(context.original_exception, "sqlstate", None) != "55P03":  # lock_not_available
            return None
        from gpuseat.db import pg_lock_error

        return pg_lock_error(context.engine, wait["s"])

    event.listen(engine, "checkout", checkout)
    event.listen(engine, "handle_error", handle_error)
