"""Issue 38, item 19: a participant's page (``GET /t/<token>``, what the registration rush opens first) reads
its seat, hours, controls and survey state in one read transaction, a fixed handful of statements.

Statements and transactions are counted with a SQLAlchemy event listener (every engine, every cursor
execute) on a real store while the real page renders, seatless and then seated (after its own claim);
before this change the seatless page ran 4 read transactions (13 statements), the seated one 9 (about 30);
then 5 (19), then 1 (7–8; the course, participant and seat in one statement) after a cached link lookup; now
the link is looked up on every request (its own read of one statement: a link revoked in another process stops
at once), then the page's one read.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from gpuseat.catalog.bundle import load_catalog
from gpuseat.core.roster import RosterText
from gpuseat.store import SeatSpec, Store, open_store
from gpuseat.web.app import Portal, create_app

COURSE = 'name = "Rush"\nparticipants = 4\n[schedule]\nstart = 2026-06-01\ndays = 5\n'


@contextmanager
def counting() -> Iterator[tuple[list[str], list[str]]]:
    """(statements, transactions begun) of every engine while the block runs, but for the portal's
    link-visit writes: they run on their own timer thread a moment after a page queued them, and one that
    lands in the block (a loaded machine) is not the page's."""
    statements: list[str] = []
    begun: list[str] = []

    def statement(conn, cursor, text, parameters, context, executemany) -> None:
        if not isinstance(threading.current_thread(), threading.Timer):
            statements.append(text)

    def begin(conn: Connection) -> None:
        if not isinstance(threading.current_thread(), threading.Timer):
            begun.append("begin")

    event.listen(Engine, "before_cursor_execute", statement)
    event.listen(Engine, "begin", begin)
    try:
        yield statements, begun
    finally:
        event.remove(Engine, "before_cursor_execute", statement)
        event.remove(Engine, "begin", begin)


def _rush(db_url: str, tmp_path: Path) -> Store:
    """A store with course ``rush``: four participants, four free seats."""
    store = open_store(db_url, create=True)
    path = tmp_path / "rush.toml"
    path.write_text(COURSE, encoding="utf-8")
    store.courses.create_course(path, key="rush")
    rows = "\n".join(f"P {i},p{i}@example.org" for i in range(4))
    store.roster.import_roster("rush", RosterText("name,email\n" + rows + "\n", where="roster"))
    store.seats.add_seats("rush", [SeatSpec(key=f"s{i}", kind="gpu", host="node", memory_gb=16) for i in range(4)])
    return store


def test_participant_page_is_one_read(db_url: str, tmp_path: Path) -> None:
    store = _rush(db_url, tmp_path)
    try:
        token = store.tokens.issue_tokens("rush")[0].token
        portal = Portal(store, load_catalog(), "rush", link_days_after_end=None)
        with TestClient(create_app(portal)) as client:
            first = client.get(f"/t/{token}")  # warm: the link, the served course's key and zone
            assert first.status_code == 200 and 'id="seat-claim"' in first.text
            with counting() as (seatless, seatless_tx):
                page = client.get(f"/t/{token}")
            assert page.status_code == 200 and 'id="no-seat"' in page.text
            csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', page.text).group(1)  # type: ignore[union-attr]
            claimed = client.post(f"/t/{token}/claim", data={"csrf": csrf}, follow_redirects=False)
            assert claimed.status_code == 303, claimed.text[:300]
            with counting() as (seated, seated_tx):
                page = client.get(f"/t/{token}")
            assert page.status_code == 200 and 'id="seat-key"' in page.text and 'id="controls"' in page.text
    finally:
        store.close()
    print(f"participant page: seatless {len(seatless)} statements, {len(seatless_tx)} transactions;")
    print(f"seated {len(seated)} statements, {len(seated_tx)} transactions")
    # the link's lookup (one statement, on every request: a link revoked in another process stops at once),
    # then the page's one read (course, participant and seat, timeline, holdings, hours ledger)
    assert len(seatless_tx) == 2, seatless
    assert len(seatless) <= 7, seatless
    # seated: the same two reads, the page's with the seat's requests, idle warning, way in, check and daily use
    assert len(seated_tx) == 2, seated
    assert len(seated) <= 10, seated


def test_page_way_in_made_for_another_is_never_shown(db_url: str, tmp_path: Path) -> None:
    """The page reads the seat's stored way in with its other rows; one made for another participant's
    login (a move the engine has not applied yet) still shows "being prepared", never that login; a
    shared account (``ubuntu``) and the holder's own login are shown."""
    from gpuseat.core.delivery import login_name
    from gpuseat.core.readiness import Access

    store = _rush(db_url, tmp_path)
    try:
        tokens = store.tokens.issue_tokens("rush")
        people = {p.key: p for p in store.roster.participants("rush")}
        ann, ben = (people[t.participant] for t in tokens[:2])
        store.seats.assign("rush", ann.key, "s0")
        store.seats.set_seat_state("rush", "s0", "running", engine="host")  # an engine that delivers ways in
        mine, theirs = login_name(ann.key, ann.unix_user), login_name(ben.key, ben.unix_user)
        portal = Portal(store, load_catalog(), "rush", link_days_after_end=None)
        with TestClient(create_app(portal)) as client:
            seen = {}
            for user in (theirs, "ubuntu", mine):
                access = Access(kind="ssh", host="gpu1.example.org", user=user)
                store.delivery.record_delivery("rush", "s0", access=access)
                seen[user] = client.get(f"/t/{tokens[0].token}").text
    finally:
        store.close()
    assert f"{theirs}@gpu1.example.org" not in seen[theirs] and "being prepared" in seen[theirs]
    assert "ubuntu@gpu1.example.org" in seen["ubuntu"] and "being prepared" not in seen["ubuntu"]
    assert f"{mine}@gpu1.example.org" in seen[mine] and "being prepared" not in seen[mine]


