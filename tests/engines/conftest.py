"""The engine tests' store: SQLite and PostgreSQL (GPUSEAT_TEST_PG_URL; required on CI)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuseat.store import CourseStore, open_store
from pg_schema import pg_schema_url

COURSE = 'name = "lab"\nparticipants = 2\n[schedule]\nstart = 2026-09-07\ndays = 5\n'


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database on each engine."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'course.db'}"
    return pg_schema_url(request)


@pytest.fixture
def store(url: str, tmp_path: Path) -> Iterator[CourseStore]:
    """A store with one course, ``lab``."""
    s = open_store(url, create=True)
    (tmp_path / "lab.toml").write_text(COURSE)
    s.courses.create_course(tmp_path / "lab.toml", key="lab")
    yield s
    s.close()
