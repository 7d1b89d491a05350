"""Two courses on one GPU server's hubs (a course left unarchived, then the next one, with seats on the same MIG
devices): the JupyterHub engine and the spawn hook follow the host engine's rule (``gpuseat.engines.other_courses``):
the older holder keeps the GPU; the newer holder's server is stopped, their start refused with a 503 that names no
one, the pass fails their seat's ``seat.device`` step (exit 2) with the other course's seat and the fix, and
``seats check`` says broken. Stand-in hub REST API, real hooks, real SQLite store.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from hubcourse import make_course
from test_hub_engine_plan import TOKEN, URL, StandInHub, spawned

from gpuseat.engines.apply import course_state
from gpuseat.engines.jupyterhub.engine import JupyterHubEngine, JupyterHubSettings
from gpuseat.engines.runner import RecordingRunner

pytest.importorskip("jupyterhub")

from test_hub_hooks import hooks, refusal, spawn
from test_hub_hooks import spawners as spawners  # the fixture


@pytest.fixture
def two(tmp_path, monkeypatch):
    """Course jan (zoe holds mig-1) made first, then course lab (ada holds mig-1 too, ben mig-2); hub seats."""
    monkeypatch.setenv("HUB_TEST_TOKEN", TOKEN)
    url = f"sqlite:///{tmp_path / 'hub.db'}"
    jan = make_course(url, tmp_path, key="jan", people=["zoe"], seats=2, assign=1)
    lab = make_course(url, tmp_path, key="lab", people=["ada", "ben"], seats=2, assign=2)
    for key in ("jan", "lab"):
        for seat in lab.seats.seats(key):
            lab.seats.set_seat_state(key, seat.key, seat.state, engine="jupyterhub", reason="a hub seat")
    yield lab, url
    jan.close()
    lab.close()


def _engine(store, hub):
    settings = JupyterHubSettings(hub_url=URL, token_env="HUB_TEST_TOKEN", timeout=5)
    engine = JupyterHubEngine(store, "lab", settings=settings, runner=RecordingRunner())
    engine.use(httpx.Client(transport=httpx.MockTransport(hub.handle)))
    return engine


def test_the_newer_courses_server_on_the_same_gpu_is_stopped_and_its_step_fails(two):
    store, _url = two
    spawned(store, "ada")  # started before the rule (or while jan's seat was free)
    hub = StandInHub("ada", "ben")
    hub.run("ada")
    engine = _engine(store, hub)
    changes = engine.plan(course_state(store, "lab"))
    acts = {(s.action, s.target) for s in changes.steps}
    assert ("hub.server.stop", "ada/") in acts and ("seat.device", "mig-1") in acts
    assert ("seat.record", "mig-1") not in acts and ("seat.record", "mig-2") in acts
    report = engine.apply(changes)
    (failed,) = report.failed
    assert (failed.step.action, failed.exit_code) == ("seat.device", 2)
    msg = failed.message or ""
    assert "course jan is not archived and its seat mig-1 (held by zoe since" in msg
    assert "gpuseat course archive jan" in msg and "gpuseat seats release --course jan --seat mig-1" in msg
    assert hub.users["ada"] == {}
    ada = next(p for p in store.roster.participants("lab") if p.key == "ada")
    ready = engine.probe(store.seats.get_seat("lab", "mig-1"), ada)
    assert ready.state == "broken" and "course jan is not archived" in (ready.reason or "")
    # jan archived: ada's seat is hers again
    store.lifecycle.archive_course("jan")
    acts = {(s.action, s.target) for s in engine.plan(course_state(store, "lab")).steps}
    assert ("seat.device", "mig-1") not in acts and ("seat.record", "mig-1") in acts


def test_the_spawn_hook_refuses_a_start_on_another_courses_gpu(two, spawners):
    store, url = two
    h = hooks(url)
    said = refusal(h, spawners("ada"))
    assert "on a GPU that another course still uses" in said and "zoe" not in said
    assert store.seats.get_seat("lab", "mig-1").state not in ("requested", "running")
    spawn(h, spawners("ben"))  # mig-2: no other course on it
    assert store.seats.get_seat("lab", "mig-2").state == "requested"
    asyncio.run(h.post_stop_hook(spawners("ben")))


@pytest.fixture
def host_then_hub(tmp_path, monkeypatch):
    """Course jan's seats on the host engine (zoe holds mig-1 over SSH), then course lab's hub seats on the same
    device UUIDs (ada holds mig-1 too, ben mig-2): one server, two engines."""
    monkeypatch.setenv("HUB_TEST_TOKEN", TOKEN)
    url = f"sqlite:///{tmp_path / 'hub.db'}"
    jan = make_course(url, tmp_path, key="jan", people=["zoe"], seats=2, assign=1)
    lab = make_course(url, tmp_path, key="lab", people=["ada", "ben"], seats=2, assign=2)
    for seat in jan.seats.seats("jan"):
        jan.seats.set_seat_state("jan", seat.key, seat.state, engine="host", reason="an SSH seat")
    for seat in lab.seats.seats("lab"):
        lab.seats.set_seat_state("lab", seat.key, seat.state, engine="jupyterhub", reason="a hub seat")
    yield lab, url
    jan.close()
    lab.close()


def test_a_host_engine_holder_keeps_the_gpu_from_a_hub_seat_of_another_course(host_then_hub, spawners):
    """The rule compares the held seats of every engine that delivers a GPU of the server (by device UUID): an
    older SSH holder of course jan keeps it; lab's hub holder is refused by the pass, the check and the hook."""
    store, url = host_then_hub
    hub = StandInHub("ada", "ben")
    engine = _engine(store, hub)
    report = engine.apply(engine.plan(course_state(store, "lab")))
    (failed,) = report.failed
    assert (failed.step.action, failed.step.target, failed.exit_code) == ("seat.device", "mig-1", 2)
    assert "course jan is not archived and its seat mig-1 (held by zoe since" in (failed.message or "")
    assert "gpuseat course archive jan" in (failed.message or "")
    ada = next(p for p in store.roster.participants("lab") if p.key == "ada")
    assert engine.probe(store.seats.get_seat("lab", "mig-1"), ada).state == "broken"
    said = refusal(hooks(url), spawners("ada"))
    assert "on a GPU that another course still uses" in said and "zoe" not in said
