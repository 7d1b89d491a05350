"""The participant's seat controls on their page (issue 40), through the ASGI app with httpx.

From the participant's side: the page shows the controls and the hours left; a stop is a pending
request with an events row. From the adversary's side: another participant's seat or name in the form,
another participant's token with one's own CSRF token, a cross-site post, a replay and a burst are
refused, and nothing happens to the other seat.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpuseat.catalog.bundle import load_catalog
from gpuseat.store import open_store
from gpuseat.web.app import Portal, create_app

COURSE = """name = "Lab"
participants = 3

[needs]
min_gpu_memory_gb = 16
isolation = "partitioned"

[schedule]
start = 2026-09-07
days = 21

[policy]
quota_hours = 40
idle_minutes = 30
"""
PASSWORD = "a long enough passphrase"
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture
def served(db_url: str, tmp_path: Path) -> Iterator[tuple[Any, TestClient, dict[str, str]]]:
    store = open_store(db_url, create=True)
    (tmp_path / "lab.toml").write_text(COURSE)
    store.courses.create_course(tmp_path / "lab.toml", key="lab")
    (tmp_path / "r.csv").write_text("name,email,unix_user\nAnn,ann@example.org,ann\nBen,ben@example.org,ben\n")
    store.roster.import_roster("lab", tmp_path / "r.csv")
    store.seats.add_seats(
        "lab",
        [
            {"key": f"mig-0{i}", "kind": "mig", "host": "gpu1", "engine": "host", "device_uuid": f"MIG-{i}"}
            for i in (1, 2)
        ],
    )
    store.seats.assign("lab", "ann", "mig-01")
    store.seats.assign("lab", "ben", "mig-02")
    links = {t.participant: t.token for t in store.tokens.issue_tokens("lab")}
    store.accounts.set_password("admin", PASSWORD)
    portal = Portal(store, load_catalog(), "lab", link_days_after_end=None)
    client = TestClient(create_app(portal), base_url="http://testserver")
    yield store, client, links
    client.close()
    store.close()


def _csrf(client: TestClient, token: str) -> str:
    page = client.get(f"/t/{token}")
    assert page.status_code == 200, page.text[:300]
    found = CSRF.search(page.text)
    assert found, page.text
    return found.group(1)


def _post(client: TestClient, token: str, **form: str) -> Any:
    return client.post(f"/t/{token}/seat", data=form, follow_redirects=False)


def test_a_participant_stops_their_seat_and_sees_it_pending(served: Any) -> None:
    store, client, links = served
    page = client.get(f"/t/{links['ann']}").text
    assert 'id="controls"' in page and 'id="seat-stop"' in page
    assert re.search(r"40\.0 of 40 h left", page), page
    r = _post(client, links["ann"], csrf=_csrf(client, links["ann"]), action="stop")
    assert r.status_code == 303 and r.headers["location"] == f"/t/{links['ann']}#controls"
    mine = store.requests.seat_requests("lab", participant="ann")
    assert [(x.action, x.state, x.seat) for x in mine] == [("stop", "pending", "mig-01")]
    assert any(e.action == "seat.request" and e.participant == "ann" for e in store.events.events("lab"))
    live = client.get(f"/t/{links['ann']}/seat.json").json()
    assert live["requests"][0]["state"] == "pending" and live["hours"]["quota"] == 40
    assert "stop: pending" in client.get(f"/t/{links['ann']}").text
    # the agent's verdict is what the page shows next
    store.requests.finish_request("lab", mine[0].id, ok=True, reason="stopped: logins refused, processes ended")
    page = client.get(f"/t/{links['ann']}").text
    assert "stop: done (stopped: logins refused, processes ended)" in page and 'id="seat-start"' in page
    stopped = re.search(r'<p id="stopped"[^>]*>([^<]*)</p>', page)
    assert stopped is not None and stopped.group(1).startswith("Your seat is stopped: "), page
    assert "stopped: stopped" not in stopped.group(1), stopped.group(1)  # the word once


def test_another_participants_seat_or_token_is_refused_and_nothing_happens(served: Any) -> None:
    store, client, links = served
    ann_csrf = _csrf(client, links["ann"])
    # ann names ben's seat, or ben, in her own form
    assert _post(client, links["ann"], csrf=ann_csrf, action="stop", seat="mig-02").status_code == 403
    assert _post(client, links["ann"], csrf=ann_csrf, action="stop", participant="ben").status_code == 403
    # ann's CSRF token on ben's link (she learnt his token's URL but not his page's form token)
    assert _post(client, links["ben"], csrf=ann_csrf, action="stop").status_code == 403
    # no token at all, a made-up link
    assert _post(client, links["ben"], action="stop").status_code == 403
    assert _post(client, "x" * 43, csrf=ann_csrf, action="stop").status_code == 404
    # a cross-site post with a valid token is refused by its origin
    cross = client.post(
        f"/t/{links['ann']}/seat",
        data={"csrf": ann_csrf, "action": "stop"},
        headers={"origin": "https://evil.example.org", "sec-fetch-site": "cross-site"},
        follow_redirects=False,
    )
    assert cross.status_code == 403
    assert store.requests.seat_requests("lab") == []
    # the replay of a real request is not a second request
    assert _post(client, links["ann"], csrf=ann_csrf, action="stop").status_code == 303
    again = _post(client, links["ann"], csrf=ann_csrf, action="stop")
    assert again.status_code == 400 and "already pending" in again.text
    assert [(x.participant, x.action) for x in store.requests.seat_requests("lab")] == [("ann", "stop")]


def test_keys_resets_and_bursts(served: Any) -> None:
    store, client, links = served
    csrf = _csrf(client, links["ann"])
    huge = _post(client, links["ann"], csrf=csrf, action="key", key="ssh-ed25519 " + "A" * 10_000)
    assert huge.status_code == 400 and "characters" in huge.text
    opts = _post(client, links["ann"], csrf=csrf, action="key", key='from="*" ssh-ed25519 AAAA x')
    assert opts.status_code == 400 and "options" in opts.text
    assert store.roster.find_participant("lab", "ann").ssh_key is None and store.requests.seat_requests("lab") == []
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl ann@new"
    assert _post(client, links["ann"], csrf=csrf, action="key", key=key).status_code == 303
    assert store.roster.find_participant("lab", "ann").ssh_key == key
    assert store.requests.seat_requests("lab")[0].action == "key"
    # a reset needs the typed confirmation
    no = _post(client, links["ann"], csrf=csrf, action="reset", confirm="yes")
    assert no.status_code == 400 and "type reset" in no.text
    assert _post(client, links["ann"], csrf=csrf, action="reset", confirm="reset").status_code == 303
    # a burst: after ten requests in ten minutes, 429 and nothing stored
    codes = []
    for action in ("stop", "start") * 5:
        codes.append(_post(client, links["ann"], csrf=csrf, action=action).status_code)
        for r in store.requests.seat_requests("lab", pending=True):  # as an agent that keeps up would
            store.requests.finish_request("lab", r.id, ok=True)
    assert codes[:8] == [303] * 8 and codes[8:] == [429] * 2, codes  # 2 earlier + 8 = 10 in ten minutes
    assert len(store.requests.seat_requests("lab", participant="ann", limit=100)) == 10
    assert store.requests.seat_requests("lab", participant="ben") == []


def test_the_organizer_sees_and_exports_hours_per_person(served: Any) -> None:
    store, client, links = served
    assert client.get("/hours", follow_redirects=False).status_code == 303  # log in first
    assert client.get("/hours.csv", follow_redirects=False).status_code == 401
    login = client.get("/login")
    r = client.post(
        "/login",
        data={"csrf": CSRF.search(login.text).group(1), "username": "admin", "password": PASSWORD},  # type: ignore[union-attr]
        follow_redirects=False,
    )
    assert r.status_code == 303
    store.requests.add_seat_hours("lab", "ann", 5, actor="admin")
    _busy(store.url, "mig-01", minutes=90)  # the monitor saw ann's GPU in use for 90 minutes
    page = client.get("/hours")
    assert page.status_code == 200 and 'data-participant="ann"' in page.text and "quota_hours" in page.text
    csv = client.get("/hours.csv")
    lines = csv.text.splitlines()
    assert lines[0] == "participant,group,seat,quota,topups,used,left,gpu_busy,running,runs_out_at"
    ann = next(x for x in lines if x.startswith("ann,"))
    assert ",mig-01,40.0,5.0," in ann and ",1.5," in ann, ann
    assert "<td>1.5</td>" in page.text
    # a million hours and more print as typed: %g wrote 1.2e+06 and 1.23457e+06
    store.requests.add_seat_hours("lab", "ben", 34567.5, kind="quota", actor="admin")
    for _ in range(12):
        store.requests.add_seat_hours("lab", "ben", 100_000, actor="admin")
    row = re.search(r'<tr data-participant="ben">.*?</tr>', client.get("/hours").text)
    assert row is not None and "<td>34567.5</td><td>1200000</td>" in row.group(0), row
    assert re.search(r"\d+\.\d of 1234567\.5 h left", client.get(f"/t/{links['ben']}").text)


def _busy(url: str, seat: str, *, minutes: int) -> None:
    """Stand-in monitor rollups: ``minutes`` of one-minute aggregates with the seat's GPU in use."""
    import time

    from sqlalchemy import create_engine, select
    from sqlalchemy.orm import Session

    from gpuseat.db.models import Device, MinuteAggregate, Seat

    engine = create_engine(url)
    start = int(time.time()) // 60 - minutes
    with Session(engine) as s, s.begin():
        row = s.scalar(select(Seat).where(Seat.key == seat))
        assert row is not None
        dev = Device(host="gpu1", uuid=str(row.device_uuid), name="H200")
        s.add(dev)
        s.flush()
        s.add_all(
            MinuteAggregate(minute=start + m, device_id=dev.id, seat_id=row.id, samples=6, active_samples=6,
                            utilization_avg=80)
            for m in range(minutes)
        )  # fmt: skip
    engine.dispose()


