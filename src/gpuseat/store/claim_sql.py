"""The claim's SQL text, which :mod:`gpuseat.store.claims` sends: the rules of :mod:`gpuseat.core.seating`
as SQL expressions, two SQLite statements and one PostgreSQL statement.

A module of its own because the statements are built once, at import, from the seating rules alone, and are
read and tuned on their own (query plans, indexes), while claims.py is about lanes, turns, retries and
diagnoses.
"""

from __future__ import annotations

import functools
import re

from gpuseat.core.seating import ASSIGNABLE_STATES, KIND_ISOLATION, VM_KINDS, isolation_rank
from gpuseat.store.rows import STEP_S, clock_sql  # STEP_S: a clock behind by more is logged as a step
from gpuseat.store.views import SEAT_COLUMNS  # what the seat view of a claim shows (SeatView.from_row)

__all__ = [
    "ANY_SEAT",
    "SEAT_COLUMNS",
    "SQLITE_EVENT",
    "SQLITE_LOOKUP",
    "SQLITE_SEAT",
    "SQLITE_STEPPED",
    "SQLITE_TAKE",
    "pg_claim_sql",
]

_STATES = ", ".join(f"'{s}'" for s in ASSIGNABLE_STATES)
_KIND_RANK = (
    "CASE s.kind "
    + " ".join(f"WHEN '{k}' THEN {isolation_rank(v)}" for k, v in sorted(KIND_ISOLATION.items()))
    + f" ELSE {isolation_rank('shared')} END"
)
_VM = ", ".join(f"'{k}'" for k in VM_KINDS)
# free: no open assignment, as the seat row says (database triggers keep ``taken``, migration 0011), so a
# claim that locks a seat taken since its snapshot re-checks the row and skips it (no lost race)
_FREE = "NOT s.taken"


def _fits(mem: str, iso: str, win: str) -> str:
    """``misfit() is None`` of core.seating apart from the group reservation: memory, isolation, guest OS."""
    return (
        f"(s.memory_gb IS NULL OR s.memory_gb + 1e-9 >= {mem})"
        f" AND ({_KIND_RANK}) >= {iso}"
        f" AND ({win} = 0 OR s.kind IN ({_VM}) OR s.engine = 'libvirt')"
    )


def _suits(reserved: str, grp: str, mem: str, iso: str, win: str) -> str:
    """``misfit() is None`` of core.seating, in SQL (``reserved``: is the seat reserved for ``grp``)."""
    return f"(json_array_length(s.groups) = 0 OR ({grp} IS NOT NULL AND {reserved})) AND {_fits(mem, iso, win)}"


# ``preference()`` of core.seating is (own hardware first, reserved for the group first, smallest, by key).
# A suitable seat is either reserved for the participant's group or reserved for nobody ("open"), so the
# best seat is the better of two: the best reserved one and the best open one, each ranked by
# (cloud, no memory known, memory, key). The open seats come in that order from the partial index
# ``ix_seats_free_order`` (migration 0012): the best is the first suitable entry, a log-n lookup instead of
# sorting every free seat per claim; the reserved ones (few) come from ``ix_seats_free_reserved``.
_RANK = "(s.kind = 'cloud'), (s.memory_gb IS NULL), s.memory_gb, s.key{collate}"
_OPEN = "json_array_length(s.groups) = 0"  # as in the partial indexes' WHERE (the planners match it)
_RESERVED_SEATS = "json_array_length(s.groups) > 0"
# the better of the two picks (``r``: 0 for the reserved one): preference() on the picked rows
_BETTER = "(b.kind = 'cloud'), b.r, (b.memory_gb IS NULL), b.memory_gb, b.key{collate}"


def _best(
    reserved: str, grp: str, mem: str, iso: str, win: str, extra: str, collate: str, lock: str
) -> tuple[str, str]:
    """The best free suitable seat, as two ``UNION ALL`` arms (reserved for ``grp``, then open seats)."""
    head = "SELECT s.id, s.key, s.kind, s.memory_gb, {r} AS r FROM seats s"
    where = f"s.course_id = :cid AND {_FREE} AND s.state IN ({_STATES}) AND {_fits(mem, iso, win)}{extra}"
    tail = f"ORDER BY {_RANK.format(collate=collate)} LIMIT 1{lock}"
    return (
        f"{head.format(r=0)} WHERE {where} AND {_RESERVED_SEATS} AND {grp} IS NOT NULL AND {reserved} {tail}",
        f"{head.format(r=1)} WHERE {where} AND {_OPEN} {tail}",
    )


