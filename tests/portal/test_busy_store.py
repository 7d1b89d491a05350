"""The portal while another process holds the store's write lock, from the participant's side (ASGI app, httpx).

A second real process holds the lock (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: ``LOCK TABLE … IN EXCLUSIVE
MODE``, which lets reads through and stops every write). The store's busy timeout is set long
(``BUSY_S``) and the portal's wait short (``GPUSEAT_WEB_BUSY_TIMEOUT``): a participant's claim or stop
request, and an organizer's release, must answer 503 with ``Retry-After`` well within the busy timeout
(compared with it, never with an absolute time), while the lock is still held, having written nothing. The
participant's page never shows the database's path or the lock holder's pid or command; the organizer's
does, and so does the server log. Once the lock is let go the same request succeeds.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpuseat.web.app import create_app

from .test_claim_route import _csrf, _held, _served

BUSY_S = 30.0  # the store's busy timeout: a request that waited it out fails the test
WEB_S = 0.3  # the portal's wait
HOLD_S = BUSY_S * 2  # the holder is let go by the test; this only bounds a holder the test forgot
PASSWORD = "a long enough passphrase"
TABLES = "seats, assignments, seat_requests, events"

SQLITE_HOLDER = """
import select, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
select.select([sys.stdin], [], [], float(sys.argv[2]))
conn.execute("ROLLBACK")
"""

PG_HOLDER = """
import select, sys
from sqlalchemy import create_engine, text
with create_engine(sys.argv[1]).connect() as conn:
    conn.execute(text("LOCK TABLE " + sys.argv[3] + " IN " + sys.argv[4] + " MODE"))  # EXCLUSIVE: reads pass
    print("held", flush=True)
    select.select([sys.stdin], [], [], float(sys.argv[2]))
    conn.rollback()
