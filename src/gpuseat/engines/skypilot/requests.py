"""The SkyPilot engine's part of participant self-service (issue 40): the same request rows the host,
libvirt and hub engines carry out (:mod:`gpuseat.store.requests`), done on the seat's cluster, so a
participant who is done for the day stops their cloud machine and what it costs by the hour.

- ``stop``: the cluster is stopped (``sky.stop``: the disk is kept, and still billed) and stays stopped
  (no pass launches a stopped seat's cluster, whatever the access window) until a ``start``, ``restart``
  or ``reset``.
- ``start``: the cluster is launched again (``sky.launch`` starts a stopped cluster with its disk).
- ``restart``: stopped, then launched again: a reboot, the disk is kept.
- ``reset``: torn down (``sky.down``: machine and disk gone), then launched afresh: a new machine, a new
  address, nothing of the old one left.
- ``key``: the new key is already in the store; an up cluster is launched again, which re-runs its setup
  (the task's setup makes the new key the only one in ``authorized_keys``; the machine is not rebooted).
  A stopped cluster gets it from the setup of its next launch, and the done message says so.
- A start, restart or reset is refused while the course's access window is closed.
- Seat hours (:mod:`gpuseat.engines.hours`, the rule of every engine): at 0 hours a running cluster is
  stopped and the stop is recorded on the seat's timeline with the reason (``seat.stop``); a start,
  restart or reset is refused with the same words until a top-up. Near and in a lab session nothing is
  stopped for hours, and a cluster stopped for hours runs (it is stopped again after the session).

Each request ends in a ``request.record`` step (tied to no seat, so a failed launch never leaves it
pending) that looks at the cluster (``sky.status``) and at this pass's launch, and marks the request
done or failed with the reason.

Ready before every session (the engine's plan, by the rule of every engine in :mod:`gpuseat.engines.sessions`):
from ``lead_minutes`` before a lab session each running seat is checked as ``seats check`` does; a seat its
holder stopped, or stopped for hours, is not.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from gpuseat.engines import wishes
from gpuseat.engines.base import CourseState, Step
from gpuseat.engines.wishes import FRESH, Reading, Wish

if TYPE_CHECKING:
    from gpuseat.engines.skypilot.engine import SkyPilotEngine
    from gpuseat.engines.skypilot.sdk import Cluster
    from gpuseat.store import ParticipantView, SeatView


def plan_cluster(
    engine: SkyPilotEngine,
    course: CourseState,
    reading: Reading,
    seat: SeatView,
    p: ParticipantView,
    info: Cluster | None,
) -> Wish:
    """What ``p``'s pending requests on ``seat`` and their run state want of the seat's cluster."""
    cluster = engine.cluster_of(seat)
    if info is not None:
        stopped = f"stopped: on {p.key}'s request; {cluster} keeps its disk until a start"
    else:
        stopped = f"not launched: stopped on {p.key}'s request until a start"
    record = partial(engine._request_step, target=cluster, seat=seat.key, cluster=cluster)
    wish = wishes.plan_wish(engine, course, reading, seat.key, p, record, stopped)
    mine = [r for r in reading.pending if r.participant == p.key and r.seat == seat.key]
    if wish.runs and wish.fresh is None and info is not None and info.up and any(r.action == "key" for r in mine):
        wish.fresh = "key"  # the launch re-runs the setup, which installs the new key
    return wish


def cluster_verdict(engine: SkyPilotEngine, step: Step) -> tuple[bool, str]:
    """Whether the request is done, from what SkyPilot shows now."""
    d = step.data
    action, cluster = str(d["request"]), str(d["cluster"])
    launched, error = engine.launch_result(cluster)
    if error is not None:
        return False, f"{cluster} could not be launched: {error.what}"
    info = engine.sky.status([cluster]).get(cluster)
    status = info.status if info is not None else None
    if action == "stop":
        if status is None:
            return True, "stopped: your cloud machine is not launched, and it stays so until a start"
        if status == "STOPPED":
            return (
                True,
                f"stopped: your cloud machine {cluster} is stopped; its disk is kept (and billed) until a start",
            )
        return False, f"{cluster} could not be stopped (SkyPilot says {status})"
    if action == "key":
        if status != "UP":
            return True, "stored: your new key is installed when your cloud machine starts again"
        if launched:
            return True, f"your new key is installed on {cluster} (the old one is removed)"
        return False, "the key could not be installed (the agent's log says why): ask again"
    if action in FRESH and not launched:
        return False, f"the {action} was not carried out (the agent's log says why): ask again"
    if status != "UP":
        return False, f"{cluster} could not be started (SkyPilot says {status or 'it is not there'})"
    said = {
        "start": "started: you can log in",
        "restart": f"restarted: {cluster} was stopped and started again with its disk; you can log in",
        "reset": "reset: a fresh cloud machine (everything on the old one is gone); you can log in",
    }
    return True, said.get(action, "started: you can log in")
