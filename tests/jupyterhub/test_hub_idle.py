"""Idle stop and never-connected stop on JupyterHub seats (:mod:`gpuseat.engines.idle`, the host engine's
rule), against the stand-in hub REST API with the hub's ``last_activity`` as JupyterHub keeps it (a start
and a stop stamp it too) and the monitor's readings written through the real monitor into the store: an
idle GPU with no activity on the hub is warned, then its server stopped after the grace with the reason;
a busy GPU, a recent kernel or a lab session never; a start lets the holder in again. A seat never used within
``never_connected_hours`` is stopped; activity only from gpuseat's own probe does not count."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from hubcourse import COURSE_TOML, make_course, reading
from sqlalchemy import create_engine, text
from test_hub_engine_plan import TOKEN, StartingHub, engine_for, spawned

from gpuseat.core.readiness import Readiness
from gpuseat.engines.apply import course_state
from gpuseat.monitor.runner import Monitor
from gpuseat.store import open_monitor

pytestmark = pytest.mark.xdist_group(name="jupyterhub")
PEOPLE = ["ada", "ben", "cy"]


class ActiveHub(StartingHub):
    """The stand-in hub with each user's ``last_activity`` (and their server's), stamped as JupyterHub does
    at a start and a stop; ``used`` sets it as a kernel or a browser tab would."""

    def __init__(self, *users: str) -> None:
        super().__init__(*users)
        self.seen: dict[str, datetime] = {}

    def used(self, user: str, at: datetime) -> None:
        self.seen[user] = at

    def run(self, user: str, name: str = "", pending: str | None = None) -> None:
        super().run(user, name, pending)
        self.seen[user] = datetime.now(UTC)

    def model(self, user: str) -> dict:
        at = self.seen.get(user)
        stamp = None if at is None else at.isoformat().replace("+00:00", "Z")
        servers = {k: {**v, "last_activity": stamp} for k, v in self.users[user].items()}
        return {"name": user, "servers": servers, "pending": None, "last_activity": stamp}

    def handle(self, request: httpx.Request) -> httpx.Response:
        answer = super().handle(request)
        if request.method == "DELETE" and answer.status_code == 204:
            self.seen[request.url.path.split("/")[4]] = datetime.now(UTC)
        return answer


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> ActiveHub:
    monkeypatch.setenv("HUB_TEST_TOKEN", TOKEN)
    return ActiveHub(*PEOPLE)


def lab_with(tmp_path, policy: str, held_minutes: int, schedule: str = ""):
    """Ada, ben and cy on three hub seats for ``held_minutes``, the course's ``[policy]`` ``policy`` (and
    ``[schedule]`` ``schedule``, if given)."""
    url = f"sqlite:///{tmp_path / 'hub.db'}"
    store = make_course(url, tmp_path, key="lab", people=PEOPLE, seats=3, assign=3)
    head = COURSE_TOML.format(n=3)
    head = head.split("[schedule]")[0] + schedule if schedule else head
    store.courses.set_course_text("lab", head + f"\n[policy]\n{policy}\n", changes=[])
    for seat in store.seats.seats("lab"):
        store.seats.set_seat_state("lab", seat.key, seat.state, engine="jupyterhub", reason="a hub seat")
    store.agents.set_engine_settings("lab", "jupyterhub", {"hub_url": "https://hub.test"}, actor="test")
    db = create_engine(url)
    with db.begin() as conn:  # as if each seat had been held that long
        conn.execute(text("UPDATE assignments SET valid_from = :t WHERE valid_to IS NULL"),
                     {"t": datetime.now(UTC) - timedelta(minutes=held_minutes)})  # fmt: skip
    db.dispose()
    return store, url


def monitor_readings(url: str, store, busy: dict[str, float], minutes: int, until: datetime | None = None) -> None:
    """The monitor's readings every 20 s over the ``minutes`` before ``until`` (default now): the captured
    H100 with each seat's MIG slice at the GPU utilisation in ``busy`` (by seat key; 0 for the others), as
    GPM reports it."""
    util = {s.device_uuid: busy.get(s.key, 0.0) for s in store.seats.seats("lab")}
    start = (until or datetime.now(UTC)).timestamp() - minutes * 60

    class Replay:
        t = start - 20

        def sample(self):
            self.t += 20
            snap = reading(self.t, set())
            gpu = snap.gpus[0]
            mig = tuple(dataclasses.replace(m, utilization_gpu=util.get(m.uuid)) for m in gpu.mig)
            return dataclasses.replace(snap, gpus=(dataclasses.replace(gpu, mig=mig), *snap.gpus[1:]))

        def close(self):
            pass

    monitor_store = open_monitor(url)
    monitor = Monitor(Replay(), monitor_store.seat_map(course="lab"), store=monitor_store)
    for _ in range(minutes * 3 + 1):
        monitor.tick()
    monitor.close()


def plan_steps(engine, store, now=None):
    changes = engine.plan(course_state(store, "lab", now=now))
    return changes, [(s.action, s.target, s.participant) for s in changes.ordered() if s.action != "seat.record"]


def test_an_idle_hub_seat_is_warned_then_its_server_stopped_a_busy_gpu_or_a_used_kernel_never(tmp_path, hub):
    day = datetime.now(UTC).date() + timedelta(days=1)  # a lab session tomorrow 10:00-12:00 (UTC)
    schedule = f'[schedule]\nstart = {day - timedelta(days=1)}\ndays = 3\naccess = "24/7"\n' \
               f'[[schedule.session]]\ndate = {day}\nhours = "10:00-12:00"\n'  # fmt: skip
    in_session = datetime(day.year, day.month, day.day, 10, 30, tzinfo=UTC)
    store, url = lab_with(tmp_path, "idle_minutes = 3\ngrace_minutes = 2\nidle_gpu_percent = 10", 30, schedule)
    try:
        for who in PEOPLE:
            spawned(store, who)
            hub.run(who)
        now = datetime.now(UTC)
        hub.used("ada", now - timedelta(minutes=20))  # ada: GPU idle, her tab closed 20 min ago
        hub.used("ben", now - timedelta(minutes=20))  # ben: a training run keeps the GPU busy
        hub.used("cy", now - timedelta(minutes=1))  # cy: GPU idle, but she is typing in a notebook
        monitor_readings(url, store, {"mig-2": 93.0}, 6)
        monitor_readings(url, store, {"mig-2": 93.0}, 6, until=in_session)
        engine = engine_for(store, hub)
        ada_seat = store.seats.seat_of("lab", "ada").key
        assert plan_steps(engine, store, in_session)[1] == []  # in a lab session: never idle
        changes, steps = plan_steps(engine, store)
        assert steps == [("seat.warn", ada_seat, "ada")], steps
        report = engine.apply(changes)
        assert not report.failed, [o.message for o in report.failed]
        warned = store.requests.idle_warning("lab", "ada")
        assert warned is not None and warned[1] == (
            "your seat is idle (GPU below 10 % and no activity on the hub for 3 min): it stops in 2 min unless you use it"
        )
        assert plan_steps(engine, store)[1] == []  # warned once; within the grace nothing more

        later = datetime.now(UTC) + timedelta(minutes=2)  # the grace has passed, still idle
        changes, steps = plan_steps(engine, store, later)
        assert steps == [("hub.server.stop", "ada/", "ada"), ("seat.stop", ada_seat, "ada")], steps
        report = engine.apply(changes)
        assert not report.failed, [o.message for o in report.failed]
        assert hub.users["ada"] == {} and "" in hub.users["ben"] and "" in hub.users["cy"]
        page = store.requests.page_of("lab", "ada")
        assert page.run_state is not None and not page.run_state.running
        assert page.run_state.reason == "idle: GPU below 10 % and no activity on the hub for 3 min, warned 2 min before"
        assert plan_steps(engine, store, later)[1] == []  # stopped once

        store.requests.request_seat("lab", "ada", "start", actor="ada")  # a start lets her in again
        report = engine.apply(engine.plan(course_state(store, "lab")))
        assert not report.failed, [o.message for o in report.failed]
        assert hub.users["ada"][""]["ready"]
        assert plan_steps(engine, store)[1] == []  # the window counts from the start
    finally:
        store.close()


def test_a_hub_seat_never_used_is_stopped_its_holders_own_use_counts_the_probe_not(tmp_path, hub):
    store, _url = lab_with(tmp_path, "never_connected_hours = 1", 120)
    hub.store = store  # a start records its seat, as the spawn hook does
    try:
        held = store.seats.seat_of("lab", "ada").assigned_since
        assert held is not None
        hub.used("ben", held + timedelta(minutes=30))  # ben used his server once, then logged out
        hub.used("cy", held - timedelta(days=3))  # cy used the hub before she got the seat, not since
        seats = {who: store.seats.seat_of("lab", who) for who in PEOPLE}
        probed = datetime.now(UTC) - timedelta(minutes=10)  # gpuseat's check ran as ada: the hub stamps her
        hub.used("ada", probed + timedelta(seconds=20))
        store.delivery.record_readiness([Readiness(course="lab", seat=seats["ada"].key, participant="ada",
                                                   state="ready", reason=None, evidence="", visible=(),
                                                   checked_at=probed, engine="jupyterhub")])  # fmt: skip
        engine = engine_for(store, hub)
        changes, steps = plan_steps(engine, store)
        assert steps == [
            ("seat.stop", seats["ada"].key, "ada"),
            ("seat.connected", seats["ben"].key, "ben"),
            ("seat.stop", seats["cy"].key, "cy"),
        ], steps
        report = engine.apply(changes)
        assert not report.failed, [o.message for o in report.failed]
        for who in ("ada", "cy"):
            state = store.requests.page_of("lab", who).run_state
            assert state is not None and not state.running
            assert state.reason == f"never connected: {who} did not log in within 1 h of getting the seat"
        assert store.requests.page_of("lab", "ben").run_state is None  # ben's seat runs on, untouched
        assert set(store.requests.connected("lab")) == {"ben"}
        assert plan_steps(engine, store)[1] == []  # each said once

        for who in ("ada", "cy"):  # a start lets them in (and counts as use)
            store.requests.request_seat("lab", who, "start", actor=who)
        report = engine.apply(engine.plan(course_state(store, "lab")))
        assert not report.failed and hub.users["cy"][""]["ready"] and hub.users["ada"][""]["ready"]
        # gpuseat's check runs as ada right after her start: her last activity is the probe's, not hers, yet
        # the start gave her a fresh window (the next pass stopped her again at once)
        store.delivery.record_readiness([Readiness(course="lab", seat=seats["ada"].key, participant="ada",
                                                   state="ready", reason=None, evidence="", visible=(),
                                                   checked_at=hub.seen["ada"], engine="jupyterhub")])  # fmt: skip
        changes, steps = plan_steps(engine, store)
        assert steps == [("seat.connected", seats["cy"].key, "cy")], steps
        engine.apply(changes)
        assert plan_steps(engine, store)[1] == []
    finally:
        store.close()


def test_a_tiny_never_connected_window_is_said_in_plain_digits(tmp_path, hub):
    store, _url = lab_with(tmp_path, "never_connected_hours = 0.0000001", 1)
    try:
        changes = engine_for(store, hub).plan(course_state(store, "lab"))
        said = {s.data["reason"] for s in changes.ordered() if s.action == "seat.stop"}
        assert said == {
            f"never connected: {who} did not log in within 0.0000001 h of getting the seat" for who in PEOPLE
        }
    finally:
        store.close()
