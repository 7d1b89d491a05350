"""The store's clock stepped an hour while agents run (an NTP correction on the machine that holds the SQLite
file, which is the agents' own machine, or on the PostgreSQL server): lease times are that clock, so a step
moves every lease at once. Ahead, a live leader's lease reads as run out (its standby took over at once, and
the leader cut its pass at the next step); back, a dead leader's lease reads as running on for the step (an
hour with no leader). Agents count how long a lease row went unrenewed on their own monotonic clock.

The step is the lease row as it would read after it: written by the leader on a clock an hour off the
database's (``take_lease(now=…)``); each agent's own clock is a counter the test moves. SQLite and PostgreSQL.
Last, the agent machine's clock alone steps back (tests/stepped_clock.py) before an access window changes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from gpuseat.engines.agent import Agent, AgentOptions
from gpuseat.engines.runner import Runner
from gpuseat.store import CourseStore

from .conftest import COURSE
from .test_agent_restore import _seats

HOUR = 3600.0
LEASE = 15.0


class Clock:
    """An agent's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.t = 1_000.0

    def __call__(self) -> float:
        return self.t


def _agents(store: CourseStore) -> tuple[Agent, Agent, Clock]:
    """A leader and its standby (dry-run, host gpu1) on one clock of their machine, the leader's first pass done."""
    clock = Clock()
    options = AgentOptions(engine="host", host="gpu1", resync_s=HOUR, lease_s=LEASE)
    made = [
        Agent(store, options, runner=Runner(dry_run=True), say=lambda _line: None, holder=name, clock=clock)
        for name in ("gpu1:1:lead", "gpu1:2:stby")
    ]
    leader, standby = made
    assert leader.tick() is not None and standby.tick() is None
    assert (leader.role, standby.role) == ("leader", "standby")
    return leader, standby, clock


def _open_course_agent(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any], today: date
) -> tuple[Clock, Agent, Any]:
    """Course ``open`` (from yesterday for three days, open all day, a host seat on gpu1) and a dry-run agent of it on
    a clock of its own, after its first pass (which worked out when the access window next changes)."""
    (tmp_path / "open.toml").write_text(
        COURSE.replace('"lab"', '"open"').replace(
            "start = 2026-09-07\ndays = 5\n", f'start = {today - timedelta(days=1)}\ndays = 3\naccess = "00:00-24:00"\n'
        )
    )
    store.courses.create_course(tmp_path / "open.toml", key="open")
    _seats(cli, url, tmp_path, "open", 3)
    clock = Clock()
    agent = Agent(store, AgentOptions(engine="host", host="gpu1", course="open", resync_s=9 * 86400, lease_s=LEASE),
                  runner=Runner(dry_run=True), say=lambda _line: None, clock=clock)  # fmt: skip
    first = agent.tick()
    assert first is not None and first.next_change is not None and not first.failed
    return clock, agent, first


def _step(store: CourseStore, leader: Agent, by: float) -> None:
    """The database's clock steps by ``by`` seconds just after the leader renewed its lease."""
    (holder, _expires, _left) = store.agents.lease(leader.options.lease_name) or ("", 0.0, 0.0)
    assert holder == leader.holder
    now = store.requests.now().timestamp()
    assert store.agents.take_lease(leader.options.lease_name, leader.holder, LEASE, now=now - by)


def test_a_store_clock_stepped_back_an_hour_leaves_no_hour_without_a_leader(store: CourseStore) -> None:
    """The clock steps back an hour, and the leader dies before it renews: its lease reads as running for an
    hour and five seconds more. The standby takes over once it has seen the row unrenewed for three lease
    periods of its own clock (45 s), not an hour later."""
    leader, standby, clock = _agents(store)
    _step(store, leader, -HOUR)
    assert store.agents.leases()[0]["expires_in_s"] > HOUR  # `agent status` shows it so, until a renewal
    for _ in range(3 * 3 + 2):  # a standby looks every third of a lease period
        clock.t += LEASE / 3
        standby.tick()
    assert standby.role == "leader", store.agents.leases()
    assert store.agents.holds_lease(standby.options.lease_name, standby.holder)


