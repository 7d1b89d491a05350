"""Opening the course database: only gpuseat's own, created only on purpose, safe when raced."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuseat.db import make_engine, upgrade
from gpuseat.errors import InputError, StoreError


def test_missing_file_is_refused_for_read_only_use(tmp_path: Path) -> None:
    target = tmp_path / "typo" / "gpuseat.db"
    with pytest.raises(InputError, match="no gpuseat database here"):
        make_engine(f"sqlite:///{target}", create=False)
    assert not target.exists() and not target.parent.exists()


def test_another_applications_sqlite_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
        conn.execute("INSERT INTO invoices VALUES (1, 9.5)")
    with pytest.raises(InputError, match=r"not a gpuseat database.*invoices"):
        upgrade(make_engine(f"sqlite:///{path}"))
    with sqlite3.connect(path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    assert tables == ["invoices"]


def test_a_text_file_as_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello, not a database\n")
    with pytest.raises(InputError, match="not a SQLite database"):
        make_engine(f"sqlite:///{path}")
    assert path.read_text() == "hello, not a database\n"


def test_unreachable_postgresql_is_one_clear_error() -> None:
    pytest.importorskip("psycopg")
    engine = make_engine("postgresql+psycopg://nobody@127.0.0.1:9/none?connect_timeout=2")
    with pytest.raises(StoreError, match="cannot open the course database"):
        upgrade(engine)


_OPEN = """
import sys
from gpuseat.db import make_engine, upgrade
upgrade(make_engine(sys.argv[1]))
"""


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_processes_creating_one_new_database_at_once_all_succeed(tmp_path: Path, backend: str) -> None:
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'new.db'}"
    else:
        url = os.environ.get("GPUSEAT_TEST_PG_URL", "")
        if not url:
            if os.environ.get("CI"):
                pytest.fail("GPUSEAT_TEST_PG_URL is not set on CI")
            pytest.skip("GPUSEAT_TEST_PG_URL not set")
        import uuid

        from sqlalchemy import text
        from sqlalchemy.engine import make_url

        name = f"gpuseat_race_{uuid.uuid4().hex[:8]}"  # a new, empty database of its own
        admin = make_engine(url).execution_options(isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f"CREATE DATABASE {name}"))
        url = make_url(url).set(database=name).render_as_string(hide_password=False)
    procs = [subprocess.Popen([sys.executable, "-c", _OPEN, url], stderr=subprocess.PIPE, text=True) for _ in range(4)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errors
    from alembic.runtime.migration import MigrationContext

    engine = make_engine(url)
    with engine.connect() as conn:
        assert len(MigrationContext.configure(conn).get_current_heads()) == 1
    engine.dispose()
    if backend == "postgresql":
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE {name}"))


@pytest.mark.parametrize("value", ["300s", "nan", "0", "-5", "1e9", "١٢", "1_0", "5e1"])
def test_a_bad_busy_timeout_is_one_clear_error_and_touches_nothing(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """GPUSEAT_DB_BUSY_TIMEOUT that is not seconds (0, 86400] fell back to the default without a word."""
    course = Path(__file__).resolve().parents[1] / "examples" / "course-2016.toml"
    made = tmp_path / "made.db"
    assert cli("course", "create", course, "--db", f"sqlite:///{made}").code == 0
    monkeypatch.setenv("GPUSEAT_DB_BUSY_TIMEOUT", value)
    fresh = tmp_path / "fresh.db"
    for args in (
        ("course", "create", course, "--db", f"sqlite:///{fresh}"),
        ("seats", "status", "--db", f"sqlite:///{made}"),
    ):
        r = cli(*args)
        assert r.code == 2 and "Traceback" not in r.err, (args, r.out, r.err)
        assert "GPUSEAT_DB_BUSY_TIMEOUT" in r.err and "at most 86400" in r.err, r.err
    assert not fresh.exists()
    monkeypatch.setenv("GPUSEAT_DB_BUSY_TIMEOUT", " 5 ")
    assert cli("seats", "status", "--db", f"sqlite:///{made}").code == 0