_COLS = ", ".join(f"s.{c}" for c in SEAT_COLUMNS)
# the participant by key (an index lookup), else by email or Unix user; coalesce() stops at the first hit
_WHO = (
    "pa.id = coalesce((SELECT p1.id FROM participants p1 WHERE p1.course_id = :cid AND p1.key = :who), "
    "(SELECT p2.id FROM participants p2 WHERE p2.course_id = :cid AND (p2.email = :email OR p2.unix_user = :who) "
    "ORDER BY p2.id LIMIT 1))"
)

# SQLite, step 1 (no lock, WAL readers never wait): the participant and the seat they hold, by id only
# (each column returned costs the client time on the hottest path; a held seat is read when there is one)
SQLITE_LOOKUP = f"""
SELECT pa.id, pa.key, pa.group_name, a.seat_id, a.valid_from, a.mode
FROM participants pa
LEFT JOIN assignments a ON a.participant_id = pa.id AND a.valid_to IS NULL
WHERE {_WHO}
  AND EXISTS (SELECT 1 FROM courses c WHERE c.id = :cid AND c.archived_at IS NULL)
"""

_SQLITE_RESERVED = "EXISTS (SELECT 1 FROM json_each(s.groups) j WHERE j.value = :grp)"
_SQLITE_ARMS = _best(_SQLITE_RESERVED, ":grp", ":mem", ":iso", ":win", "", "", "")

# SQLite, step 2 (under BEGIN IMMEDIATE): take the best free suitable seat in one statement, from now or
# from when the seat's or the participant's last assignment ended if that is later (a clock stepped back:
# see store.rows._clock; what must not overlap is the seat's and the person's own history)
SQLITE_TAKE = f"""
INSERT INTO assignments (seat_id, participant_id, valid_from, mode)
SELECT b.id, :pid, max(:now,
       coalesce((SELECT max(a.valid_to) FROM assignments a WHERE a.seat_id = b.id), :now),
       coalesce((SELECT max(a.valid_to) FROM assignments a WHERE a.participant_id = :pid), :now)), :mode
FROM (
    SELECT * FROM ({_SQLITE_ARMS[0]}) UNION ALL SELECT * FROM ({_SQLITE_ARMS[1]})
) b
WHERE EXISTS (SELECT 1 FROM courses c WHERE c.id = :cid AND c.archived_at IS NULL)
ORDER BY {_BETTER.format(collate="")}
LIMIT 1
RETURNING seat_id, valid_from
"""

SQLITE_SEAT = f"SELECT {_COLS} FROM seats s WHERE s.id = :sid"

_PG_RESERVED = "EXISTS (SELECT 1 FROM json_array_elements_text(s.groups) j(v) WHERE j.v = n.grp)"
_PG_NEED = "(CAST(:needs AS jsonb) -> n0.grp ->> {i})"
# the arms read the participant's needs as one-value subqueries (computed once, before the scan), so each
# arm is a scan of one index in preference order that stops at the first suitable seat it can lock
_PG_ARMS = _best(
    "EXISTS (SELECT 1 FROM json_array_elements_text(s.groups) j(v) WHERE j.v = (SELECT grp FROM n))",
    "(SELECT grp FROM n)",
    "(SELECT mem FROM n)",
    "(SELECT iso FROM n)",
    "(SELECT win FROM n)",
    " AND EXISTS (SELECT 1 FROM n) AND NOT EXISTS (SELECT 1 FROM held)",
    ' COLLATE "C"',
    " FOR UPDATE OF s SKIP LOCKED",
)

