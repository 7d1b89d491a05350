"""The few SkyPilot SDK calls gpuseat makes, behind one small class (the boundary tests replace).

SkyPilot's client SDK is asynchronous: ``sky.launch``, ``sky.stop``, ``sky.down``, ``sky.autostop`` and
``sky.status`` each return a request id and ``sky.get(request_id)`` waits for the result (and raises
the request's own error). :class:`SkyPilot` makes each call and waits for it, turns any error into one
:class:`~gpuseat.errors.EngineError` that names the call and SkyPilot's message, and records the call
in the runner's log, so an apply report lists SDK calls beside the commands. In a dry run the calls
that change a cluster are recorded and not made; ``status`` still runs (a dry plan sees the clouds).

``sky`` is imported on first use (it takes seconds, and an organizer machine without SkyPilot still
runs every other engine); tests hand :class:`SkyPilot` a recording fake of the module instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from gpuseat.engines.runner import Ran, Runner
from gpuseat.errors import EngineError

#: SkyPilot's cluster states (``sky.ClusterStatus``): INIT is provisioning (or abnormal), UP runs, STOPPED
#: keeps its disk; a cluster that was torn down is not listed at all
STATUSES = ("INIT", "UP", "STOPPED", "AUTOSTOPPING", "PENDING")


def load_sky() -> Any:
    """The installed ``sky`` module (one clear error when SkyPilot is not installed)."""
    try:
        import sky
    except ImportError:
        raise EngineError(
            "the skypilot package is not installed on this machine",
            where="skypilot",
            fix="pip install 'skypilot[aws]' (or the clouds your course rents) where the agent runs",
        ) from None
    return sky


@dataclass(frozen=True)
class Cluster:
    """One SkyPilot cluster as ``sky.status`` reports it."""

    name: str
    status: str
    autostop: int = -1  # idle minutes before it stops itself; negative: no autostop
    ip: str | None = None
    port: int | None = None
    course: str | None = None  # GPUSEAT_COURSE of the task it was created with, when SkyPilot kept it

    @property
    def up(self) -> bool:
        """True when the cluster runs (participants can log in)."""
        return self.status == "UP"


def _text(value: Any) -> str:
    raw = getattr(value, "value", value)
    return str(raw).upper()


def _cluster(record: Any) -> Cluster:
    """A ``StatusResponse`` (or a mapping of the same fields) → :class:`Cluster`."""
    get: Callable[[str], Any] = record.get if isinstance(record, dict) else (lambda k: getattr(record, k, None))
    handle = get("handle")
    ip = getattr(handle, "head_ip", None) if handle is not None else None
    port = getattr(handle, "head_ssh_port", None) if handle is not None else None
    course = None
    created = get("last_creation_yaml")
    if isinstance(created, str) and created:
        try:
            doc = yaml.safe_load(created)
        except yaml.YAMLError:
            doc = None
        envs = doc.get("envs") if isinstance(doc, dict) else None
        if isinstance(envs, dict) and envs.get("GPUSEAT_COURSE"):
            course = str(envs["GPUSEAT_COURSE"])
    autostop = get("autostop")
    return Cluster(
        name=str(get("name")),
        status=_text(get("status")),
        autostop=int(autostop) if isinstance(autostop, int) else -1,
        ip=str(ip) if ip else None,
        port=int(port) if isinstance(port, int) else None,
        course=course,
    )


class SkyPilot:
    """SkyPilot's Python API for gpuseat: launch, stop, down, autostop and status, each waited for."""

    def __init__(self, module: Any | None = None, *, runner: Runner | None = None) -> None:
        self._module = module
        self.runner = runner

    @property
    def sky(self) -> Any:
        """The SDK module (``sky``, imported on first use)."""
        if self._module is None:
            self._module = load_sky()
        return self._module

    # -- the calls ---------------------------------------------------------------------------------

    def launch(self, cluster: str, task: dict[str, Any], *, idle_minutes: int | None = None, wait: bool = True) -> Any:
        """``sky.launch`` the task as ``cluster`` (a new cluster, a stopped one started, or setup re-run on
        an UP one); ``idle_minutes``: it stops itself that many minutes later (a hard limit, idle or not).

        ``wait=False`` returns the request id at once (None in a dry run): several seats launch side by
        side, and :meth:`result` waits for each."""
        sky = self.sky

        def call() -> Any:
            kwargs: dict[str, Any] = {"cluster_name": cluster, "retry_until_up": False}
            if idle_minutes is not None:
                kwargs["idle_minutes_to_autostop"] = idle_minutes
                kwargs["wait_for"] = self._wait_for("none")
            return sky.launch(sky.Task.from_yaml_config(task), **kwargs)

        extra = (f"idle_minutes={idle_minutes}",) if idle_minutes is not None else ()
        return self._wait("launch", cluster, call, mutates=True, extra=extra, wait=wait)

    def result(self, verb: str, target: str, request_id: Any) -> Any:
        """Wait for a request made with ``wait=False`` (``sky.get``); its error as one EngineError."""
        return self._wait(verb, target, lambda: request_id, mutates=False, extra=("(waited)",))

    def stop(self, cluster: str) -> None:
        """``sky.stop``: the cluster stops and keeps its disk (a cluster that no longer exists is fine)."""
        self._wait("stop", cluster, lambda: self.sky.stop(cluster), mutates=True, gone_ok=True)

    def down(self, cluster: str) -> None:
        """``sky.down``: the cluster and its disk are gone (a cluster that no longer exists is fine)."""
        self._wait("down", cluster, lambda: self.sky.down(cluster), mutates=True, gone_ok=True)

    def autostop(self, cluster: str, idle_minutes: int) -> None:
        """``sky.autostop``: the cluster stops itself ``idle_minutes`` from now (a hard limit: ``wait_for``
        none), so a seat stops at its access window's end even while no agent runs."""
        self._wait(
            "autostop",
            cluster,
            lambda: self.sky.autostop(cluster, idle_minutes, wait_for=self._wait_for("none")),
            mutates=True,
            extra=(str(idle_minutes),),
        )

    def status(self, clusters: Sequence[str] | None = None) -> dict[str, Cluster]:
        """``sky.status`` (refreshed where SkyPilot thinks it matters: autostopped clusters) → name → cluster."""
        names = list(clusters) if clusters is not None else None
        if names == []:
            return {}

        def call() -> Any:
            return self.sky.status(names, refresh=self.sky.StatusRefreshMode.AUTO)

        found = self._wait("status", ",".join(names or ["*"]), call, mutates=False)
        out = {}
        for record in found or ():
            c = _cluster(record)
            out[c.name] = c
        return out

    # -- internals ---------------------------------------------------------------------------------

    def _wait_for(self, value: str) -> Any:
        enum = getattr(self.sky, "AutostopWaitFor", None)
        if enum is None:  # the installed SDK keeps it in sky.skylet.autostop_lib
            from sky.skylet.autostop_lib import AutostopWaitFor

            enum = AutostopWaitFor
        return enum(value)

    def _wait(
        self,
        verb: str,
        target: str,
        call: Callable[[], Any],
        *,
        mutates: bool,
        extra: Sequence[str] = (),
        gone_ok: bool = False,
        wait: bool = True,
    ) -> Any:
        argv = (f"sky.{verb}", target, *extra)
        if mutates and self.runner is not None and self.runner.dry_run:
            self._record(Ran(argv, None, None, 0.0, dry=True))
            return None
        started = time.monotonic()
        try:
            request = call()
            if not wait:
                self._record(Ran(argv, None, 0, time.monotonic() - started, f"request {request}"))
                return request
            result = self.sky.get(request)
        except EngineError:
            raise
        except Exception as exc:  # SkyPilot raises its own exceptions (ClusterNotUpError, ResourcesUnavailableError …)
            message = f"{type(exc).__name__}: {exc}".strip()[:500]
            if gone_ok and type(exc).__name__ == "ClusterDoesNotExist":
                self._record(Ran(argv, None, 0, time.monotonic() - started, "", message))
                return None
            self._record(Ran(argv, None, 1, time.monotonic() - started, "", message))
            raise EngineError(f"sky.{verb} {target} failed: {message}", where="skypilot") from None
        self._record(Ran(argv, None, 0, time.monotonic() - started))
        return result

    def _record(self, ran: Ran) -> None:
        if self.runner is not None:
            self.runner.log.append(ran)
