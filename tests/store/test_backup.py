"""``db backup`` taken while 16 processes claim seats restores to a consistent store (SQLite online backup
API, PostgreSQL pg_dump); ``db restore`` refuses to overwrite a store with courses and bad files."""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text

from gpuseat.cli import main
from gpuseat.core.roster import RosterText
from gpuseat.store import open_store
from pg_schema import PG

from .test_concurrency import course_with, open_counts, start_workers


def restore_target(url: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """An empty database of the same kind (PostgreSQL: a new database with the same search_path)."""
    if url.startswith("sqlite"):
        return f"sqlite:///{tmp_path / 'restored.db'}"
    name = f"restore_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG or "", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))

    def drop() -> None:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()

    request.addfinalizer(drop)
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def consistent(url: str) -> tuple[int, int, int, int]:
    """(seats held twice, people holding two, open assignments, claim events) of a store."""
    with open_store(url) as store:
        doubles_seat, doubles_person, total = open_counts(store)
        claims = len([e for e in store.events.events("big", limit=100_000) if e.action == "seat.claim"])
    return doubles_seat, doubles_person, total, claims


def test_backup_while_sixteen_writers_claim_restores_consistently(
    url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = open_store(url, create=True)
    keys = course_with(store, tmp_path, participants=400, seats=400)
    go = tmp_path / "go"
    workers = start_workers(url, go, keys, 16)
    go.touch()
    deadline = time.monotonic() + 120
    while open_counts(store)[2] < 30 and time.monotonic() < deadline:
        time.sleep(0.01)
    backup = tmp_path / "store.backup"
    before = open_counts(store)[2]
    running = workers.running()
    assert main(["db", "backup", "--to", str(backup), "--db", url]) == 0
    workers.results(timeout=600)
    assert open_counts(store) == (0, 0, 400)
    store.close()
    assert before < 400 and running > 0, "the backup was not started while the claims ran"
    target = restore_target(url, tmp_path, request)
    assert main(["db", "restore", str(backup), "--db", target]) == 0
    doubles_seat, doubles_person, total, claims = consistent(target)
    assert (doubles_seat, doubles_person) == (0, 0)
    assert before <= total <= 400 and claims == total  # a snapshot of one moment: each claim with its events row
    with open_store(target) as restored:  # the restored store works: every participant gets a seat
        report = restored.seats.assign_all("big")
        assert report.kept == total and len(report.assigned) == 400 - total


def test_restore_refuses_a_store_with_courses_and_bad_files(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_store(url, create=True) as store:
        course_with(store, tmp_path, participants=3, seats=3)
    backup = tmp_path / "b.backup"
    assert main(["db", "backup", "--to", str(backup), "--db", url]) == 0
    assert main(["db", "backup", "--to", str(backup), "--db", url]) == 2  # exists: --force replaces it
    assert "exists already" in capsys.readouterr().err
    assert main(["db", "restore", str(backup), "--db", url]) == 2
    err = capsys.readouterr().err
    assert "holds courses" in err and "--force" in err and "Traceback" not in err
    junk = tmp_path / "junk"
    junk.write_text(json.dumps({"not": "a backup"}))
    assert main(["db", "restore", str(junk), "--db", f"sqlite:///{tmp_path / 'new.db'}"]) == 2
    assert "not a gpuseat backup" in capsys.readouterr().err
    other = "postgresql+psycopg://nobody@/x" if url.startswith("sqlite") else f"sqlite:///{tmp_path / 'x.db'}"
    assert main(["db", "restore", str(backup), "--db", other]) == 2
    assert "cannot be restored into" in capsys.readouterr().err
    with open_store(url) as store:  # nothing lost
        assert len(store.roster.participants("big")) == 3
    if url.startswith("sqlite"):
        # a SQLite file that is no gpuseat backup is named as such at once (it first said "holds courses: add
        # --force", and only with --force that the file was bad)
        alien = tmp_path / "alien.db"
        with sqlite3.connect(alien) as conn:
            conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
        conn.close()
        assert main(["db", "restore", str(alien), "--db", url]) == 2
        err = capsys.readouterr().err
        assert "not an intact gpuseat backup" in err and "holds courses" not in err, err
        # --force replaces the contents with the backup's
        with open_store(url) as store:
            store.roster.import_roster(
                "big", RosterText("name,email,unix_user\nZ,z@example.org,zz\n", where="more.csv")
            )
        assert main(["db", "restore", str(backup), "--force", "--db", url]) == 0
        with open_store(url) as store:
            assert len(store.roster.participants("big")) == 3
