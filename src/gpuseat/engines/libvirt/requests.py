"""The libvirt engine's part of participant self-service (issue 40): the same request rows the host
engine carries out (:mod:`gpuseat.store.requests`), done on the seat's VM.

- ``stop``: the VM is powered off and stays off (no plan starts a stopped seat's VM, a new definition
  is applied without starting it) until a ``start``, ``restart`` or ``reset``.
- ``start``: the VM runs again. ``restart``: powered off and started; the disk is kept.
- ``reset``: powered off, the holder's overlay deleted and made afresh on the course's base image
  (the ``image`` setting), started: everything written in the VM is gone; the reset step itself marks
  the request done. Refused without a base image.
- ``key``: the new key is already in the store; the plan's ``domain.update`` gives the VM a new seed
  (a running VM restarts with it); done once the seat's seed is the one made with it.
- A start, restart or reset is refused while the course's access hours are closed.
- Seat hours (:mod:`gpuseat.engines.hours`, the rule of every engine): at 0 hours a running VM is powered
  off and the stop is recorded on the seat's timeline with the reason (``seat.stop``); a start, restart
  or reset is refused with the same words until a top-up. Near and in a lab session nothing is stopped
  for hours, and a VM stopped for hours runs (it is powered off again after the session).
- Ready before every session (:mod:`gpuseat.engines.sessions`, the rule of every engine): from ``lead_minutes``
  before one, each running VM is checked as its holder (``seat.check``: SSH in with the probe key, list the
  GPUs) and the broken ones posted to the course webhook (``session.report``).

Each request ends in a ``request.record`` step (tied to no seat, so a failed step never leaves it
pending) that looks at libvirt and marks the request done or failed with the reason.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from gpuseat.core.selfservice import RunState
from gpuseat.engines import base as engine_base
from gpuseat.engines import hours as seat_hours
from gpuseat.engines import sessions as session_checks
from gpuseat.engines.base import RUN_REQUESTS, Changes, CourseState, Step, plan_holder_requests, stale_requests
from gpuseat.engines.libvirt import machine as vm_
from gpuseat.engines.libvirt import names
from gpuseat.errors import GpuseatError

if TYPE_CHECKING:
    from gpuseat.engines.libvirt.engine import LibvirtEngine
    from gpuseat.store import ParticipantView, SeatView
    from gpuseat.store.requests import RequestView

#: the plan's steps that (re)make or start a holder's VM
MAKES = ("domain.create", "domain.reimage", "domain.update", "domain.start")


def plan_requests(engine: LibvirtEngine, course: CourseState, changes: Changes, seats: dict[str, SeatView]) -> None:
    """Add the steps of the pending requests on these seats, and keep stopped seats' VMs off."""
    if not seats or course.course is None or course.archived:
        return
    holders = {s.key: p for s, p in course.holders() if s.key in seats} if course.active else {}
    pending = engine.pending_requests(seats)
    if not holders and not pending:
        return
    states = engine.store.requests.run_states(engine.course)
    ledger = seat_hours.read(engine.store, engine.course, course.now) if holders else None
    checks = session_checks.SessionChecks(engine, course, ledger)
    add = changes.steps.append
    changes.steps += [engine._request_step(r, why, seat=r.seat) for r, why in stale_requests(pending, holders)]
    refusals: dict[str, str] = {}
    if course.closed is not None:
        refusals = dict.fromkeys(RUN_REQUESTS, f"the seat cannot run now: {course.closed}")
    elif engine.options.image is None:
        refusals = {"reset": "no base image to reset to (the organizer sets the libvirt setting image=…)"}
    for key, p in sorted(holders.items()):
        name = names.domain_name(engine.course, key)
        state = states.get(p.key, RunState(True))
        ours = [s for s in changes.steps if s.target == name and s.action in MAKES]
        mine = sorted((r for r in pending if r.participant == p.key and r.seat == key), key=lambda x: x.id)
        rule = ledger.of(p.key) if ledger is not None else seat_hours.HoursRule(False, False)
        running = plan_holder_requests(
            changes,
            mine,
            rule.runs(state),
            {**refusals, **rule.refusals()},
            run=partial(_run_steps, engine, changes, ours, p, key, name),
            record=partial(engine._request_step, target=name, seat=key),
        )
        why = state.reason if state.reason and not state.running else "the seat is stopped"
        if running and rule.stop_reason is not None and not any(r.action in RUN_REQUESTS for r in mine):
            why = rule.stop_reason  # recorded on the seat's timeline: the page and `seat hours` say it
            # tied to no seat (as the host's): recorded even if the power-off fails, which the next pass retries
            add(engine._step("seat.stop", key, why, "record", participant=p.key, reason=why))
            running = False
        if running:
            if any(s.action in ("domain.reset", "domain.restart") for s in ours):
                _ensure_record(engine, changes, key, p.key, engine.login_of(p))
            if (check := checks.check(key, p.key)) is not None:  # ready before the session (after its VM's steps)
                add(check)
            continue
        # stopped: the VM stays off (its definition is still kept up to date)
        kept = [replace(s, data={**s.data, "start": False}) for s in ours if s.action != "domain.start"]
        _drop(changes, ours)
        changes.steps.extend(kept)
        dom = engine.libvirt.lookup(name)
        if dom is not None and dom.isActive() and not any(s.action == "domain.stop" and s.target == name
                                                           for s in changes.steps):  # fmt: skip
            add(engine._step("domain.stop", name, why, "revoke", participant=p.key, seat=key, seats=(key,)))
        if engine._records():  # its way in says why, written once (also in the pass that makes the VM)
            changes.steps[:] = [s for s in changes.steps if not (s.action == "seat.record" and s.target == key)]
            note = "stopped until a start"  # the same words at every pass (a second plan is empty)
            engine._plan_record(changes, course, seats[key], p, engine.login_of(p), running=False, ip=None, note=note)
    if (report := checks.report(holders)) is not None:  # after this pass's checks: the broken seats, to the webhook
        add(report)


