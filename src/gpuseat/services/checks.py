"""``seats check``: probe every seat through its engine, as its participant, in parallel.

Probes run in a bounded thread pool; each seat has its own deadline, so one slow or hung seat
costs one worker for at most ``timeout`` seconds and never stalls the others' results. Every
result (ready | broken, reason, evidence, time) goes to the store through one call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpuseat.core.readiness import Readiness
from gpuseat.engines import registry
from gpuseat.errors import GpuseatError, InputError

if TYPE_CHECKING:
    from gpuseat.bench.run import BenchOptions
    from gpuseat.store import CourseStore, ParticipantView, SeatView

DEFAULT_WORKERS = 16


def _broken(seat: SeatView, who: str | None, reason: str, evidence: str = "") -> Readiness:
    return Readiness(seat.course, seat.key, who, "broken", reason, evidence, (), datetime.now(UTC), seat.engine)


def check_seats(
    store: CourseStore,
    course: str | None = None,
    *,
    seat: str | None = None,
    timeout: float = 30.0,
    workers: int = DEFAULT_WORKERS,
    settings: Mapping[str, Mapping[str, str]] | None = None,
    record: bool = True,
    actor: str = "gpuseat",
    bench: BenchOptions | None = None,
) -> list[Readiness]:
    """Probe each assigned seat (or just ``seat``) through ``load_engine(seat.engine)``'s probe.

    ``settings`` maps an engine name to its settings (plain strings). A seat without a participant
    is skipped; an engine that cannot be loaded or raises makes that seat broken with the reason.
    """
    if not 0 < timeout <= 3600:  # nan too; -1 made every probe fail at once and the seats were called broken
        raise InputError(f"{timeout:g} s is not a probe timeout", where="timeout", fix="give 1 to 3600 seconds")
    if not 0 < workers <= 256:
        raise InputError(f"{workers} workers", where="workers", fix="give 1 to 256 workers")
    key = store.courses.get_course(course).key
    seats = [store.seats.get_seat(key, seat)] if seat else store.seats.seats(key)
    people = {p.key: p for p in store.roster.participants(key)}
    targets = [s for s in seats if s.participant]
    engines: dict[str, Any] = {}
    delivering = registry.delivering()
    for name in sorted({s.engine for s in targets}):
        if name not in delivering:  # "manual" (nobody delivers these seats, so nobody can probe them), a broken plug-in
            why = registry.unusable().get(name)
            engines[name] = why or f"no engine delivers this seat ({name}): add it with --engine {'/'.join(delivering)}"
            continue
        given = {**store.agents.engine_settings(key, name), **dict((settings or {}).get(name, {}))}
        try:
            try:  # engines that take a timeout stop their own probes in time (no thread outlives the run)
                engines[name] = registry.build(name, store, key, settings={**given, "timeout": timeout})
            except GpuseatError:
                engines[name] = registry.build(name, store, key, settings=given)
        except (GpuseatError, ImportError, AttributeError, TypeError) as exc:
            engines[name] = f"engine {name} cannot probe: {getattr(exc, 'what', exc)}"
    results: dict[str, Readiness] = {}
    jobs: list[tuple[SeatView, Any, ParticipantView]] = []
    stopped = _stopped(store, key, targets)
    for s in targets:
        engine = engines[s.engine]
        p: ParticipantView = people[s.participant or ""]
        if isinstance(engine, str):
            results[s.key] = _broken(s, p.key, engine)
        elif s.key in stopped:
            results[s.key] = _broken(s, p.key, stopped[s.key])
        else:
            jobs.append((s, engine, p))
    done = _run_probes(jobs, timeout=timeout, workers=workers)
    for s, _engine, p in jobs:
        results[s.key] = done.get(s.key) or _broken(s, p.key, f"the probe did not answer within {timeout:g} s")
    out = [results[s.key] for s in targets]
    if bench is not None:
        out = bench_ready(out, {s.key: s for s in targets}, bench)
    if record and out:
        store.delivery.record_readiness(out, actor=actor)
    return out


def _stopped(store: CourseStore, course: str, seats: list[SeatView]) -> dict[str, str]:
    """Seats that are stopped now (by their holder, the organizer, or for seat hours outside a session):
    not probed, since their engine keeps them from running; the result says so instead of the probe's
    failure ("Permission denied", "no probe Pod"), which would read like a fault."""
    from gpuseat.core.selfservice import RunState
    from gpuseat.engines import hours
    from gpuseat.store.requests import SELF_SERVICE_ENGINES

    ours = [s for s in seats if s.engine in SELF_SERVICE_ENGINES and s.participant]
    if not ours:
        return {}
    states = store.requests.run_states(course)
    if all(states.get(s.participant or "", RunState(True)).running for s in ours):
        return {}
    ledger = hours.read(store, course, None)
    out = {}
    for s in ours:
        who = s.participant or ""
        state = states.get(who, RunState(True))
        if not ledger.of(who).runs(state):
            why = (state.reason or "stopped").removeprefix("stopped: ")
            out[s.key] = f"stopped ({why}): not probed; it is checked once it runs again (gpuseat seat start -p {who})"
    return out


def _run_probes(
    jobs: list[tuple[SeatView, Any, ParticipantView]], *, timeout: float, workers: int
) -> dict[str, Readiness]:
    """Probe ``jobs`` on at most ``workers`` daemon threads; each seat gets ``timeout`` from when a worker
    could start it. A probe that hangs past its deadline is abandoned: its thread is a daemon, so the
    command still exits at its deadline (a joined pool would wait for the hung call)."""
    lanes = max(1, min(workers, len(jobs) or 1))
    queue = list(enumerate(jobs))
    lock = threading.Lock()
    done: dict[str, Readiness] = {}

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                _n, (seat, engine, person) = queue.pop(0)
            result = _probe(engine, seat, person)
            with lock:
                done[seat.key] = result

    for _ in range(lanes):
        threading.Thread(target=worker, name="probe", daemon=True).start()
    started = time.monotonic()
    for n, (seat, _engine, _person) in enumerate(jobs):
        deadline = started + timeout * (1 + n // lanes)  # a seat queued behind others gets a timeout of its own
        while time.monotonic() < deadline:
            with lock:
                if seat.key in done:
                    break
            time.sleep(0.02)
    with lock:
        return dict(done)


def _probe(engine: Any, seat: SeatView, participant: ParticipantView) -> Readiness:
    try:
        result: Readiness = engine.probe(seat, participant)
        left = _previous_holders_in(engine, seat, participant)
        if left and result.ready:
            from dataclasses import replace

            return replace(result, state="broken", reason=left)
        return result
    except GpuseatError as exc:
        return _broken(seat, participant.key, exc.what)
    except Exception as exc:  # an engine's bug must not hide the other seats' results
        return _broken(seat, participant.key, f"{type(exc).__name__}: {exc}")


def _previous_holders_in(engine: Any, seat: SeatView, holder: ParticipantView) -> str | None:
    """Exclusivity: why a previous holder of ``seat`` could still log in (None when every one is refused)."""
    refused = getattr(engine, "refused", None)
    if refused is None:
        return None
    store = engine.store
    people = {p.key: p for p in store.roster.participants(seat.course)}
    for a in store.seats.history(seat.course, seat=seat.key):
        p = people.get(a.participant)
        if p is None or p.key == holder.key or p.seat:
            continue  # a mover still holds another seat: their own login is expected to work
        why = refused(p)
        if why:
            return f"previous holder {p.key} is not refused: {why}"
    return None


def summary(results: list[Readiness]) -> dict[str, int]:
    """Counts for the checklist: ready, broken, total."""
    ready = sum(1 for r in results if r.ready)
    return {"ready": ready, "broken": len(results) - ready, "total": len(results)}


#: engines whose seats are GPUs of the machine ``seats check`` runs on (the host engine runs on the server)
LOCAL_ENGINES = ("host",)


def bench_ready(results: list[Readiness], seats: Mapping[str, SeatView], options: BenchOptions) -> list[Readiness]:
    """``--bench``: LeNet on every ready seat of this machine at once (fleet mode, one process per seat,
    pinned to the seat's device UUID), each result kept on the seat's readiness as ``bench``.

    Only seats whose GPU is on this machine can be measured from here; a ready seat of another engine
    gets a ``bench`` entry that says where to run it instead. Broken seats are not benchmarked.
    """
    from dataclasses import replace

    from gpuseat.bench.fleet import BenchTarget, run_fleet

    local = [r for r in results if r.ready and r.engine in LOCAL_ENGINES and seats[r.seat].device_uuid]
    targets = {
        r.seat: BenchTarget(select=seats[r.seat].device_uuid or "", name=seats[r.seat].profile or seats[r.seat].kind)
        for r in local
    }
    outcomes = {o.seat.select: o for o in run_fleet(options, list(targets.values()))} if targets else {}
    out = []
    for r in results:
        if r.seat in targets:
            o = outcomes[targets[r.seat].select]
            found = {
                "cuda_visible_devices": o.seat.select,
                "seconds": o.result.seconds if o.result else None,
                "iterations": o.result.iterations if o.result else None,
                "device": o.result.device.model_dump(mode="json") if o.result else None,
                "vs_median": o.vs_median,
                "error": o.error,
                "finding": o.finding,
            }
            out.append(replace(r, bench=found))
        elif r.ready:
            where = "inside the seat: gpuseat bench --all-seats"
            why = f"the {r.engine} engine's GPUs are not on this machine; run the benchmark {where}"
            out.append(replace(r, bench={"error": why, "finding": why}))
        else:
            out.append(r)
    return out
