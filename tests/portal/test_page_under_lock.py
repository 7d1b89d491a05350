"""Issue 38, item 9: a participant's page never waits for a write lock held by another process.

A second real process takes SQLite's write lock (``BEGIN IMMEDIATE``) and keeps it for ``HOLD_S`` unless
the test lets it go sooner; meanwhile httpx opens a participant's page on the real server (uvicorn). The
page must answer while the lock is still held and well before the holder would have let go by itself
(compared with the hold, never with an absolute time): a page that waited for the lock would answer only
after ``HOLD_S``. The test then lets the lock go (rather than sitting out the hold), and the visit (the
link's last use) is written once the lock is free.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gpuseat.services.demo import Demo, seed_demo
from gpuseat.store.tokens import token_hash

from .live import copy_demo, start

HOLD_S = 20.0  # the holder is let go as soon as the test has its answer: a long hold costs nothing when it passes

HOLDER = """
import select, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
select.select([sys.stdin], [], [], float(sys.argv[2]))  # until the test closes our stdin, at most this long
conn.execute("ROLLBACK")
print("released", flush=True)
"""


def hold_write_lock(db: Path, seconds: float) -> tuple[subprocess.Popen[str], float]:
    """A second process holding the database's write lock for ``seconds`` or until :func:`release`; returns
    it and when it took the lock."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db), str(seconds)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc, time.monotonic()


def release(holder: subprocess.Popen[str]) -> None:
    """Let the holder's lock go now (it rolls back and exits)."""
    assert holder.stdin is not None
    holder.stdin.close()
    holder.wait(HOLD_S * 3)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """The demo, seeded once for the module (each test serves its own copy: the first one writes to it)."""
    return seed_demo(tmp_path_factory.mktemp("seeded") / "demo")


def _last_used(db: Path, token: str) -> str | None:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = conn.execute(
            "SELECT last_used_at FROM access_tokens WHERE token_hash = ?", (token_hash(token),)
        ).fetchone()
    finally:
        conn.close()
    return row[0] if row else None


def test_first_visit_answers_while_another_process_holds_the_write_lock(seeded: Demo, tmp_path: Path) -> None:
    demo = copy_demo(seeded, tmp_path / "demo")
    db = Path(demo.db_url.removeprefix("sqlite:///"))
    server = start(["--db", demo.db_url, "--course", demo.course, "--links-expire", "never"], tmp_path / "serve.log")
    try:
        who, token = next(iter(demo.links.items()))
        assert _last_used(db, token) is None  # a first visit: the old page wrote it in the request
        holder, held_at = hold_write_lock(db, HOLD_S)
        try:
            with httpx.Client(base_url=server.url, timeout=HOLD_S * 4) as client:
                page = client.get(f"/t/{token}")
                page_s = time.monotonic() - held_at
                live = client.get(f"/t/{token}/live")
                live_s = time.monotonic() - held_at
            assert holder.poll() is None, "the lock was released before the page answered: the test proves nothing"
        finally:
            release(holder)
        released_s = time.monotonic() - held_at
        print(f"page under a held write lock: {page_s:.3f} s, live {live_s:.3f} s; lock held {released_s:.1f} s")
        assert page.status_code == 200 and "not valid" not in page.text
        assert live.status_code == 200 and live.json()["participant"] == who
        # answered from a read: well before the holder would have let go by itself
        assert page_s < HOLD_S / 4 and live_s < HOLD_S / 4
        # the visit is recorded once the lock is free (the server retries it)
        deadline = time.monotonic() + 30
        while _last_used(db, token) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _last_used(db, token) is not None, server.output()
    finally:
        assert server.stop() == 0, server.output()


ORGANIZER_PAGES = ("/overview", "/seats", "/seats/live.json", "/roster", "/links", "/survey", "/alerts", "/bench")


def test_organizer_pages_answer_while_another_process_holds_the_write_lock(seeded: Demo, tmp_path: Path) -> None:
    """Showing a page is a read: none of the organizer's pages waits for the lock either."""
    import re

    from fastapi.testclient import TestClient

    from gpuseat.catalog.bundle import load_catalog
    from gpuseat.store import open_store
    from gpuseat.web.app import Portal, create_app

    demo = copy_demo(seeded, tmp_path / "demo")
    db = Path(demo.db_url.removeprefix("sqlite:///"))
    with open_store(demo.db_url) as store:
        store.accounts.set_password("admin", "a long enough passphrase")
        portal = Portal(store, load_catalog(), demo.course, link_days_after_end=None)
        with TestClient(create_app(portal)) as client:
            csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', client.get("/login").text).group(1)  # type: ignore[union-attr]
            form = {"csrf": csrf, "username": "admin", "password": "a long enough passphrase"}
            assert client.post("/login", data=form).status_code == 200
            holder, held_at = hold_write_lock(db, HOLD_S)
            took = {}
            try:
                for path in ORGANIZER_PAGES:
                    started = time.monotonic()
                    assert client.get(path).status_code == 200, path
                    took[path] = time.monotonic() - started
                answered = time.monotonic() - held_at
                assert holder.poll() is None, "the lock was released before the pages answered"
            finally:
                release(holder)
            hold = time.monotonic() - held_at
    print(f"organizer pages under a held write lock: {answered:.2f} s for {len(took)} pages (lock held {hold:.1f} s)")
    assert answered < HOLD_S / 2, took  # well before the holder would have let go by itself
