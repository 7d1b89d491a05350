"""An agent started without ``--host`` applies the host its per-host seats are on (the host engine's "default: the
only one"), which is often not this machine's name (``vm``, ``ip-10-0-0-5`` beside seats on ``gpu1``): its lease is
named after that host, as ``gpuseat apply``'s and the engine commands' are, so they and an agent given ``--host``
exclude each other. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuseat.engines.agent import Agent, AgentOptions, ApplyLease, Held
from gpuseat.engines.runner import Runner
from gpuseat.store import CourseStore

from .test_agent_restore import _seats

THIS_MACHINE = "builder-vm"  # this machine's name, never a seat's host (the seats are on gpu1)


@pytest.fixture(autouse=True)
def _named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: THIS_MACHINE)


def _agent(store: CourseStore, host: str | None, holder: str, engine: str | None = "host") -> Agent:
    options = AgentOptions(engine=engine, host=host, resync_s=3600)
    return Agent(store, options, runner=Runner(dry_run=True), say=lambda _line: None, holder=holder)


def test_apply_leaves_to_an_agent_started_without_host(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    _seats(cli, url, tmp_path, "lab", 1)
    agent = _agent(store, None, f"{THIS_MACHINE}:1:agent")
    assert agent.tick() is not None and agent.role == "leader"
    assert agent.options.lease_name == "agent:host:gpu1"  # the seats' host, not this machine's name
    before = (store.agents.events_head(), store.agents.holdings())

    r = cli("apply", "--format", "json", "--db", url)
    assert r.code == 1 and "Traceback" not in r.err, (r.out, r.err)
    assert json.loads(r.out)["left_to_agents"] == [
        {"engine": "host", "host": "gpu1", "lease": "agent:host:gpu1", "holder": f"{THIS_MACHINE}:1:agent"}
    ]
    assert f"error: host on gpu1: not applied: agent {THIS_MACHINE}:1:agent holds lease agent:host:gpu1" in r.err
    up = cli("host", "up", "--course", "lab", "--db", url)  # an engine command without --host: the same
    assert up.code == 1 and "holds lease agent:host:gpu1" in up.err, (up.out, up.err)
    assert (store.agents.events_head(), store.agents.holdings()) == before
    status = json.loads(cli("agent", "status", "--format", "json", "--db", url).out)
    assert [(s["name"], s["lease_holder"]) for s in status] == [("agent:host:gpu1", f"{THIS_MACHINE}:1:agent")]


def test_agents_with_and_without_host_of_one_seat_host_are_one_leader(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    _seats(cli, url, tmp_path, "lab", 1)
    for engine in ("host", None):  # an agent of the host engine, then one of every engine (agent:all:gpu1)
        bare, named = _agent(store, None, f"{THIS_MACHINE}:1:bare", engine), _agent(store, "gpu1", "gpu1:2:n", engine)
        for a in (bare, named, bare, named):
            a.tick()
        assert (bare.role, named.role) == ("leader", "standby")
        assert bare.options.lease_name == named.options.lease_name == f"agent:{engine or 'all'}:gpu1"
    # the agent of every engine applies the engines that are not per host for this machine, as an apply without
    # --host leases them (agent:all:THIS-MACHINE): it holds that lease too
    lease = ApplyLease(store)
    lease.take([("libvirt", None)])
    assert list(lease.held.values()) == [Held("libvirt", None, f"agent:all:{THIS_MACHINE}", bare.holder)]
    lease.give_back()
    stop = threading.Event()
    stop.set()
    bare.run(stop)  # stopped at once: both leases given back
    assert store.agents.lease("agent:all:gpu1") is None and store.agents.lease(f"agent:all:{THIS_MACHINE}") is None
    lease = ApplyLease(store)
    lease.take([("libvirt", None)])  # an apply of such an engine runs: a new agent of every engine waits for it
    late = _agent(store, None, f"{THIS_MACHINE}:4:late", engine=None)
    assert late.tick() is None and late.role == "standby"
    lease.give_back()
    assert late.tick() is not None and late.role == "leader"


def test_an_apply_leaves_a_plan_that_failed_without_host_to_the_agent_of_its_seats_host(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    """A per-host engine that could not plan without --host (here: nvidia-smi fails) carried no host, so the apply
    kept it as its own error beside the agent that applies that host."""
    _seats(cli, url, tmp_path, "lab", 1)
    agent = _agent(store, "gpu1", "gpu1:1:agent")
    assert agent.tick() is not None and agent.role == "leader"
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nexit 1\n")
    smi.chmod(0o755)
    assert cli("engines", "settings", "host", f"nvidia_smi={smi}", "--course", "lab", "--db", url).code == 0
    r = cli("apply", "--format", "json", "--db", url)
    assert r.code == 1 and "Traceback" not in r.err, (r.out, r.err)
    out = json.loads(r.out)
    assert out["plans"] == [] and [h["host"] for h in out["left_to_agents"]] == ["gpu1"]
    assert "cannot plan" not in r.err and "holds lease agent:host:gpu1" in r.err


def test_an_agent_without_host_keeps_the_host_it_found(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    """Seats added later on a second host are that host's agent's: the agent found gpu1 and keeps it."""
    said: list[str] = []
    agent = _agent(store, None, f"{THIS_MACHINE}:1:agent")
    agent.say = said.append
    agent.tick()
    assert agent.options.lease_name == f"agent:host:{THIS_MACHINE}"  # no seat yet: this machine's name
    _seats(cli, url, tmp_path, "lab", 1)
    agent._renew_at = 0.0  # the next renewal (a third of a lease period on)
    done = agent.tick()  # its old lease given back, the seats' host's taken (free)
    assert agent.role == "leader" and agent.options.lease_name == "agent:host:gpu1" and done is not None
    assert store.agents.lease(f"agent:host:{THIS_MACHINE}") is None
    assert f"agent {agent.holder}: its seats are on host gpu1 (no --host): lease agent:host:gpu1" in said
    (tmp_path / "two.txt").write_text("GPU 0: NVIDIA H200 (UUID: GPU-00000009-0000-4000-8000-000000000000)\n")
    r = cli("seats", "add", "--from-nvidia-smi", tmp_path / "two.txt", "--engine", "host", "--host", "gpu2",
            "--course", "lab", "--db", url)  # fmt: skip
    assert r.code == 0, r.err
    again = agent.tick()
    assert again is not None and {p.host for p in again.planned} == {"gpu1"}, [p.to_dict() for p in again.planned]
    assert agent.options.lease_name == "agent:host:gpu1"
    fresh = _agent(store, None, f"{THIS_MACHINE}:2:fresh")  # started now: it cannot tell, and says so once
    fresh.say = said.append
    fresh.tick()
    fresh.tick()
    assert fresh.options.lease_name == f"agent:host:{THIS_MACHINE}"
    assert len([line for line in said if "several hosts (gpu1, gpu2)" in line]) == 1
