"""Issue 38, item 9 (the store's side): reads never wait for another process's write lock; writers that wait say so.

A second real process holds SQLite's write lock (``BEGIN IMMEDIATE``) while the real CLI runs in its own
process. Each read must answer well before the lock is released (compared with the hold, never with an
absolute time); a writer waits for the lock and, after 2 s, prints "waiting for another writer (pid …)…".
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuseat.services.demo import seed_demo
from gpuseat.store import open_store

SRC = Path(__file__).resolve().parents[2] / "src"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HOLD_S = 20.0  # the holder is let go as soon as the test has its answer: a long hold costs nothing when it passes

HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("ROLLBACK")
"""


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    demo = seed_demo(tmp_path_factory.mktemp("demo"))
    return Path(demo.db_url.removeprefix("sqlite:///"))


def gpuseat(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run the real CLI in its own process; returns it and how long it took."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "gpuseat", *args],
        capture_output=True,
        text=True,
        timeout=HOLD_S * 6,
        env={**os.environ, "PYTHONPATH": str(SRC), **(env or {})},
    )
    return done, time.monotonic() - started


def holding(db: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(db), str(HOLD_S)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def let_go(holder: subprocess.Popen[str]) -> None:
    """End the holder once the test has what it needs (the lock is released with its process), instead of
    waiting out the whole hold."""
    holder.terminate()
    holder.wait(HOLD_S * 3)


READS = [
    ("course", "list"),
    ("seats", "status"),
    ("survey", "report"),
    ("usage",),
    ("monitor", "--once", "--format", "json", "--from-xml", str(FIXTURES / "gpuseat__tesla-m60-x2.xml")),
]


@pytest.mark.parametrize("command", READS, ids=lambda c: " ".join(c[:2]))
def test_reads_answer_while_another_process_holds_the_write_lock(demo_db: Path, command: tuple[str, ...]) -> None:
    holder = holding(demo_db)
    try:
        done, took = gpuseat(*command, "--db", f"sqlite:///{demo_db}")
        still_held = holder.poll() is None
    finally:
        let_go(holder)
    print(f"{' '.join(command[:2])} under a held write lock: {took:.2f} s (the lock is held for {HOLD_S:.0f} s)")
    assert done.returncode == 0, done.stderr
    assert still_held and took < HOLD_S / 3, (took, HOLD_S)
    assert "waiting for another writer" not in done.stderr


def test_a_read_that_needs_a_schema_upgrade_says_so_at_once(tmp_path: Path) -> None:
    """An older schema needs the write lock to upgrade: a read refuses at once, naming the holder."""
    db = tmp_path / "old.db"
    open_store(f"sqlite:///{db}", create=True).close()
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE alembic_version SET version_num = '0011'")  # as an older gpuseat left it
    conn.close()
    holder = holding(db)
    try:
        done, took = gpuseat("course", "list", "--db", f"sqlite:///{db}")
        still_held = holder.poll() is None
    finally:
        let_go(holder)
    assert still_held and took < HOLD_S / 3, (took, HOLD_S, done.stderr)
    assert done.returncode == 1, done.stderr
    assert "must be upgraded" in done.stderr and "holds the write lock" in done.stderr
    assert f"pid {holder.pid}" in done.stderr, done.stderr
    assert sqlite3.connect(db).execute("SELECT version_num FROM alembic_version").fetchone() == ("0011",)


def test_a_writer_that_waits_says_who_it_waits_for(demo_db: Path) -> None:
    holder = holding(demo_db)
    writer = subprocess.Popen(
        [sys.executable, "-m", "gpuseat", "survey", "close", "--db", f"sqlite:///{demo_db}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    try:
        assert writer.stderr is not None
        said = writer.stderr.readline()  # the writer's first words: it is waiting, and for whom
        still_held = holder.poll() is None
    finally:
        let_go(holder)  # now the writer gets the lock
    out, rest = writer.communicate(timeout=HOLD_S * 6)
    assert still_held, said
    assert writer.returncode == 0, said + rest  # it waited for the lock, then closed the survey
    assert "waiting for another writer" in said and f"pid {holder.pid}" in said, said + rest
    assert "waiting for another writer" not in out
