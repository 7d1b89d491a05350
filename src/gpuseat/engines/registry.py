"""The registry: the one list of seat engines.

Each engine is an :class:`EngineSpec` (name, the seat kinds it delivers, its class and its settings
model, imported only when used, so one engine's missing optional dependency never breaks another, and
a line for the docs). Third-party engines register an ``EngineSpec`` under the ``gpuseat.engines``
entry-point group::

    [project.entry-points."gpuseat.engines"]
    mycloud = "mypkg.gpuseat_engine:SPEC"
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from gpuseat.errors import InputError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from gpuseat.engines.base import Engine
    from gpuseat.engines.runner import Runner
    from gpuseat.store import CourseStore

ENTRY_POINT_GROUP = "gpuseat.engines"
#: the ``[policy]`` fields that stop a seat: idle, never connected, out of seat hours (every delivering
#: engine stops at 0 h: :mod:`gpuseat.engines.hours`)
POLICY_STOPS = ("idle_minutes", "never_connected_hours", "quota_hours")


@dataclass(frozen=True)
class EngineSpec:
    """One engine: ``target`` and ``settings`` are ``"module:Name"`` (None for ``manual``: nobody
    delivers those seats, gpuseat only records them). ``per_host``: a seat's ``host`` is the machine whose
    agent delivers it (an agent for another ``--host`` leaves the seat alone). ``login_on_host``: the seat's
    holder logs in to the seat's ``host`` itself, so a host given as a DNS name or address is their SSH way
    in before the engine records one (a hub's GPU host or a hypervisor is not). ``policy_stops``: the
    ``[policy]`` stops the engine carries out on its seats, of :data:`POLICY_STOPS`; ``gpuseat apply`` names
    the others where its seats' policy sets them (:func:`gpuseat.engines.idle.unenforced`)."""

    name: str
    kinds: tuple[str, ...]
    target: str | None
    settings: str | None
    doc: str
    per_host: bool = False
    login_on_host: bool = False
    policy_stops: tuple[str, ...] = ()

    def load(self) -> type[Any]:
        """The engine class (imported now)."""
        if self.target is None:
            raise InputError(
                f"engine {self.name!r} delivers nothing: its seats are set up by hand",
                where="engine",
                fix="give the seats an engine that delivers them (gpuseat seats add --engine …)",
            )
        engine: type[Any] = _attr(self.target)
        return engine

    def settings_model(self) -> type[BaseModel] | None:
        """The pydantic model of the engine's settings (None: the engine takes none)."""
        return _attr(self.settings) if self.settings else None


BUILTIN: tuple[EngineSpec, ...] = (
    EngineSpec(
        "host",
        ("gpu", "mig", "shared"),
        "gpuseat.engines.host.engine:HostEngine",
        "gpuseat.engines.host.engine:HostSettings",
        "One Linux GPU server: an account, a key and exactly one GPU or MIG device per participant.",
        per_host=True,
        login_on_host=True,
        policy_stops=POLICY_STOPS,
    ),
    EngineSpec(
        "libvirt",
        ("vm", "vgpu", "gpu"),
        "gpuseat.engines.libvirt.engine:LibvirtEngine",
        "gpuseat.engines.libvirt.engine:LibvirtSettings",
        "One libvirt VM per seat (passthrough or vGPU), its login made by a cloud-init seed.",
        policy_stops=("quota_hours",),
    ),
    EngineSpec(
        "jupyterhub",
        ("gpu", "mig", "shared", "vgpu"),
        "gpuseat.engines.jupyterhub.engine:JupyterHubEngine",
        "gpuseat.engines.jupyterhub.engine:JupyterHubSettings",
        "A JupyterHub whose spawner gives each user exactly their seat's GPU.",
        policy_stops=POLICY_STOPS,
    ),
    EngineSpec(
        "slurm",
        ("slurm", "gpu", "mig"),
        "gpuseat.engines.slurm.engine:SlurmEngine",
        "gpuseat.engines.slurm.engine:SlurmSettings",
        "A Slurm cluster: associations, per-person GPU limits, session reservations, jobs cancelled on revoke.",
        policy_stops=("quota_hours",),
    ),
    EngineSpec(
        "skypilot",
        ("cloud",),
        "gpuseat.engines.skypilot.engine:SkyPilotEngine",
        "gpuseat.engines.skypilot.engine:SkyPilotSettings",
        "Cloud seats launched, stopped and autostopped through SkyPilot's Python API.",
        policy_stops=("quota_hours",),
    ),
    EngineSpec(
        "kubernetes",
        ("gpu", "mig", "shared"),
        "gpuseat.engines.kubernetes.engine:KubernetesEngine",
        "gpuseat.engines.kubernetes.engine:KubernetesSettings",
        "Kubernetes: one pod per seat from rendered manifests (server-side dry run when a cluster is set).",
        policy_stops=("quota_hours",),
    ),
    EngineSpec("manual", ("gpu", "mig", "vgpu", "shared", "cloud", "slurm", "vm"), None, None, "Seats set up by hand."),
)


@cache
def specs() -> dict[str, EngineSpec]:
    """Every engine by name: the built-in ones, then those registered through entry points."""
    out = {s.name: s for s in BUILTIN}
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            spec = ep.load()
        except Exception:  # a broken plug-in must not break gpuseat; `gpuseat apply` names it
            continue
        if isinstance(spec, EngineSpec) and spec.name not in out:
            out[spec.name] = spec
    return out


def names() -> tuple[str, ...]:
    """Every engine name, ``manual`` included (what a seat's ``engine`` may be)."""
    return tuple(specs())


def delivering() -> tuple[str, ...]:
    """The engines that deliver seats (every one but ``manual``)."""
    return tuple(n for n, s in specs().items() if s.target is not None)


def spec(name: str) -> EngineSpec:
    """The engine called ``name``, or one clear error that lists the others."""
    found = specs().get(name)
    if found is None:
        raise InputError(f"no seat engine called {name!r}", where="engine", fix=f"use one of {', '.join(names())}")
    return found


def build(
    name: str,
    store: CourseStore,
    course: str,
    *,
    settings: dict[str, Any] | None = None,
    runner: Runner | None = None,
    host: str | None = None,
) -> Engine:
    """The engine ``name`` for ``course``: settings validated by its model (store values, then
    ``settings`` over them), commands through ``runner``, acting for ``host`` when it has several."""
    from gpuseat.engines.runner import default_runner

    found = spec(name)
    cls = found.load()
    model = found.settings_model()
    values = dict(settings or {})
    parsed = validate_settings(name, values) if model is not None else None
    engine: Engine = cls(store, course, settings=parsed, runner=runner or default_runner(), host=host)
    return engine


def validate_settings(name: str, values: dict[str, Any]) -> Any:
    """``values`` checked by engine ``name``'s settings model; one clear error per bad field."""
    from pydantic import ValidationError

    model = spec(name).settings_model()
    if model is None:
        if values:
            raise InputError(f"engine {name!r} takes no settings", where="settings", fix="remove them")
        return None
    try:
        return model.model_validate(_read_typed_numbers(name, model, values))
    except InputError as exc:  # a field's own rule (the one host rule of ssh_host, jump_host): say where it is set
        if exc.where not in model.model_fields:
            raise
        fix = f"{exc.fix}; set it with `gpuseat engines settings {name} {exc.where}=VALUE`" if exc.fix else None
        raise InputError(exc.what, where=f"{name} setting {exc.where}", fix=fix) from None
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ())) or "settings"
        if where in model.model_fields:  # a known setting's value: say how to set it, not every setting's name
            fix = f"give another value: gpuseat engines settings {name} {where}=VALUE"
        else:
            fix = f"settings are: {', '.join(model.model_fields)}"
        raise InputError(f"{name} setting {where}: {err.get('msg')}", where=f"{name} settings", fix=fix) from None


def _read_typed_numbers(name: str, model: type[BaseModel], values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with each number typed as text (``ssh_port=2222``, ``timeout=30``) read by the one rule for a
    number (:func:`gpuseat.core.numbers.plain_number`): pydantic's own reading also took ``1_0``, `` 12`` and
    ``1e1`` (as 10), as a number flag once did."""
    import typing

    from gpuseat.core.numbers import plain_number

    out = dict(values)
    for key, value in values.items():
        field = model.model_fields.get(key)
        if field is None or not isinstance(value, str):
            continue
        kinds = {k for k in (typing.get_args(field.annotation) or (field.annotation,)) if k is not type(None)}
        if kinds and kinds <= {int, float}:
            try:
                out[key] = plain_number(value, whole=kinds == {int})
            except ValueError as exc:
                raise InputError(
                    f"{name} setting {key}: {exc}",
                    where=f"{name} settings",
                    fix=f"set it with `gpuseat engines settings {name} {key}=NUMBER`",
                ) from None
    return out


def _attr(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)
