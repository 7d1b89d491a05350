"""The JupyterHub engine's plan and apply against a stand-in hub REST API (httpx.MockTransport): which
servers it stops and why, what it never stops (a holder's own server, a start in progress), the seats it
frees for their next holder, a seat out of hours stopped (its start refused until a top-up), and that a
second plan after an apply is empty. The real-hub conformance
tests (tests/conformance/test_jupyterhub.py) prove the same hand-over with JupyterHub itself."""

from __future__ import annotations

from dataclasses import replace
from urllib.parse import unquote

import httpx
import pytest
from hubcourse import make_course

from gpuseat.engines.apply import course_state, one_pass
from gpuseat.engines.jupyterhub.engine import JupyterHubEngine, JupyterHubSettings
from gpuseat.engines.runner import RecordingRunner
from gpuseat.errors import EngineError

TOKEN = "engine-token"
URL = "https://hub.test"


class StandInHub:
    """The parts of JupyterHub's REST API the engine uses, with users and their servers in a dict; it
    lists users two per page, so the engine must follow the pagination."""

    def __init__(self, *users: str) -> None:
        self.users: dict[str, dict[str, dict]] = {u: {} for u in users}
        self.calls: list[tuple[str, str]] = []
        self.token = TOKEN

    def run(self, user: str, name: str = "", pending: str | None = None) -> None:
        self.users.setdefault(user, {})[name] = {"name": name, "ready": pending is None, "pending": pending}

    def model(self, user: str) -> dict:
        return {"name": user, "servers": dict(self.users[user]), "pending": None}

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = unquote(request.url.path)
        self.calls.append((request.method, path))
        if request.headers.get("Authorization") != f"token {self.token}":
            return httpx.Response(403, json={"message": "Action is not authorized with current scopes"})
        parts = path.removeprefix("/hub/api/").split("/")
        if parts == ["users"] and request.method == "GET":
            offset = int(request.url.params.get("offset", 0))
            names = sorted(self.users)
            page = names[offset : offset + 2]
            nxt = {"offset": offset + 2} if offset + 2 < len(names) else None
            items = [self.model(u) for u in page]
            return httpx.Response(200, json={"items": items, "_pagination": {"offset": offset, "next": nxt}})
        user = parts[1]
        if len(parts) == 2 and request.method == "GET":
            return httpx.Response(200, json=self.model(user)) if user in self.users else httpx.Response(404)
        if len(parts) == 2 and request.method == "POST":
            if user in self.users:
                return httpx.Response(409, json={"message": f"user {user} already exists"})
            self.users[user] = {}
            return httpx.Response(201, json=self.model(user))
        if request.method == "DELETE" and parts[2] in ("server", "servers"):
            name = parts[3] if parts[2] == "servers" else ""
            if self.users.get(user, {}).pop(name, None) is None:
                return httpx.Response(400, json={"message": f"{user}'s server is not running"})
            return httpx.Response(204)
        return httpx.Response(404, json={"message": f"no {request.method} {path} in the stand-in"})


@pytest.fixture
def lab(tmp_path):
    store = make_course(f"sqlite:///{tmp_path / 'hub.db'}", tmp_path, key="lab", people=["ada", "ben", "cy"],
                        seats=3, assign=2)  # fmt: skip
    for seat in store.seats.seats("lab"):
        store.seats.set_seat_state("lab", seat.key, seat.state, engine="jupyterhub", reason="a hub seat")
    store.agents.set_engine_settings("lab", "jupyterhub", {"hub_url": URL, "token_env": "HUB_TEST_TOKEN"}, actor="test")
    yield store
    store.close()


@pytest.fixture
def hub(monkeypatch):
    monkeypatch.setenv("HUB_TEST_TOKEN", TOKEN)
    return StandInHub("ada", "ben", "cy", "admin")


def engine_for(store, hub, *, dry_run=False):
    client = httpx.Client(transport=httpx.MockTransport(hub.handle))
    settings = JupyterHubSettings(hub_url=URL, token_env="HUB_TEST_TOKEN", timeout=5)
    engine = JupyterHubEngine(store, "lab", settings=settings, runner=RecordingRunner(dry_run=dry_run))
    engine.use(client)
    return engine


def spawned(store, who: str, server: str = "") -> str:
    """What the spawn hook records when ``who``'s server starts on their seat."""
    seat = store.seats.seat_of("lab", who)
    store.seats.set_seat_state("lab", seat.key, "running", engine="jupyterhub", engine_ref=f"{who}/{server}")
    return seat.key


def steps(changes):
    return [(s.phase, s.action, s.target) for s in changes.ordered()]