"""


class Holder:
    """Another process holding the write lock of ``url`` until :meth:`release`."""

    def __init__(self, url: str, mode: str = "EXCLUSIVE") -> None:
        if url.startswith("sqlite:///"):
            argv = [sys.executable, "-c", SQLITE_HOLDER, url.removeprefix("sqlite:///"), str(HOLD_S)]
        else:
            argv = [sys.executable, "-c", PG_HOLDER, url, str(HOLD_S), TABLES, mode]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "held"
        self.argv = argv

    def holding(self) -> bool:
        return self.proc.poll() is None

    def release(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(30)


@pytest.fixture
def served(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, TestClient, Any]]:
    monkeypatch.setenv("GPUSEAT_DB_BUSY_TIMEOUT", str(BUSY_S))  # read when the store opens
    monkeypatch.setenv("GPUSEAT_WEB_BUSY_TIMEOUT", str(WEB_S))  # read when the portal is made
    store, portal, links = _served(db_url, tmp_path, people=3, seats=2)
    host_seat = {"key": "h00", "kind": "mig", "host": "gpu1", "engine": "host", "device_uuid": "MIG-0"}
    store.seats.add_seats("rush", [host_seat])  # an engine that carries out a participant's requests
    store.seats.assign("rush", "p01", "h00")
    store.accounts.set_password("admin", PASSWORD)
    client = TestClient(create_app(portal), base_url="http://testserver")
    yield store, client, links
    client.close()
    store.close()


def _leaks(text: str, db_url: str, holder: Holder) -> list[str]:
    """What of the server's insides the participant's answer shows."""
    path = db_url.split("///", 1)[-1].split("?", 1)[0]
    found = [w for w in (path, "pid", "backend", "sqlite", "postgresql", "SELECT", "LOCK", "Traceback") if w in text]
    return found + [a for a in holder.argv[2:3] if a and a in text]


def _under_lock(db_url: str, send: Any) -> tuple[Any, float, bool, Holder]:
    """``send()`` while another process holds the lock: its answer, how long it took, whether the lock was
    still held when it answered."""
    holder = Holder(db_url)
    try:
        started = time.monotonic()
        answer = send()
        took = time.monotonic() - started
        held = holder.holding()
    finally:
        holder.release()
    return answer, took, held, holder


def _busy_for_participant(answer: Any, took: float, held: bool, holder: Holder, db_url: str) -> None:
    assert held, "the lock was let go before the answer: the test proves nothing"
    assert answer.status_code == 503, answer.text[:500]
    assert not _leaks(answer.text, db_url, holder), (_leaks(answer.text, db_url, holder), answer.text[:800])
    assert "busy" in answer.text and "try again" in answer.text, answer.text[:500]
    assert int(answer.headers.get("retry-after", 0)) > 0, answer.headers
    assert took < BUSY_S / 4, took  # the portal's wait, not the store's busy timeout


def test_a_claim_under_a_held_lock_is_a_plain_503_soon_and_the_next_one_gets_a_seat(
    served: Any, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store, client, links = served
    token = links["p00"]
    csrf = _csrf(client, token)
    with caplog.at_level(logging.WARNING, logger="gpuseat.web"):
        answer, took, held, holder = _under_lock(
            db_url, lambda: client.post(f"/t/{token}/claim", data={"csrf": csrf}, follow_redirects=False)
        )
    _busy_for_participant(answer, took, held, holder, db_url)
    assert store.seats.seat_of("rush", "p00") is None  # nothing written
    assert any("another writer" in r.getMessage() for r in caplog.records), caplog.text  # the log keeps why
    again = client.post(f"/t/{token}/claim", data={"csrf": csrf}, follow_redirects=False)
    assert again.status_code == 303, again.text[:500]
    assert store.seats.seat_of("rush", "p00") is not None


def test_a_stop_request_under_a_held_lock_is_a_plain_503_soon(served: Any, db_url: str) -> None:
    store, client, links = served
    token = links["p01"]
    form = {"csrf": _csrf(client, token), "action": "stop", "seat": "h00"}
    answer, took, held, holder = _under_lock(
        db_url, lambda: client.post(f"/t/{token}/seat", data=form, follow_redirects=False)
    )
    _busy_for_participant(answer, took, held, holder, db_url)
    assert store.requests.seat_requests("rush", participant="p01") == []  # nothing written
    again = client.post(f"/t/{token}/seat", data=form, follow_redirects=False)
    assert again.status_code == 303, again.text[:500]
    assert [r.action for r in store.requests.seat_requests("rush", participant="p01")] == ["stop"]


def test_the_organizer_sees_why_a_release_under_a_held_lock_failed(served: Any, db_url: str) -> None:
    store, client, _links = served
    login = client.get("/login").text
    csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', login).group(1)  # type: ignore[union-attr]
    assert client.post("/login", data={"csrf": csrf, "username": "admin", "password": PASSWORD}).status_code == 200
    csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', client.get("/seats").text).group(1)  # type: ignore[union-attr]
    form = {"csrf": csrf, "action": "release", "participant": "p01", "seat": "h00"}
    answer, took, held, _holder = _under_lock(
        db_url, lambda: client.post("/seats/action", data=form, follow_redirects=False)
    )
    assert held and answer.status_code == 503, answer.text[:500]
    assert took < BUSY_S / 4, took
    assert int(answer.headers["retry-after"]) > 0
    assert "another writer held" in answer.text, answer.text[:800]  # the organizer is told what holds it
    assert store.seats.seat_of("rush", "p01") is not None  # nothing released
    assert client.post("/seats/action", data=form).status_code == 200
    assert store.seats.seat_of("rush", "p01") is None


def test_a_link_whose_lookup_waits_for_a_lock_is_the_busy_page_too(served: Any, db_url: str) -> None:
    """PostgreSQL's ``ACCESS EXCLUSIVE`` stops reads as well: the link's own lookup fails, and so does the
    error page's second look at the link; the answer is still the participant's busy page (it was a 500)."""
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite's readers never wait for a writer")
    _store, client, links = served
    holder = Holder(db_url, "ACCESS EXCLUSIVE")
    try:
        started = time.monotonic()
        page, live = client.get(f"/t/{links['p01']}"), client.get(f"/t/{links['p01']}/live")
        took, held = time.monotonic() - started, holder.holding()
    finally:
        holder.release()
    for answer in (page, live):
        _busy_for_participant(answer, took, held, holder, db_url)
    assert "busy" in live.json()["error"], live.text
    assert client.get(f"/t/{links['p01']}").status_code == 200


def test_a_claim_outside_the_portal_waits_the_busy_timeout_then_fails_clearly(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim's own connection (a hub's, the CLI's) waits one busy timeout for a lock, as every write of the
    store does, then raises StoreBusy; on PostgreSQL it waited for as long as the lock was held."""
    from gpuseat.errors import StoreError

    monkeypatch.setenv("GPUSEAT_DB_BUSY_TIMEOUT", str(WEB_S))
    store = _served(db_url, tmp_path, people=2, seats=1)[0]
    try:
        holder = Holder(db_url)
        try:
            started = time.monotonic()
            with pytest.raises(StoreError) as busy:
                store.claims.claim_seat("rush", "p00", mode="pool")
            took, held = time.monotonic() - started, holder.holding()
        finally:
            holder.release()
        assert held and took < HOLD_S / 4, took
        assert type(busy.value).__name__ == "StoreBusy"  # the error a caller can retry on
        assert "another writer held" in busy.value.what and "nothing was changed" in (busy.value.fix or "")
        assert store.seats.seat_of("rush", "p00") is None
        assert store.claims.claim_seat("rush", "p00", mode="pool").participant == "p00"
    finally:
        store.close()


