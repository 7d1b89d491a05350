"""The store tests run on SQLite and on PostgreSQL (GPUSEAT_TEST_PG_URL; required on CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuseat.store import CourseStore, open_store
from pg_schema import pg_schema_url

EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database on each engine."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'course.db'}"
    return pg_schema_url(request)


@pytest.fixture
def store(url: str) -> CourseStore:
    """A new store (schema created) on each engine."""
    s = open_store(url, create=True)
    yield s
    s.close()


@pytest.fixture
def course2016(store: CourseStore) -> CourseStore:
    """The 2016 course with the 16-person example roster."""
    store.courses.create_course(EXAMPLES / "course-2016.toml")
    store.roster.import_roster(None, EXAMPLES / "roster-16.csv")
    return store


def two_seat_lab(store: CourseStore) -> tuple[str, str]:
    """The 2016 course as ``lab`` with the example roster and two host seats, seat-01 and seat-02, that nobody
    holds yet; the keys of its first two participants (ann, ben) are returned for the test to seat."""
    store.courses.create_course(EXAMPLES / "course-2016.toml", key="lab")
    store.roster.import_roster("lab", EXAMPLES / "roster-16.csv")
    store.seats.add_seats("lab", [{"key": f"seat-0{i}", "kind": "gpu", "engine": "host"} for i in (1, 2)])
    ann, ben = (p.key for p in store.roster.participants("lab")[:2])
    return ann, ben
