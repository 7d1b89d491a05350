"""Databases for the portal tests: SQLite always, PostgreSQL when GPUSEAT_TEST_PG_URL is set (required on CI)."""

from __future__ import annotations

import os
import uuid as uuidlib

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


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path) -> str:
    """The database URL of one test, on each engine."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'course.db'}"
    return pg_schema_url(request)
