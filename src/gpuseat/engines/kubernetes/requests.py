"""The Kubernetes engine's part of participant self-service (issue 40): the same request rows the host,
libvirt, hub and cloud engines carry out (:mod:`gpuseat.store.requests`), done in the holder's namespace.
A stopped seat is what a closed access window is, for one participant.

- ``stop``: their RoleBinding is deleted (``access.revoke``: no ``kubectl`` of theirs reaches the namespace)
  and every pod in their namespace ends (``pods.end``); it stays so (no pass binds them or makes the probe
  Pod again, whatever the access window) until a ``start``, ``restart`` or ``reset``. The namespace, its
  quota and its PersistentVolumeClaims are kept.
- ``start``: the RoleBinding is applied again (and the probe Pod made again).
- ``restart``: every pod in the namespace ends (what a Deployment or Job owns is made again by it); the
  access stays; the probe Pod is made again.
- ``reset``: the namespace is deleted (``kubectl delete --wait``: its pods, PersistentVolumeClaims with
  their data, ConfigMaps, Secrets, everything) and made afresh.
- ``key``: failed with :data:`NO_SSH_LOGIN`: the RoleBinding names the participant's cluster user, whom the
  cluster signs in (the organizer's kubeconfig, OIDC …); there is no SSH login to put a key on. The key
  stays stored for an SSH seat.
- A start, restart or reset is refused while the course's access window is closed.
- Seat hours (:mod:`gpuseat.engines.hours`, the rule of every engine): at 0 hours a running seat is stopped
  as above and the stop is recorded on the seat's timeline with the reason (``seat.stop``); a start,
  restart or reset is refused with the same words until a top-up. Near and in a lab session nothing is
  stopped for hours, and a seat stopped for hours runs (it is stopped again after the session).

Each request ends in a ``request.record`` step (tied to no seat, so a failed step never leaves it pending)
that looks at the cluster (the RoleBinding, the namespace, its pods) and at this pass's steps, and marks the
request done or failed with the reason. The seat's stored way in says it is stopped, and why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuseat.engines import wishes
from gpuseat.engines.base import CourseState, Step
from gpuseat.engines.wishes import FRESH, Reading, Wish

if TYPE_CHECKING:
    from gpuseat.engines.kubernetes.engine import KubernetesEngine
    from gpuseat.store import ParticipantView
    from gpuseat.store.requests import RequestView

#: the participant's RoleBinding in their namespace (what a stop deletes)
BINDING = "gpuseat-participant"
#: why a ``key`` request fails on a Kubernetes seat
NO_SSH_LOGIN = (
    "a Kubernetes seat has no SSH login: you reach your namespace with kubectl, signed in to the cluster as "
    "yourself (your key is kept for an SSH seat)"
)


def plan_namespace(
    engine: KubernetesEngine, course: CourseState, reading: Reading, seat: str, p: ParticipantView, ns: str, made: bool
) -> Wish:
    """What ``p``'s pending requests on ``seat`` and their run state want of their namespace ``ns``
    (``made``: it exists now)."""

    def record(r: RequestView, refused: str | None) -> Step:
        refused = refused or (NO_SSH_LOGIN if r.action == "key" else None)
        return engine._request_step(r, refused, target=ns, seat=seat, namespace=ns, made=made)

    stopped = f"stopped: on {p.key}'s request; no access to namespace {ns} until a start"
    wish = wishes.plan_wish(engine, course, reading, seat, p, record, stopped)
    if not made:
        wish.fresh = None
    return wish


def namespace_verdict(engine: KubernetesEngine, step: Step) -> tuple[bool, str]:
    """Whether the request is done, from what the cluster shows now."""
    d = step.data
    action = str(d["request"])
    ns = str(d.get("namespace") or step.target)
    have = engine.applied()
    bound = ("RoleBinding", ns, BINDING) in have
    if action == "stop":
        if bound:
            return False, f"your access to namespace {ns} could not be revoked (the agent's log says why): ask again"
        left = engine._running_pods(ns) if ("Namespace", "", ns) in have else []
        if left:
            return False, f"your pods could not all be ended ({', '.join(left[:5])} still running): ask again"
        return True, f"stopped: your access to namespace {ns} is revoked and your pods ended, until a start"
    if ("Namespace", "", ns) not in have:
        return False, f"your namespace {ns} could not be made (the agent's log says why): ask again"
    step_of = {"reset": "namespace.delete", "restart": "pods.end"}.get(action)
    if step_of is not None and d.get("made") and (step_of, ns) not in engine.carried:
        return False, f"the {action} was not carried out (the agent's log says why): ask again"
    if not bound:
        return False, f"your access to namespace {ns} could not be granted (the agent's log says why): ask again"
    said = {
        "start": f"started: you can use namespace {ns} again",
        "restart": f"restarted: your pods in namespace {ns} ended (a Deployment or Job makes its own again); "
        "your access stays",
        "reset": f"reset: namespace {ns} was deleted and made afresh; everything in it is gone, "
        "PersistentVolumeClaims and their data too",
    }
    if action in FRESH and not d.get("made"):  # nothing was there to end or delete
        return True, f"{said[action].split(':', 1)[0]}: namespace {ns} is made afresh; you can use it"
    return True, said.get(action, f"started: you can use namespace {ns} again")
