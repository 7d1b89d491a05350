"""A release's reason is kept in the history (``assignments.ended_by``, 32 characters): a longer one, an
empty one or one with control characters is refused with one clear message, never cut or stored unsaid."""

from __future__ import annotations

import pytest

from gpuseat.errors import InputError

from .conftest import two_seat_lab

BAD = [
    ("left the course after week two, by email", "40 characters"),  # was cut to 32 unsaid
    ("gone\nseat-02 released by admin", "control characters"),  # a second line forged in `seats history`
    ("ok\x1b[2J", "control characters"),  # an escape sequence for the organizer's terminal
    ("", "empty"),
]


def _history(store):
    return [(a.participant, a.seat, a.valid_to is None, a.ended_by) for a in store.seats.history("lab")]


@pytest.mark.parametrize(("reason", "message"), BAD)
def test_library_refuses_a_reason_it_cannot_keep_and_changes_nothing(store, reason, message):
    ann, _ = two_seat_lab(store)
    store.seats.assign("lab", ann, "seat-01")
    before = _history(store)
    with pytest.raises(InputError) as caught:
        store.seats.release("lab", participant=ann, reason=reason)
    assert caught.value.where == "reason" and message in caught.value.what and caught.value.fix
    assert _history(store) == before


def test_a_reason_of_32_characters_is_kept_whole(store):
    ann, _ = two_seat_lab(store)
    store.seats.assign("lab", ann, "seat-01")
    reason = "moved to the other lab, see mail"  # 32
    done = store.seats.release("lab", participant=ann, reason=reason)
    assert done is not None and done.ended_by == reason
    assert _history(store)[-1][-1] == reason


def test_cli_names_the_flag_and_exits_2(cli, store, url):
    ann, _ = two_seat_lab(store)
    store.seats.assign("lab", ann, "seat-01")
    before = _history(store)
    result = cli("seats", "release", "--participant", ann, "--reason", BAD[0][0], "--course", "lab", "--db", url)
    assert result.code == 2, result.out + result.err
    assert result.err.startswith("error: --reason: the reason has 40") and "To fix: shorten it" in result.err
    assert "Traceback" not in result.err and "released" not in result.out
    assert _history(store) == before