def test_a_released_holders_server_is_stopped_then_the_seat_is_freed_and_a_second_plan_is_empty(lab, hub):
    bens = spawned(lab, "ben")
    hub.run("ben")
    hub.run("admin")  # not a course user: never touched
    lab.seats.release("lab", participant="ben")
    engine = engine_for(lab, hub)
    changes = engine.plan(course_state(lab, "lab"))
    assert steps(changes) == [
        ("revoke", "hub.server.stop", "ben/"),
        ("record", "seat.free", bens),
        ("record", "seat.record", lab.seats.seat_of("lab", "ada").key),
    ]
    stop = changes.ordered()[0]
    assert stop.why == "ben holds no seat in course lab now" and stop.seats == (bens,) and stop.participant == "ben"
    report = engine.apply(changes)
    assert [o.state for o in report.outcomes] == ["done"] * 3, [o.message for o in report.outcomes]
    assert hub.users["ben"] == {} and "" in hub.users["admin"]
    assert ("DELETE", "/hub/api/users/ben/server") in hub.calls
    assert lab.seats.get_seat("lab", bens).state == "planned"  # the next holder may start
    assert engine.plan(course_state(lab, "lab")).empty


def test_a_holders_own_server_and_a_start_in_progress_are_never_stopped(lab, hub):
    spawned(lab, "ada")
    hub.run("ada")
    hub.run("ben", pending="spawn")  # ben clicked Start: the hook has not recorded his seat yet
    engine = engine_for(lab, hub)
    changes = engine.plan(course_state(lab, "lab"))
    assert not [s for s in changes.steps if s.phase == "revoke"], steps(changes)
    assert {o.login for o in engine.observe(course_state(lab, "lab"))} == {"ada", "ben"}


def test_a_moved_holders_server_holding_the_old_seat_is_stopped(lab, hub):
    old = spawned(lab, "ada")
    hub.run("ada")
    free = next(s.key for s in lab.seats.seats("lab") if s.participant is None)
    lab.seats.move("lab", "ada", free)
    changes = engine_for(lab, hub).plan(course_state(lab, "lab"))
    stop = changes.ordered()[0]
    assert (stop.action, stop.target) == ("hub.server.stop", "ada/") and set(stop.seats) == {old, free}
    assert stop.why == f"ada moved to {free}: the server still holds {old}"


def test_a_server_on_a_seat_removed_with_force_is_stopped_and_one_on_a_fresh_seat_is_not(lab, hub):
    old = spawned(lab, "ada")
    hub.run("ada")
    engine = engine_for(lab, hub)
    lab.agents.set_holdings("lab", "jupyterhub", None, [h.to_dict() for h in engine.observe(course_state(lab, "lab"))])
    free = next(s.key for s in lab.seats.seats("lab") if s.participant is None)
    lab.seats.move("lab", "ada", free)
    lab.lifecycle.remove_seats("lab", [old], actor="test", force=True)  # nobody holds it: its engine takes it down
    changes = engine.plan(course_state(lab, "lab"))
    stop = changes.ordered()[0]  # the server runs on the removed seat's GPU: no move or release stops it
    assert (stop.action, stop.target, stop.seats) == ("hub.server.stop", "ada/", (free,)), steps(changes)
    assert stop.why == f"ada's server still runs on seat {old} (removed from the course now): {free} is theirs from " \
        "their next start"  # fmt: skip
    engine.apply(changes)
    assert hub.users["ada"] == {}
    spawned(lab, "ada")  # their next start, on the seat they hold: never stopped
    hub.run("ada")
    assert not [s for s in engine.plan(course_state(lab, "lab")).steps if s.phase == "revoke"]


def test_a_server_started_after_the_engines_look_on_a_seat_removed_after_a_move_is_stopped(lab, hub):
    """ada's server started after the engine's last look (no holdings row), then she moved and her old seat
    was removed with --force: no seat names her server, which still has the removed seat's GPU."""
    engine = engine_for(lab, hub)
    lab.agents.set_holdings("lab", "jupyterhub", None, [h.to_dict() for h in engine.observe(course_state(lab, "lab"))])
    old = spawned(lab, "ada")
    hub.run("ada")
    free = next(s.key for s in lab.seats.seats("lab") if s.participant is None)
    lab.seats.move("lab", "ada", free)
    lab.lifecycle.remove_seats("lab", [old], actor="test", force=True)
    changes = engine.plan(course_state(lab, "lab"))
    stop = changes.ordered()[0]
    assert (stop.action, stop.target, stop.seats) == ("hub.server.stop", "ada/", (free,)), steps(changes)
    assert stop.why == "ada's server holds no seat (the seat it started on was removed or changed since: it may " \
        f"still have its GPU): {free} is theirs from their next start"  # fmt: skip
    engine.apply(changes)
    assert hub.users["ada"] == {}
    assert not [s for s in engine.plan(course_state(lab, "lab")).steps if s.phase == "revoke"]