def test_reset_says_what_it_does_on_the_seats_engine(served: Any) -> None:
    """A VM's holder is told reset gives a fresh disk, a host seat's holder a fresh home: never the other."""
    store, client, links = served
    store.seats.add_seats("lab", [{"key": "vm-01", "kind": "gpu", "engine": "libvirt"}])
    store.seats.release("lab", participant="ben")
    store.seats.assign("lab", "ben", "vm-01")
    ben, ann = client.get(f"/t/{links['ben']}").text, client.get(f"/t/{links['ann']}").text
    assert "Reset to a fresh disk" in ben and "fresh home" not in ben
    assert "Reset to a fresh home" in ann and "fresh disk" not in ann
    assert "Restart (reboots your virtual machine)" in ben and "ends your processes" not in ben
    assert "Restart (ends your processes)" in ann and "virtual machine)" not in ann
    # a cloud seat: its controls are there (they were greyed: the skypilot engine carried nothing out) and taken
    store.seats.add_seats("lab", [{"key": "cloud-01", "kind": "cloud", "engine": "skypilot"}])
    store.seats.release("lab", participant="ben")
    store.seats.assign("lab", "ben", "cloud-01")
    assert client.get(f"/t/{links['ben']}/seat.json").json()["enabled"] is True
    page = client.get(f"/t/{links['ben']}").text
    assert 'id="seat-stop"' in page and "Reset gives you a fresh cloud machine" in page
    stop = _post(client, links["ben"], csrf=CSRF.search(page).group(1), seat="cloud-01", action="stop")  # type: ignore[union-attr]
    assert stop.status_code == 303, stop.text
    assert [(r.seat, r.action, r.state) for r in store.requests.seat_requests("lab", participant="ben")] == [
        ("cloud-01", "stop", "pending")
    ]
    # a Kubernetes seat: its controls were greyed too (the engine carried nothing out); now they say what they do
    store.seats.add_seats("lab", [{"key": "k8s-01", "kind": "mig", "engine": "kubernetes", "profile": "1g.10gb"}])
    store.seats.release("lab", participant="ann")
    store.seats.assign("lab", "ann", "k8s-01")
    assert client.get(f"/t/{links['ann']}/seat.json").json()["enabled"] is True
    page = client.get(f"/t/{links['ann']}").text
    assert 'id="seat-stop"' in page and "Reset gives you a fresh namespace" in page and "fresh home" not in page
    assert "Restart (ends your pods; your access stays)" in page
    stop = _post(client, links["ann"], csrf=CSRF.search(page).group(1), seat="k8s-01", action="stop")  # type: ignore[union-attr]
    assert stop.status_code == 303, stop.text
    assert [(r.seat, r.action, r.state) for r in store.requests.seat_requests("lab", participant="ann")] == [
        ("k8s-01", "stop", "pending")
    ]


