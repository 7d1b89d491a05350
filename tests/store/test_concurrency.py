"""Many processes at once, and processes killed half-way: no double assignment, no half-imported roster.

Real processes (``python -c``) against one SQLite file and one PostgreSQL schema; the database's own
answer (SQL over ``assignments``) is what is checked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from sqlalchemy import text

from gpuseat.core.roster import RosterText
from gpuseat.store import CourseStore, SeatSpec, open_store

from .conftest import EXAMPLES

# one warm process (Python, SQLAlchemy, the driver and gpuseat imported) forks the workers: each is a
# process of its own with its own connections, as a fresh ``python -c`` would be, without its second of
# start-up (16 of them on 2 cores took longer than the claims). Each worker says "ready" once its store
# is open, claims its keys once ``go`` exists and writes what it got to ``<out>/<i>.json``.
FORKER = textwrap.dedent(
    """
    import json, os, signal, sys, time, traceback
    from sqlalchemy import create_engine
    from gpuseat.errors import NoFreeSeat
    from gpuseat.store import open_store
    url, go, out_dir, chunks = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    create_engine(url).dispose()  # loads the dialect and its driver; connects to nothing
    pids = []
    for i, keys in enumerate(chunks):
        pid = os.fork()
        if pid == 0:
            code, ready = 1, False
            try:
                os.dup2(os.open(os.path.join(out_dir, f"{i}.err"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
                store = open_store(url)
                os.write(1, b"ready\\n")
                ready = True
                while not os.path.exists(go):
                    time.sleep(0.005)
                out = {}
                for key in keys:
                    try:
                        out[key] = store.claims.claim_seat(None, key, mode="pool").key
                    except NoFreeSeat:
                        out[key] = None
                path = os.path.join(out_dir, f"{i}.json")
                with open(path + ".tmp", "w") as f:
                    json.dump(out, f)
                os.rename(path + ".tmp", path)
                code = 0
            except BaseException:
                traceback.print_exc()
                if not ready:
                    os.write(1, b"failed\\n")  # the test reads one line per worker: never leave it waiting
            finally:
                os._exit(code)
        pids.append(pid)
    # "kill": SIGKILL every worker (none is reaped before, so no pid can have been reused); then, or at
    # the end of input, report each worker's exit status
    if sys.stdin.readline().strip() == "kill":
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
    codes = []
    for pid in pids:
        status = os.waitpid(pid, 0)[1]
        codes.append(-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
    print(json.dumps(codes), flush=True)
    """
)


class Workers:
    """``n`` claiming processes forked from one warm process (see :data:`FORKER`)."""

    def __init__(self, url: str, go: Path, chunks: list[list[str]]) -> None:
        self.out = go.parent / f"{go.name}-workers"
        self.out.mkdir()
        self.n = len(chunks)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", FORKER, url, str(go), str(self.out), json.dumps(chunks)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env(),
        )
        assert self.proc.stdout is not None
        said = [self.proc.stdout.readline().strip() for _ in range(self.n)]
        if said != ["ready"] * self.n:
            self.proc.communicate("kill\n", timeout=30)
            raise AssertionError(f"{said}: {self.errors()}")

    def errors(self) -> str:
        return "\n".join(p.read_text() for p in sorted(self.out.glob("*.err")))

    def running(self) -> int:
        """Workers that have not finished their claims."""
        return self.n - len(list(self.out.glob("*.json")))

    def _codes(self, command: str, timeout: float) -> list[int]:
        out, _err = self.proc.communicate(command, timeout=timeout)
        return list(json.loads(out.strip().splitlines()[-1]))

    def results(self, timeout: float = 300) -> dict[str, str | None]:
        """Wait for every worker: each exits 0; what they got, merged."""
        codes = self._codes("wait\n", timeout)
        assert codes == [0] * self.n, (codes, self.errors())
        got: dict[str, str | None] = {}
        for i in range(self.n):
            got.update(json.loads((self.out / f"{i}.json").read_text()))
        return got

    def kill(self) -> None:
        """SIGKILL every worker wherever it is."""
        codes = self._codes("kill\n", 30)
        assert all(c in (0, -9) for c in codes), (codes, self.errors())


def course_with(store: CourseStore, tmp_path: Path, participants: int, seats: int) -> list[str]:
    path = tmp_path / "big.toml"
    path.write_text(f'name = "big"\nparticipants = {participants}\n[schedule]\nstart = 2026-01-05\ndays = 5\n')
    store.courses.create_course(path, key="big")
    rows = ["name,email,unix_user"] + [f"P {i},p{i:05d}@example.org,p{i:05d}" for i in range(participants)]
    store.roster.import_roster("big", RosterText("\n".join(rows)))
    store.seats.add_seats("big", [SeatSpec(key=f"s{i:05d}", kind="gpu", memory_gb=16) for i in range(seats)])
    return [f"p{i:05d}" for i in range(participants)]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")}


def start_workers(url: str, go: Path, keys: list[str], n: int) -> Workers:
    return Workers(url, go, [keys[i::n] for i in range(n)])  # interleaved: all compete for the same seats


def open_counts(store: CourseStore) -> tuple[int, int, int]:
    """Seats held twice, participants holding two seats, open assignments: what the database says."""
    with store.database.engine.connect() as conn:
        q = "SELECT count(*) FROM (SELECT {c} FROM assignments WHERE valid_to IS NULL GROUP BY {c} HAVING count(*) > 1) d"
        double_seat = conn.execute(text(q.format(c="seat_id"))).scalar()
        double_person = conn.execute(text(q.format(c="participant_id"))).scalar()
        total = conn.execute(text("SELECT count(*) FROM assignments WHERE valid_to IS NULL")).scalar()
    return int(double_seat or 0), int(double_person or 0), int(total or 0)


def test_sixteen_processes_claim_without_double_assignment(url, tmp_path):
    store = open_store(url, create=True)
    keys = course_with(store, tmp_path, participants=96, seats=80)
    go = tmp_path / "go"
    workers = start_workers(url, go, keys, 16)
    go.touch()
    results = workers.results()
    got = [s for s in results.values() if s is not None]
    assert len(results) == 96
    assert len(got) == 80 and len(set(got)) == 80  # every seat handed out once
    assert sum(1 for s in results.values() if s is None) == 16  # the rest: a clear "no free seat"
    assert open_counts(store) == (0, 0, 80)
    held = {s.participant: s.key for s in store.seats.seats("big")}
    assert all(held[p] == s for p, s in results.items() if s is not None)
    store.close()


def test_sigkill_in_a_burst_of_claims_leaves_a_consistent_store(url, tmp_path):
    store = open_store(url, create=True)
    keys = course_with(store, tmp_path, participants=400, seats=400)
    go = tmp_path / "go"
    workers = start_workers(url, go, keys, 8)
    go.touch()
    deadline = time.monotonic() + 60
    while open_counts(store)[2] < 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    workers.kill()
    # PostgreSQL: a COMMIT that reached the server before the kill still lands (its backend notices the
    # dead client only afterwards): count once the open assignments stop changing
    killed_mid_way, stable_since = open_counts(store)[2], time.monotonic()
    while time.monotonic() - stable_since < 1.0 and time.monotonic() < deadline + 30:
        time.sleep(0.1)
        now_open = open_counts(store)[2]
        if now_open != killed_mid_way:
            killed_mid_way, stable_since = now_open, time.monotonic()
    assert 0 < killed_mid_way < 400, "the processes were not killed in the middle of their claims"
    assert open_counts(store)[:2] == (0, 0)
    # the store still works: every participant gets a seat, the ones who had one keep it
    before = {s.participant: s.key for s in store.seats.seats("big") if s.participant}
    report = store.seats.assign_all("big")
    assert report.kept == killed_mid_way and len(report.assigned) == 400 - killed_mid_way
    after = {s.participant: s.key for s in store.seats.seats("big")}
    assert all(after[p] == s for p, s in before.items())
    assert open_counts(store) == (0, 0, 400)
    if store.database.engine.dialect.name == "sqlite":
        with store.database.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
    store.close()


IMPORTER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from gpuseat.store import open_store
    store = open_store(sys.argv[1])
    print("importing", flush=True)
    store.roster.import_roster("big", Path(sys.argv[2]))
    print("done", flush=True)
    """
)


def test_sigkill_in_a_roster_import_stores_all_or_nothing(url, tmp_path):
    store = open_store(url, create=True)
    path = tmp_path / "big.toml"
    path.write_text('name = "big"\nparticipants = 20000\n[schedule]\nstart = 2026-01-05\ndays = 5\n')
    store.courses.create_course(path, key="big")
    roster = tmp_path / "roster.csv"
    ssh = (EXAMPLES / "roster-16.csv").read_text().splitlines()[1].split(",")[4]
    rows = ["name,email,group,unix_user,ssh_key"]
    rows += [f"Person {i},person{i:05d}@example.org,participants,u{i:05d},{ssh}" for i in range(20000)]
    roster.write_text("\n".join(rows) + "\n")
    proc = subprocess.Popen(
        [sys.executable, "-c", IMPORTER, url, str(roster)], stdout=subprocess.PIPE, text=True, env=env()
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "importing"
    time.sleep(1.0)  # checking 20,000 rows and writing them takes several seconds here
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    stored = len(store.roster.participants("big"))
    assert stored in (0, 20000)
    assert stored == 0, "the import finished before the kill: make the roster bigger"
    assert [e.action for e in store.events.events("big")] == ["course.create"]
    report = store.roster.import_roster("big", roster)  # the same import afterwards succeeds in full
    assert report.added == 20000 and len(store.roster.participants("big")) == 20000
    store.close()