def test_a_bad_web_busy_timeout_is_refused_when_the_portal_starts(
    cli: Any, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not db_url.startswith("sqlite"):
        pytest.skip("an environment variable: one engine is enough")
    _served(db_url, tmp_path, people=1, seats=1)[0].close()
    monkeypatch.setenv("GPUSEAT_WEB_BUSY_TIMEOUT", "5s")
    r = cli("serve", "--db", db_url, "--course", "nope")  # a portal that would start is refused anyway
    assert r.code == 2 and "GPUSEAT_WEB_BUSY_TIMEOUT" in r.err and "Traceback" not in r.err, r.err


RUSH_S = 1.0  # the portal's wait in the rush below: each answer within a few of it, however many queue


def test_a_rush_under_a_held_lock_answers_each_request_within_its_own_wait(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claims and a stop request sent together while another process holds the lock: SQLite's writers take
    turns in a queue first, and each waited for the writers before it and then its own wait (the k-th about
    k × the wait). Each must answer 503 within about one wait; once the lock is let go each gets through,
    nothing having been written twice or half."""
    monkeypatch.setenv("GPUSEAT_DB_BUSY_TIMEOUT", str(BUSY_S))
    monkeypatch.setenv("GPUSEAT_WEB_BUSY_TIMEOUT", str(RUSH_S))
    store, portal, links = _served(db_url, tmp_path, people=10, seats=10)
    store.seats.add_seats(
        "rush", [{"key": "h00", "kind": "mig", "host": "gpu1", "engine": "host", "device_uuid": "MIG-0"}]
    )
    store.seats.assign("rush", "p01", "h00")
    client = TestClient(create_app(portal), base_url="http://testserver")
    try:
        sends = [(f"/t/{links[p]}/claim", {"csrf": _csrf(client, links[p])}) for p in sorted(links)[2:]]
        stop = {"csrf": _csrf(client, links["p01"]), "action": "stop", "seat": "h00"}
        sends.insert(len(sends) // 2, (f"/t/{links['p01']}/seat", stop))

        def rush() -> list[tuple[int, float]]:
            def send(path: str, form: dict[str, str]) -> tuple[int, float]:
                started = time.monotonic()
                status = client.post(path, data=form, follow_redirects=False).status_code
                return status, time.monotonic() - started

            with ThreadPoolExecutor(len(sends)) as pool:
                return list(pool.map(lambda s: send(*s), sends))

        holder = Holder(db_url)
        try:
            answers, held = rush(), holder.holding()
        finally:
            holder.release()
        assert held, "the lock was let go before the answers: the test proves nothing"
        assert [a for a, _ in answers] == [503] * len(sends), answers
        assert max(took for _, took in answers) < 3 * RUSH_S, answers  # one wait each, not one after another
        assert _held(store) == {"p01": "h00"} and store.requests.seat_requests("rush") == []  # nothing written
        assert [a for a, _ in rush()] == [303] * len(sends)
        seats = _held(store)
        assert sorted(seats) == sorted(links)[1:] and len(set(seats.values())) == len(seats), seats
        assert [r.action for r in store.requests.seat_requests("rush")] == ["stop"]
    finally:
        client.close()
        store.close()
