"""Issue 38, item 20: the organizer's Seats page runs a fixed handful of SQL statements, whatever the seat count.

Statements are counted with a SQLAlchemy event listener (every engine, every cursor execute) while the
real page (``GET /seats``, logged in) renders for 100 and for 1,000 seats, every seat held and with
connect details; the page before this change ran about 8 statements per seat (814 at 100 seats).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.engine import Engine

from gpuseat.catalog.bundle import load_catalog
from gpuseat.core.roster import RosterText
from gpuseat.store import CourseStore, open_store
from gpuseat.web.app import Portal, create_app

PASSWORD = "a long enough passphrase"
COURSE = """name = "Seats at scale"
participants = {n}

[needs]
min_gpu_memory_gb = 4
cuda = true
guest_os = "linux"
isolation = "partitioned"

[schedule]
start = 2026-06-01
days = 5
"""


def build_course(url: str, folder: Path, n: int) -> CourseStore:
    """A course of ``n`` participants and ``n`` seats, every seat held, each with a way in."""
    store = open_store(url, create=True)
    path = folder / "scale.toml"
    path.write_text(COURSE.format(n=n), encoding="utf-8")
    store.courses.create_course(path, key="scale")
    rows = "\n".join(f"P{i:04d},p{i:04d}@example.edu,participants,p{i:04d}," for i in range(n))
    store.roster.import_roster(
        "scale", RosterText("name,email,group,unix_user,ssh_key\n" + rows + "\n", where="roster")
    )
    store.seats.add_seats(
        "scale",
        [
            {
                "key": f"seat-{i:04d}",
                "kind": "gpu",
                "host": f"gpu{i // 8}.example.org",
                "device_uuid": f"GPU-{i:08d}-0000-0000-0000-000000000000",
                "profile": "L40S",
                "memory_gb": 48.0,
                "connect": f"ssh p{i:04d}@gpu{i // 8}.example.org",
            }
            for i in range(n)
        ],
    )
    store.seats.assign_all("scale")
    return store


@contextmanager
def counting() -> Iterator[list[str]]:
    """Every SQL statement any engine sends while the block runs."""
    seen: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany) -> None:
        seen.append(statement)

    event.listen(Engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", count)


def seats_page_statements(store: CourseStore) -> tuple[int, str]:
    """(statements, page) of one ``GET /seats`` by a logged-in organizer (the second: caches warm)."""
    store.accounts.set_password("admin", PASSWORD)
    portal = Portal(store, load_catalog(), "scale", link_days_after_end=None)
    with TestClient(create_app(portal)) as client:
        page = client.get("/login")
        csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', page.text).group(1)  # type: ignore[union-attr]
        r = client.post("/login", data={"csrf": csrf, "username": "admin", "password": PASSWORD})
        assert r.status_code in (200, 303), r.text[:300]
        assert client.get("/seats").status_code == 200  # warm: the served course's key and zone
        with counting() as seen:
            r = client.get("/seats")
        assert r.status_code == 200
        return len(seen), r.text


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_seats_page_statements_do_not_grow_with_seats(engine: str, tmp_path: Path, request) -> None:
    from pg_schema import pg_schema_url

    counts = {}
    for n in (100, 1000):
        url = f"sqlite:///{tmp_path / f'seats-{n}.db'}" if engine == "sqlite" else pg_schema_url(request)
        (tmp_path / str(n)).mkdir()
        store = build_course(url, tmp_path / str(n), n)
        try:
            counts[n], page = seats_page_statements(store)
        finally:
            store.close()
        assert page.count('<tr data-seat="seat-') == 2 * n  # every seat in the table and in "ways in"
        assert f"ssh p{n - 1:04d}@gpu{(n - 1) // 8}.example.org" in page
    print(f"seats page statements ({engine}): {counts}")
    # a fixed handful per page: the same at 1,000 seats as at 100, and far below one per seat
    for n, count in counts.items():
        assert count <= 25, (n, count)
    assert counts[1000] == counts[100], counts
