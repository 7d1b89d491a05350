"""Databases for the portal tests: SQLite always, PostgreSQL when GPUSEAT_TEST_PG_URL is set (required on CI)."""

from __future__ import annotations

import pytest

from pg_schema import pg_schema_url


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path) -> str:
    """The database URL of one test, on each engine."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'course.db'}"
    return pg_schema_url(request)
