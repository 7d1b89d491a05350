"""Seat hours (``[policy] quota_hours``): the one rule every engine that can stop a seat applies, so a
host account, a VM and a hub server run out of hours the same way and say it in the same words.

- Out of hours: no hours left (quota plus top-ups, :func:`gpuseat.core.selfservice.hours_of`) and no lab
  session near. The running seat is stopped with :attr:`HoursRule.stop_reason` (a ``stop`` by the agent
  on the seat's timeline, so the participant page and ``gpuseat seat hours`` say why), and a start,
  restart or reset is refused with :attr:`HoursRule.refusal` until the organizer tops up.
- Lab sessions do not count against the hours: from ``lead_minutes`` before one until it ends nothing is
  stopped for hours, and a seat stopped for hours runs through it (its timeline keeps the stop, so it
  is stopped again after the session). A seat its participant stopped stays stopped.

Hours and sessions are counted on the store's clock (unless the pass was given a time): a machine whose
clock was stepped neither stops a seat for hours not used nor lets one run past its last minute.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gpuseat.core.amounts import hours_text
from gpuseat.engines.base import RUN_REQUESTS

if TYPE_CHECKING:
    from gpuseat.core.selfservice import Hours, RunState
    from gpuseat.store import Store
    from gpuseat.store.requests import SessionPolicy

#: how a stop for seat hours starts its reason (such a stop does not hold during a lab session)
HOURS_REASON = "no seat hours left"


@dataclass(frozen=True)
class HoursRule:
    """What the seat hours say of one holder's seat now."""

    #: in a lab session, or within ``lead_minutes`` before the next one: hours stop nothing
    near: bool
    #: no hours left and no session near: the seat stops and run requests are refused
    out: bool
    #: why a start, restart or reset is refused (None: not out of hours)
    refusal: str | None = None
    #: the reason on the agent's stop (None: not out of hours)
    stop_reason: str | None = None

    def refusals(self) -> dict[str, str]:
        """The refusal of each run request (``plan_holder_requests``' ``refusals``), none with hours left."""
        return dict.fromkeys(RUN_REQUESTS, self.refusal) if self.refusal is not None else {}

    def runs(self, state: RunState) -> bool:
        """Whether the seat runs by its run state: a seat stopped for hours also runs near a session."""
        return state.running or (self.near and stopped_for_hours(state.reason))


def stopped_for_hours(reason: str | None) -> bool:
    """True for the reason of a stop for seat hours (held back during a lab session)."""
    return (reason or "").startswith(HOURS_REASON)


def rule(h: Hours | None, policy: Mapping[str, Any], sessions: SessionPolicy | None, now: datetime) -> HoursRule:
    """The hours rule for one holder: ``h`` their hours (None: not counted), ``policy`` their ``[policy]``
    (for ``lead_minutes``), ``sessions`` where ``now`` stands against the course's lab sessions."""
    lead = float(policy.get("lead_minutes") or 0)
    near = sessions is not None and sessions.near(now, lead)
    if h is None or h.left is None or h.left > 0 or near:
        return HoursRule(near, False)
    total = (h.quota or 0) + h.topups
    return HoursRule(
        near,
        True,
        refusal=f"{HOURS_REASON} (0 of {hours_text(total)} h): ask the organizer for more",
        stop_reason=f"{HOURS_REASON}: {h.used:.1f} of {hours_text(total)} h used",
    )


@dataclass(frozen=True)
class CourseHours:
    """A course's seat hours and lab sessions at ``now``, read once per pass."""

    now: datetime
    hours: Mapping[str, Hours]
    sessions: SessionPolicy | None

    def of(self, participant: str) -> HoursRule:
        """The rule for ``participant`` (by key)."""
        policy = self.sessions.policies.get(participant, {}) if self.sessions is not None else {}
        return rule(self.hours.get(participant), policy, self.sessions, self.now)


def read(store: Store, course: str, now: datetime | None) -> CourseHours:
    """The hours and sessions of ``course`` at ``now`` (None: the store's clock, as the hours are counted)."""
    when = now or store.requests.now()
    return CourseHours(
        when, store.requests.seat_hours(course, now=when), store.requests.seat_policies(course, now=when)
    )
