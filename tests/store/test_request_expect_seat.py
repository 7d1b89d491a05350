"""A participant's seat control is checked against the seat their page showed in the same transaction
as the request's write: a move (or release) that lands between the page's read and the write refuses
the request instead of stopping or resetting the seat they hold now, and stores nothing."""

from __future__ import annotations

import pytest

from gpuseat.store.requests import SeatChanged

from .conftest import two_seat_lab


def test_a_request_for_the_seat_held_before_a_move_is_refused_and_stores_nothing(store) -> None:
    ann, _ben = two_seat_lab(store)
    store.seats.assign("lab", ann, "seat-01")
    store.seats.move("lab", ann, "seat-02")  # the organizer's move, after ann's page showed seat-01
    events = len(store.events.events("lab"))
    for action in ("stop", "reset"):
        with pytest.raises(SeatChanged, match="this request was for seat seat-01; you now hold seat-02"):
            store.requests.request_seat("lab", ann, action, actor=ann, expect_seat="seat-01")
    assert store.requests.seat_requests("lab", participant=ann) == []
    assert len(store.events.events("lab")) == events
    done = store.requests.request_seat("lab", ann, "stop", actor=ann, expect_seat="seat-02")
    assert (done.seat, done.state) == ("seat-02", "pending")
    store.seats.release("lab", participant=ann)
    with pytest.raises(SeatChanged, match="you hold no seat now"):
        store.requests.request_seat("lab", ann, "start", actor=ann, expect_seat="seat-02")


def test_a_request_no_engine_will_carry_out_fails_with_the_reason_when_its_seat_or_course_goes(store) -> None:
    """A stop left pending on a seat its asker was released from is failed when the seat is removed, and
    a restart pending when the course is archived is failed by the archive: neither stays "pending" for ever
    (nor is carried out if the seat key came back), and a request of another seat is left alone."""
    ann, ben = two_seat_lab(store)
    store.seats.assign("lab", ann, "seat-02")
    store.seats.assign("lab", ben, "seat-01")
    stop = store.requests.request_seat("lab", ann, "stop", actor=ann)
    kept = store.requests.request_seat("lab", ben, "restart", actor=ben)
    store.seats.release("lab", participant=ann)  # before any agent came by
    store.lifecycle.remove_seats("lab", ["seat-02"], actor="organizer")
    (gone,) = store.requests.seat_requests("lab", participant=ann)
    assert (gone.id, gone.state, gone.reason) == (
        stop.id,
        "failed",
        "not carried out: the seat was removed from the course",
    )
    assert [(r.id, r.state) for r in store.requests.seat_requests("lab", pending=True)] == [(kept.id, "pending")]
    failed = [e for e in store.events.events("lab") if e.action == "seat.request.failed"]
    assert [(e.participant, e.seat) for e in failed] == [(ann, "seat-02")]

    store.lifecycle.archive_course("lab", actor="organizer")
    (ended,) = store.requests.seat_requests("lab", participant=ben)
    assert (ended.id, ended.state, ended.reason) == (kept.id, "failed", "not carried out: the course was archived")
    assert ended.done_at is not None and store.requests.seat_requests("lab", pending=True) == []