def do_request(engine: LibvirtEngine, step: Step) -> str | None:
    """Carry out ``domain.restart``, ``domain.reset``, ``seat.stop`` and ``request.record``."""
    d, lv = step.data, engine.libvirt
    if step.action == "seat.stop":  # the agent's stop for hours, after the VM was powered off
        if not engine.runner.dry_run:
            engine.store.requests.agent_stop(engine.course, str(step.participant), str(d["reason"]))
        return None
    if step.action == "domain.restart":
        dom = lv.lookup(step.target)
        if dom is None:
            raise GpuseatError(f"domain {step.target} is gone", where=f"seat {d['seat']}", fix="apply again")
        if engine.runner.dry_run:
            engine.runner.run(["virsh", "-c", engine.settings.connect, "reboot", step.target])
            return None
        if dom.isActive():
            lv.stop(dom)
        lv.start(dom, d["seat"])
        return None
    if step.action == "domain.reset":
        return _reset(engine, step)
    if engine.runner.dry_run:
        return None
    ok, reason = _verdict(engine, step)
    if not engine.store.requests.finish_request(engine.course, int(d["id"]), ok=ok, reason=reason):
        return None  # already done (a reset marks its own request)
    return None if ok else f"request {d['id']} ({d['request']}) failed: {reason}"


