"""Putting one seat on one JupyterHub spawner: environment, Docker device request or Kubernetes resource.

Which spawner family an object belongs to is read from its class hierarchy (by class name, so neither
kubespawner nor dockerspawner has to be importable here):

* local processes (``LocalProcessSpawner``, ``SimpleLocalProcessSpawner``, ``SystemdSpawner``, sudo and
  batch spawners): ``CUDA_VISIBLE_DEVICES`` is the seat's GPU or MIG UUID, ``GPUSEAT_SEAT`` its key;
* ``DockerSpawner`` (and its subclasses): a ``device_requests`` entry for exactly that device in
  ``extra_host_config`` plus ``NVIDIA_VISIBLE_DEVICES`` (dockerspawner#331: without it every user got
  the same GPU);
* ``KubeSpawner``: ``extra_resource_limits`` of one ``nvidia.com/gpu`` (or, under the device plugin's
  ``mixed`` MIG strategy, ``nvidia.com/mig-<profile>``) and a node selector for the seat's host (the
  node's name; a host that can name no node is refused, :func:`gpuseat.render.k8s.node_problem`). On
  Kubernetes the device plugin picks the device on that node, so the UUID is not pinned there.

Every value is assigned as a new dict, never updated in place: spawner objects live on between spawns
and class-level config dicts are shared, so an in-place update would leak one user's GPU into the next
spawn (planetary-computer-hub#66).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from gpuseat.render.k8s import GPU, HOSTNAME_LABEL, mig_resource, node_problem

if TYPE_CHECKING:
    from gpuseat.jupyterhub.config import MigStrategy

Flavour = Literal["local", "docker", "kubernetes"]

# Seat kinds a hub server can hold (the others are VMs, cloud machines or Slurm jobs with their own engine).
HUB_KINDS = frozenset({"gpu", "mig", "shared"})


@dataclass(frozen=True, slots=True)
class Grant:
    """What one server gets from its seat."""

    seat: str  # the seat's key (GPUSEAT_SEAT)
    kind: str  # gpu | mig | shared
    device_uuid: str | None  # GPU-… or MIG-…; None until the seat is provisioned
    host: str | None
    profile: str | None  # MIG profile such as 1g.10gb


def flavour(spawner: object) -> Flavour:
    """The spawner family, from the names of the classes it derives from."""
    names = {cls.__name__ for cls in type(spawner).__mro__}
    if "KubeSpawner" in names:
        return "kubernetes"
    if "DockerSpawner" in names:
        return "docker"
    return "local"


def kube_resource(grant: Grant, mig_strategy: MigStrategy = "mixed") -> str:
    """The extended resource a KubeSpawner pod asks for (single strategy: MIG slices are ``nvidia.com/gpu``)."""
    if grant.kind == "mig" and mig_strategy == "mixed" and grant.profile:
        return mig_resource(grant.profile)
    return GPU


def missing_for(grant: Grant, kind: Flavour) -> str | None:
    """What the seat lacks to be handed to this spawner family (None when nothing)."""
    if grant.kind not in HUB_KINDS:
        return f"seat {grant.seat} is a {grant.kind} seat, which JupyterHub cannot start"
    if kind == "kubernetes":
        if grant.kind == "mig" and not grant.profile:
            return f"MIG seat {grant.seat} has no profile (such as 1g.10gb) for its Kubernetes resource"
        return node_problem(grant.seat, grant.host)  # else a Pod pinned to no node: Pending forever
    if not grant.device_uuid:
        return f"seat {grant.seat} has no device UUID yet"
    return None


def apply(spawner: Any, grant: Grant, *, mig_strategy: MigStrategy = "mixed") -> Flavour:
    """Give ``spawner`` exactly the seat's device; returns the family it was treated as."""
    kind = flavour(spawner)
    env = {k: v for k, v in dict(spawner.environment).items() if k not in _SEAT_ENV}
    env["GPUSEAT_SEAT"] = grant.seat
    if kind == "kubernetes":
        _kube_seat(spawner, grant, mig_strategy)
        _seat_again_after_profile(spawner, grant, mig_strategy)
    elif kind == "docker":
        uuid = str(grant.device_uuid)
        env["NVIDIA_VISIBLE_DEVICES"] = uuid
        request = {"driver": "nvidia", "device_ids": [uuid], "capabilities": [["gpu"]]}
        spawner.extra_host_config = _with_device_request(spawner.extra_host_config, request)
    else:
        env["CUDA_VISIBLE_DEVICES"] = str(grant.device_uuid)
    spawner.environment = env
    return kind


