"""More writers than cores: eight processes write one course at once (two roster imports, two movers, two that
ask for stops and starts and finish them, two claimers) while an agent passes over it, on SQLite and
PostgreSQL. Each write either lands or is refused with a gpuseat error that says why (a seat taken meanwhile, a
request already pending); none is lost, no seat gets two holders nor a participant two seats, and nothing
deadlocks (PostgreSQL would abort one side with ``deadlock detected``: an internal error here).

The writers are forks of the warm test process (each opens its own store after the fork), so the race is
the writes' and not Python's start-up.
"""

from __future__ import annotations

import faulthandler
import itertools
import json
import os
import signal
import time
import traceback
from pathlib import Path
from typing import Any

import pytest

from gpuseat.engines.agent import Agent, AgentOptions
from gpuseat.engines.runner import Runner
from gpuseat.errors import InputError
from gpuseat.store import CourseStore, open_store
from pg_schema import db_url  # noqa: F401 (the url fixture: SQLite and PostgreSQL)

PEOPLE, SEATS, ROUNDS = 24, 30, 12
COURSE = f'name = "lab"\nparticipants = {PEOPLE + 16}\n[schedule]\nstart = 2026-09-07\ndays = 5\n'


def _roster(keys: list[str]) -> str:
    return "key,name,email\n" + "".join(f"{k},{k.upper()},{k}@example.org\n" for k in keys)