def _reset(engine: LibvirtEngine, step: Step) -> str | None:
    """Power the VM off, delete every disk of the seat, make the holder's overlay afresh and start it."""
    d, lv, o = step.data, engine.libvirt, engine.options
    if engine.runner.dry_run:
        wanted = vm_.disk_name(step.target, step.participant)
        for argv in (
            ["destroy", step.target],
            ["vol-delete", "--pool", o.pool, wanted],
            ["vol-create-as", o.pool, wanted, f"{o.disk_gb}G", "--backing-vol", str(o.image)],
            ["start", step.target],
        ):
            engine.runner.run(["virsh", "-c", engine.settings.connect, *argv])
        return None
    vm_.stop_vm(lv, engine.course, d["seat"])
    pool = lv.pool(o.pool, o.pool_dir)
    disks, _seeds = vm_.seat_volumes(lv, pool, step.target)
    gone = vm_.remove_volumes(lv, o.pool, disks)
    vm = engine._vm(d["seat"], step.participant or "", d["login"], d["keys"])
    made = vm_.ensure_vm(lv, engine.course, engine.layout, vm, o)
    said = "reset: a fresh disk from the course's image" + (", you can log in" if made.running else "")
    engine.store.requests.finish_request(engine.course, int(d["id"]), ok=True, reason=said)
    return f"{', '.join(gone) or 'no disk'} replaced by a fresh overlay of {o.image}"


def _verdict(engine: LibvirtEngine, step: Step) -> tuple[bool, str]:
    """Whether the request is done, from what libvirt shows now."""
    d = step.data
    if (outcome := engine_base.refused_outcome(d)) is not None:
        return outcome
    action, name, lv = str(d["request"]), str(step.target), engine.libvirt
    dom = lv.lookup(name)
    if dom is None:
        return False, f"the VM {name} is not there yet"
    on = bool(dom.isActive())
    if action == "stop":
        return (True, "stopped: the VM is powered off") if not on else (False, "the VM could not be powered off")
    if action == "key":
        seat, p = engine.store.seats.get_seat(engine.course, str(d["seat"])), None
        people = {x.key: x for x in engine.store.roster.participants(engine.course)}
        p = people.get(seat.participant or "")
        if p is None or not p.ssh_key:
            return False, "the key could not be installed"
        vm = engine._vm(seat.key, p.key, engine.login_of(p), [p.ssh_key])
        pool = lv.find_pool(engine.options.pool)
        _disks, seeds = vm_.seat_volumes(lv, pool, name)
        if vm_.seed_name(engine.course, vm, engine.options) in seeds:
            return True, "your new key is in the VM's seed (the old one is removed): it applies at the next boot"
        return False, "the key could not be installed"
    if action == "reset":  # done by its own step once the disk is new: still pending, that step failed
        return False, "the disk could not be replaced (the agent's log says why)"
    if not on and engine.options.start:
        return False, f"the VM could not be started ({lv.state(dom)})"
    return True, "restarted: you can log in" if action == "restart" else "started: you can log in"


def _ensure_record(engine: LibvirtEngine, changes: Changes, seat: str, who: str, login: str) -> None:
    """A ``seat.record`` of the seat (its way in once the restarted VM has its address), once."""
    if not engine._records() or any(s.action == "seat.record" and s.target == seat for s in changes.steps):
        return
    changes.steps.append(engine._record_step(seat, who, f"{who} logs in as {login}", seat=seat, login=login, wait=True))


def _run_steps(
    engine: LibvirtEngine, changes: Changes, ours: list[Step], p: ParticipantView, seat: str, name: str, r: RequestView
) -> None:
    """A reset replaces the VM's planned steps (``ours``, kept up to date) by ``domain.reset``, a fresh disk; a
    restart with nothing planned for the VM powers it off and on. A start needs no step of its own."""
    if r.action == "reset":
        _drop(changes, ours)
        ours[:] = [engine._step("domain.reset", name, f"{p.key} asked for a reset: a fresh disk", "grant",
                                participant=p.key, seats=(seat,), seat=seat, login=engine.login_of(p),
                                keys=[p.ssh_key] if p.ssh_key else [], id=r.id)]  # fmt: skip
        changes.steps.append(ours[0])
    elif r.action == "restart" and not ours:
        ours[:] = [engine._step("domain.restart", name, f"{p.key} asked for a restart", "grant",
                                participant=p.key, seats=(seat,), seat=seat)]  # fmt: skip
        changes.steps.append(ours[0])


def _drop(changes: Changes, steps: list[Step]) -> None:
    changes.steps[:] = [s for s in changes.steps if not any(s is x for x in steps)]
