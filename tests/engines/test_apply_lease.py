"""``gpuseat apply`` and the agent lease: an engine and host whose agent runs are left to it (two passes at once
on one machine both ``useradd`` the same login, or a stale plan re-grants after a move); where none runs, the
apply holds the lease for its pass, so an agent starting meanwhile waits as standby. And agents that differ
only by ``--course`` share one lease (one agent per engine and host applies): the standby says what it leaves
unapplied and what to run instead. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuseat.engines.agent import Agent, AgentOptions
from gpuseat.engines.runner import Runner
from gpuseat.store import CourseStore

from .conftest import COURSE
from .test_agent_restore import _seats

LEASES = ("agent:host:gpu1", "agent:all:gpu1")

# a stand-in nvidia-smi, run by the apply's host engine as it plans: once, it looks at the store from a process of
# its own (the leases, and an agent of the host that ticks meanwhile), then fails (nothing is changed anywhere)
LOOK = """
import json, sys
from gpuseat.engines.agent import Agent, AgentOptions
from gpuseat.engines.runner import Runner
from gpuseat.store import open_store

store = open_store(sys.argv[1], create=False)
leases = {name: (store.agents.lease(name) or [None])[0] for name in sys.argv[3:]}
said = []
agent = Agent(store, AgentOptions(engine="host", host="gpu1"), runner=Runner(dry_run=True), say=said.append,
              holder="gpu1:2:meanwhile")
agent.tick()
with open(sys.argv[2], "w") as out:
    json.dump({"leases": leases, "role": agent.role}, out)
