"""PostgreSQL takes an events id at INSERT, not at commit: a transaction that took id 100 can commit after
the one that took 101, which the agent has followed already (its cursor is past 100). The agent looks for
such a missing id with the head each tick and plans its course when it appears; one that never does (the
transaction rolled back) it stops looking for after ``hole_s``. SQLite takes ids in commit order."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from gpuseat.engines.agent import Agent
from gpuseat.store import CourseStore
from gpuseat.store.rows import _log

from .test_agent_restore import _two_courses_and_an_agent


def _planned(agent: Agent) -> list[str] | None:
    done = agent.tick()
    return None if done is None else sorted(p.course for p in done.planned)


class OpenWrite:
    """An organizer's write in a course (a move, as the store logs it) whose events row has its id (INSERTed)
    but is not committed yet: :meth:`commit` or :meth:`roll_back` ends it."""

    def __init__(self, store: CourseStore, course: str) -> None:
        self._write: AbstractContextManager[Session] | None = store.database.write()
        s = self._write.__enter__()
        _log(s, course, "organizer@example.org", "seat.moved", participant="p1")
        s.flush()  # the INSERT: the sequence gives this row its id now

    def commit(self) -> None:
        write, self._write = self._write, None
        assert write is not None
        write.__exit__(None, None, None)

    def roll_back(self) -> None:
        write, self._write = self._write, None
        if write is not None:  # the write failed: its transaction rolls back
            failed = RuntimeError("the organizer's write failed")
            assert not write.__exit__(RuntimeError, failed, None)


@pytest.fixture
def open_write(store: CourseStore, url: str) -> Iterator[Callable[[str], OpenWrite]]:
    """Start an :class:`OpenWrite` in a course (PostgreSQL only); one left open is rolled back at the end."""
    if not url.startswith("postgresql"):
        pytest.skip("SQLite has one writer at a time: a second write waits for the first to commit")
    opened: list[OpenWrite] = []

    def start(course: str) -> OpenWrite:
        opened.append(OpenWrite(store, course))
        return opened[-1]

    yield start
    for write in opened:
        write.roll_back()


@pytest.mark.parametrize("when", ["after the first pass", "during the first pass"])
def test_a_change_committed_after_a_larger_id_is_planned_at_the_next_tick(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any], open_write: Any, when: str
) -> None:
    said: list[str] = []
    agent = _two_courses_and_an_agent(store, url, tmp_path, cli, said)
    if when == "after the first pass":
        assert _planned(agent) == ["lab", "two"]
    a = open_write("lab")  # takes the smaller id
    store.events.log("two", "seat.check")  # takes a larger one and commits first
    assert _planned(agent) == (["two"] if when == "after the first pass" else ["lab", "two"])
    assert agent.cursor == store.agents.events_head()
    a.commit()  # now A commits: the head does not move
    assert store.agents.events_head() == agent.cursor
    assert _planned(agent) == ["lab"], "the change committed after a larger id was not planned"
    assert _planned(agent) is None  # and then idle again
    said_before = list(said)
    store.events.log("two", "seat.check")
    assert _planned(agent) == ["two"]
    assert said == said_before


def test_an_id_rolled_back_is_looked_for_a_while_then_never_again(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any], open_write: Any
) -> None:
    said: list[str] = []
    agent = _two_courses_and_an_agent(store, url, tmp_path, cli, said)
    agent.hole_s = 2.0  # a few ticks take milliseconds: well inside it even on a loaded machine
    assert _planned(agent) == ["lab", "two"]
    a = open_write("lab")
    store.events.log("two", "seat.check")
    assert _planned(agent) == ["two"]
    a.roll_back()  # A fails: its id stays missing for good
    said_before = list(said)
    started = time.monotonic()
    assert _planned(agent) is None  # no pass for a missing id
    assert agent._holes  # still looked for, with the head, inside the bound
    assert [_planned(agent) for _ in range(4)] == [None] * 4  # nor at any tick after
    time.sleep(max(0.0, started + agent.hole_s + 0.1 - time.monotonic()))
    assert _planned(agent) is None
    assert not agent._holes  # given up: the idle tick reads the head and the cursor's row only again
    assert said == said_before  # and nothing said about it
    store.events.log("lab", "seat.check")
    assert _planned(agent) == ["lab"]


def test_sqlite_takes_ids_in_commit_order_and_the_agent_keeps_no_holes(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    agent = _two_courses_and_an_agent(store, url, tmp_path, cli, [])
    assert store.agents.ids_follow_commits is url.startswith("sqlite")
    assert _planned(agent) == ["lab", "two"]
    store.events.log("two", "seat.check")
    assert _planned(agent) == ["two"]
    assert not agent._holes  # every id up to the head is there, on both engines
