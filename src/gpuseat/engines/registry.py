"""The registry: the one list of seat engines.

Each engine is an :class:`EngineSpec` (name, the seat kinds it delivers, its class and its settings
model, imported only when used, so one engine's missing optional dependency never breaks another, and
a line for the docs). Third-party engines register an ``EngineSpec`` under the ``gpuseat.engines``
entry-point group (docs/engines.md)::

    [project.entry-points."gpuseat.engines"]
    mycloud = "mypkg.gpuseat_engine:SPEC"

A plug-in that cannot be used (it fails to import, names no ``EngineSpec``, takes a built-in's name) never
breaks gpuseat: it is left out of :func:`specs`, and :func:`unusable` keeps why, which ``gpuseat engines list``
prints and every use of its name says (``seats add --engine``, ``apply``, ``seats check``).
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from gpuseat.errors import EngineError, InputError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from gpuseat.engines.base import Engine
    from gpuseat.engines.runner import Runner
    from gpuseat.store import CourseStore

ENTRY_POINT_GROUP = "gpuseat.engines"
#: the ``[policy]`` fields that stop a seat: idle, never connected, out of seat hours (every delivering
#: engine stops at 0 h: :mod:`gpuseat.engines.hours`)
POLICY_STOPS = ("idle_minutes", "never_connected_hours", "quota_hours")
#: an engine's name: what ``seats add --engine`` stores in the seats table's ``engine`` column (16 characters)
#: and what ``apply --set ENGINE.KEY=VALUE`` reads up to the first dot
ENGINE_NAME = re.compile(r"[a-z][a-z0-9_-]{0,15}")


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

    def __post_init__(self) -> None:
        if not ENGINE_NAME.fullmatch(self.name):
            raise ValueError(
                f"engine name {self.name!r}: 1 to 16 lowercase letters, digits, '-' or '_', starting with a letter"
            )
        odd = [s for s in self.policy_stops if s not in POLICY_STOPS]
        if odd:
            raise ValueError(f"engine {self.name}: policy_stops {odd} are not of {', '.join(POLICY_STOPS)}")

    def load(self) -> type[Any]:
        """The engine class (imported now); it must name itself as the registry does."""
        if self.target is None:
            raise InputError(
                f"engine {self.name!r} delivers nothing: its seats are set up by hand",
                where="engine",
                fix="give the seats an engine that delivers them (gpuseat seats add --engine …)",
            )
        engine: type[Any] = _attr(self.target)
        named = getattr(engine, "name", None)
        if named != self.name:
            raise EngineError(
                f"{self.target} names itself {named!r}, but its EngineSpec registers it as {self.name!r}",
                where=f"engine {self.name}",
                fix=f'set name = "{self.name}" on the class (its steps, events and holdings carry that name)',
            )
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
def _plugins() -> tuple[dict[str, EngineSpec], dict[str, str]]:
    """The engines registered through entry points, by name, and why each plug-in that cannot be used cannot
    (by its entry point's name, the name it is meant to be used by)."""
    from importlib.metadata import entry_points

    found: dict[str, EngineSpec] = {}
    broken: dict[str, str] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        package = f", package {dist.name} {dist.version}" if dist else ""
        source = f"the plug-in engine {ep.name} ({ep.value}{package})"
        try:
            spec = ep.load()
        except Exception as exc:  # a broken plug-in must not break gpuseat: each use of its name says why
            broken.setdefault(ep.name, f"{source} cannot load: {type(exc).__name__}: {exc}")
            continue
        if not isinstance(spec, EngineSpec):
            broken.setdefault(ep.name, f"{source} names a {type(spec).__name__}, not an EngineSpec")
        elif spec.name in {s.name for s in BUILTIN} or spec.name in found:
            broken.setdefault(ep.name, f"{source} is left out: an engine called {spec.name!r} is registered already")
        else:
            found[spec.name] = spec
    return found, broken


@cache
def specs() -> dict[str, EngineSpec]:
    """Every engine by name: the built-in ones, then those registered through entry points."""
    return {**{s.name: s for s in BUILTIN}, **_plugins()[0]}


def unusable() -> dict[str, str]:
    """The plug-ins installed that cannot be used, each with why: name → reason (for a person)."""
    return dict(_plugins()[1])


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
        why = unusable().get(name)
        if why is not None:  # installed, so not a typo: the installation is what is wrong
            raise EngineError(why, where=f"engine {name}", fix=_FIX_PLUGIN)
        raise InputError(f"no seat engine called {name!r}", where="engine", fix=f"use one of {', '.join(names())}")
    return found


_FIX_PLUGIN = "fix or reinstall its package in gpuseat's environment (docs/engines.md), or uninstall it"


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
