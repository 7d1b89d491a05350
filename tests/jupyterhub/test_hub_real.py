"""A real JupyterHub + configurable-http-proxy + SimpleLocalProcessSpawner on 127.0.0.1, started from the
``jupyterhub_config.py`` that ``gpuseat jupyterhub config`` prints, with seats in a course store:

* three users' server processes hold their own seat's MIG UUID in /proc/<pid>/environ, and a kernel
  started on each prints it; a fourth user gets the 503 with its message;
* the GPU-aware culler (the hub's managed service) stops the server whose seat the replayed monitor
  data shows idle and leaves the busy one running;
* 20 rounds of concurrent starts and stops for 6 users on 3 pool seats never give one seat to two
  running servers (checked from the processes' environments and from the store); a server whose
  start fails leaves its seat ``failed`` with the spawner's error, then back in the pool.

On CI a missing jupyterhub or configurable-http-proxy fails these tests; elsewhere they are skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hubcourse import make_course, reading, seat_specs
from realhub import HubMissing, environ_of, find_hub, find_proxy, running_hub

from gpuseat.monitor.runner import Monitor
from gpuseat.store import open_monitor

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(name="jupyterhub")]
CONTACT = "the course team (gpu-help@example.edu)"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def hub_installed():
    try:
        find_hub()
        find_proxy()
    except HubMissing as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(str(exc))
        pytest.skip(str(exc))


def gpuseat(*args: str) -> str:
    """What ``gpuseat ARGS`` prints (a separate process, as an organizer runs it)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "gpuseat", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def hub_env(url: str) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]), "GPUSEAT_DB_URL": url}


# -- assigned seats, kernels, the 503, the culler ------------------------------------------------


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lab")
    url = f"sqlite:///{tmp / 'course.db'}"
    store = make_course(url, tmp, key="lab", people=["ada", "ben", "cy", "dee"], seats=3, assign=3)
    text = gpuseat(
        "jupyterhub", "config", "--db", url, "--course", "lab", "--spawner", "local", "--contact", CONTACT,
        "--cull-idle-hours", "0.002", "--cull-every", "1",
    )  # fmt: skip
    with running_hub(text, tmp / "hub", env=hub_env(url)) as hub:
        hub.add_users("ada", "ben", "cy", "dee")
        yield hub, store, url
    store.close()


@contextmanager
def gpus_busy(url: str, busy: set[str]) -> Iterator[None]:
    """The monitor running against the lab's store, replaying the captured H100 at the current time with
    the MIG slices in ``busy`` running a job (the culler keeps their servers, stops the others)."""
    monitor_store = open_monitor(url)
    stop = threading.Event()

    class Now:
        def sample(self):
            return reading(time.time(), busy)

        def close(self):
            pass

    monitor = Monitor(Now(), monitor_store.seat_map(course="lab"), store=monitor_store)
    monitor.stop_event = stop
    feeder = threading.Thread(target=monitor.run, args=(1.0,))
    feeder.start()
    try:
        yield
    finally:
        stop.set()
        feeder.join(timeout=30)
        monitor.close()  # its writer thread stores what is queued, then the store is closed


def start_all(hub, people: set[str]) -> None:
    """Ask for each person's server at once: a start request waits until its server is up (or the hub's
    slow_spawn_timeout), so one after the other would wait out each single-user server's start in turn."""
    names = sorted(people)
    with ThreadPoolExecutor(max(len(names), 1)) as pool:
        for person, r in zip(names, pool.map(hub.start, names), strict=True):
            assert r.status_code in (201, 202), (person, r.text)