def test_a_page_loaded_before_a_move_cannot_stop_or_reset_the_new_seat(served: Any) -> None:
    """Ann's page shows mig-01; the organizer then moves her to mig-03. Her old page's Reset (or Stop) names
    mig-01 and is answered "reload", so her new seat's disk and session are not touched unseen."""
    store, client, links = served
    store.seats.add_seats(
        "lab", [{"key": "mig-03", "kind": "mig", "host": "gpu1", "engine": "host", "device_uuid": "MIG-3"}]
    )
    page = client.get(f"/t/{links['ann']}").text
    assert page.count('name="seat" value="mig-01"') == 2, page  # the stop/start and the reset forms name it
    csrf = CSRF.search(page).group(1)  # type: ignore[union-attr]
    store.seats.move("lab", "ann", "mig-03")
    assert client.get(f"/t/{links['ann']}/live").json()["seat"] == "mig-03"  # not the seat she left
    for form in ({"action": "reset", "confirm": "reset"}, {"action": "stop"}):
        stale = _post(client, links["ann"], csrf=csrf, seat="mig-01", **form)
        assert stale.status_code == 409, stale.text
        assert "seat mig-01, which you no longer hold; you now hold mig-03: reload the page" in stale.text
    assert store.requests.seat_requests("lab") == []
    assert not any(e.action == "portal.refused" for e in store.events.events("lab"))  # a stale page, no attack
    # the reloaded page names the new seat, and its reset is taken
    page = client.get(f"/t/{links['ann']}").text
    assert page.count('name="seat" value="mig-03"') == 2
    fresh = _post(client, links["ann"], csrf=CSRF.search(page).group(1), seat="mig-03", action="reset", confirm="reset")  # type: ignore[union-attr]
    assert fresh.status_code == 303, fresh.text
    assert [(x.action, x.seat) for x in store.requests.seat_requests("lab", participant="ann")] == [("reset", "mig-03")]
    # after a release the old page is answered the same way, and still only "reload"
    store.seats.release("lab", participant="ann")
    gone = _post(client, links["ann"], csrf=CSRF.search(page).group(1), seat="mig-03", action="stop")  # type: ignore[union-attr]
    assert gone.status_code == 409 and "you hold no seat now" in gone.text


def test_a_seat_stopped_for_hours_says_so_and_after_a_top_up_that_start_brings_it_back(served: Any) -> None:
    """Out of hours (her own quota is 0 h) the agent stops ann's seat; her page says why. After the organizer's top-up the stop
    stays until she starts the seat again (a start is hers to ask), and her page tells her she may."""
    store, client, links = served
    store.requests.add_seat_hours("lab", "ann", 0, kind="quota", actor="organizer")  # her own quota: 0 h
    used = "no seat hours left: 0.0 of 0 h used"
    store.requests.agent_stop("lab", "ann", used)
    page = client.get(f"/t/{links['ann']}").text
    assert f"Your seat is stopped: {used}." in page and "hours again" not in page
    store.requests.add_seat_hours("lab", "ann", 5, actor="organizer", note="project week")
    page = client.get(f"/t/{links['ann']}").text
    assert "You have seat hours again: press Start." in page, page
    assert 'id="seat-start"' in page
    ben = client.get(f"/t/{links['ben']}").text
    assert "Your seat is stopped" not in ben and "hours again" not in ben
