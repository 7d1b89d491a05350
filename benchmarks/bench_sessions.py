"""Seat hours and the checks before a session at 1,000 seats: what they add to one agent pass.

Each course has ``quota_hours`` set, every seat held, a tenth stopped and topped up, and a lab session
10 minutes from now (lead 15 min, a course webhook): every running seat is due a check. Two shapes: one
course of 1,000 seats and 20 courses of 50. Per course, what an engine's pass does for hours and sessions:

- **read**: ``gpuseat.engines.hours.read`` (every holder's hours, the course's sessions and policies);
- **plan**: each holder's hours rule, then ``SessionChecks.plan`` (the checks due, the webhook report);
- **carry out**: ``sessions.do`` for each ``seat.check`` step (the holder looked up, the result stored)
  with a probe that answers at once (the SSH probe itself is not timed: its cost is the network's).

The floor is the plain SQL ``GROUP BY`` of the same rows: each participant's summed held time, one
statement per course. Prints the median of ``--runs`` of each, the ratio of read + plan to the floor, and
the SQL statements per course (they must not grow with the seats) and per check carried out.

    .venv/bin/python benchmarks/bench_sessions.py [--runs 5] [--db URL]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from session_soon import session_soon  # noqa: E402  (the tests' session a few minutes from now)

FLOOR = {
    "sqlite": "SELECT a.participant_id, sum(julianday(coalesce(a.valid_to, 'now')) - julianday(a.valid_from)) "
    "FROM assignments a JOIN seats s ON s.id = a.seat_id JOIN courses c ON c.id = s.course_id "
    "WHERE c.key = :k GROUP BY a.participant_id",
    "postgresql": "SELECT a.participant_id, sum(extract(epoch FROM coalesce(a.valid_to, now()) - a.valid_from)) "
    "FROM assignments a JOIN seats s ON s.id = a.seat_id JOIN courses c ON c.id = s.course_id "
    "WHERE c.key = :k GROUP BY a.participant_id",
}


def build(url: str, courses: int, per: int, folder: Path, prefix: str) -> list[str]:
    """``courses`` courses of ``per`` held host seats each (see the module docstring); their keys."""
    from gpuseat.store import open_store

    _at, schedule = session_soon(10)
    keys = []
    with open_store(url, create=True) as store:
        for c in range(courses):
            key = f"{prefix}{c:02d}"
            keys.append(key)
            (folder / f"{key}.toml").write_text(
                f'name = "{key}"\nparticipants = {per}\nwebhook = "http://127.0.0.1:9/hook"\n{schedule}'
                "[policy]\nquota_hours = 40\nlead_minutes = 15\n"
            )
            store.courses.create_course(folder / f"{key}.toml", key=key)
            rows = "".join(f"{key}-p{i},{key}-p{i}@example.org\n" for i in range(per))
            (folder / f"{key}.csv").write_text("name,email\n" + rows)
            store.roster.import_roster(key, folder / f"{key}.csv")
            seats = [
                {"key": f"s{i:04d}", "kind": "mig", "host": "gpu1", "engine": "host", "device_uuid": f"MIG-{key}-{i}"}
                for i in range(per)
            ]
            store.seats.add_seats(key, seats)
            store.seats.assign_all(key)
            for who in [p.key for p in store.roster.participants(key)][::10]:
                r = store.requests.request_seat(key, who, "stop", actor="bench", by_participant=False)
                store.requests.finish_request(key, r.id, ok=True, reason="bench")
                store.requests.add_seat_hours(key, who, 5, actor="bench")
    return keys


def shape(url: str, keys: list[str], runs: int) -> dict[str, Any]:
    """Medians of read, plan, carry out and floor over ``keys``, and the statements they ran."""
    from sqlalchemy import event, text

    from gpuseat.core.readiness import Readiness
    from gpuseat.core.selfservice import RunState
    from gpuseat.engines import hours as seat_hours
    from gpuseat.engines import sessions as session_checks
    from gpuseat.engines.apply import course_state
    from gpuseat.engines.host.engine import HostEngine
    from gpuseat.engines.runner import Runner
    from gpuseat.store import open_store

    class Answered(HostEngine):
        """The host engine with a probe that answers at once: the SSH round trip is not what is timed."""

        def probe(self, seat: Any, participant: Any) -> Readiness:
            return Readiness(self.course, seat.key, participant.key, "ready", None, "", (), datetime.now(UTC), "host")

    counted = [0]
    with open_store(url) as store:
        event.listen(
            store.database.engine, "before_cursor_execute", lambda *_a, **_k: counted.__setitem__(0, counted[0] + 1)
        )
        reads, plans, floors, statements = [], [], [], []
        done = 0.0
        done_n = checks = 0
        for run in range(runs + 1):  # run 0 plans every check and carries them out; the others find them done
            read = plan = 0.0
            for key in keys:
                state = course_state(store, key)
                engine = Answered(store, key, runner=Runner(), host="gpu1")
                states = store.requests.run_states(key)
                before = counted[0]
                t = time.perf_counter()
                ledger = seat_hours.read(store, key, None)
                read += time.perf_counter() - t
                t = time.perf_counter()
                running = {
                    seat.key: p.key
                    for seat, p in state.holders()
                    if ledger.of(p.key).runs(states.get(p.key, RunState(True)))
                }
                steps = session_checks.SessionChecks(engine, state, ledger).plan(running)
                plan += time.perf_counter() - t
                statements.append(counted[0] - before)
                due = [step for step in steps if step.action == "seat.check"]
                assert bool(due) == (run == 0), (run, len(due))
                before = counted[0]
                t = time.perf_counter()
                for step in due:
                    session_checks.do(engine, step)
                done += time.perf_counter() - t
                done_n += counted[0] - before
                checks += len(due)
            t = time.perf_counter()
            with store.database.engine.connect() as conn:
                for key in keys:
                    conn.execute(text(FLOOR[store.database.dialect]), {"k": key}).all()
            floors.append(time.perf_counter() - t)
            reads.append(read)
            plans.append(plan)
    return {
        "read": statistics.median(reads),
        "plan_due": plans[0],
        "plan": statistics.median(plans[1:]),
        "done": done,
        "floor": statistics.median(floors),
        "statements": (min(statements), max(statements)),
        "per_check": done_n / max(checks, 1),
        "checks": checks,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="runs after the first (which carries out the checks)")
    ap.add_argument("--db", default=None, help="an empty database URL (default: a SQLite file in a temp folder)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.db or f"sqlite:///{Path(tmp) / 'sessions.db'}"
        for label, courses, per, prefix in (
            ("1 course x 1,000 seats", 1, 1000, "big"),
            ("20 courses x 50", 20, 50, "c"),
        ):
            t = time.perf_counter()
            keys = build(url, courses, per, Path(tmp), prefix)
            built = time.perf_counter() - t
            got = shape(url, keys, args.runs)
            low, high = got["statements"]
            print(f"{label} (built in {built:.1f} s), {got['checks']} checks due:")
            print(f"  floor (SQL GROUP BY of the held time):       {got['floor'] * 1000:7.1f} ms")
            print(f"  hours read:                                  {got['read'] * 1000:7.1f} ms")
            print(f"  hours rules + session checks planned:        {got['plan_due'] * 1000:7.1f} ms (every check due)")
            print(f"                                               {got['plan'] * 1000:7.1f} ms (every seat checked)")
            ratio = (got["read"] + got["plan_due"]) / got["floor"]
            print(f"  ratio (read + plan, every check due) / floor: {ratio:6.1f}x")
            print(f"  SQL statements per course (read + plan):     {low}-{high}")
            per = got["done"] / max(got["checks"], 1) * 1000
            print(
                f"  checks carried out (a probe that answers at once): {got['done']:.2f} s, {per:.2f} ms and "
                f"{got['per_check']:.0f} statements a check"
            )


if __name__ == "__main__":
    main()