_SEAT_ENV = frozenset({"GPUSEAT_SEAT", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"})


def _kube_seat(spawner: Any, grant: Grant, mig_strategy: MigStrategy) -> None:
    """The seat's GPU resource (and no other) and its node on a KubeSpawner."""
    limits = {k: v for k, v in dict(spawner.extra_resource_limits).items() if not _is_gpu_resource(k)}
    limits[kube_resource(grant, mig_strategy)] = "1"
    spawner.extra_resource_limits = limits
    guarantees = dict(spawner.extra_resource_guarantees)
    spawner.extra_resource_guarantees = {k: v for k, v in guarantees.items() if not _is_gpu_resource(k)}
    selector = {k: v for k, v in dict(spawner.node_selector).items() if k != HOSTNAME_LABEL}
    if grant.host:
        selector[HOSTNAME_LABEL] = grant.host
    spawner.node_selector = selector
    extra = dict(spawner.extra_container_config or {})
    if isinstance(extra.get("resources"), dict):  # it replaces the container's resources as a whole
        resources = dict(extra["resources"])
        for part in ("limits", "requests"):
            if isinstance(resources.get(part), dict):
                resources[part] = {k: v for k, v in resources[part].items() if not _is_gpu_resource(k)}
        resources["limits"] = {**(resources.get("limits") or {}), kube_resource(grant, mig_strategy): "1"}
        spawner.extra_container_config = {**extra, "resources": resources}


def _seat_again_after_profile(spawner: Any, grant: Grant, mig_strategy: MigStrategy) -> None:
    """KubeSpawner applies the profile the participant chose (``profile_list``'s ``kubespawner_override``) in
    ``start()``, after the pre-spawn hook: a profile's ``extra_resource_limits`` or ``node_selector`` replaced
    the seat's, so a participant could pick four whole GPUs on any node. The seat is put on again right after
    the profile is loaded (wrapped once: a later spawn wraps the original again, not the wrapper)."""
    current = spawner.load_user_options
    original: Callable[[], Any] = getattr(current, "gpuseat_original", current)

    async def load_user_options() -> None:
        loaded = original()
        if hasattr(loaded, "__await__"):
            await loaded
        _kube_seat(spawner, grant, mig_strategy)
        env = {k: v for k, v in dict(spawner.environment).items() if k not in _SEAT_ENV}
        spawner.environment = {**env, "GPUSEAT_SEAT": grant.seat}

    load_user_options.gpuseat_original = original  # type: ignore[attr-defined]
    spawner.load_user_options = load_user_options


def _is_gpu_resource(name: str) -> bool:
    return name == GPU or name.startswith(("nvidia.com/mig-", "nvidia.com/gpu."))


def _with_device_request(host_config: Any, request: dict[str, Any]) -> Any:
    """``extra_host_config`` whose ``device_requests`` is exactly ``[request]`` (a callable stays callable)."""
    if callable(host_config):
        # wrap the admin's own callable once; a later spawn re-wraps the original, not the wrapper
        original: Callable[..., Any] = getattr(host_config, "gpuseat_original", host_config)

        async def wrapped(spawner: Any) -> dict[str, Any]:
            value = original(spawner)
            if hasattr(value, "__await__"):
                value = await value
            return {**dict(value or {}), "device_requests": [request]}

        wrapped.gpuseat_original = original  # type: ignore[attr-defined]
        return wrapped
    return {**dict(host_config or {}), "device_requests": [request]}
