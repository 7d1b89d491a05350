"""The participant's own stop, start, restart, reset and key on Slurm seats, and seat hours at 0, against the
recording stand-in cluster of test_engine_plan (no accounting: the session reservations' users are what a stop
takes away). The real cluster, with accounting and the participants' own ``sbatch``, runs the same flow in
test_accounting.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from gpuseat.engines.apply import one_pass
from gpuseat.engines.slurm.requests import NO_SSH_KEY, NOTHING_TO_RESET

from .test_engine_plan import Lab, lab  # noqa: F401  (the lab fixture)

KEY = (Path(__file__).parents[1] / "vms" / "keys" / "alice.pub").read_text().strip()


def _ask(lab: Lab, who: str, action: str, **kw: str) -> int:  # noqa: F811
    p = lab.people[who]
    return int(lab.store.requests.request_seat("c1", p, action, actor=f"participant:{p}", **kw).id)  # type: ignore[attr-defined]


def _row(lab: Lab, request_id: int) -> tuple[str, str]:  # noqa: F811
    (r,) = [r for r in lab.store.requests.seat_requests("c1", limit=100) if r.id == request_id]  # type: ignore[attr-defined]
    return r.state, r.reason or ""


def _users(lab: Lab) -> set[tuple[str, ...]]:  # noqa: F811
    return {tuple(sorted(u)) for u in lab.fake.reservations.values()}


def test_a_stop_takes_the_holder_off_the_sessions_and_cancels_their_jobs_until_a_start(lab: Lab) -> None:  # noqa: F811
    assert not lab.apply().failed
    lab.job(41, "alice", "seat-01")
    lab.job(42, "bob", "seat-02")
    stop = _ask(lab, "alice", "stop")
    changes = lab.plan()
    revoke = [(s.action, s.target, s.why) for s in changes.ordered() if s.phase == "revoke"]
    assert [a for a, _t, _w in revoke] == ["reservation.revoke", "reservation.revoke", "jobs.cancel"], revoke
    assert all(w.endswith(f"{lab.people['alice']} asked for a stop") for _a, _t, w in revoke)
    assert not lab.apply().failed
    assert _row(lab, stop) == (
        "done",
        "stopped: your jobs in partition gpuseat-c1 were cancelled; no new job of yours runs there until a start",
    )
    assert 41 not in lab.fake.jobs and 42 in lab.fake.jobs  # bob's job is his own seat's: kept
    assert _users(lab) == {("bob",)}
    access = lab.store.delivery.access_of("c1")  # type: ignore[attr-defined]
    assert access["seat-01"]["notes"][0] == (
        f"stopped: on {lab.people['alice']}'s request; no job of yours runs in gpuseat-c1 until a start"
    )
    assert not access["seat-02"]["notes"][0].startswith("stopped")
    assert lab.plan().steps == []  # a second apply plans nothing
    name = next(iter(lab.fake.reservations))
    lab.fake.reservations[name].append("alice")  # by hand: taken off again at the next pass
    assert [(s.action, s.target) for s in lab.plan().steps] == [("reservation.revoke", name)]

    # both stopped: the reservations keep a placeholder (Slurm refuses an empty Users=), then both start
    _ask(lab, "bob", "stop")
    assert not lab.apply().failed and _users(lab) == {("root",)} and 42 not in lab.fake.jobs
    assert lab.plan().steps == []
    starts = [_ask(lab, who, "start") for who in ("alice", "bob")]
    assert not lab.apply().failed
    assert [_row(lab, r) for r in starts] == [("done", "started: you can run jobs in partition gpuseat-c1 again")] * 2
    assert _users(lab) == {("alice", "bob")}
    assert "stopped" not in lab.store.delivery.access_of("c1")["seat-01"]["notes"][0]  # type: ignore[attr-defined]
    assert lab.plan().steps == []


def test_a_restart_cancels_the_holders_jobs_and_keeps_them_in(lab: Lab) -> None:  # noqa: F811
    assert not lab.apply().failed
    lab.job(51, "alice", "seat-01")
    lab.job(52, "alice", "seat-01", state="PENDING")
    lab.job(53, "bob", "seat-02")
    restart = _ask(lab, "alice", "restart")
    done = lab.apply()
    assert not done.failed, done.failed
    assert _row(lab, restart) == (
        "done",
        "restarted: 2 job(s) of yours in partition gpuseat-c1 were cancelled; you can submit again",
    )
    assert set(lab.fake.jobs) == {53} and _users(lab) == {("alice", "bob")}
    assert lab.plan().steps == []


def test_a_reset_and_a_key_are_refused_with_the_reason_and_the_seat_runs_on(lab: Lab) -> None:  # noqa: F811
    assert not lab.apply().failed
    lab.job(61, "alice", "seat-01")
    reset, key = _ask(lab, "alice", "reset"), _ask(lab, "alice", "key", key=KEY)
    assert not lab.apply().failed
    assert [_row(lab, r) for r in (reset, key)] == [("failed", NOTHING_TO_RESET), ("failed", NO_SSH_KEY)]
    assert 61 in lab.fake.jobs and _users(lab) == {("alice", "bob")}
    assert lab.plan().steps == []


def test_no_seat_hours_left_stops_a_slurm_seat_outside_the_sessions_only(lab: Lab) -> None:  # noqa: F811
    store = lab.store
    text = store.courses.course_text("c1") + "\n[policy]\nquota_hours = 0\n"  # type: ignore[attr-defined]
    store.courses.set_course_text("c1", text, changes=[])  # type: ignore[attr-defined]
    assert not lab.apply().failed  # in today's session: nothing stops for hours
    assert _users(lab) == {("alice", "bob")}
    assert store.requests.seat_requests("c1") == []  # type: ignore[attr-defined]
    lab.job(71, "alice", "seat-01")
    later = datetime.now(UTC) + timedelta(days=3)  # after the course's last session
    done = one_pass(store, course="c1", engine="slurm", runner=lab.runner, now=later)  # type: ignore[arg-type]
    assert not done.failed, done.failed
    stops = store.requests.seat_requests("c1")  # type: ignore[attr-defined]
    assert sorted(r.participant for r in stops) == sorted(lab.people[w] for w in ("alice", "bob"))
    assert all(r.state == "done" and r.reason.startswith("no seat hours left: ") for r in stops)
    assert _users(lab) == {("root",)} and 71 not in lab.fake.jobs
    start = _ask(lab, "alice", "start")
    assert not one_pass(store, course="c1", engine="slurm", runner=lab.runner, now=later).failed  # type: ignore[arg-type]
    assert _row(lab, start) == ("failed", "no seat hours left (0 of 0 h): ask the organizer for more")
    assert _users(lab) == {("root",)}
