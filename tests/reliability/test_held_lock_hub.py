"""A held lock and JupyterHub's spawn hook: a start while another process holds the store's write lock past
the busy timeout is the hub's 503 with gpuseat's message (never a 500, never a hub left waiting), nothing is
half-written, and the next start after the lock is let go gets the seat. SQLite (``BEGIN IMMEDIATE``) and
PostgreSQL (``LOCK TABLE seats``), with a 1 s busy timeout."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("jupyterhub")

from jupyterhub import orm
from jupyterhub.objects import Hub
from jupyterhub.spawner import SimpleLocalProcessSpawner
from jupyterhub.user import User
from tornado.web import HTTPError
from traitlets.config import Config

from gpuseat.jupyterhub import HubSettings, SeatHooks

from .test_held_lock import Holder

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "jupyterhub"))  # the hub tests' course maker
from hubcourse import make_course

from pg_schema import db_url  # noqa: F401 - the url fixture: SQLite and PostgreSQL

CONTACT = "Dr. Organizer (gpu-course@example.edu)"


@pytest.fixture
def spawner() -> Iterator[Any]:
    """The spawner the hub makes for ada's default server."""
    db = orm.new_session_factory("sqlite://")()
    orm_user = orm.User(name="ada")
    db.add(orm_user)
    db.commit()
    settings = {"spawner_class": SimpleLocalProcessSpawner, "hub": Hub(), "config": Config(), "db": db}
    yield User(orm_user, settings, db=db).spawners[""]
    db.close()


def test_a_spawn_under_a_held_lock_is_a_clear_503_and_the_next_one_starts(
    url: str, tmp_path: Path, spawner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUSEAT_DB_BUSY_TIMEOUT", "1")  # read when the hook opens the store
    store = make_course(url, tmp_path, key="lab", people=["ada", "ben"], seats=2, assign=1)
    seat = store.seats.seat_of("lab", "ada")
    assert seat is not None
    hooks = SeatHooks(HubSettings(course="lab", db_url=url, contact=CONTACT))
    holder = Holder(url, "seats")
    try:
        started = time.monotonic()
        with pytest.raises(HTTPError) as refused:
            asyncio.run(hooks.pre_spawn_hook(spawner))
        took = time.monotonic() - started
        still_held = holder.proc.poll() is None
    finally:
        holder.release()
    assert still_held
    assert refused.value.status_code == 503
    message = str(refused.value.log_message or refused.value.reason or refused.value)
    assert "cannot hand out seats at the moment" in message and CONTACT in message, message
    assert took < 30, took  # the busy timeout (1 s), not a hub left waiting on the lock
    assert store.seats.get_seat("lab", seat.key).state != "requested"  # nothing half-written
    asyncio.run(hooks.pre_spawn_hook(spawner))  # the lock let go: ada's start gets her seat
    assert store.seats.get_seat("lab", seat.key).state == "requested"
    store.close()
