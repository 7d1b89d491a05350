"""A recording fake of SkyPilot's client SDK (the ``sky`` module) at the engine's SDK boundary.

Each call is recorded as ``(name, args, kwargs)`` and answered as SkyPilot answers: ``sky.launch``,
``sky.stop``, ``sky.down``, ``sky.autostop`` and ``sky.status`` return a request id, ``sky.get`` waits
for it (here: returns the result, or raises the request's error). :func:`check_signatures` binds every
recorded call to the *installed* SDK's signature, so a call the real SDK would refuse fails the test.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
import yaml


def import_sky(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The installed ``sky`` module, imported the first time with HOME in this run's temp folder.

    SkyPilot fixes its ``~/.sky`` paths when it is imported and writes there at once (``user_hash``,
    ``locks``), so a test run that imported it under the shell's HOME would change the shell's ``~/.sky``.
    """
    if "sky" not in sys.modules:
        home = tmp_path_factory.getbasetemp() / "sky-home"
        home.mkdir(exist_ok=True)
        shell_home = os.environ.get("HOME")
        os.environ["HOME"] = str(home)
        try:
            import sky  # noqa: F401
        finally:
            if shell_home is None:
                del os.environ["HOME"]
            else:
                os.environ["HOME"] = shell_home
    return sys.modules["sky"]


@pytest.fixture(scope="module", name="real_sky")
def installed_sky(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The ``real_sky`` fixture: the installed ``sky`` module (:func:`import_sky`), for checking the fake
    against it; required on CI, skipped elsewhere when SkyPilot is not installed. A test module imports it
    (``from .fakesky import installed_sky``)."""
    if importlib.util.find_spec("sky") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("skypilot is not installed (the dev extra installs it)")
        pytest.skip("skypilot is not installed")
    return import_sky(tmp_path_factory)


class ClusterDoesNotExist(Exception):
    """Named as SkyPilot's (``sky.exceptions.ClusterDoesNotExist``)."""


class ResourcesUnavailableError(Exception):
    """Named as SkyPilot's (``sky.exceptions.ResourcesUnavailableError``)."""


@dataclass
class FakeTask:
    config: dict[str, Any]


@dataclass
class FakeSky:
    """The ``sky`` module as gpuseat uses it; ``clusters``: name → status record fields."""

    real: Any  # the installed sky module: its enums (StatusRefreshMode) are passed through
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)
    clusters: dict[str, dict[str, Any]] = field(default_factory=dict)
    fail_launch: str | None = None
    timeline: list[str] = field(default_factory=list)  # shared with the runner: the order of everything
    _results: dict[str, Any] = field(default_factory=dict)
    _n: int = 0
    _disks: int = 0

    def __post_init__(self) -> None:
        self.StatusRefreshMode = self.real.StatusRefreshMode
        fake = self

        class Task:
            @staticmethod
            def from_yaml_config(config: dict[str, Any], *args: Any, **kwargs: Any) -> FakeTask:
                fake._call("Task.from_yaml_config", (config, *args), kwargs)
                return FakeTask(config)

        self.Task = Task

    # -- requests ------------------------------------------------------------------------------------

    def _call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.calls.append((name, args, kwargs))
        self.timeline.append(f"sky.{name} {args[0] if args and isinstance(args[0], str) else ''}".strip())

    def _request(self, result: Any) -> str:
        self._n += 1
        rid = f"req-{self._n}"
        self._results[rid] = result
        return rid

    def get(self, request_id: str) -> Any:
        self._call("get", (request_id,), {})
        result = self._results.pop(request_id)
        if isinstance(result, Exception):
            raise result
        return result

    def launch(self, task: FakeTask, cluster_name: str | None = None, **kwargs: Any) -> str:
        self._call("launch", (task,), {"cluster_name": cluster_name, **kwargs})
        self.timeline[-1] = f"sky.launch {cluster_name}"
        if self.fail_launch:
            return self._request(ResourcesUnavailableError(self.fail_launch))
        assert cluster_name is not None
        n = len(self.clusters) + 10
        old = self.clusters.get(cluster_name)
        if old is None:
            self._disks += 1
        self.clusters[cluster_name] = {
            "status": "UP",
            "autostop": kwargs.get("idle_minutes_to_autostop") or -1,
            "ip": f"54.12.3.{n}",
            "envs": task.config.get("envs", {}),
            "setup": task.config.get("setup", ""),
            # a stopped or up cluster is started (its setup re-run) on the disk it has; only a new one gets a new disk
            "disk": old["disk"] if old is not None and "disk" in old else f"disk-{self._disks}",
        }
        return self._request((1, None))

    def stop(self, cluster_name: str, **kwargs: Any) -> str:
        self._call("stop", (cluster_name,), kwargs)
        found = self.clusters.get(cluster_name)
        if found is None:
            return self._request(ClusterDoesNotExist(f"Cluster {cluster_name} does not exist."))
        found.update(status="STOPPED", ip=None, autostop=-1)
        return self._request(None)

    def down(self, cluster_name: str, **kwargs: Any) -> str:
        self._call("down", (cluster_name,), kwargs)
        if self.clusters.pop(cluster_name, None) is None:
            return self._request(ClusterDoesNotExist(f"Cluster {cluster_name} does not exist."))
        return self._request(None)

    def autostop(self, cluster_name: str, idle_minutes: int, **kwargs: Any) -> str:
        self._call("autostop", (cluster_name, idle_minutes), kwargs)
        self.clusters[cluster_name]["autostop"] = idle_minutes
        return self._request(None)

    def status(self, cluster_names: list[str] | None = None, **kwargs: Any) -> str:
        self._call("status", (cluster_names,), kwargs)
        out = []
        for name, c in sorted(self.clusters.items()):
            if cluster_names is not None and name not in cluster_names:
                continue
            handle = SimpleNamespace(head_ip=c["ip"], head_ssh_port=22) if c["ip"] else None
            out.append(
                SimpleNamespace(
                    name=name,
                    status=SimpleNamespace(value=c["status"]),
                    autostop=c["autostop"],
                    handle=handle,
                    last_creation_yaml=yaml.safe_dump({"envs": c["envs"]}),
                )
            )
        return self._request(out)

    # -- what was called -------------------------------------------------------------------------------

    def verbs(self) -> list[str]:
        """The SDK calls that change something, as ``verb cluster``."""
        out = []
        for name, args, kwargs in self.calls:
            if name in ("launch",):
                out.append(f"launch {kwargs['cluster_name']}")
            elif name in ("stop", "down", "autostop"):
                out.append(f"{name} {args[0]}")
        return out

    def launched(self) -> list[dict[str, Any]]:
        """The task configs handed to ``sky.launch``, in order."""
        return [c for n, (c, *_), _ in self.calls if n == "Task.from_yaml_config"]


def check_signatures(fake: FakeSky) -> int:
    """Bind every recorded call to the installed SDK's signature (and check the enums' types)."""
    from sky.skylet.autostop_lib import AutostopWaitFor

    real = fake.real
    for name, args, kwargs in fake.calls:
        target = real.Task.from_yaml_config if name == "Task.from_yaml_config" else getattr(real, name)
        inspect.signature(target).bind(*args, **kwargs)
        if "wait_for" in kwargs:
            assert isinstance(kwargs["wait_for"], AutostopWaitFor), kwargs
        if "refresh" in kwargs:
            assert isinstance(kwargs["refresh"], real.StatusRefreshMode), kwargs
        for k in ("idle_minutes_to_autostop", "idle_minutes"):
            if k in kwargs:
                assert isinstance(kwargs[k], int), kwargs
    return len(fake.calls)
