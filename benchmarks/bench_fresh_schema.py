"""How long a new database takes to get its schema: from the file of gpuseat.db.fresh (what a new database gets)
against the walk through every Alembic revision (what it got before), side by side in one run.

Each round makes one new database each way, interleaved, ``--rounds`` times; prints the medians of wall and
CPU time (this process's, so on PostgreSQL the server's share shows in wall time only) and the ratio walk/file.
SQLite always; PostgreSQL with ``--pg URL`` (or ``GPUSEAT_TEST_PG_URL``), a new schema a round, dropped after.

Run: ``.venv/bin/python benchmarks/bench_fresh_schema.py [--rounds 15] [--pg URL]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from sqlalchemy import create_engine, text

from gpuseat.db import make_engine, upgrade


@contextmanager
def _sqlite() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        yield f"sqlite:///{Path(tmp) / 'new.db'}"


def _postgresql(url: str) -> Callable[[], AbstractContextManager[str]]:
    admin = create_engine(url)

    @contextmanager
    def new() -> Iterator[str]:
        schema = f"bench_{uuid.uuid4().hex[:12]}"
        with admin.begin() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
        try:
            yield f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"
        finally:
            with admin.begin() as conn:
                conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))

    return new


def _time(new: Callable[[], AbstractContextManager[str]], walk: bool) -> tuple[float, float]:
    with new() as url:
        engine = make_engine(url)
        with engine.connect():
            pass  # the connection (and SQLite's WAL file) is not what is measured
        wall, cpu = time.perf_counter(), time.process_time()
        upgrade(engine, walk=walk)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        engine.dispose()
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--pg", default=os.environ.get("GPUSEAT_TEST_PG_URL"))
    args = parser.parse_args()
    kinds: list[tuple[str, Callable[[], AbstractContextManager[str]]]] = [("SQLite", _sqlite)]
    if args.pg:
        kinds.append(("PostgreSQL", _postgresql(args.pg)))
    for name, new in kinds:
        _time(new, walk=False), _time(new, walk=True)  # warm: imports, Alembic's revisions read once
        runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        for _ in range(args.rounds):
            for walk in (False, True):
                runs[walk].append(_time(new, walk))
        med = {w: tuple(statistics.median(r[i] for r in runs[w]) * 1000 for i in (0, 1)) for w in runs}
        (fw, fc), (ww, wc) = med[False], med[True]
        print(
            f"{name}: file {fw:.1f} ms wall / {fc:.1f} ms CPU; walk {ww:.1f} ms wall / {wc:.1f} ms CPU; "
            f"walk/file {ww / fw:.1f}x wall, {wc / fc:.1f}x CPU ({args.rounds} rounds, medians)"
        )


if __name__ == "__main__":
    main()
