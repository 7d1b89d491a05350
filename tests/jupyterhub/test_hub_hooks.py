"""The hooks on real spawner objects and a real store (SQLite and PostgreSQL), without a running hub:
who gets which seat, every refusal is a 503 that says why and whom to ask, stops are owner-checked and
idempotent, a failed start is recorded with the spawner's error. The real hub is in test_hub_real.py.
"""

from __future__ import annotations

import asyncio

import pytest

from gpuseat.core.roster import RosterText
from session_soon import session_soon

pytest.importorskip("jupyterhub")

from hubcourse import make_course, reading, seat_specs
from jupyterhub import orm
from jupyterhub.objects import Hub
from jupyterhub.spawner import SimpleLocalProcessSpawner
from jupyterhub.user import User
from tornado.web import HTTPError
from traitlets.config import Config

from gpuseat.jupyterhub import HubSettings, SeatHooks
from gpuseat.monitor.alerts import GPU_LOST, Alert
from gpuseat.monitor.runner import Monitor
from gpuseat.store import open_monitor
from pg_schema import pg_schema_url

PEOPLE = ["ada", "ben", "cy", "dee", "eve", "fay"]
CONTACT = "Dr. Organizer (gpu-course@example.edu)"


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    """A fresh database on each engine (PostgreSQL: a throwaway schema, required on CI)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'course.db'}"
    return pg_schema_url(request)


@pytest.fixture
def spawners():
    """``spawners(name, server='')``: the spawner the hub would make for that user's server."""
    db = orm.new_session_factory("sqlite://")()
    users: dict[str, User] = {}

    def make(name: str, server: str = ""):
        if name not in users:
            orm_user = orm.User(name=name)
            db.add(orm_user)
            db.commit()
            settings = {"spawner_class": SimpleLocalProcessSpawner, "hub": Hub(), "config": Config(), "db": db}
            users[name] = User(orm_user, settings, db=db)
        user = users[name]
        if server and server not in user.orm_spawners:
            user._new_orm_spawner(server, server)
        return user.spawners[server]

    yield make
    db.close()


def hooks(url: str, mode: str = "assigned", course: str = "lab") -> SeatHooks:
    return SeatHooks(HubSettings(course=course, db_url=url, mode=mode, contact=CONTACT))


def spawn(h: SeatHooks, spawner) -> None:
    """Run the pre-spawn hook as JupyterHub does (it returns an awaitable)."""
    asyncio.run(h.pre_spawn_hook(spawner))


def stop(h: SeatHooks, spawner) -> None:
    asyncio.run(h.post_stop_hook(spawner))


def refusal(h: SeatHooks, spawner) -> str:
    with pytest.raises(HTTPError) as caught:
        spawn(h, spawner)
    assert caught.value.status_code == 503
    stop(h, spawner)  # JupyterHub runs it after a refused start too: it must change nothing
    return caught.value.log_message


def test_assigned_seats_refusals_and_stop(url, tmp_path, spawners):
    store = make_course(url, tmp_path, key="lab", people=PEOPLE[:4], seats=3, assign=3)
    h = hooks(url)
    seats = {s["key"]: s["device_uuid"] for s in seat_specs(3)}
    for person, seat in zip(PEOPLE[:3], seats, strict=True):
        sp = spawners(person)
        spawn(h, sp)
        assert sp.get_env()["CUDA_VISIBLE_DEVICES"] == seats[seat]
        assert sp.get_env()["GPUSEAT_SEAT"] == seat
        view = store.seats.get_seat("lab", seat)
        assert (view.engine, view.engine_ref, view.state, view.participant) == (
            "jupyterhub",
            f"{person}/",
            "requested",
            person,
        )

    no_seat = refusal(h, spawners("dee"))
    assert "no seat has been assigned to you" in no_seat and CONTACT in no_seat
    stranger = refusal(h, spawners("mallory"))
    assert "not on the roster of course lab" in stranger and CONTACT in stranger

    # a second (named) server of ada wants the same seat: busy, and it must not release ada's seat
    busy = refusal(h, spawners("ada", "second"))
    assert "in use by another server (jupyterhub ada/)" in busy and CONTACT in busy
    assert store.seats.get_seat("lab", "mig-1").state == "requested"

    ada = spawners("ada")
    stop(h, ada)
    stop(h, ada)  # idempotent
    view = store.seats.get_seat("lab", "mig-1")
    assert (view.state, view.participant, view.engine) == ("released", "ada", "jupyterhub")  # assigned: kept
    spawn(h, ada)  # and ada can start again on her seat
    assert store.seats.get_seat("lab", "mig-1").state == "requested"
    assert max(h.timing.pre_spawn) < 5.0
    store.close()


