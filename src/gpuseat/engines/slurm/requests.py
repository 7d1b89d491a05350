"""The Slurm engine's part of participant self-service (issue 40): the same request rows the other engines
carry out (:mod:`gpuseat.store.requests`), done on the course partition. A stopped Slurm seat is a holder who
may not run jobs there, until a start.

- ``stop``: the holder leaves the users of the course's session reservations (the partition is
  ``ReqResv=YES``, so no job of theirs starts there: ``sbatch`` is refused with Slurm's *Access denied to
  requested reservation*); with accounting their association in the course account also gets
  ``MaxSubmitJobs=0`` (no job charged to the course account, in any partition); then their live course jobs,
  running and pending, are cancelled (``scancel``). Their association, GPU limit and seat limit are kept.
- ``start``: they are users of the session reservations again and ``MaxSubmitJobs`` is cleared (``-1``).
- ``restart``: their live course jobs are cancelled; their access stays.
- ``reset``: failed with :data:`NOTHING_TO_RESET` (a Slurm seat has nothing of its own to reset).
- ``key``: failed with :data:`NO_SSH_KEY` (the engine installs no key anywhere).
- A start or restart is refused while the course's access is closed; seat hours
  (:mod:`gpuseat.engines.hours`, the rule of every engine) stop a seat at 0 hours as above, and near or in a
  lab session nothing is stopped for hours.

Each request ends in a ``request.record`` step that looks at the cluster (the reservations' users, the
association, the queue) and marks it done or failed with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpuseat.engines import wishes
from gpuseat.engines.base import CourseState, Step
from gpuseat.engines.slurm import config
from gpuseat.engines.wishes import Reading

if TYPE_CHECKING:
    from gpuseat.engines.slurm.engine import SlurmEngine
    from gpuseat.store import ParticipantView
    from gpuseat.store.requests import RequestView

#: why a ``key`` request fails on a Slurm seat
NO_SSH_KEY = (
    "a Slurm seat has no SSH login of gpuseat's: you log in to the cluster as your own unix user, whose keys "
    "the cluster keeps (your key is kept for an SSH seat)"
)
#: why a ``reset`` request fails on a Slurm seat
NOTHING_TO_RESET = (
    "a Slurm seat has nothing of its own to reset: your files are in your home on the cluster, which gpuseat "
    "does not manage; a restart cancels your jobs"
)
#: ``MaxSubmitJobs`` of a stopped holder's association (``-1`` clears it: no limit, as the engine adds them)
STOPPED_SUBMIT = "0"


@dataclass
class Wishes:
    """What the holders' requests, run states and hours want of the course partition in this pass."""

    #: login → why their seat is stopped
    stopped: dict[str, str] = field(default_factory=dict)
    #: login → the note of their way in while it is stopped
    notes: dict[str, str] = field(default_factory=dict)
    #: logins whose live course jobs a restart cancels
    restart: set[str] = field(default_factory=set)
    #: ``request.record`` and ``seat.stop`` steps (tied to no seat)
    steps: list[Step] = field(default_factory=list)


def plan_requests(
    engine: SlurmEngine,
    course: CourseState,
    holders: dict[str, tuple[str, ParticipantView]],
    live: dict[str, list[int]],
) -> Wishes:
    """The wishes of ``holders`` (login → (seat, participant)); ``live``: each login's live course jobs now."""
    out = Wishes()
    seats = {seat for seat, _p in holders.values()}
    reading = wishes.read_requests(engine, course, seats, bool(holders))
    if reading is None:
        return out
    out.steps += wishes.stale_steps(engine, reading, {seat: p for seat, p in holders.values()})
    runs = Reading([r for r in reading.pending if r.action != "reset"], reading.states, reading.hours)
    for login, (seat, p) in sorted(holders.items()):

        def record(r: RequestView, refused: str | None, login: str = login, seat: str = seat) -> Step:
            refused = refused or (NO_SSH_KEY if r.action == "key" else None)
            return engine._request_step(r, refused, seat=seat, login=login, job_ids=live.get(login, []))

        stopped = f"stopped: on {p.key}'s request; no job of yours runs in {engine.partition} until a start"
        wish = wishes.plan_wish(engine, course, runs, seat, p, record, stopped)
        out.steps += [
            record(r, NOTHING_TO_RESET)
            for r in reading.pending
            if r.action == "reset" and r.participant == p.key and r.seat == seat
        ]
        out.steps += wish.steps
        if not wish.runs:
            out.stopped[login] = wish.why
            out.notes[login] = wish.stopped or stopped
        elif "restart" in wish.ran:
            out.restart.add(login)
    return out


def verdict(engine: SlurmEngine, step: Step) -> tuple[bool, str]:
    """Whether the request is done, from what the cluster shows now."""
    d = step.data
    action, login, part = str(d["request"]), str(d["login"]), engine.partition
    resvs = {n: f for n, f in engine.slurm.reservations().items() if config.is_session(n, part)}
    inside = sorted(n for n, f in resvs.items() if login in set(f.get("Users", "").split(",")))
    limit = engine.slurm.associations(part).get(login, {}).get("maxsubmitjobs") if engine.accounting() else None
    left = [j.job_id for j in engine.course_jobs([login])]
    if action == "stop":
        if inside:
            return (
                False,
                f"you could not be taken off session reservation {inside[0]} (the agent's log says why): ask again",
            )
        if limit is not None and limit != STOPPED_SUBMIT:
            return (
                False,
                f"your association in account {part} could not be closed (the agent's log says why): ask again",
            )
        if left:
            return False, f"your job(s) {', '.join(map(str, left[:5]))} could not be cancelled: ask again"
        return (
            True,
            f"stopped: your jobs in partition {part} were cancelled; no new job of yours runs there until a start",
        )
    if len(inside) < len(resvs) or limit:
        return False, f"you could not be let in to partition {part} again (the agent's log says why): ask again"
    if action == "restart":
        still = sorted(set(left) & {int(x) for x in d.get("job_ids") or []})
        if still:
            return False, f"your job(s) {', '.join(map(str, still[:5]))} could not be cancelled: ask again"
        n = len(d.get("job_ids") or [])
        return True, f"restarted: {n} job(s) of yours in partition {part} were cancelled; you can submit again"
    return True, f"started: you can run jobs in partition {part} again"
