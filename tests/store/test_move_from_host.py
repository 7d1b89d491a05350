"""A server dies after day one: ``seats move --from-host H`` moves everyone on it to the best suitable free seat on
another host, by ``seats assign``'s rule, in one transaction (each move as ``seats move``: the old assignment closed
with ``ended_by="move"``, a ``seat.move`` row); too few seats elsewhere move nobody (exit 2) unless ``--partial``;
``--dry-run`` stores nothing. Before, the organizer moved each holder by hand, and ``seats assign`` of a released
one chose one of the dead server's seats again."""

from __future__ import annotations

import json

import pytest

from gpuseat.errors import InputError, NoFreeSeat

from .conftest import EXAMPLES

#: the 2016 course's one group (participants) needs 4 GB and a partitioned seat: the 2 GB seat on gpu2 suits
#: nobody, by assign's rule; gpu1's free seat-04 must not be chosen (its server is dead)
GPU1 = [("seat-01", 16), ("seat-02", 16), ("seat-03", 16), ("seat-04", 16)]
GPU2 = [("seat-05", 2), ("seat-06", 40), ("seat-07", 16), ("seat-08", 16)]
HOLDERS = {"amartin": "seat-01", "bcosta": "seat-02", "cwei": "seat-03"}


def two_hosts(store, gpu2=GPU2):
    """The 2016 course as ``dl``: MIG seats on the host engine, on gpu1 and gpu2; three holders on gpu1."""
    store.courses.create_course(EXAMPLES / "course-2016.toml", key="dl")
    store.roster.import_roster("dl", EXAMPLES / "roster-16.csv")
    specs = [
        {"key": k, "kind": "mig", "memory_gb": m, "host": host, "engine": "host", "device_uuid": f"MIG-{k}"}
        for host, seats in (("gpu1", GPU1), ("gpu2", gpu2))
        for k, m in seats
    ]
    store.seats.add_seats("dl", specs)
    for who, seat in HOLDERS.items():
        store.seats.assign("dl", who, seat)


def _held(store):
    return {s.participant: s.key for s in store.seats.seats("dl") if s.participant}


def _history(store):
    return [(a.participant, a.seat, a.valid_to is None, a.ended_by) for a in store.seats.history("dl")]


def test_everyone_on_the_host_moves_to_the_best_suitable_seat_elsewhere(store):
    two_hosts(store)
    before, head = _history(store), store.agents.events_head()
    states = {s.key: s.state for s in store.seats.seats("dl")}
    planned = store.seats.move_from_host("dl", "gpu1", dry_run=True)
    assert _history(store) == before and store.agents.events_head() == head  # a dry run stores nothing
    done = store.seats.move_from_host("dl", "gpu1")
    # assign's rule: the smallest suitable seat first, by key; never the 2 GB seat nor gpu1's free seat-04
    moves = [(m.participant, m.from_seat, m.from_host, m.seat, m.host) for m in done.moved]
    assert moves == [
        ("amartin", "seat-01", "gpu1", "seat-07", "gpu2"),
        ("bcosta", "seat-02", "gpu1", "seat-08", "gpu2"),
        ("cwei", "seat-03", "gpu1", "seat-06", "gpu2"),
    ]
    assert planned.moved == done.moved and planned.dry_run and not done.dry_run and not done.stayed
    assert _held(store) == {"amartin": "seat-07", "bcosta": "seat-08", "cwei": "seat-06"}
    closed = {(who, seat): ended for who, seat, is_open, ended in _history(store) if not is_open}
    assert closed == {(who, seat): "move" for who, seat in HOLDERS.items()}
    rows = [(e.action, e.participant, e.seat) for e in store.events.events("dl") if e.action == "seat.move"]
    assert sorted(rows) == [("seat.move", "amartin", "seat-07"), ("seat.move", "bcosta", "seat-08"),
                            ("seat.move", "cwei", "seat-06")]  # fmt: skip
    assert {s.key: s.state for s in store.seats.seats("dl")} == states  # gpu1's seats kept as they were
    again = store.seats.move_from_host("dl", "gpu1")
    assert again.moved == () and again.stayed == ()


def test_too_few_seats_elsewhere_move_nobody_unless_partial(store):
    two_hosts(store, gpu2=[("seat-05", 2), ("seat-06", 40)])  # one suitable free seat for three holders
    before = _history(store)
    with pytest.raises(NoFreeSeat) as short:
        store.seats.move_from_host("dl", "gpu1")
    assert "3 holder(s) on gpu1 but 1 suitable free seat(s) elsewhere (group participants needs 2 more)" in str(
        short.value
    )
    assert "--partial" in short.value.fix and "gpuseat seats add" in short.value.fix
    assert _history(store) == before
    done = store.seats.move_from_host("dl", "gpu1", partial=True)
    assert [(m.participant, m.seat) for m in done.moved] == [("amartin", "seat-06")] and done.stayed == (
        "bcosta",
        "cwei",
    )
    assert _held(store) == {"amartin": "seat-06", "bcosta": "seat-02", "cwei": "seat-03"}
    with pytest.raises(InputError) as unknown:
        store.seats.move_from_host("dl", "gpu1", to_host="gpu9")
    assert unknown.value.what == "no seat of course dl is on host 'gpu9' (hosts: gpu1, gpu2)"
    assert unknown.value.where == "to_host"


def test_cli_moves_a_dead_servers_holders(cli, store, url):
    two_hosts(store)
    head = store.agents.events_head()
    db = ("--course", "dl", "--db", url)
    both = cli("seats", "move", "--from-host", "gpu1", "--participant", "amartin", "--seat", "seat-07", *db)
    assert both.code == 2 and both.err.startswith("error: --from-host:") and "Traceback" not in both.err, both
    unknown = cli("seats", "move", "--from-host", "gpu9", *db)
    assert unknown.code == 2, unknown
    assert "error: --from-host: no seat of course dl is on host 'gpu9' (hosts: gpu1, gpu2)" in unknown.err
    dry = cli("seats", "move", "--from-host", "gpu1", "--dry-run", *db)
    assert dry.code == 0, dry
    assert "amartin: seat-01 (gpu1) -> seat-07 (gpu2)" in dry.out and "nothing was stored" in dry.out
    assert store.agents.events_head() == head
    done = cli("seats", "move", "--from-host", "gpu1", "--to-host", "gpu2", *db)
    assert done.code == 0, done
    lines = done.out.splitlines()
    assert "cwei: seat-03 (gpu1) -> seat-06 (gpu2)" in lines
    assert "gpu1's seats are free now" in lines[-1] and "gpuseat seats remove" in lines[-1]
    assert _held(store) == {"amartin": "seat-07", "bcosta": "seat-08", "cwei": "seat-06"}
    nobody = cli("seats", "move", "--from-host", "gpu1", "--format", "json", *db)
    assert nobody.code == 0 and json.loads(nobody.out)["moved"] == [], nobody
    text = cli("seats", "move", "--from-host", "gpu1", *db)
    assert text.code == 0 and text.out.strip() == "nobody holds a seat on gpu1", text