def test_link_visits_are_written_together(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages never write: the visits of links opened together are written in one statement a moment later,
    on a timer (``VISIT_FLUSH_S``), and a visit noted after that write arms the next one."""
    import time

    from gpuseat.web import portal as portal_module

    store = _rush(db_url, tmp_path)
    try:
        tokens = [t.token for t in store.tokens.issue_tokens("rush")]
        portal = Portal(store, load_catalog(), "rush", link_days_after_end=None)

        def used() -> int:
            return sum(1 for s in store.tokens.token_status("rush") if s["last_used_at"] is not None)

        def written(n: int) -> None:
            deadline = time.monotonic() + 30
            while used() < n and time.monotonic() < deadline:
                time.sleep(0.05)
            assert used() == n

        with TestClient(create_app(portal)) as client, counting() as (statements, _begun):
            monkeypatch.setattr(portal_module, "VISIT_FLUSH_S", 3600.0)  # the timer waits: count the writes
            for token in tokens[:3]:
                assert client.get(f"/t/{token}").status_code == 200
            assert not [s for s in statements if s.lstrip().upper().startswith("UPDATE")] and used() == 0  # no write
            pending = portal._flush
            assert pending is not None and pending.is_alive()  # one write is due, for all three
            pending.cancel()
            portal.record_visits()  # what the timer runs
            assert used() == 3
            assert len([s for s in statements if s.lstrip().upper().startswith("UPDATE ACCESS_TOKENS")]) == 1
            monkeypatch.setattr(portal_module, "VISIT_FLUSH_S", 0.2)
            assert client.get(f"/t/{tokens[3]}").status_code == 200  # noted after that write: the timer writes it
            written(4)
    finally:
        store.close()


def test_a_hub_or_vm_seat_host_is_not_the_participants_way_in(tmp_path: Path) -> None:
    """A seat's host given as a DNS name is an SSH way in only where its holder logs in to it (the host
    engine, a seat set up by hand): a hub seat's host is the hub's GPU host and a libvirt seat's the
    hypervisor, so before the engine records their way in the page says "being prepared", never
    ``ssh LOGIN@HOST``; the organizer's Seats view names no ``ssh_host`` fix for them either."""
    from gpuseat.core.delivery import login_name
    from gpuseat.services.delivery import ways_in

    store = _rush(f"sqlite:///{tmp_path / 'course.db'}", tmp_path)
    engines = {"hub": ("jupyterhub", "gpu"), "vm": ("libvirt", "gpu"), "vgpu": ("libvirt", "vgpu"),
               "host": ("host", "gpu"), "hand": ("manual", "gpu"), "free": ("jupyterhub", "gpu")}  # fmt: skip
    try:
        store.seats.add_seats("rush", [
            SeatSpec(key=k, kind=kind, host=f"{k}.example.org", memory_gb=16, engine=engine)
            for k, (engine, kind) in engines.items()
        ])  # fmt: skip
        people = store.roster.participants("rush")
        holders = dict(zip(("hub", "vm", "vgpu", "host"), people, strict=True))
        for seat, p in holders.items():
            store.seats.assign("rush", p.key, seat)
        links = {t.participant: t.token for t in store.tokens.issue_tokens("rush")}
        portal = Portal(store, load_catalog(), "rush", link_days_after_end=None)
        with TestClient(create_app(portal)) as client:
            pages = {seat: client.get(f"/t/{links[p.key]}").text for seat, p in holders.items()}
        seats_view = {row["seat"]: row for row in ways_in(store, "rush")}
    finally:
        store.close()
    for seat, p in holders.items():
        login, page = login_name(p.key, p.unix_user), pages[seat]
        if seat == "host":  # the participant logs in to the host itself: its address is the way in, as before
            assert f"ssh {login}@host.example.org" in page and "being prepared" not in page
            continue
        assert "being prepared" in page and f"you will log in as {login}" in page, (seat, page[-3000:])
        assert f"@{seat}.example.org" not in page and "ssh_host" not in page, seat
    assert seats_view["hand"]["way"] == "ssh hand.example.org"  # a seat set up by hand: as before
    free = seats_view["free"]  # nobody holds it: what is missing, not the host engine's fix
    assert free["way"] is None and "ssh_host" not in str(free["missing"]), free
    assert str(free["missing"]).startswith("no way in yet: the jupyterhub engine records it"), free