"""


def _stand_in(tmp_path: Path, url: str) -> Path:
    """The stand-in nvidia-smi (its first run looks, see :data:`LOOK`) and where it writes what it saw."""
    (tmp_path / "look.py").write_text(LOOK)
    seen = tmp_path / "seen.json"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        f"#!/bin/sh\n[ -e {tmp_path}/looked ] && exit 1\ntouch {tmp_path}/looked\n"
        f"{sys.executable} {tmp_path}/look.py '{url}' {seen} {' '.join(LEASES)} >&2\nexit 1\n"
    )
    smi.chmod(0o755)
    return seen


def _applied(store: CourseStore) -> list[str]:
    return [e.action for e in store.events.events("lab") if e.action in ("engine.apply", "drift.reverted")]


def test_apply_leaves_an_engine_and_host_to_its_running_agent(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    _seats(cli, url, tmp_path, "lab", 1)
    agent = Agent(store, AgentOptions(engine="host", host="gpu1", resync_s=3600), runner=Runner(dry_run=True),
                  say=lambda _line: None, holder="gpu1:1:agent")  # fmt: skip
    assert agent.tick() is not None and agent.role == "leader"
    before = (store.agents.events_head(), store.agents.holdings())

    r = cli("apply", "--engine", "host", "--host", "gpu1", "--db", url)
    assert r.code == 1 and "Traceback" not in r.err, (r.out, r.err)
    assert "error: host on gpu1: not applied: agent gpu1:1:agent holds lease agent:host:gpu1" in r.err
    assert "within seconds (gpuseat agent status)" in r.err and "stop that agent first" in r.err
    assert "Plan: 0 to add, 0 to change, 0 to take away." in r.out  # nothing planned here, nothing applied
    assert (store.agents.events_head(), store.agents.holdings()) == before and _applied(store) == []
    assert store.agents.lease("agent:host:gpu1")[0] == "gpu1:1:agent"  # type: ignore[index]
    assert store.agents.lease("agent:all:gpu1") is None  # given back
    every = cli("apply", "--format", "json", "--db", url)  # no flags: the seats' host is gpu1, left to the agent
    assert every.code == 1 and json.loads(every.out)["left_to_agents"] == [
        {"engine": "host", "host": "gpu1", "lease": "agent:host:gpu1", "holder": "gpu1:1:agent"}
    ]
    # a dry run changes nothing: always allowed, and the agent keeps its lease
    dry = cli("apply", "--dry-run", "--engine", "host", "--host", "gpu1", "--db", url)
    assert dry.code == 0 and "not applied" not in dry.err, dry.err
    assert store.agents.lease("agent:host:gpu1")[0] == "gpu1:1:agent"  # type: ignore[index]


def test_apply_holds_the_lease_for_its_pass_and_gives_it_back(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    _seats(cli, url, tmp_path, "lab", 1)
    seen = _stand_in(tmp_path, url)
    assert cli("engines", "settings", "host", f"nvidia_smi={tmp_path}/nvidia-smi", "--course", "lab",
               "--db", url).code == 0  # fmt: skip
    r = cli("apply", "--engine", "host", "--host", "gpu1", "--db", url)
    assert r.code == 1 and "cannot plan" in r.out, (r.out, r.err)  # the stand-in fails after its look
    looked = json.loads(seen.read_text())
    assert all(h is not None and ":apply-" in h for h in looked["leases"].values()), looked  # held by the apply
    assert looked["role"] == "standby"  # an agent started meanwhile waits
    assert [store.agents.lease(n) for n in LEASES] == [None, None]  # given back at the end
    agent = Agent(store, AgentOptions(engine="host", host="gpu1"), runner=Runner(dry_run=True),
                  say=lambda _line: None, holder="gpu1:3:after")  # fmt: skip
    agent.tick()
    assert agent.role == "leader"  # at its first look


def test_agents_of_different_courses_on_one_host_say_what_is_left_unapplied(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    (tmp_path / "two.toml").write_text(COURSE.replace('"lab"', '"two"'))
    store.courses.create_course(tmp_path / "two.toml", key="two")
    _seats(cli, url, tmp_path, "lab", 1)
    _seats(cli, url, tmp_path, "two", 2)
    said: dict[str, list[str]] = {}

    def agent(course: str | None) -> Agent:
        options = AgentOptions(engine="host", host="gpu1", course=course, resync_s=3600)
        lines = said.setdefault(str(course), [])
        return Agent(store, options, runner=Runner(dry_run=True), say=lines.append)

    lab, two, every, lab2 = agent("lab"), agent("two"), agent(None), agent("lab")
    assert lab.holder.endswith(" (course lab)") and " (course" not in every.holder
    for a in (lab, two, every, lab2, two):
        a.tick()
    assert (lab.role, two.role, every.role, lab2.role) == ("leader", "standby", "standby", "standby")
    told = [line for line in said["two"] if "not applied" in line]
    assert told == [
        f"agent {two.holder}: standby for agent:host:gpu1, whose holder {lab.holder} applies course lab only: "
        "course two is not applied on this host while it runs (one agent per engine and host applies); to apply "
        "it, stop both agents and run one for every course: gpuseat agent --engine host --host gpu1"
    ]  # said once, not at each tick
    assert [line for line in said["None"] if "not applied" in line] == [
        f"agent {every.holder}: standby for agent:host:gpu1, whose holder {lab.holder} applies course lab only: "
        "every course but lab is not applied on this host while it runs (one agent per engine and host applies); "
        "to apply it, stop that agent (this one applies every course)"
    ]
    assert not [line for line in said["lab"] if "not applied" in line]  # a fail-over standby of the same course

    # the leader of every course applies both: its standby of one course has nothing to say
    store.agents.drop_lease(lab.options.lease_name, lab.holder)
    done = every.tick()
    assert every.role == "leader" and done is not None and {p.course for p in done.planned} == {"lab", "two"}
    before = len(said["two"])
    two.tick()
    assert two.role == "standby" and not [line for line in said["two"][before:] if "not applied" in line]


def test_an_engine_command_leaves_its_host_to_the_running_agent(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    """`gpuseat host up` (as `slurm enroll` and `vms up`: one engine's command) ran its pass without the agent lease:
    beside a live agent of that host, both applied it at once. Now it is `gpuseat apply --engine host`'s pass:
    left to the agent (the machine untouched), a line on stderr, exit 1."""
    _seats(cli, url, tmp_path, "lab", 1)
    smi = tmp_path / "nvidia-smi"  # what the host engine reads as it plans: fails, so no step could touch this machine
    smi.write_text("#!/bin/sh\nexit 1\n")
    smi.chmod(0o755)
    agent = Agent(store, AgentOptions(engine="host", host="gpu1", resync_s=3600), runner=Runner(dry_run=True),
                  say=lambda _line: None, holder="gpu1:1:agent")  # fmt: skip
    assert agent.tick() is not None and agent.role == "leader"
    before = (store.agents.events_head(), store.agents.holdings())

    r = cli("host", "up", "--course", "lab", "--host", "gpu1", "--nvidia-smi", smi, "--db", url)
    assert r.code == 1 and "Traceback" not in r.err, (r.out, r.err)
    assert "error: host on gpu1: not applied: agent gpu1:1:agent holds lease agent:host:gpu1" in r.err
    assert "gpuseat host up: 1 engine(s) and host(s) left to the agent" in r.err and "stop that agent first" in r.err
    assert "cannot plan" not in r.out + r.err  # the plan of a host left to its agent is not this pass's
    assert store.agents.holdings() == before[1] and _applied(store) == []
    assert store.agents.lease("agent:host:gpu1")[0] == "gpu1:1:agent"  # type: ignore[index]
    assert store.agents.lease("agent:all:gpu1") is None  # given back
    down = cli("host", "down", "--course", "lab", "--host", "gpu1", "--format", "json", "--db", url)
    assert down.code == 1 and json.loads(down.out)["left_to_agents"] == [
        {"engine": "host", "host": "gpu1", "lease": "agent:host:gpu1", "holder": "gpu1:1:agent"}
    ]
    assert store.agents.holdings() == before[1] and _applied(store) == []
