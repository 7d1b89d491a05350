"""Which courses an agent for one ``--host`` plans once a second server is in the store: a host engine's
course on another server is that server's agent's; engines whose seats name a node, not the agent's
machine (Slurm, Kubernetes), keep every course."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuseat.engines.apply import targets
from gpuseat.store import open_store

COURSE = 'name = "NAME"\nparticipants = 2\n[schedule]\nstart = 2026-09-07\ndays = 5\n'


def test_an_agent_for_one_host_plans_its_own_courses_and_every_node_engines(
    tmp_path: Path, cli: Callable[..., Any]
) -> None:
    db = f"sqlite:///{tmp_path / 'c.db'}"
    servers = (("one", "host", "gpu1"), ("two", "host", "gpu2"), ("hpc", "slurm", "node7"))
    for i, (key, engine, host) in enumerate(servers):
        (tmp_path / f"{key}.toml").write_text(COURSE.replace("NAME", key))
        uuid = f"GPU-{i:08d}-0000-4000-8000-000000000000"
        (tmp_path / f"{key}.txt").write_text(f"GPU 0: NVIDIA H200 (UUID: {uuid})\n")
        for args in (
            ("course", "create", tmp_path / f"{key}.toml", "--key", key),
            ("seats", "add", "--from-nvidia-smi", tmp_path / f"{key}.txt", "--engine", engine, "--host", host,
             "--course", key),
        ):  # fmt: skip
            r = cli(*args, "--db", db)
            assert r.code == 0, (args, r.err)
    with open_store(db) as store:
        assert targets(store, course=None, engine=None, host="gpu1") == [("hpc", "slurm"), ("one", "host")]
        assert targets(store, course=None, engine=None, host="slurmctl") == [("hpc", "slurm")]
        assert targets(store, course=None, engine=None) == [("hpc", "slurm"), ("one", "host"), ("two", "host")]
        # asked for by name, a course is planned wherever (the engine then says it is not on this host)
        assert targets(store, course="two", engine=None, host="gpu1") == [("two", "host")]
        # what a server's agent last found there keeps the course its to plan (a deleted course too)
        store.agents.set_holdings("two", "host", "gpu1", [{"what": "key", "login": "old", "engine": "host"}])
        assert ("two", "host") in targets(store, course=None, engine=None, host="gpu1")
        assert ("two", "host") in targets(store, course=None, engine=None, host="gpu1", courses=["two"])
        assert targets(store, course=None, engine=None, host="gpu3", courses=["two"]) == []
