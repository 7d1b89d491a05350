"""The store tests run on SQLite and on PostgreSQL (GPUSEAT_TEST_PG_URL; required on CI)."""

from __future__ import annotations

import os
import uuid as uuidlib
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from gpuseat.services.courses import CourseStore, open_store

PG = os.environ.get("GPUSEAT_TEST_PG_URL")
ON_CI = os.environ.get("CI") == "true"
EXAMPLES = Path(__file__).parents[2] / "examples"


def _pg_url(request: pytest.FixtureRequest) -> str:
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
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database on each engine."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'course.db'}"
    return _pg_url(request)


@pytest.fixture
def store(url: str) -> CourseStore:
    """A new store (schema created) on each engine."""
    s = open_store(url, create=True)
    yield s
    s.close()


@pytest.fixture
def course2016(store: CourseStore) -> CourseStore:
    """The 2016 course with the 16-person example roster."""
    store.create_course(EXAMPLES / "course-2016.toml")
    store.import_roster(None, EXAMPLES / "roster-16.csv")
    return store
