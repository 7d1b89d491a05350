"""One store object: each concern docs/architecture.md lists is an attribute of the store, built on its one
database handle; the old flat names still work, each call warning once."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from gpuseat.store import CourseStore, Store, open_store
from gpuseat.store.base import Concern

ROOT = Path(__file__).resolve().parents[2]


def _documented() -> dict[str, str]:
    """``store.<concern>`` → module, from the table of docs/architecture.md's store section."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## The store", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^\| `store\.(\w+)` \| `store/(\w+)\.py` \|", section, re.M))


def test_every_documented_concern_is_an_attribute_on_the_one_handle(store: CourseStore) -> None:
    documented = _documented()
    assert len(documented) >= 15 and {"courses", "roster", "seats", "claims", "events", "monitor"} <= set(documented)
    for name, module in documented.items():
        concern = getattr(store, name)
        assert isinstance(concern, Concern), name
        assert type(concern).__module__ == f"gpuseat.store.{module}", name
        assert concern._database is store.database, name  # one handle: no concern opens its own
        assert getattr(store, name) is concern, name  # built once per store


def test_the_old_name_is_the_store() -> None:
    assert CourseStore is Store


def test_an_old_flat_name_warns_once_and_does_what_the_concern_does(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text('name = "c"\nparticipants = 2\n[schedule]\nstart = 2026-01-05\ndays = 5\n')
    with open_store(f"sqlite:///{tmp_path / 's.db'}", create=True) as store:
        with pytest.warns(DeprecationWarning, match=r"use store\.courses\.create_course") as caught:
            made = store.create_course(tmp_path / "c.toml", key="c")
        assert len(caught) == 1
        assert store.courses.get_course("c") == made
        with pytest.warns(DeprecationWarning, match=r"store\.seats\.seats") as caught:
            assert store.seats("c") == store.seats.seats("c") == []
        assert len(caught) == 1
        with pytest.warns(DeprecationWarning, match=r"store\.events\.events"):
            assert [e.action for e in store.events("c")] == ["course.create"]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the attributes themselves never warn
            assert [e.action for e in store.events.events("c")] == ["course.create"]
        with pytest.raises(AttributeError, match="no_such_method"):
            store.no_such_method  # noqa: B018
