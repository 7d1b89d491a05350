"""``gpuseat agent status`` lists every running agent of a lease, the standbys too (an organizer running two
agents for fail-over sees that the standby is alive), without hiding the leader's status row, and agents
long gone are neither shown nor kept."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from gpuseat.engines.agent import Agent, AgentOptions
from gpuseat.engines.runner import Runner
from gpuseat.store import CourseStore


def _status(cli: Callable[..., Any], url: str) -> dict[str, Any]:
    r = cli("agent", "status", "--format", "json", "--db", url)
    assert r.code == 0, r.err
    (row,) = json.loads(r.out)
    return dict(row)


def test_agent_status_lists_the_leader_and_its_standbys(store: CourseStore, url: str, cli: Callable[..., Any]) -> None:
    options = AgentOptions(engine="host", host="gpu1", resync_s=3600)
    agents = [
        Agent(store, options, runner=Runner(dry_run=True), say=lambda _line: None, holder=name)
        for name in ("gpu1:10:aaa", "gpu1:20:bbb", "gpu1:30:ccc")
    ]
    for agent in agents:
        agent.tick()
    assert [a.role for a in agents] == ["leader", "standby", "standby"]
    row = _status(cli, url)
    # the leader's status row as before (its keys kept) ...
    assert (row["holder"], row["role"], row["lease_holder"]) == ("gpu1:10:aaa", "leader", "gpu1:10:aaa")
    assert row["last_apply_at"] and row["cursor"] == store.agents.events_head()
    # ... and every agent running for the lease, the lease holder first, each with when it last reported
    assert [(a["holder"], a["role"]) for a in row["agents"]] == [
        ("gpu1:10:aaa", "leader"), ("gpu1:20:bbb", "standby"), ("gpu1:30:ccc", "standby"),
    ]  # fmt: skip
    assert all(a["reported_at"] and 0 <= a["reported_s_ago"] < 60 for a in row["agents"]), row["agents"]
    table = cli("agent", "status", "--db", url).out
    assert "gpu1:20:bbb standby" in table and "gpu1:30:ccc standby" in table and "gpu1:10:aaa leader" in table
    csv = cli("agent", "status", "--format", "csv", "--db", url).out
    assert "gpu1:20:bbb standby" in csv

    # a standby that stops cleanly is no longer listed; the leader's row is untouched
    halt = threading.Event()
    halt.set()
    agents[2].run(halt)
    row = _status(cli, url)
    assert [a["holder"] for a in row["agents"]] == ["gpu1:10:aaa", "gpu1:20:bbb"]

    # the leader dies without a word: its status row stays (the last pass), the standby takes over and is
    # then listed first as the leader
    store.agents.drop_lease(options.lease_name, "gpu1:10:aaa")
    assert agents[1].tick() is not None and agents[1].role == "leader"
    row = _status(cli, url)
    assert (row["holder"], row["role"]) == ("gpu1:20:bbb", "leader")
    assert row["agents"][0]["holder"] == "gpu1:20:bbb" and row["agents"][0]["role"] == "leader"


def test_agents_long_gone_are_not_shown_and_not_kept(store: CourseStore, url: str, cli: Callable[..., Any]) -> None:
    options = AgentOptions(engine="host", host="gpu1", resync_s=3600, lease_s=15)
    long_ago = time.time() - 3600
    store.agents.report_agent(options.lease_name, "gpu1:99:old", "standby", 45, now=long_ago)  # died an hour ago
    store.agents.report_agent("agent:host:gpu7", "gpu7:1:old", "leader", 45, now=long_ago)  # a host retired
    assert {h["holder"] for hs in store.agents.live_agents(now=long_ago + 1).values() for h in hs} == {
        "gpu1:99:old",
        "gpu7:1:old",
    }
    assert store.agents.live_agents() == {}  # past three lease periods: not shown
    agent = Agent(store, options, runner=Runner(dry_run=True), say=lambda _line: None, holder="gpu1:1:new")
    agent.tick()
    assert [a["holder"] for a in _status(cli, url)["agents"]] == ["gpu1:1:new"]
    # and deleted by the next agent to report, whatever its lease: asked as of an hour ago, they are gone
    then = store.agents.live_agents(now=long_ago + 1)
    assert [h["holder"] for hs in then.values() for h in hs] == ["gpu1:1:new"]
    # a report is renewed every third of a lease period, not at every tick
    first = store.agents.live_agents()[options.lease_name][0]["reported_at"]
    agent.tick()
    assert store.agents.live_agents()[options.lease_name][0]["reported_at"] == first
    agent._report_at = 0.0  # a third of the lease period passed
    agent.tick()
    assert store.agents.live_agents()[options.lease_name][0]["reported_at"] > first
