"""Seat hours on a libvirt seat, as the participant lives them, against libvirt's test driver: at 0 hours
their VM is powered off and their page says why, a start is refused with the reason until the organizer
tops up, and near a lab session nothing is stopped for hours (a VM stopped for hours runs through it).
The same rule as the host engine's (:mod:`gpuseat.engines.hours`); hours are moved by putting the
seat's assignment back on the store's timeline, as if it had run that long."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from gpuseat.core.seating import AGENT_ACTOR
from gpuseat.store import open_store
from session_soon import session_soon

from .conftest import EXAMPLES
from .test_test_driver import again_empty, apply, build, fill, holder

COURSE = (EXAMPLES / "course-2016.toml").read_text()


def _course(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "lab.toml"
    path.write_text(text)
    return path


def _held_for(db: Path, participant: str, hours: float) -> None:
    """As if ``participant`` had held their seat for ``hours`` (their seat ran that long)."""
    from sqlalchemy import create_engine, text

    engine = create_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE assignments SET valid_from = :t WHERE valid_to IS NULL AND participant_id = "
                "(SELECT id FROM participants WHERE key = :k)"
            ),
            {"t": datetime.now(UTC) - timedelta(hours=hours), "k": participant},
        )
    engine.dispose()


def test_out_of_hours_the_vm_is_powered_off_a_start_is_refused_and_a_topup_lets_it_run(tmp_path, test_host):
    """Quota 1 h, ann's seat ran 2 h: one pass powers her VM off and records why on her timeline (her page
    and the hours say it); her start is refused with the reason; after a top-up a start boots it. Ben's
    VM, with hours left, runs throughout; a second pass plans nothing."""
    db = tmp_path / "course.db"
    store = open_store(f"sqlite:///{db}", create=True)
    try:
        lay = fill(store, seats=2, assign=2, source=_course(tmp_path, COURSE + "\n[policy]\nquota_hours = 1\n"))
        eng = build(store, test_host)
        apply(eng, store)
        first, second = (s.name for s in lay.slices[:2])
        ann, ben = holder(store, first), holder(store, second)
        vm, neighbour = (test_host.lookup(f"gpuseat-demo-{k}") for k in (first, second))
        assert vm.isActive() and neighbour.isActive()

        _held_for(db, ann.key, 2)
        steps, _ = apply(eng, store)
        assert ("revoke", "domain.stop", f"gpuseat-demo-{first}") in steps and ("record", "seat.stop", first) in steps
        assert not vm.isActive() and neighbour.isActive()
        page = store.requests.page_of("demo", ann.key)
        assert page.run_state is not None and not page.run_state.running
        assert (page.run_state.reason or "").startswith("no seat hours left: 2.0 of 1 h used"), page.run_state
        assert page.hours is not None and page.hours.left == 0 and not page.hours.running
        stop = store.requests.seat_requests("demo", participant=ann.key)[0]
        assert (stop.action, stop.state, stop.actor) == ("stop", "done", AGENT_ACTOR), stop
        assert store.requests.seat_requests("demo", participant=ben.key) == []
        again_empty(eng, store)  # the stop is recorded once; the VM stays off

        def last():
            return store.requests.seat_requests("demo", participant=ann.key)[0]

        for action in ("start", "restart", "reset"):
            store.requests.request_seat("demo", ann.key, action, actor=ann.key)
            steps, _ = apply(eng, store)
            assert not {"domain.start", "domain.restart", "domain.reset"} & {a for _p, a, _t in steps}, steps
            assert (last().action, last().state) == (action, "failed")
            assert last().reason == "no seat hours left (0 of 1 h): ask the organizer for more", last()
            assert not vm.isActive()
        again_empty(eng, store)

        store.requests.add_seat_hours("demo", ann.key, 5, actor="organizer")
        again_empty(eng, store)  # a top-up alone does not start the seat: her start does
        store.requests.request_seat("demo", ann.key, "start", actor=ann.key)
        apply(eng, store)
        assert vm.isActive() and (last().state, last().reason) == ("done", "started: you can log in")
        left = store.requests.seat_hours("demo")[ann.key].left
        assert left is not None and 3.9 < left <= 4, left
        again_empty(eng, store)
        assert neighbour.isActive()
    finally:
        store.close()


def _session_course(tmp_path: Path) -> Path:
    """Quota 1 h, access 24/7, a lab session starting within ``lead_minutes`` (120) from now."""
    _at, schedule = session_soon(21)
    head = COURSE.split("[schedule]")[0]
    return _course(tmp_path, head + schedule + "\n[policy]\nquota_hours = 1\nlead_minutes = 120\n")


def test_near_a_lab_session_a_vm_out_of_hours_runs_and_one_stopped_for_hours_starts(tmp_path, test_host):
    """Sessions do not count against the hours: ann, 2 h used of 1, is not stopped in the lead time of a
    session; cat's VM, stopped for hours before, runs for it; ben, who stopped his own seat, stays off."""
    db = tmp_path / "course.db"
    store = open_store(f"sqlite:///{db}", create=True)
    try:
        lay = fill(store, seats=3, assign=3, source=_session_course(tmp_path))
        eng = build(store, test_host)
        apply(eng, store)
        first, second, third = (s.name for s in lay.slices[:3])
        ann, ben, cat = (holder(store, k) for k in (first, second, third))
        vms = [test_host.lookup(f"gpuseat-demo-{k}") for k in (first, second, third)]
        for who in (ann, ben, cat):
            _held_for(db, who.key, 2)
        assert all(store.requests.seat_hours("demo")[p.key].left == 0 for p in (ann, ben, cat))
        store.requests.request_seat("demo", ben.key, "stop", actor=ben.key)
        store.requests.agent_stop("demo", cat.key, "no seat hours left: 2.0 of 1 h used")
        steps, _ = apply(eng, store)
        assert ("revoke", "domain.stop", f"gpuseat-demo-{second}") in steps
        assert ("revoke", "domain.stop", f"gpuseat-demo-{third}") not in steps
        assert "seat.stop" not in {a for _p, a, _t in steps}, steps
        assert [v.isActive() for v in vms] == [True, False, True]
        assert [r.action for r in store.requests.seat_requests("demo", participant=ann.key)] == []
        again_empty(eng, store)
    finally:
        store.close()


def test_the_hours_reason_prints_a_large_quota_as_written() -> None:
    """A quota plus top-ups of a million hours reads "1000000 h" in the refusal and the stop reason that the
    participant sees (``%g`` wrote ``1e+06``), and a small one keeps its hundredths."""
    from gpuseat.core.selfservice import Hours
    from gpuseat.engines import hours as seat_hours

    now = datetime.now(UTC)
    big = seat_hours.rule(
        Hours(quota=999_000.0, topups=1_000.0, used=1_000_000.0, left=0.0, running=True), {}, None, now
    )
    assert big.refusal == "no seat hours left (0 of 1000000 h): ask the organizer for more"
    assert big.stop_reason == "no seat hours left: 1000000.0 of 1000000 h used"
    small = seat_hours.rule(Hours(quota=1.25, topups=0.0, used=1.5, left=0.0, running=True), {}, None, now)
    assert small.refusal == "no seat hours left (0 of 1.25 h): ask the organizer for more"