def test_servers_their_seats_name_are_never_stopped_even_when_they_started_after_the_pass_read_the_seats(lab, hub):
    """A default and a named server that hold their holders' seats, a start in progress with no seat yet,
    and a server that started (its seat recorded by the hook) after the pass read the seats: none stopped."""
    spawned(lab, "ben", "second")
    hub.run("ben", "second")
    hub.run("ada", pending="spawn")  # the hook has not recorded her seat yet
    engine = engine_for(lab, hub)
    state = course_state(lab, "lab")  # read before ada's server is up
    changes = engine.plan(state)
    assert not [s for s in changes.steps if s.phase == "revoke"], steps(changes)
    spawned(lab, "ada")
    hub.run("ada")
    changes = engine.plan(state)
    assert not [s for s in changes.steps if s.phase == "revoke"], steps(changes)


def test_archive_delete_and_a_shut_window_stop_every_course_server(lab, hub):
    spawned(lab, "ada")
    hub.run("ada")
    hub.run("ada", "second")
    engine = engine_for(lab, hub)
    state = course_state(lab, "lab")
    archived = engine.plan(replace(state, archived=True))
    assert steps(archived) == [("revoke", "hub.server.stop", "ada/"), ("revoke", "hub.server.stop", "ada/second")]
    assert {s.why for s in archived.steps} == {"the course is archived"}
    closed = engine.plan(replace(state, closed="outside the course's access hours"))
    assert [s.why for s in closed.steps if s.phase == "revoke"] == [
        "access is closed: outside the course's access hours"
    ] * 2
    lab.agents.set_holdings("lab", "jupyterhub", None, [{"what": "server", "login": "ada"}])
    gone = replace(state, course=None, seats=(), people={}, access={})
    deleted = engine.plan(gone)
    assert steps(deleted) == steps(archived) and {s.why for s in deleted.steps} == {"the course is deleted"}
    engine.apply(deleted)
    assert hub.users["ada"] == {} and engine.observe(gone) == []


def test_a_dry_run_changes_neither_the_hub_nor_the_store(lab, hub):
    bens = spawned(lab, "ben")
    hub.run("ben")
    lab.seats.release("lab", participant="ben")
    engine = engine_for(lab, hub, dry_run=True)
    report = engine.apply(engine.plan(course_state(lab, "lab")))
    assert [o.state for o in report.outcomes] == ["done"] * 3
    assert report.outcomes[0].message == f"would DELETE {URL}/hub/api/users/ben/server"
    assert (
        "" in hub.users["ben"]
        and lab.seats.get_seat("lab", bens).state == "running"
        and lab.delivery.access_of("lab") == {}
    )


def test_a_holder_without_a_hub_account_gets_one_and_their_way_in(lab, hub):
    del hub.users["ada"]
    engine = engine_for(lab, hub)
    changes = engine.plan(course_state(lab, "lab"))
    assert ("grant", "hub.user.add", "ada") in steps(changes)
    engine.apply(changes)
    assert "ada" in hub.users
    seat = lab.seats.seat_of("lab", "ada")
    access = engine.connect(seat)
    assert access is not None and access.url == f"{URL}/user/ada/" and access.holder == "ada"
    assert access.device_uuid == seat.device_uuid
    assert engine.plan(course_state(lab, "lab")).empty


def test_a_token_without_the_role_is_one_clear_error_and_apply_names_it(lab, hub):
    hub.token = "another"
    engine = engine_for(lab, hub)
    with pytest.raises(EngineError, match="the hub refused the engine's token") as info:
        engine.plan(course_state(lab, "lab"))
    assert "admin:servers" in (info.value.fix or "")


def test_without_a_hub_url_apply_says_what_to_set(lab, monkeypatch):
    lab.agents.set_engine_settings("lab", "jupyterhub", {"hub_url": None}, actor="test")
    result = one_pass(lab, course="lab", engine="jupyterhub", runner=RecordingRunner())
    (failed,) = result.failed
    assert failed["exit_code"] == 2 and "no hub_url (set hub_url=https://HUB)" in failed["error"]


def test_the_pagination_is_followed(lab, hub):
    for n in range(7):
        hub.users[f"guest{n}"] = {}
    assert set(engine_for(lab, hub).users()) == set(hub.users)
    assert sum(1 for m, p in hub.calls if (m, p) == ("GET", "/hub/api/users")) == 6


