"""The claim's SQL picks the seat the pure rules of core.seating pick (misfit + preference), on both databases.

Random courses (groups with memory, isolation and guest-OS needs; seats of every kind, some reserved,
some failed or held) are claimed participant by participant; each answer is compared with the seat the
Python rules choose from the same rows, and "no free seat" must agree too.
"""

from __future__ import annotations

import contextlib
import random
from pathlib import Path

import pytest
from sqlalchemy import text

from gpuseat.core.needs import SeatNeed
from gpuseat.core.roster import RosterText
from gpuseat.core.seating import misfit, preference
from gpuseat.errors import InputError, NoFreeSeat, NotFound
from gpuseat.store import CourseStore, SeatSpec

from .test_concurrency import course_with

KINDS = ("gpu", "mig", "vgpu", "shared", "cloud", "slurm", "vm")
ENGINES = ("manual", "libvirt", "jupyterhub", "slurm")
GROUPS = {
    "small": 'min_gpu_memory_gb = 8\nisolation = "shared"',
    "big": 'min_gpu_memory_gb = 40\nisolation = "dedicated"',
    "win": 'min_gpu_memory_gb = 10\nguest_os = "windows"\nisolation = "partitioned"',
    "mid": "min_gpu_memory_gb = 20",
}


def make_course(store: CourseStore, tmp_path: Path, rng: random.Random, people: int = 24, seats: int = 30) -> None:
    groups = "".join(f'[[group]]\nname = "{g}"\ncount = {people}\n{need}\n' for g, need in GROUPS.items())
    path = tmp_path / "mixed.toml"
    path.write_text(f'name = "mixed"\n[schedule]\nstart = 2026-01-05\ndays = 5\n{groups}')
    store.courses.create_course(path, key="mixed")
    names = list(GROUPS)
    rows = ["name,email,group"] + [f"P {i},p{i:03d}@example.org,{rng.choice(names)}" for i in range(people)]
    store.roster.import_roster("mixed", RosterText("\n".join(rows)))
    specs = []
    for i in range(seats):
        reserved = rng.sample(names, rng.choice((0, 0, 0, 1, 2)))
        specs.append(
            SeatSpec(
                key=rng.choice(("s", "S", "seat-", "a_")) + f"{rng.randrange(1000):03d}-{i}",
                kind=rng.choice(KINDS),  # type: ignore[arg-type]
                engine=rng.choice(ENGINES),  # type: ignore[arg-type]
                memory_gb=rng.choice((None, 5.0, 10.0, 20.0, 40.0, 80.0, 19.9999999999)),
                groups=tuple(reserved),
            )
        )
    store.seats.add_seats("mixed", specs)
    for x in rng.sample(specs, 4):
        store.seats.set_seat_state("mixed", x.key, rng.choice(("failed", "released")))