@pytest.fixture
def store(url: str, tmp_path: Path) -> Any:
    """Course ``lab``: 24 participants, 30 seats on gpu1, p00..p11 seated, p12..p23 not."""
    s = open_store(url, create=True)
    (tmp_path / "lab.toml").write_text(COURSE)
    s.courses.create_course(tmp_path / "lab.toml", key="lab")
    (tmp_path / "roster.csv").write_text(_roster([f"p{i:02d}" for i in range(PEOPLE)]))
    s.roster.import_roster("lab", tmp_path / "roster.csv")
    s.seats.add_seats(
        "lab",
        [
            {"key": f"s{i:02d}", "kind": "gpu", "host": "gpu1", "engine": "host", "device_uuid": f"GPU-{i:02d}"}
            for i in range(SEATS)
        ],
    )
    for i in range(PEOPLE // 2):
        s.seats.assign("lab", f"p{i:02d}", f"s{i:02d}")
    yield s
    s.close()


def _work(url: str, role: str, n: int, folder: Path) -> dict[str, Any]:
    """One writer's rounds; what landed (to look for afterwards) and what was refused, by whom."""
    s = open_store(url)
    landed: list[Any] = []
    refused: list[str] = []
    try:
        for r in range(ROUNDS):
            try:
                if role == "import":  # new people each round, and every earlier one again (updated, not doubled)
                    keys = [f"i{n}x{j:02d}" for j in range(r + 1)]
                    path = folder / f"import-{n}-{r}.csv"
                    path.write_text(_roster(keys))
                    s.roster.import_roster("lab", path)
                    landed.append(keys[-1])
                elif role == "move":  # p00..p05 (mover 0) or p06..p11 (mover 1) to a free seat
                    who = f"p{6 * n + r % 6:02d}"
                    free = [v.key for v in s.seats.seats("lab") if v.participant is None]
                    s.seats.move("lab", who, free[(r * 7 + n) % len(free)])
                    landed.append(who)
                elif role == "ask":  # stops and starts of p00..p11's seats, each finished at once, as the agent does
                    who = f"p{n * 6 + r % 6:02d}"
                    got = s.requests.request_seat("lab", who, "stop" if r % 2 == 0 else "start", actor="t",
                                                  by_participant=False)  # fmt: skip
                    s.requests.finish_request("lab", got.id, ok=True, reason="done")
                    landed.append(got.id)
                else:  # claims by the unseated p12..p23, two claimers for each
                    who = f"p{12 + (r + n * 3) % 12:02d}"
                    landed.append([who, s.claims.claim_seat("lab", who, mode="pool").key])
            except InputError as exc:  # refused, saying why; a store error (a deadlock, a lock waited out) fails
                refused.append(f"{type(exc).__name__}: {exc.what}")
    finally:
        s.close()
    return {"role": role, "landed": landed, "refused": refused}


def _fork(url: str, role: str, n: int, folder: Path) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:  # where a writer stands, should the test give up on it: its stacks, on SIGUSR1
        stacks = open(folder / f"{role}-{n}.stacks", "w")  # noqa: SIM115 (open until os._exit)
        faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
        out = _work(url, role, n, folder)
        (folder / f"{role}-{n}.json").write_text(json.dumps(out))
        code = 0
    except BaseException:
        (folder / f"{role}-{n}.err").write_text(traceback.format_exc())
    finally:
        os._exit(code)


def test_eight_writers_and_an_agent_lose_nothing_and_double_nothing(
    store: CourseStore, url: str, tmp_path: Path
) -> None:
    roles = [(role, n) for role in ("import", "move", "ask", "claim") for n in (0, 1)]
    pids = [_fork(url, role, n, tmp_path) for role, n in roles]
    # the agent ticks as `gpuseat agent` does, a poll apart (a tick in a tight loop is no agent's load)
    opts = AgentOptions(engine="host", host="gpu1", resync_s=3600, poll_s=0.02)
    agent = Agent(store, opts, runner=Runner(dry_run=True), say=lambda _line: None)
    passes, left, deadline = 0, set(pids), time.monotonic() + 120
    while left:
        if time.monotonic() > deadline:  # say where each writer still running stands, then end them
            for pid in left:
                os.kill(pid, signal.SIGUSR1)
            time.sleep(1)
            for pid in left:
                os.kill(pid, signal.SIGKILL)
            stacks = {p.name: p.read_text()[-3000:] for p in tmp_path.glob("*.stacks") if p.stat().st_size}
            pytest.fail(f"{len(left)} writer(s) did not finish within 120 s; where they stood: {stacks}")
        passes += agent.tick() is not None
        time.sleep(opts.poll_s)
        for pid in list(left):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                left.discard(pid)
                assert os.waitstatus_to_exitcode(status) == 0, [p.read_text() for p in tmp_path.glob("*.err")]
    results = {(r, n): json.loads((tmp_path / f"{r}-{n}.json").read_text()) for r, n in roles}
    assert passes >= 1
    # nothing doubled: each seat one holder at most, each participant one seat at most, now and in the history
    holders = [v.participant for v in store.seats.seats("lab") if v.participant]
    assert len(holders) == len(set(holders)), sorted(holders)
    history = store.seats.history("lab")
    for of in ("seat", "participant"):
        for key in {getattr(a, of) for a in history}:
            spans = sorted(((a.valid_from, a.valid_to) for a in history if getattr(a, of) == key), key=lambda x: x[0])
            for (_a0, a1), (b0, _b1) in itertools.pairwise(spans):
                assert a1 is not None and a1 <= b0, (of, key, spans)
    # nothing lost: every import's people, every landed move, request and claim is in the store as written
    people = {p.key for p in store.roster.participants("lab")}
    for n in (0, 1):
        assert {f"i{n}x{j:02d}" for j in range(ROUNDS)} <= people
        assert len(results[("import", n)]["landed"]) == ROUNDS, results[("import", n)]
    assert len(people) == PEOPLE + 2 * ROUNDS
    requests = {r.id: r for r in store.requests.seat_requests("lab", limit=10_000)}
    asked = [i for n in (0, 1) for i in results[("ask", n)]["landed"]]
    assert asked and all(requests[i].state == "done" for i in asked), [requests.get(i) for i in asked]
    seat_of = {v.participant: v.key for v in store.seats.seats("lab") if v.participant}
    claimed = [c for n in (0, 1) for c in results[("claim", n)]["landed"]]
    assert claimed, results[("claim", 0)]
    for who, _seat in claimed:  # a claimer keeps its seat unless a mover took the participant elsewhere: none do
        assert who in seat_of, (who, seat_of)
    moved = [w for n in (0, 1) for w in results[("move", n)]["landed"]]
    assert len(moved) + sum(len(results[("move", n)]["refused"]) for n in (0, 1)) == 2 * ROUNDS
    assert moved, results[("move", 0)]
    # the agent's last look: once more, nothing left unplanned
    assert agent.tick() is not None or store.agents.events_head() == agent.cursor