def test_a_released_holder_whose_hub_name_is_an_email_with_an_apostrophe_loses_their_server(lab, hub):
    """JupyterHub takes any user name without '/' (an email login such as o'brien@…), and so do the hooks;
    the engine skipped names outside [A-Za-z0-9@._+-], so such a holder kept their server (and GPU) after
    a release."""
    from gpuseat.core.roster import RosterText

    lab.roster.import_roster(
        "lab", RosterText("key,name,email\nobrien,Ann O'Brien,o'brien@example.edu\n", where="r.csv")
    )
    lab.agents.set_engine_settings("lab", "jupyterhub", {"hub_url": URL, "match_by": "email"}, actor="test")
    free = next(s.key for s in lab.seats.seats("lab") if s.participant is None)
    lab.seats.assign("lab", "obrien", free)
    user = "o'brien@example.edu"
    lab.seats.set_seat_state("lab", free, "running", engine="jupyterhub", engine_ref=f"{user}/")
    hub.users[user] = {}
    hub.run(user)
    lab.seats.release("lab", participant="obrien")
    engine = engine_for(lab, hub)
    engine.settings = JupyterHubSettings(hub_url=URL, token_env="HUB_TEST_TOKEN", timeout=5, match_by="email")
    changes = engine.plan(course_state(lab, "lab"))
    assert ("revoke", "hub.server.stop", f"{user}/") in steps(changes)
    report = engine.apply(changes)
    assert all(o.state == "done" for o in report.outcomes), [o.message for o in report.outcomes]
    assert hub.users[user] == {}
    assert ("DELETE", f"/hub/api/users/{user}/server") in hub.calls


class StartingHub(StandInHub):
    """The stand-in hub, whose ``POST /users/{name}/server`` starts a ready server; with the course's
    ``store`` set, it first records the server on its user's seat, as the spawn hook does."""

    store = None

    def handle(self, request: httpx.Request) -> httpx.Response:
        parts = unquote(request.url.path).removeprefix("/hub/api/").split("/")
        if request.method == "POST" and len(parts) == 3 and parts[2] == "server":
            self.calls.append(("POST", unquote(request.url.path)))
            if self.store is not None and self.store.seats.seat_of("lab", parts[1]) is not None:
                spawned(self.store, parts[1])
            self.run(parts[1])
            return httpx.Response(201)
        return super().handle(request)


def test_at_zero_hours_the_server_stops_a_start_is_refused_and_a_topup_lets_it_start(lab, monkeypatch):
    """At 0 seat hours (the rule of gpuseat.engines.hours): the pass stops ada's server and records why on
    her timeline (the hub's own *Start* is then refused by the spawn hook); her start is refused with the
    reason until a top-up, then it starts the server; ben's server is never touched."""
    monkeypatch.setenv("HUB_TEST_TOKEN", TOKEN)
    hub = StartingHub("ada", "ben", "cy")
    ada_seat = spawned(lab, "ada")
    spawned(lab, "ben")
    hub.run("ada")
    hub.run("ben")
    engine = engine_for(lab, hub)
    engine.apply(engine.plan(course_state(lab, "lab")))  # their ways in
    assert engine.plan(course_state(lab, "lab")).empty

    lab.requests.add_seat_hours("lab", "ada", 0, kind="quota", actor="organizer")  # ada: no hours left
    changes = engine.plan(course_state(lab, "lab"))
    assert steps(changes) == [("revoke", "hub.server.stop", "ada/"), ("record", "seat.stop", ada_seat)]
    assert changes.ordered()[0].why == "no seat hours left: 0.0 of 0 h used"
    report = engine.apply(changes)
    assert not report.failed, [o.message for o in report.failed]
    assert hub.users["ada"] == {} and "" in hub.users["ben"]
    page = lab.requests.page_of("lab", "ada")
    assert page.run_state is not None and not page.run_state.running
    assert page.run_state.reason == "no seat hours left: 0.0 of 0 h used"
    assert engine.plan(course_state(lab, "lab")).empty  # the stop is recorded once

    def ask(action: str) -> tuple[str, str | None]:
        lab.requests.request_seat("lab", "ada", action, actor="ada")
        report = engine.apply(engine.plan(course_state(lab, "lab")))
        assert engine.plan(course_state(lab, "lab")).empty
        done = lab.requests.seat_requests("lab", participant="ada")[0]
        assert done.action == action and not [o for o in report.failed if o.step.action != "request.record"]
        return done.state, done.reason

    for action in ("start", "restart", "reset"):
        assert ask(action) == ("failed", "no seat hours left (0 of 0 h): ask the organizer for more")
        assert hub.users["ada"] == {}
    assert ("POST", "/hub/api/users/ada/server") not in hub.calls

    lab.requests.add_seat_hours("lab", "ada", 5, actor="organizer")
    assert engine.plan(course_state(lab, "lab")).empty  # a top-up alone starts nothing: her start does
    state, reason = ask("start")
    assert state == "done" and (reason or "").startswith("started"), reason
    assert hub.users["ada"][""]["ready"] and "" in hub.users["ben"]
    assert lab.requests.seat_requests("lab", participant="ben") == []