def test_each_server_holds_its_own_seat_and_a_kernel_sees_it(lab):
    hub, store, url = lab
    want = {p: s["device_uuid"] for p, s in zip(["ada", "ben", "cy"], seat_specs(3), strict=True)}
    # all three GPUs busy meanwhile: after the culler test (random order) its idle readings are recent,
    # and the lab's culler (0.002 h) would stop a restarted server while the kernels start
    with gpus_busy(url, set(want.values())):
        start_all(hub, set(want) - set(hub.servers()))
        for person, uuid in want.items():
            server = hub.wait_ready(person)
            env = environ_of(server["state"]["pid"])
            assert env["CUDA_VISIBLE_DEVICES"] == uuid
            seat = store.seats.seat_of("lab", person)
            assert env["GPUSEAT_SEAT"] == seat.key
            assert (seat.engine, seat.engine_ref) == ("jupyterhub", f"{person}/")
        assert len(set(want.values())) == 3
        code = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"
        with ThreadPoolExecutor(len(want)) as pool:  # a kernel on each server, started side by side
            printed = {person: pool.submit(hub.run_in_kernel, person, code) for person in want}
        for person, uuid in want.items():
            assert printed[person].result().strip() == uuid
    deadline = time.monotonic() + 30
    while {store.seats.seat_of("lab", p).state for p in want} != {"running"} and time.monotonic() < deadline:
        time.sleep(0.2)
    assert {store.seats.seat_of("lab", p).state for p in want} == {"running"}


def test_a_fourth_user_gets_a_503_with_the_reason(lab):
    hub, store, _ = lab
    r = hub.start("dee")
    assert r.status_code == 503
    message = r.json()["message"]
    assert "No GPU seat for dee: no seat has been assigned to you in course lab" in message
    assert CONTACT in message
    assert store.seats.seat_of("lab", "dee") is None
    assert "dee" not in hub.servers()


def test_the_culler_stops_the_idle_seat_and_keeps_the_busy_one(lab):
    hub, store, url = lab
    start_all(hub, {"ada", "ben", "cy"} - set(hub.servers()))  # when this test runs on its own
    for person in ("ada", "ben", "cy"):
        hub.wait_ready(person)
    since = datetime.now(UTC)  # (the kernel test may have run first, all GPUs busy)
    with gpus_busy(url, {store.seats.seat_of("lab", "ada").device_uuid}):  # ada's MIG slice runs a job
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and {"ben", "cy"} & set(hub.servers()):
            time.sleep(0.1)
        running = set(hub.servers())
    assert "ada" in running, hub.log_tail()
    assert not {"ben", "cy"} & running, hub.log_tail()
    log = hub.log_tail(200_000)
    assert "stop ben/ (seat mig-2): no GPU compute" in log
    assert "keep ada/ (seat mig-1): GPU busy now" in log
    assert store.seats.seat_of("lab", "ben").state == "released"  # assigned seat: kept by ben, engine state recorded
    assert store.seats.seat_of("lab", "ada").state == "running"
    status = {
        row["seat"]: row
        for row in json.loads(gpuseat("seats", "status", "--db", url, "--course", "lab", "--format", "json"))
    }
    assert {(r["participant"], r["engine"], r["state"]) for r in status.values()} == {
        ("ada", "jupyterhub", "running"),
        ("ben", "jupyterhub", "released"),
        ("cy", "jupyterhub", "released"),
    }
    # stored in whole seconds: a reading in the second `since` began in is not older than it
    assert datetime.fromisoformat(status["mig-1"]["last_gpu_activity"]) >= since.replace(microsecond=0)
    # none while this test ran: times are whole seconds, and once the monitor has rolled a minute up a
    # seat's last activity is the end of its last busy minute (the kernel test may have run just before)
    ben_active = status["mig-2"]["last_gpu_activity"]
    bound = max(since + timedelta(seconds=1), since.replace(second=59, microsecond=0))
    assert ben_active is None or datetime.fromisoformat(ben_active) <= bound, (ben_active, since)


# -- pool seats under concurrent starts and stops -------------------------------------------------

PEOPLE = ["ann", "bo", "cal", "dan", "eli", "flo"]