def test_pool_claims_release_and_owner_check(url, tmp_path, spawners):
    store = make_course(url, tmp_path, key="lab", people=PEOPLE, seats=3)
    h = hooks(url, mode="pool")
    for person in PEOPLE[:3]:
        spawn(h, spawners(person))
    held = {s.participant: s.key for s in store.seats.seats("lab")}
    assert set(held) == set(PEOPLE[:3])
    full = refusal(h, spawners("dee"))
    assert "No free GPU seat for dee right now" in full and CONTACT in full

    stop(h, spawners("dee"))  # dee holds nothing: nothing changes
    stop(h, spawners("ben", "other"))  # ben's other server did not take ben's seat
    assert {s.participant for s in store.seats.seats("lab")} == set(PEOPLE[:3])

    stop(h, spawners("ben"))
    seat = store.seats.get_seat("lab", held["ben"])
    assert seat.participant is None and seat.state == "planned" and seat.state_reason == "back in the pool"
    kinds = [(e.action, (e.detail or {}).get("to")) for e in store.events.events("lab") if e.seat == held["ben"]]
    assert ("seat.state", "released") in kinds  # the engine state was recorded before the seat went back
    stop(h, spawners("ben"))  # idempotent
    dee = spawners("dee")
    spawn(h, dee)
    assert dee.get_env()["GPUSEAT_SEAT"] == held["ben"]
    store.close()


def test_gpu_lost_seat_is_refused_or_skipped(url, tmp_path, spawners):
    store = make_course(url, tmp_path, key="lab", people=PEOPLE[:3], seats=3, assign=1)
    monitor_store = open_monitor(url)
    snap = reading(1_800_000_000.0, busy=set())
    Monitor(
        _OneShot(snap), monitor_store.seat_map(course="lab"), store=monitor_store
    ).tick()  # the devices, with parents
    gpu = snap.gpus[0].uuid
    monitor_store.record_alert(
        Alert(GPU_LOST, gpu, f"GPU NVIDIA H100 80GB HBM3 ({gpu}) lost: no longer reported", 1_800_000_060.0)
    )

    lost = refusal(hooks(url), spawners("ada"))
    assert "out of order (the monitor lost its GPU)" in lost and "move you to another seat" in lost

    # pool mode: every seat sits on the lost GPU, so each is taken out of the pool and nobody gets one
    store.seats.release("lab", participant="ada")
    pool = refusal(hooks(url, mode="pool"), spawners("ben"))
    assert "No free GPU seat for ben" in pool
    assert {s.state for s in store.seats.seats("lab")} == {"failed"}
    assert all(s.state_reason.startswith("GPU lost") for s in store.seats.seats("lab"))
    monitor_store.close()
    store.close()


def test_a_seat_marked_failed_is_refused_or_left_for_another(url, tmp_path, spawners):
    """The organiser marked ada's seat failed: her assigned start is refused with the reason; in pool
    mode her held failed seat is handed back and she gets a working one."""
    store = make_course(url, tmp_path, key="lab", people=PEOPLE[:3], seats=3, assign=1)
    store.seats.set_seat_state("lab", "mig-1", "failed", reason="GPU fell off the bus")
    refused = refusal(hooks(url), spawners("ada"))
    assert "Your GPU seat mig-1 is out of order (GPU fell off the bus)" in refused and CONTACT in refused
    assert store.seats.get_seat("lab", "mig-1").state == "failed"

    ada = spawners("ada", "pool")
    spawn(hooks(url, mode="pool"), ada)
    assert ada.get_env()["GPUSEAT_SEAT"] != "mig-1"
    assert store.seats.seat_of("lab", "ada").key == ada.get_env()["GPUSEAT_SEAT"]
    assert (
        store.seats.get_seat("lab", "mig-1").participant is None
        and store.seats.get_seat("lab", "mig-1").state == "failed"
    )
    store.close()


def test_failed_start_is_recorded_with_the_spawners_error(tmp_path, spawners):
    url = f"sqlite:///{tmp_path / 'course.db'}"
    store = make_course(url, tmp_path, key="lab", people=PEOPLE[:2], seats=2, assign=2)
    h = hooks(url)
    sp = spawners("ada")

    async def spawn_that_fails():
        # what JupyterHub does: the spawn future is pending while the start fails and the hub stops it
        sp._spawn_future = asyncio.get_running_loop().create_future()
        await h.pre_spawn_hook(sp)
        try:
            raise FileExistsError("[Errno 17] File exists: '/home/ada'")
        except FileExistsError:
            await h.post_stop_hook(sp)

    asyncio.run(spawn_that_fails())
    seat = store.seats.get_seat("lab", "mig-1")
    assert seat.state == "failed" and "FileExistsError" in (seat.state_reason or "")
    assert seat.participant == "ada"

    ben = spawners("ben")

    async def spawn_that_works():
        ben._spawn_future = asyncio.get_running_loop().create_future()
        await h.pre_spawn_hook(ben)
        ben._spawn_future.set_result(None)
        await asyncio.sleep(0)  # the done-callback runs, and hands the write to gpuseat's thread
        h._worker.submit(lambda: None).result()

    asyncio.run(spawn_that_works())
    assert store.seats.get_seat("lab", "mig-2").state == "running"
    store.close()


