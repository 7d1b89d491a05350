"""One PostgreSQL schema per test on the throwaway server of scripts/postgres.sh (shared by the store,
portal and JupyterHub tests; required on CI, skipped elsewhere when GPUSEAT_TEST_PG_URL is unset)."""

from __future__ import annotations

import os
import uuid as uuidlib
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

PG = os.environ.get("GPUSEAT_TEST_PG_URL")
ON_CI = os.environ.get("CI") == "true"


def pg_schema_url(request: pytest.FixtureRequest) -> str:
    """A fresh PostgreSQL schema for one test (dropped afterwards)."""
    if not PG:
        if ON_CI:
            pytest.fail("GPUSEAT_TEST_PG_URL is not set on CI (scripts/test.sh starts PostgreSQL)")
        pytest.skip("GPUSEAT_TEST_PG_URL not set")
    schema = f"t_{uuidlib.uuid4().hex[:12]}"
    admin = create_engine(PG)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))

    def drop() -> None:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()

    request.addfinalizer(drop)
    sep = "&" if "?" in PG else "?"
    return f"{PG}{sep}options=-csearch_path%3D{schema}"


@pytest.fixture(params=["sqlite", "postgresql"], name="url")
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The ``url`` fixture: a fresh, empty database on each engine, a SQLite file or a PostgreSQL schema of
    the test's own. A test module that wants it imports it (``from pg_schema import db_url``)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'course.db'}"
    return pg_schema_url(request)