# PostgreSQL: the whole claim in one statement (autocommit: one round trip)
_PG_CLAIM = f"""
WITH n0 AS (
    SELECT pa.id AS pid, pa.key AS pkey, pa.group_name AS grp FROM participants pa
    WHERE {_WHO}
      AND EXISTS (SELECT 1 FROM courses c WHERE c.id = :cid AND c.archived_at IS NULL)
), clk AS (
    SELECT to_timestamp(STORE_CLOCK) AS at  -- the store's one clock, the server's (store.rows.clock_sql)
), n AS (
    SELECT n0.pid, n0.pkey, n0.grp,
           coalesce(CAST({_PG_NEED.format(i=0)} AS float8), 0) AS mem,
           coalesce(CAST({_PG_NEED.format(i=1)} AS integer), 0) AS iso,
           coalesce(CAST({_PG_NEED.format(i=2)} AS integer), 0) AS win
    FROM n0
), held AS (
    -- the open assignment found through the participant's index whatever the statistics say: the id a
    -- one-value subquery, the lookup fenced off by LIMIT (no join order to choose), and "open" written so
    -- that no partial index matches (a generic plan made while assignments was empty otherwise scanned the
    -- open-seat index whole, or the table)
    SELECT {_COLS}, a.valid_from, a.mode FROM (
        SELECT a.seat_id, a.valid_from, a.mode FROM assignments a
        WHERE a.participant_id = (SELECT pid FROM n0) AND coalesce(a.valid_to IS NULL, false) LIMIT 1
    ) a JOIN seats s ON s.id = a.seat_id
), r AS (
    {_PG_ARMS[0]}
), o AS (
    {_PG_ARMS[1]}
), pick AS (
    SELECT b.id, b.key FROM (SELECT * FROM r UNION ALL SELECT * FROM o) b
    ORDER BY {_BETTER.format(collate=' COLLATE "C"')} LIMIT 1
), ins AS (
    -- from now by the server's clock (the store's one clock: store.rows.db_now), or from when the seat's or
    -- the person's last assignment ended if that clock is behind it (store.rows._clock: what must not
    -- overlap is the seat's and the person's own history)
    INSERT INTO assignments (seat_id, participant_id, valid_from, mode)
    SELECT pick.id, n.pid,
           greatest((SELECT at FROM clk),
                    (SELECT max(a.valid_to) FROM assignments a WHERE a.seat_id = pick.id),
                    (SELECT max(a.valid_to) FROM assignments a WHERE a.participant_id = n.pid)), :mode
    FROM pick CROSS JOIN n
    RETURNING seat_id, valid_from, mode
), ev AS (
    INSERT INTO events (at, course_key, actor, action, participant, seat, detail)
    SELECT ins.valid_from, :ckey, :actor, 'seat.claim', n.pkey, pick.key, CAST(:detail AS json)
    FROM ins JOIN pick ON pick.id = ins.seat_id CROSS JOIN n
), stepped AS (
    INSERT INTO events (at, course_key, actor, action, participant, seat, detail)
    SELECT ins.valid_from, :ckey, :actor, 'clock.stepped', n.pkey, pick.key,
           json_build_object('clock', (SELECT at FROM clk), 'stored', ins.valid_from,
                             'behind_s', extract(epoch FROM ins.valid_from - (SELECT at FROM clk)))
    FROM ins JOIN pick ON pick.id = ins.seat_id CROSS JOIN n
    WHERE ins.valid_from > (SELECT at FROM clk) + make_interval(secs => {STEP_S})
)
SELECT 'held' AS how, n.pkey, n.grp, {", ".join(f"h.{c}" for c in SEAT_COLUMNS)}, h.valid_from, h.mode, false, true
FROM n JOIN held h ON true
UNION ALL
SELECT 'new', n.pkey, n.grp, {_COLS}, ins.valid_from, ins.mode, false, true
FROM n JOIN ins ON true JOIN seats s ON s.id = ins.seat_id
UNION ALL
SELECT 'none', n.pkey, n.grp, {", ".join("NULL" for _ in SEAT_COLUMNS)}, NULL, NULL,
       EXISTS (SELECT 1 FROM seats s WHERE s.course_id = :cid AND {_FREE} AND s.state IN ({_STATES})
          AND {_suits(_PG_RESERVED, "n.grp", "n.mem", "n.iso", "n.win")}),
       EXISTS (SELECT 1 FROM seats s WHERE s.course_id = :cid)
FROM n WHERE NOT EXISTS (SELECT 1 FROM held) AND NOT EXISTS (SELECT 1 FROM ins)
"""
ANY_SEAT = "SELECT EXISTS (SELECT 1 FROM seats WHERE course_id = :cid)"  # for the "no free seat" message

SQLITE_EVENT = (
    "INSERT INTO events (at, course_key, actor, action, participant, seat, detail) "
    "VALUES (:now, :ckey, :actor, 'seat.claim', :pkey, :skey, :detail)"
)
SQLITE_STEPPED = (
    "INSERT INTO events (at, course_key, actor, action, participant, seat, detail) "
    "VALUES (:now, :ckey, :actor, 'clock.stepped', :pkey, :skey, :stepped)"
)


_NAMED = re.compile(r"(?<![:\w\\]):(\w+)(?!:)")  # a ``:name`` parameter, as SQLAlchemy's text() finds them


@functools.cache
def pg_claim_sql() -> tuple[str, tuple[str, ...]]:
    """The claim statement with PostgreSQL's own ``$n`` placeholders, and the parameter names in order.

    Sent through psycopg's :class:`~psycopg.RawCursor`, which passes ``$n`` through untouched: psycopg
    rewrites ``%(name)s`` placeholders with a regular expression on every call for a statement over
    4,096 characters (it caches only shorter ones), and that was a third of the claim's client CPU.
    """
    names: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    return _NAMED.sub(number, _PG_CLAIM.replace("STORE_CLOCK", clock_sql("postgresql"))), tuple(names)