def test_a_store_clock_stepped_back_keeps_a_live_leader(store: CourseStore) -> None:
    """Stepped back, a live leader renews on its own clock's schedule, on the database's new time: it stays the
    leader, and its standby, which sees the row renewed, stays standby."""
    leader, standby, clock = _agents(store)
    _step(store, leader, -HOUR)
    for _ in range(12):
        clock.t += LEASE / 3
        leader.tick()
        standby.tick()
        assert (leader.role, standby.role) == ("leader", "standby")
    (lease,) = store.agents.leases()
    assert lease["holder"] == leader.holder and 0 < lease["expires_in_s"] <= LEASE, lease


def test_a_store_clock_stepped_ahead_keeps_the_live_leader_and_its_pass(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    """The clock steps an hour ahead: the live leader's lease reads as run out an hour ago. Its standby does not
    take over (it did, at its next look: a second agent applying while the leader finished its step), and the
    leader's next pass is not cut at its first step (it asked the database whether it held the lease, which
    said no): it renews the row that is still its own and applies every step."""
    _seats(cli, url, tmp_path, "lab", 1)
    leader, standby, clock = _agents(store)
    _step(store, leader, HOUR)
    clock.t += LEASE / 3 - 0.1  # the standby looks just before the leader's renewal is due
    assert standby.tick() is None and standby.role == "standby", store.agents.leases()
    (tmp_path / "roster.csv").write_text("key,name,email\nann,Ann,ann@example.org\n")
    store.roster.import_roster("lab", tmp_path / "roster.csv")
    (seat,) = store.seats.seats("lab")
    store.seats.assign("lab", "ann", seat.key)
    _step(store, leader, HOUR)
    got = leader.tick()  # a store change; its renewal is not due on its own clock
    assert got is not None and got.reports, got
    skipped = [o.step.key for r in got.reports for o in r.outcomes if o.state != "done"]
    assert not skipped and leader.role == "leader", f"the pass was cut at a clock step: {skipped}"
    for _ in range(12):
        clock.t += LEASE / 3
        standby.tick()
        leader.tick()
        assert (leader.role, standby.role) == ("leader", "standby")


def test_a_standby_still_takes_over_a_dead_leader_within_a_lease_period(store: CourseStore) -> None:
    """No step: the leader dies just before its lease runs out; its standby takes over once it has seen the row
    unrenewed for a lease period of its own clock and the database's clock says it has run out, as before; an
    agent that starts after a lease ran out long ago takes it a lease period after its first look."""
    leader, standby, clock = _agents(store)
    _step(store, leader, LEASE - 0.05)  # its last renewal: the lease runs out in 0.05 s
    assert standby.tick() is None
    deadline = time.monotonic() + 10
    while (store.agents.lease(leader.options.lease_name) or ("", 0.0, 0.0))[2] > 0:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    clock.t += LEASE - 1
    assert standby.tick() is None and standby.role == "standby"  # run out, but unrenewed for less than a lease
    clock.t += 1
    standby.tick()
    assert standby.role == "leader"
    late = Agent(store, standby.options, runner=Runner(dry_run=True), say=lambda _line: None, holder="gpu1:3:new",
                 clock=clock)  # fmt: skip
    store.agents.take_lease(standby.options.lease_name, standby.holder, LEASE, now=0.0)  # died long ago
    assert late.tick() is None and late.role == "standby"  # its first look: the row may read so after a step
    clock.t += LEASE
    late.tick()
    assert late.role == "leader"


def test_an_agent_started_after_a_step_ahead_does_not_take_a_live_leaders_lease(store: CourseStore) -> None:
    """The database's clock steps an hour ahead just as a second standby starts: at its first look the live
    leader's lease reads as run out an hour ago. It waits a lease period of its own clock, in which the leader
    renews, and stays standby; the leader's pass is not cut."""
    leader, _standby, clock = _agents(store)
    _step(store, leader, HOUR)
    late = Agent(store, leader.options, runner=Runner(dry_run=True), say=lambda _line: None, holder="gpu1:3:new",
                 clock=clock)  # fmt: skip
    assert late.tick() is None and late.role == "standby", store.agents.leases()
    clock.t += LEASE / 3
    leader.tick()  # renews on its own clock's third
    for _ in range(3):
        clock.t += LEASE / 3
        assert late.tick() is None and late.role == "standby", store.agents.leases()
        leader.tick()
    assert leader.role == "leader" and store.agents.holds_lease(leader.options.lease_name, leader.holder)


def test_a_standby_with_a_shorter_lease_does_not_take_a_live_leaders(store: CourseStore) -> None:
    """The leader runs with ``--lease 150`` (renewed every 50 s), its standby with 15: the standby counts three
    of the leader's lease periods, as the row had left when it saw it renewed, not three of its own (45 s,
    before the leader's next renewal), so it never takes over a live leader the database says holds."""
    clock = Clock()
    leader, standby = (
        Agent(
            store,
            AgentOptions(engine="host", host="gpu1", resync_s=HOUR, lease_s=lease),
            runner=Runner(dry_run=True),
            say=lambda _line: None,
            holder=name,
            clock=clock,
        )
        for name, lease in (("gpu1:1:lead", 150.0), ("gpu1:2:stby", LEASE))
    )
    assert leader.tick() is not None and standby.tick() is None
    for _ in range(3):
        for _ in range(10):  # 50 s: the leader's renewal is due at the end
            clock.t += 5
            standby.tick()
            assert standby.role == "standby", clock.t
        leader.tick()
        assert leader.role == "leader"


def test_an_access_window_change_is_passed_on_time_by_an_agent_whose_machine_clock_stepped_back(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    """The agent's pass worked out when the course's access window next changes (the store's clock); then this
    machine's clock steps back an hour (the store's does not: PostgreSQL elsewhere). When that change comes by
    the agent's own clock, it passes (it compared the stepped clock with the change and waited an hour more,
    or for the resync)."""
    from stepped_clock import REAL_DATETIME, stepped

    clock, agent, first = _open_course_agent(store, url, tmp_path, cli, REAL_DATETIME.now(UTC).date())
    left = (first.next_change - store.requests.now()).total_seconds()
    assert 0 < left <= 2 * 86400, first.next_change
    with stepped(-timedelta(hours=1)):
        clock.t += left - 60
        assert agent.tick() is None  # a minute before: nothing due
        clock.t += 61
        assert agent.tick() is not None, "the access window's change waited for the machine's clock"


def test_a_run_out_lease_of_a_dead_agent_of_this_machine_is_taken_at_the_first_look(store: CourseStore) -> None:
    """A lease whose holder was an agent process of this machine that is gone (kill -9) and which has run out is
    taken at once: no clock step can make a dead process live. A live process's run-out row, or one from another
    machine, is waited on for a lease period first (the database's clock may have stepped ahead)."""
    clock = Clock()
    options = AgentOptions(engine="host", host="gpu1", resync_s=HOUR, lease_s=LEASE)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for holder, leads in ((f"{socket.gethostname()}:{os.getpid()}:live", False), ("elsewhere:4242:x", False)):
        store.agents.take_lease(options.lease_name, holder, LEASE, now=0.0)
        late = Agent(store, options, runner=Runner(dry_run=True), say=lambda _line: None, clock=clock)
        late.tick()
        assert (late.role == "leader") is leads, holder
        store.agents.drop_lease(options.lease_name, holder)
    store.agents.take_lease(options.lease_name, f"{socket.gethostname()}:{dead.pid}:dead", LEASE, now=0.0)
    late = Agent(store, options, runner=Runner(dry_run=True), say=lambda _line: None, clock=clock)
    late.tick()
    assert late.role == "leader", store.agents.leases()


def test_an_access_window_change_the_store_clock_stepped_past_is_passed_within_a_renewal(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any], monkeypatch: Any
) -> None:
    """The store's clock steps ahead past the access window's next change while the agent runs (NTP on the
    database's machine; this machine's clock and the agent's own do not move): by the store's clock the window has
    changed. The agent passed only at the next resync (here 9 days; 5 minutes by default) or event: it measured
    the store's clock at its last pass only. It reads it again with each renewal of its lease."""
    from gpuseat.store.agents import Agents

    clock, agent, first = _open_course_agent(store, url, tmp_path, cli, datetime.now(UTC).date())
    ahead = (first.next_change - store.requests.now()).total_seconds() + 60
    clock.t += 1
    assert agent.tick() is None  # nothing due
    real = Agents._clock
    monkeypatch.setattr(Agents, "_clock", lambda self, s: real(self, s) + ahead)  # the database's clock stepped
    passes = []
    for _ in range(int(LEASE / 3) + 2):  # a renewal's time, tick by tick
        clock.t += 1
        passes.append(agent.tick())
    done = [p for p in passes if p is not None]
    assert done, "the window's change the store's clock stepped past waited for the resync"
    assert len(done) == 1, "the agent passed again and again"