@pytest.fixture(scope="module")
def dropin(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dropin")
    url = f"sqlite:///{tmp / 'course.db'}"
    store = make_course(url, tmp, key="dropin", people=[*PEOPLE, "zed"], seats=3)
    text = gpuseat(
        "jupyterhub", "config", "--db", url, "--course", "dropin", "--mode", "pool", "--spawner", "local", "--contact", CONTACT,
        "--cull-idle-hours", "0",
    )  # fmt: skip
    # the failed-start test waits out http_timeout (the hub's TimeoutError is what it checks); the tiny
    # server answers within a fraction of a second, so 10 s is still many times what a start needs
    with running_hub(text, tmp / "hub", env=hub_env(url), tiny=True, http_timeout=10) as hub:
        hub.add_users(*PEOPLE, "zed")
        yield hub, store, url


def _settle(hub, names, timeout=120.0) -> dict[str, dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        models = {n: hub.api("GET", f"/users/{n}").json() for n in names}
        if all(m.get("pending") is None for m in models.values()):
            return {n: m["servers"][""] for n, m in models.items() if m.get("servers", {}).get("")}
        time.sleep(0.2)
    raise AssertionError(f"servers did not settle\n{hub.log_tail()}")


def test_twenty_rounds_never_give_one_seat_to_two_servers(dropin):
    hub, store, url = dropin
    uuids = {s["key"]: s["device_uuid"] for s in seat_specs(3)}
    running: dict[str, dict] = {}
    granted = refused = 0
    with ThreadPoolExecutor(len(PEOPLE)) as pool:
        for _round in range(20):
            # everyone at once: the running ones stop, the others ask for a seat
            calls = {
                p: pool.submit(hub.api, "DELETE", f"/users/{p}/server") if p in running else pool.submit(hub.start, p)
                for p in PEOPLE
            }
            for p, call in calls.items():
                r = call.result()
                if p in running:
                    assert r.status_code in (202, 204), r.text
                elif r.status_code == 503:
                    refused += 1
                    assert "No free GPU seat for" in r.json()["message"] and CONTACT in r.json()["message"]
                else:
                    assert r.status_code in (201, 202), r.text
                    granted += 1
            running = {p: s for p, s in _settle(hub, PEOPLE).items() if s.get("ready")}
            envs = {p: environ_of(s["state"]["pid"]) for p, s in running.items()}
            seen = [e["GPUSEAT_SEAT"] for e in envs.values()]
            assert len(seen) == len(set(seen)) <= 3, envs
            for p, env in envs.items():
                assert env["CUDA_VISIBLE_DEVICES"] == uuids[env["GPUSEAT_SEAT"]]
                seat = store.seats.seat_of("dropin", p)
                assert seat is not None and seat.key == env["GPUSEAT_SEAT"] and seat.engine_ref == f"{p}/"
            held = [s for s in store.seats.seats("dropin") if s.participant is not None]
            assert {s.participant for s in held} == set(running)  # nobody stopped still holds a pool seat
    assert granted >= 20 and refused >= 20  # both paths ran many times
    for p in running:
        hub.stop_server(p)
    assert all(s.participant is None for s in store.seats.seats("dropin"))
    assert {(s.engine, s.state) for s in store.seats.seats("dropin")} == {("jupyterhub", "planned")}
    status = json.loads(gpuseat("seats", "status", "--db", url, "--course", "dropin", "--format", "json"))
    assert [(r["engine"], r["state"], r["participant"]) for r in status] == [("jupyterhub", "planned", None)] * 3


def test_a_failed_start_records_the_spawners_error_and_frees_the_pool_seat(dropin):
    hub, store, _ = dropin
    marker = hub.workdir / "home" / "zed" / ".broken"  # zed's server exits at once (tiny_server.py)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("")
    r = hub.start("zed")
    assert r.status_code in (202, 500), r.text
    _settle(hub, ["zed"])
    assert "zed" not in hub.servers()
    failures = [e for e in store.events.events("dropin") if (e.detail or {}).get("to") == "failed"]
    assert failures and failures[-1].detail["engine_ref"] == "zed/"
    assert "TimeoutError" in failures[-1].detail["reason"]  # the hub gave up waiting for the server
    assert all(s.participant is None for s in store.seats.seats("dropin"))  # and the pool seat is free again
    marker.unlink()
