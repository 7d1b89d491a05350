"""An agent over a store that ``gpuseat db restore`` replaced under it: the events head went back below the
agent's cursor (SQLite's backup API writes into the live file; pg_restore --clean resets the sequence), so
the agent plans every course at once instead of waiting for the next resync."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuseat.engines.agent import Agent, AgentOptions
from gpuseat.engines.runner import Runner
from gpuseat.store import CourseStore
from gpuseat.store.backup import backup, restore

from .conftest import COURSE


def _seats(cli: Callable[..., Any], url: str, tmp_path: Path, key: str, n: int) -> None:
    uuid = f"GPU-{n:08d}-0000-4000-8000-000000000000"
    (tmp_path / f"{key}.txt").write_text(f"GPU 0: NVIDIA H200 (UUID: {uuid})\n")
    r = cli("seats", "add", "--from-nvidia-smi", tmp_path / f"{key}.txt", "--engine", "host", "--host", "gpu1",
            "--course", key, "--db", url)  # fmt: skip
    assert r.code == 0, r.err


def _two_courses_and_an_agent(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any], said: list[str]
) -> Agent:
    """Courses ``lab`` and ``two``, a seat on host gpu1 each, and a (dry-run) agent for that host."""
    (tmp_path / "two.toml").write_text(COURSE.replace('"lab"', '"two"'))
    store.courses.create_course(tmp_path / "two.toml", key="two")
    _seats(cli, url, tmp_path, "lab", 1)
    _seats(cli, url, tmp_path, "two", 2)
    return Agent(store, AgentOptions(engine="host", host="gpu1", resync_s=3600), runner=Runner(dry_run=True),
                 say=said.append, holder="gpu1:1:abc")  # fmt: skip


def test_a_restored_store_is_planned_whole_at_the_next_tick(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    said: list[str] = []
    agent = _two_courses_and_an_agent(store, url, tmp_path, cli, said)
    first = agent.tick()
    assert first is not None and sorted(p.course for p in first.planned) == ["lab", "two"]
    backup(url, tmp_path / "store.backup")
    for _ in range(5):  # changes after the backup: the head moves past what the backup holds
        store.events.log("lab", "seat.check")
    assert agent.tick() is not None
    before = agent.cursor
    assert before is not None and before > 0
    restore(url, tmp_path / "store.backup", force=True)
    assert store.agents.events_head() < before  # the store went back
    again = agent.tick()  # at once, not at the next resync (an hour here)
    assert again is not None, "the restored store was not planned"
    assert sorted(p.course for p in again.planned) == ["lab", "two"]  # every course, not the changed ones
    assert agent.role == "leader" and agent.cursor == store.agents.events_head()
    assert any("store was replaced" in line for line in said), said
    # the restored lease row (the backup's, long expired) and status row do not unseat the leader
    assert store.agents.holds_lease(agent.options.lease_name, agent.holder)
    (row,) = [r for r in store.agents.agent_statuses() if r["name"] == agent.options.lease_name]
    assert (row["holder"], row["role"], row["cursor"]) == (agent.holder, "leader", agent.cursor)
    assert agent.tick() is None  # and then idle again
    store.events.log("two", "seat.check")  # a change after the restore reaches the machine at once
    later = agent.tick()
    assert later is not None and [p.course for p in later.planned] == ["two"]


def test_a_restored_lease_held_by_another_live_agent_makes_this_one_a_standby(
    store: CourseStore, url: str, tmp_path: Path
) -> None:
    """The backup's lease row names another holder, still unexpired: this agent waits as standby, as it would
    for any holder, and takes over when that lease runs out."""
    options = AgentOptions(engine="host", host="gpu1", resync_s=3600, lease_s=60)
    store.agents.take_lease(options.lease_name, "other:1:old", 600)
    backup(url, tmp_path / "store.backup")
    store.agents.drop_lease(options.lease_name, "other:1:old")
    agent = Agent(store, options, runner=Runner(dry_run=True), say=lambda _line: None, holder="gpu1:1:abc")
    assert agent.tick() is not None and agent.role == "leader"
    for _ in range(3):
        store.events.log("lab", "seat.check")
    assert agent.tick() is not None
    restore(url, tmp_path / "store.backup", force=True)
    assert agent.tick() is None and agent.role == "standby"
    store.agents.drop_lease(options.lease_name, "other:1:old")
    assert agent.tick() is not None and agent.role == "leader"


def test_a_restored_store_written_past_the_old_cursor_before_the_next_tick_is_planned_whole(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    """The restore, then enough writes (a seat added, logins) that the head is past the agent's cursor again
    before its next tick: the row at its cursor is another one now, so the store was replaced all the same."""
    said: list[str] = []
    agent = _two_courses_and_an_agent(store, url, tmp_path, cli, said)
    assert agent.tick() is not None
    backup(url, tmp_path / "store.backup")
    for _ in range(5):
        store.events.log("lab", "seat.check")
    assert agent.tick() is not None
    before = agent.cursor
    assert before is not None
    restore(url, tmp_path / "store.backup", force=True)
    assert store.agents.events_head() < before
    _seats(cli, url, tmp_path, "lab", 3)  # writes of one course after the restore, past the old cursor
    while store.agents.events_head() <= before:
        store.events.log("lab", "seat.check")
    again = agent.tick()
    assert again is not None, "the restored store was not planned"
    assert sorted(p.course for p in again.planned) == ["lab", "two"], "only the courses written since were planned"
    assert any("store was replaced" in line for line in said), said
    assert agent.role == "leader" and agent.cursor == store.agents.events_head()
    assert agent.tick() is None  # and then idle again
    store.events.log("two", "seat.check")
    later = agent.tick()
    assert later is not None and [p.course for p in later.planned] == ["two"]


def test_archiving_or_deleting_a_course_is_a_change_not_a_replaced_store(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    """A course archived or deleted keeps its events rows (they are append-only): the row at the agent's cursor
    is still there, so the agent re-plans that course only."""
    for key in ("two", "three"):
        (tmp_path / f"{key}.toml").write_text(COURSE.replace('"lab"', f'"{key}"'))
        store.courses.create_course(tmp_path / f"{key}.toml", key=key)
    _seats(cli, url, tmp_path, "lab", 1)
    _seats(cli, url, tmp_path, "two", 2)
    _seats(cli, url, tmp_path, "three", 3)
    said: list[str] = []
    agent = Agent(store, AgentOptions(engine="host", host="gpu1", resync_s=3600), runner=Runner(dry_run=True),
                  say=said.append, holder="gpu1:1:abc")  # fmt: skip
    first = agent.tick()
    assert first is not None and sorted(p.course for p in first.planned) == ["lab", "three", "two"]
    agent.tick()  # the first pass's own rows
    store.lifecycle.archive_course("two")
    archived = agent.tick()
    assert archived is not None and [p.course for p in archived.planned] == ["two"]
    agent.tick()
    done = store.lifecycle.delete_course("three", export_to=tmp_path / "three.zip")
    assert done["deferred"] is False
    store.lifecycle.delete_course("lab", export_to=tmp_path / "lab.zip")
    deleted = agent.tick()
    assert deleted is not None and "two" not in [p.course for p in deleted.planned]
    assert not any("store was replaced" in line for line in said), said