def test_unreachable_store_is_a_503(tmp_path, spawners):
    h = SeatHooks(HubSettings(course="lab", db_url=f"sqlite:///{tmp_path / 'missing' / 'course.db'}", contact=CONTACT))
    message = refusal(h, spawners("ada"))
    assert "cannot hand out seats at the moment" in message and CONTACT in message


class _OneShot:
    def __init__(self, snap):
        self.snap = snap

    def sample(self):
        return self.snap

    def close(self):
        pass


LAB_HOURS = """name = "Weekday lab"
participants = 2

[needs]
min_gpu_memory_gb = 8
isolation = "partitioned"

[schedule]
start = 2026-03-02
end = 2026-03-13
weekdays = ["mon", "tue", "wed", "thu", "fri"]
hours = "09:00-17:00"
"""


def test_a_seat_stopped_for_hours_starts_near_a_lab_session_one_stopped_by_its_holder_does_not(tmp_path, spawners):
    """Seat hours do not hold during lab sessions (gpuseat.engines.hours): with a session within
    ``lead_minutes``, ada's seat, stopped by the agent for hours, starts from the hub's own *Start*; ben's,
    which he stopped himself, is refused with his reason. Without a session near, ada's is refused too."""

    from gpuseat.store import open_store

    _at, schedule = session_soon(21)
    head = LAB_HOURS.split("[schedule]")[0].replace("participants = 2", "participants = 3")
    url = f"sqlite:///{tmp_path / 'course.db'}"
    store = open_store(url, create=True)
    for key, lead in (("lab", 120), ("far", 0)):
        (tmp_path / f"{key}.toml").write_text(f"{head}{schedule}[policy]\nquota_hours = 0\nlead_minutes = {lead}\n")
        store.courses.create_course(tmp_path / f"{key}.toml", key=key, timezone="UTC")
        roster = "name,email,group,unix_user\n" + "".join(f"{p.title()},{p}@example.edu,,{p}\n" for p in PEOPLE[:2])
        store.roster.import_roster(key, RosterText(roster, where="r.csv"))
        store.seats.add_seats(key, seat_specs(2))
        for person, seat in zip(PEOPLE[:2], ("mig-1", "mig-2"), strict=True):
            store.seats.assign(key, person, seat)
            store.seats.set_seat_state(key, seat, "planned", engine="jupyterhub", reason="a hub seat")
        store.requests.agent_stop(key, "ada", "no seat hours left: 0.0 of 0 h used")
    store.requests.request_seat("lab", "ben", "stop", actor="ben")
    store.requests.finish_request("lab", store.requests.seat_requests("lab", participant="ben")[0].id, ok=True,
                                  reason="stopped: your server on the hub is stopped")  # fmt: skip
    h = hooks(url)
    spawn(h, spawners("ada"))
    assert store.seats.get_seat("lab", "mig-1").engine_ref == "ada/"
    assert "Your GPU seat is stopped (stopped: your server on the hub is stopped)" in refusal(h, spawners("ben"))
    far = refusal(hooks(url, course="far"), spawners("ada"))
    assert "Your GPU seat is stopped (no seat hours left: 0.0 of 0 h used)" in far, far
    store.close()


def test_a_hand_over_not_applied_yet_is_refused_without_naming_the_previous_holder(tmp_path, spawners):
    """ada's server holds mig-1; the organizer releases ada and gives mig-1 to dee (store only). Until the
    engine stops ada's server, dee's start is refused with a message that does not name ada, and ada's
    running server keeps the seat recorded as its own."""
    url = f"sqlite:///{tmp_path / 'course.db'}"
    store = make_course(url, tmp_path, key="lab", people=PEOPLE[:4], seats=3, assign=1)
    h = hooks(url)
    spawn(h, spawners("ada"))
    store.seats.release("lab", participant="ada")
    store.seats.assign("lab", "dee", "mig-1")
    message = refusal(h, spawners("dee"))
    assert "still held by its previous holder's server" in message and CONTACT in message
    assert "ada" not in message
    seat = store.seats.get_seat("lab", "mig-1")
    assert (seat.state, seat.engine_ref, seat.participant) == ("requested", "ada/", "dee")
    stop(h, spawners("ada"))  # ada's server stops: she holds no seat, so the hook leaves mig-1 to the engine
    assert store.seats.get_seat("lab", "mig-1").engine_ref == "ada/"