def python_choice(store: CourseStore, participant: str) -> str | None:
    """The seat the pure rules choose for ``participant`` from the stored rows."""
    course = store.courses.get_course("mixed")
    needs = {g["name"]: SeatNeed.model_validate({k: v for k, v in g.items() if k in SeatNeed.model_fields})
             for g in course.summary["groups"]}  # fmt: skip
    group = store.roster.find_participant("mixed", participant).group
    ok = []
    for x in store.seats.seats("mixed"):
        if x.participant is not None or x.state not in ("planned", "requested", "running"):
            continue
        need = needs.get(group) if group else None
        if misfit(kind=x.kind, memory_gb=x.memory_gb, engine=x.engine, reserved_for=x.groups, group=group, need=need):
            continue
        ok.append((preference(key=x.key, kind=x.kind, memory_gb=x.memory_gb, reserved_for=x.groups, group=group), x))
    return min(ok, key=lambda t: t[0])[1].key if ok else None


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sql_claim_matches_the_pure_rules(store: CourseStore, tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    make_course(store, tmp_path, rng)
    people = [p.key for p in store.roster.participants("mixed")]
    rng.shuffle(people)
    seated = 0
    for who in people:
        expected = python_choice(store, who)
        if expected is None:
            with pytest.raises(NoFreeSeat, match=f"no free seat suits {who}"):
                store.claims.claim_seat("mixed", who)
            continue
        got = store.claims.claim_seat("mixed", who, mode="pool", actor="test")
        assert got.key == expected and got.participant == who and got.mode == "pool"
        assert store.claims.claim_seat("mixed", who).key == expected  # held: the same seat again, nothing new
        seated += 1
    assert seated > 0
    claims = [e for e in store.events.events("mixed") if e.action == "seat.claim"]
    assert len(claims) == seated and all(e.actor == "test" and e.detail == {"mode": "pool"} for e in claims)
    assert {(e.participant, e.seat) for e in claims} == {
        (a.participant, a.seat) for a in store.seats.history("mixed") if a.valid_to is None
    }


def test_claim_finds_by_email_and_unix_user_and_names_unknown_people(course2016: CourseStore) -> None:
    p = course2016.roster.participants()[0]
    course2016.seats.add_seats(None, [SeatSpec(key=f"g{i}", kind="gpu", memory_gb=80) for i in range(2)])
    assert course2016.claims.claim_seat(None, p.email.upper()).participant == p.key  # type: ignore[union-attr]
    if p.unix_user:
        assert course2016.claims.claim_seat(None, p.unix_user).key == course2016.seats.seat_of(None, p.key).key  # type: ignore[union-attr]
    with pytest.raises(NotFound, match="no participant 'nobody'"):
        course2016.claims.claim_seat(None, "nobody")
    with pytest.raises(NotFound, match="no course 'nope'"):
        course2016.claims.claim_seat("nope", p.key)
    with pytest.raises(InputError, match="unknown mode"):
        course2016.claims.claim_seat(None, p.key, mode="borrow")  # type: ignore[arg-type]


def test_a_participants_second_claim_that_loses_the_race_gets_the_seat_they_hold(
    course2016: CourseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two claims for one person at once (two hub servers, a double click): the one that looked before
    the other took a seat loses at the unique index, is retried, and answers the seat now held."""
    from gpuseat.store import claims, open_store

    p = course2016.roster.participants()[0]
    course2016.seats.add_seats(None, [SeatSpec(key=f"g{i}", kind="gpu", memory_gb=80) for i in range(3)])
    other = open_store(course2016.url)
    first: dict[str, str] = {}
    if course2016.database.engine.dialect.name == "sqlite":  # the lookup runs before the write lock: race it there
        real = claims._begin

        def racing(store: object, raw: object, turns: object, ask: object = None) -> bytes | None:
            if not first:
                first["seat"] = "?"  # (the other claim's own turn passes straight through)
                first["seat"] = other.claims.claim_seat(None, p.key).key  # the other claim wins meanwhile
            return real(store, raw, turns, ask)

        monkeypatch.setattr(claims, "_begin", racing)
    else:  # one statement: two claims of one person race inside the database
        first["seat"] = other.claims.claim_seat(None, p.key).key
    got = course2016.claims.claim_seat(None, p.key)
    other.close()
    assert got.key == first["seat"] and got.participant == p.key
    held = [x for x in course2016.seats.seats(None) if x.participant == p.key]
    assert [x.key for x in held] == [first["seat"]]


def test_a_claim_whose_seat_was_taken_for_them_while_it_waited_gets_it_when_none_is_left(
    store: CourseStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite: a claim waiting in the writers' queue can be served by the claim before it (its seat taken
    in that claim's transaction) and still come to the write lock itself (it missed the answer). When that
    seat was the last free one, its own take finds none: the participant holds a seat, so the answer is
    that seat, never "no seat is left" (the portal's 50-claims-on-20-seats test once got one such 409)."""
    from gpuseat.store import claims, open_store

    if store.database.engine.dialect.name != "sqlite":
        return  # one statement on PostgreSQL: the seat held is found in the same statement
    who = course_with(store, tmp_path, 2, 1)
    other = open_store(store.url)
    taken: dict[str, str] = {}
    real = claims._begin

    def served_meanwhile(db: object, raw: object, turns: object, ask: object = None) -> bytes | None:
        if not taken:
            taken["seat"] = "?"  # (the other claim's own turn passes straight through)
            taken["seat"] = other.claims.claim_seat("big", who[0]).key  # the last seat, for the same person
        return real(db, raw, turns, None)  # no answer comes: this claim writes itself

    monkeypatch.setattr(claims, "_begin", served_meanwhile)
    got = store.claims.claim_seat("big", who[0], mode="pool")
    other.close()
    assert (got.key, got.participant) == (taken["seat"], who[0])
    with pytest.raises(NoFreeSeat):  # the course is full for everyone else
        store.claims.claim_seat("big", who[1], mode="pool")


def test_claim_after_the_course_is_deleted_and_made_again(store: CourseStore, tmp_path: Path) -> None:
    """The claim remembers course ids per store; a course made again under the same key is found."""
    rng = random.Random(7)
    make_course(store, tmp_path, rng, people=4, seats=8)
    who = store.roster.participants("mixed")[0].key
    with contextlib.suppress(NoFreeSeat):
        store.claims.claim_seat("mixed", who)  # the claim now knows course "mixed" by its id
    with store.database.engine.begin() as conn:
        conn.execute(text("DELETE FROM courses WHERE key = 'mixed'"))
    make_course(store, tmp_path, random.Random(7), people=4, seats=8)
    expected = python_choice(store, who)
    if expected is None:
        with pytest.raises(NoFreeSeat):
            store.claims.claim_seat("mixed", who)
    else:
        assert store.claims.claim_seat("mixed", who).key == expected


def test_a_claim_is_one_statement_on_postgresql_and_one_take_on_sqlite(
    store: CourseStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: the whole claim (lookup, take, events row) is one statement, one round trip; SQLite:
    under the write lock only the take, the read of the seat taken and its events row run (what the
    database itself executed)."""
    from sqlalchemy import event

    make_course(store, tmp_path, random.Random(11), people=6, seats=12)
    who = [p.key for p in store.roster.participants("mixed")]
    sent: list[str] = []
    postgres = store.database.engine.dialect.name == "postgresql"
    if postgres:  # every statement psycopg sends, whoever sends it
        import psycopg

        real = psycopg.Cursor.execute  # every cursor's, the connection's own execute included

        def execute(self: psycopg.Cursor, query: str, *args: object, **kwargs: object) -> object:  # type: ignore[type-arg]
            sent.append(" ".join(str(query).split()))
            return real(self, query, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(psycopg.Cursor, "execute", execute)
        store.claims.claim_seat("mixed", who[0])  # warm: the course is known, the claim pool is open
    else:  # SQLite's own trace of every statement it runs, on every connection of the store
        from gpuseat.store import claims

        store.database.engine.dispose()

        def trace(dbapi_conn: object, _record: object = None) -> None:
            dbapi_conn.set_trace_callback(lambda sql: sent.append(" ".join(sql.split())))  # type: ignore[attr-defined]

        event.listen(store.database.engine, "connect", trace)
        store.claims.claim_seat("mixed", who[0])  # warm: the claim's own connection (its lane) is open
        for lane in claims._lanes[store.database]:
            trace(lane.conn)
    checked = 0
    for p in who[1:]:
        sent.clear()
        try:
            got = store.claims.claim_seat("mixed", p)
        except NoFreeSeat:
            continue
        assert got.participant == p
        checked += 1
        if postgres:
            assert len(sent) == 1 and sent[0].startswith("WITH n0 AS"), sent
            continue
        top = [x for x in sent if not x.startswith("--")]  # "-- TRIGGER …" lines are the triggers' own
        locked = top[top.index("BEGIN IMMEDIATE") + 1 : top.index("COMMIT")]
        locked = [x for i, x in enumerate(locked) if i == 0 or x != locked[i - 1]]  # RETURNING is traced per step
        assert [x.split()[:3] for x in locked] == [
            ["INSERT", "INTO", "assignments"],
            ["SELECT", "s.id,", "s.key,"],  # the seat taken, for the answer and the events row
            ["INSERT", "INTO", "events"],
        ], locked
    assert checked > 0


def test_sqlite_claims_from_many_threads_share_lanes_and_close_them(tmp_path: Path) -> None:
    """A hub claims from worker threads: each concurrent claim gets its own connection (lane), no seat is
    handed out twice, and closing the store closes every lane's connection and lock-file descriptor."""
    import os
    import threading

    from gpuseat.store import claims, open_store

    store = open_store(f"sqlite:///{tmp_path / 'c.db'}", create=True)
    who = course_with(store, tmp_path, 48, 48)
    got: dict[str, str] = {}
    start = threading.Barrier(8)

    def claim_some(mine: list[str]) -> None:
        start.wait()
        for p in mine:
            got[p] = store.claims.claim_seat("big", p, mode="pool").key

    threads = [threading.Thread(target=claim_some, args=(who[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == sorted(who) and len(set(got.values())) == len(who)
    lanes = list(claims._lanes[store.database])
    assert 1 <= len(lanes) <= 8
    store.close()
    for lane in lanes:
        for fd in (lane.turns._fd, lane.turns._append):  # the lane's place in the writer queue
            with pytest.raises(OSError):
                os.fstat(fd)
        with pytest.raises(Exception, match="closed"):
            lane.conn.execute("SELECT 1")


def test_sqlite_lanes_copy_the_write_ahead_log_after_their_turn(tmp_path: Path) -> None:
    """Lanes turn SQLite's checkpoint-inside-the-commit off and copy the log themselves every
    CHECKPOINT_EVERY seats taken: the database file itself (read without the log) has the assignments."""
    import sqlite3

    from gpuseat.store import claims, open_store

    db = tmp_path / "c.db"
    store = open_store(f"sqlite:///{db}", create=True)
    who = course_with(store, tmp_path, claims.CHECKPOINT_EVERY + 10, claims.CHECKPOINT_EVERY + 10)
    with store.database.engine.begin() as conn:  # what the set-up wrote is in the file, the log emptied
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    for p in who:
        store.claims.claim_seat("big", p)
    without_log = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    in_file = without_log.execute("SELECT count(*) FROM assignments").fetchone()[0]
    without_log.close()
    assert claims.CHECKPOINT_EVERY <= in_file < len(who)  # the copy after the 64th, not after every claim
    assert len(store.seats.history("big")) == len(who)  # the rest is in the log, read as usual
    store.close()


def test_a_claim_after_the_server_ended_its_connection_takes_a_new_one(store: CourseStore, tmp_path: Path) -> None:
    """PostgreSQL: the backend behind a claim connection is ended (a server restart, an admin's
    pg_terminate_backend): the next claim is answered on a new connection, and the dead one is dropped."""
    if store.database.engine.dialect.name != "postgresql":
        pytest.skip("SQLite claims have no server connection to lose")
    from gpuseat.store import claims

    who = course_with(store, tmp_path, 4, 4)
    first = store.claims.claim_seat("big", who[0]).key
    (lane,) = claims._lanes[store.database]
    pid = lane.conn.info.backend_pid
    with store.database.engine.connect() as admin:
        assert admin.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar() is True
    second = store.claims.claim_seat("big", who[1])
    assert second.participant == who[1] and second.key != first
    assert lane.conn.closed and all(x.conn.info.backend_pid != pid for x in claims._lanes[store.database])
    assert [e.participant for e in store.events.events() if e.action == "seat.claim"] == who[:2]


def test_warm_claims_readies_a_connection_and_writes_nothing(store: CourseStore, tmp_path: Path) -> None:
    """A hub warms the claim at start-up: afterwards a claim connection is open (on PostgreSQL with the
    claim prepared there), nobody holds a seat and no event was written; an unknown course is refused."""
    from gpuseat.store import claims

    who = course_with(store, tmp_path, 3, 3)
    before = len(store.events.events())
    store.claims.warm_claims("big")
    assert len(store.events.events()) == before
    assert all(x.participant is None for x in store.seats.seats("big"))
    if store.database.engine.dialect.name == "postgresql":
        (lane,) = claims._lanes[store.database]
        prepared = lane.conn.execute("SELECT statement FROM pg_prepared_statements", prepare=False).fetchall()
        assert [x[0].split()[:3] for x in prepared] == [["WITH", "n0", "AS"]], prepared
    else:
        assert len(claims._lanes[store.database]) == 1
    assert store.claims.claim_seat("big", who[0]).participant == who[0]
    with pytest.raises(NotFound, match="no course 'nope'"):
        store.claims.warm_claims("nope")
