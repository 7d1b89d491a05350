"""JupyterHub seats from the participant's side, as the adversary, against a real JupyterHub +
configurable-http-proxy + jupyterhub-singleuser started from ``gpuseat jupyterhub config``.

Each participant acts with a token of their own (issued by the hub, their own permissions):

* ada's kernel sees her seat's device and nothing else; the engine's probe, run as ada, says ready;
* ada cannot start, open or stop ben's server, and her second (named) server gets no second GPU;
* a participant without a seat gets the 503 with gpuseat's reason and contact, in the API and as the
  message the hub's pages show;
* a hand-over with no organizer command after the store's change but ``gpuseat apply --engine
  jupyterhub``: ben's running server is stopped through the hub's REST API, his next start is refused
  with the hub's 503, the new holder starts and sees exactly the seat's device, a second apply plans
  nothing; a move stops the mover's server (it held the old seat's GPU) and their next start gets the
  new seat's device;
* the engine's probe of a participant with no seat is "broken", with the hub's reason;
* a roster re-import that renames a participant (the hub matches by ``unix_user`` here): the old hub user's
  running server is stopped by the next apply and it cannot start one on the seat; the new one gets the seat.

The hub matches participants by ``unix_user`` (the fixture's people have key = unix_user, so every other test
reads the same either way).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "jupyterhub"))
from hubcourse import make_course
from realhub import HubMissing, environ_of, find_hub, find_proxy, running_hub

from gpuseat.engines import registry
from gpuseat.engines.apply import one_pass
from gpuseat.engines.runner import Runner

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(name="jupyterhub")]
REPO = Path(__file__).resolve().parents[2]
CONTACT = "the course team (gpu-help@example.edu)"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    try:
        find_hub()
        find_proxy()
    except HubMissing as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    tmp = tmp_path_factory.mktemp("conformance-hub")
    url = f"sqlite:///{tmp / 'course.db'}"
    store = make_course(url, tmp, key="lab", people=["ada", "ben", "cy"], seats=3, assign=2)
    for seat in store.seats.seats("lab"):  # what `seats add --engine jupyterhub` records
        store.seats.set_seat_state("lab", seat.key, seat.state, engine="jupyterhub", reason="a hub seat")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    engine_token = secrets.token_hex(32)
    token_file = tmp / "engine-token"  # the token is a secret: a file only its owner reads, never the store
    token_file.write_text(engine_token + "\n", encoding="utf-8")
    token_file.chmod(0o600)
    text = subprocess.run(
        [sys.executable, "-m", "gpuseat", "jupyterhub", "config", "--db", url, "--course", "lab",
         "--spawner", "local", "--contact", CONTACT, "--cull-idle-hours", "0", "--match-by", "unix_user",
         "--engine-token-file", str(token_file)],
        capture_output=True, text=True, env=env, timeout=120, check=True,
    ).stdout  # fmt: skip
    extra = "c.JupyterHub.allow_named_servers = True\n"
    hub_env = {"PYTHONPATH": env["PYTHONPATH"], "GPUSEAT_DB_URL": url}
    with running_hub(text, tmp / "hub", env=hub_env, extra=extra) as h:
        h.add_users("ada", "ben", "cy")
        settings = {"hub_url": h.url, "token_file": str(token_file), "match_by": "unix_user"}
        store.agents.set_engine_settings("lab", "jupyterhub", settings, actor="test")
        engine = registry.build("jupyterhub", store, "lab", settings=settings, runner=Runner())
        h.engine_token = engine_token  # type: ignore[attr-defined]
        h.token_file = token_file  # type: ignore[attr-defined]
        yield h, store, engine
    store.close()


@pytest.fixture(autouse=True)
def fresh(hub):
    """Each test starts from the same course, whatever ran before it (the suite runs in random order):
    no servers, ada on the first seat, ben on the second, cy without one."""
    h, store, _ = hub
    for name in h.servers():
        h.stop_server(name)
    seats = sorted(store.seats.seats("lab"), key=lambda s: s.key)
    for seat in seats:
        if seat.participant:
            store.seats.release("lab", seat=seat.key)
    for seat in store.seats.seats("lab"):
        if seat.state in ("released", "failed"):
            store.seats.set_seat_state("lab", seat.key, "planned", reason="test reset")
    store.seats.assign("lab", "ada", seats[0].key)
    store.seats.assign("lab", "ben", seats[1].key)


def as_user(hub, name: str) -> httpx.Client:
    """A client holding a token of ``name``'s own (what a participant copies from the hub's token page)."""
    r = httpx.post(
        f"{hub.url}/hub/api/users/{name}/tokens",
        json={"note": "participant", "expires_in": 3600},
        headers={"Authorization": f"token {hub.engine_token}"},
        timeout=60,
    )
    assert r.status_code in (200, 201), r.text
    return httpx.Client(base_url=hub.url, headers={"Authorization": f"token {r.json()['token']}"}, timeout=120.0)


def test_a_participant_sees_exactly_their_seat_and_the_probe_says_so(hub):
    h, store, engine = hub
    ada = as_user(h, "ada")
    seat = store.seats.seat_of("lab", "ada")
    r = ada.post("/hub/api/users/ada/server")
    assert r.status_code in (201, 202), r.text
    server = h.wait_ready("ada")
    env = environ_of(server["state"]["pid"])
    assert env["CUDA_VISIBLE_DEVICES"] == seat.device_uuid
    readiness = engine.probe(seat, store.roster.find_participant("lab", "ada"))
    assert "CUDA_VISIBLE_DEVICES=" + seat.device_uuid in readiness.evidence and readiness.participant == "ada"
    if shutil.which("nvidia-smi"):  # a GPU host: the driver's list decides, and it lacks the captured UUID
        assert readiness.state == "broken" and "nvidia-smi -L" in readiness.evidence
    else:
        assert readiness.ready, readiness.evidence
        assert readiness.visible == (seat.device_uuid,)
    assert "ada" in h.servers()  # the probe leaves a running server running


def test_ada_cannot_reach_bens_server_nor_take_a_second_gpu(hub):
    h, store, _ = hub
    ada = as_user(h, "ada")
    with ThreadPoolExecutor(2) as pool:  # both servers start side by side (a start request waits for its server)
        ada_up = pool.submit(ada.post, "/hub/api/users/ada/server") if "ada" not in h.servers() else None
        ben_up = pool.submit(h.start, "ben")
        assert ada_up is None or ada_up.result().status_code in (201, 202), ada_up.result().text
        assert ben_up.result().status_code in (201, 202), ben_up.result().text
    h.wait_ready("ada")
    h.wait_ready("ben")
    assert ada.post("/hub/api/users/ben/server").status_code in (403, 404)
    assert ada.delete("/hub/api/users/ben/server").status_code in (403, 404)
    r = ada.get("/user/ben/api/kernels", follow_redirects=False)
    assert r.status_code in (302, 403, 404) and r.status_code != 200
    assert ada.post("/hub/api/users/ben/tokens", json={}).status_code in (403, 404)
    # a second server of her own: the hooks refuse it, her seat is already held by her first server
    r = ada.post("/hub/api/users/ada/servers/second")
    assert r.status_code == 503, r.text
    assert "in use by another server" in r.json()["message"] and CONTACT in r.json()["message"]
    seats = {s.key: (s.participant, s.engine_ref) for s in store.seats.seats("lab") if s.participant}
    assert sorted(seats.values()) == [("ada", "ada/"), ("ben", "ben/")]
    h.stop_server("ben")


def test_no_seat_no_server_and_the_reason_is_the_hubs_message(hub):
    h, store, engine = hub
    cy = as_user(h, "cy")
    r = cy.post("/hub/api/users/cy/server")
    assert r.status_code == 503
    assert r.json()["message"].startswith("No GPU seat for cy: no seat has been assigned to you in course lab.")
    assert CONTACT in r.json()["message"]
    free = next(s for s in store.seats.seats("lab") if s.participant is None)
    readiness = engine.probe(free, store.roster.find_participant("lab", "cy"))
    assert readiness.state == "broken" and "No GPU seat for cy" in (readiness.reason or "")
    assert "cy" not in h.servers()


def start_as(hub, name: str) -> dict:
    """``name`` starts their server with their own token; returns the ready server's model."""
    r = as_user(hub, name).post(f"/hub/api/users/{name}/server")
    assert r.status_code in (201, 202), r.text
    return hub.wait_ready(name)


def test_a_release_and_hand_over_are_carried_out_by_apply_alone(hub, cli):
    """ben holds a seat and his server runs; the organizer releases him and gives the seat to cy (store
    only). Until the engine applies, cy is refused (the seat is in use by ben's server); after ONLY
    ``gpuseat apply --engine jupyterhub``: ben's server is gone, his next start is the hub's 503, cy
    starts and sees exactly the seat's device, and a second apply plans nothing."""
    h, store, _ = hub
    seat = store.seats.seat_of("lab", "ben")
    server = start_as(h, "ben")
    assert environ_of(server["state"]["pid"])["CUDA_VISIBLE_DEVICES"] == seat.device_uuid
    db = ("--course", "lab", "--db", store.url)
    assert cli("seats", "release", "--participant", "ben", *db).code == 0
    assert cli("seats", "assign", "--participant", "cy", "--seat", seat.key, *db).code == 0
    r = as_user(h, "cy").post("/hub/api/users/cy/server")  # revoke before grant: the seat is still ben's server's
    assert r.status_code == 503 and "still held by its previous holder's server" in r.json()["message"], r.text
    assert "ben" not in r.json()["message"]  # the previous holder is never named to the next one
    assert "ben" in h.servers()

    done = cli("apply", "--engine", "jupyterhub", *db)
    assert done.code == 0, done.out + done.err
    assert "- hub.server.stop" in done.out and "ben/" in done.out and "ben holds no seat" in done.out
    assert "ben" not in h.servers() and h.api("GET", "/users/ben").json()["servers"] == {}
    r = as_user(h, "ben").post("/hub/api/users/ben/server")
    assert r.status_code == 503 and "No GPU seat for ben" in r.json()["message"] and CONTACT in r.json()["message"]

    server = start_as(h, "cy")
    assert environ_of(server["state"]["pid"])["CUDA_VISIBLE_DEVICES"] == seat.device_uuid
    readiness = registry.build("jupyterhub", store, "lab", settings=store.agents.engine_settings("lab", "jupyterhub"),
                               runner=Runner()).probe(store.seats.seat_of("lab", "cy"), store.roster.find_participant("lab", "cy"))  # fmt: skip
    assert "CUDA_VISIBLE_DEVICES=" + seat.device_uuid in readiness.evidence
    if not shutil.which("nvidia-smi"):
        assert readiness.ready and readiness.visible == (seat.device_uuid,), readiness.evidence
    access = store.delivery.access_of("lab")[seat.key]
    assert access["holder"] == "cy" and access["url"] == f"{h.url}/user/cy/"

    again = cli("apply", "--engine", "jupyterhub", *db)
    assert again.code == 0 and "nothing to change" in again.out, again.out
    kept = {x["login"]: x for x in store.agents.holdings("lab") if x["engine"] == "jupyterhub"}
    assert "cy" in kept and "ben" not in kept and kept["cy"]["seat"] == seat.key


def test_a_move_stops_the_movers_server_and_the_next_start_gets_the_new_seat(hub):
    """ada's running server holds her old seat's GPU; after ``seats move`` the agent's pass (one_pass)
    stops it, frees the old seat, and her next start gets the new seat's device."""
    h, store, _ = hub
    old = store.seats.seat_of("lab", "ada")
    server = start_as(h, "ada")
    assert environ_of(server["state"]["pid"])["CUDA_VISIBLE_DEVICES"] == old.device_uuid
    free = next(s for s in store.seats.seats("lab") if s.participant is None)
    store.seats.move("lab", "ada", free.key)

    result = one_pass(store, course="lab", engine="jupyterhub", runner=Runner())
    assert not result.failed, result.failed
    (plan,) = result.planned
    stops = [s for s in plan.changes.steps if s.action == "hub.server.stop"]
    assert [s.target for s in stops] == ["ada/"] and "moved to" in stops[0].why
    assert set(stops[0].seats) == {old.key, free.key}
    assert "ada" not in h.servers()
    assert store.seats.get_seat("lab", old.key).state == "planned"  # free for its next holder
    access = plan.engine.connect(store.seats.get_seat("lab", free.key))
    assert access is not None and access.holder == "ada" and access.device_uuid == free.device_uuid
    assert plan.engine.connect(store.seats.get_seat("lab", old.key)) is None
    again = one_pass(store, course="lab", engine="jupyterhub", runner=Runner())
    assert again.planned[0].changes.empty, again.planned[0].changes.to_dict()

    server = start_as(h, "ada")
    assert environ_of(server["state"]["pid"])["CUDA_VISIBLE_DEVICES"] == free.device_uuid
    again = one_pass(store, course="lab", engine="jupyterhub", runner=Runner())
    assert again.planned[0].changes.empty, again.planned[0].changes.to_dict()
    h.stop_server("ada")


def test_a_server_started_after_the_engines_look_whose_seat_is_removed_after_a_move_is_stopped(hub):
    """The adversary's way to keep a second GPU: ada starts her server after the engine's last look (so its
    holdings do not know it), the organizer moves her and removes her old seat with ``--force`` before the
    next pass. No stored seat names her server any more, yet it still runs on the removed seat's GPU; the
    next pass stops it, and her next start gets the seat she holds now."""
    from hubcourse import mig_devices

    h, store, _ = hub
    gone_uuid, profile = mig_devices()[-4]  # a device none of the fixture's seats uses
    spec = {"key": "mig-gone", "kind": "mig", "host": "gpu-node-1", "device_uuid": gone_uuid, "profile": profile,
            "memory_gb": 10.0}  # fmt: skip
    store.seats.add_seats("lab", [spec])
    store.seats.set_seat_state("lab", "mig-gone", "planned", engine="jupyterhub", reason="a hub seat")
    first = store.seats.seat_of("lab", "ada")
    try:
        store.seats.move("lab", "ada", "mig-gone")
        looked = one_pass(store, course="lab", engine="jupyterhub", runner=Runner())  # the engine's last look
        assert not looked.failed, looked.failed
        assert "ada" not in {x["login"] for x in store.agents.holdings("lab") if x["engine"] == "jupyterhub"}

        server = start_as(h, "ada")
        assert environ_of(server["state"]["pid"])["CUDA_VISIBLE_DEVICES"] == gone_uuid
        store.seats.move("lab", "ada", first.key)
        store.lifecycle.remove_seats("lab", ["mig-gone"], actor="test", force=True)
        # her server still has the removed seat's GPU, and she holds another seat: two GPUs until the pass
        assert environ_of(h.servers()["ada"]["state"]["pid"])["CUDA_VISIBLE_DEVICES"] == gone_uuid

        result = one_pass(store, course="lab", engine="jupyterhub", runner=Runner())
        assert not result.failed, result.failed
        (plan,) = result.planned
        stops = [s for s in plan.changes.steps if s.action == "hub.server.stop"]
        assert [(s.target, s.seats) for s in stops] == [("ada/", (first.key,))], plan.changes.to_dict()
        assert "no seat" in stops[0].why and f"{first.key} is theirs from their next start" in stops[0].why
        ada = as_user(h, "ada")
        assert ada.get("/hub/api/users/ada").json()["servers"] == {}  # what ada herself sees: no server left

        server = start_as(h, "ada")  # her next start: the seat she holds, and nothing else
        assert environ_of(server["state"]["pid"])["CUDA_VISIBLE_DEVICES"] == first.device_uuid
        again = one_pass(store, course="lab", engine="jupyterhub", runner=Runner())
        assert not [s for s in again.planned[0].changes.steps if s.phase == "revoke"], again.planned[
            0
        ].changes.to_dict()
        h.stop_server("ada")
    finally:
        if "mig-gone" in {s.key for s in store.seats.seats("lab")}:
            h.stop_server("ada")
            store.seats.release("lab", seat="mig-gone")
            store.lifecycle.remove_seats("lab", ["mig-gone"], actor="test", force=True)


def test_the_agent_carries_out_a_release_with_no_command_after_it(hub):
    """``gpuseat agent --engine jupyterhub`` running beside the hub: the organizer only releases ben in the
    store; the agent stops his running server and frees his seat, and his next start is refused."""
    import threading

    from gpuseat.engines.agent import Agent, AgentOptions
    from gpuseat.store import open_store

    h, store, _ = hub
    seat = store.seats.seat_of("lab", "ben")
    start_as(h, "ben")
    stop = threading.Event()
    with open_store(store.url) as own:  # the agent is its own process in production: its own connections
        agent = Agent(own, AgentOptions(engine="jupyterhub", course="lab", poll_s=0.2), say=lambda _line: None)
        thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
        thread.start()
        try:
            store.seats.release("lab", participant="ben")
            deadline = time.monotonic() + 120  # a bound for a stuck agent, not a timing claim
            while time.monotonic() < deadline and (
                "ben" in h.servers() or store.seats.get_seat("lab", seat.key).state != "planned"
            ):
                time.sleep(0.2)
        finally:
            stop.set()
            thread.join(timeout=60)
    assert "ben" not in h.servers(), h.log_tail()
    assert store.seats.get_seat("lab", seat.key).state == "planned"
    r = as_user(h, "ben").post("/hub/api/users/ben/server")
    assert r.status_code == 503 and "No GPU seat for ben" in r.json()["message"]
    assert any(e.action == "engine.apply" for e in store.events.events("lab")), "the agent logs what it applied"


def test_a_dry_run_stops_nothing(hub, cli):
    h, store, _ = hub
    start_as(h, "ben")
    store.seats.release("lab", participant="ben")
    r = cli("apply", "--engine", "jupyterhub", "--dry-run", "--course", "lab", "--db", store.url)
    assert r.code == 0 and "hub.server.stop" in r.out
    assert "ben" in h.servers()


def test_seats_check_probes_each_hub_seat_as_its_participant(hub, cli):
    """``gpuseat seats check`` on hub seats: a server started with the participant's own token, a kernel
    that lists the GPUs; ready when exactly the seat's device shows. A seat the hub will not start
    (out of order) is broken with the hub's reason. The results are stored on the seats."""
    import json

    h, store, _ = hub
    for who in ("ada", "ben"):
        seat = store.seats.seat_of("lab", who)
        store.seats.set_seat_state("lab", seat.key, seat.state, engine="jupyterhub", reason="a hub seat")
    args = ("seats", "check", "--course", "lab", "--db", store.url, "--timeout", "240", "--format", "json",
            "--set", f"jupyterhub.hub_url={h.url}", "--set", f"jupyterhub.token_file={h.token_file}")  # fmt: skip
    r = cli(*args)
    report = json.loads(r.out)
    rows = {x["participant"]: x for x in report["seats"]}
    assert sorted(rows) == ["ada", "ben"] and all(x["engine"] == "jupyterhub" for x in rows.values())
    if shutil.which("nvidia-smi"):  # a GPU host: the driver's list decides (see the probe test above)
        assert r.code == 3
        return
    assert r.code == 0, r.out + r.err
    assert report["summary"] == {"ready": 2, "broken": 0, "total": 2}
    for who in ("ada", "ben"):
        assert rows[who]["visible"] == [store.seats.seat_of("lab", who).device_uuid]
    assert not h.servers()  # the probe stops the servers it started

    bens = store.seats.seat_of("lab", "ben")
    if bens.state == "released":  # the hooks mark a stopped server's seat released
        store.seats.set_seat_state("lab", bens.key, "planned", reason="test")
    store.seats.set_seat_state("lab", bens.key, "failed", reason="GPU fell off the bus")
    r = cli(*args)
    rows = {x["participant"]: x for x in json.loads(r.out)["seats"]}
    assert r.code == 3 and rows["ada"]["state"] == "ready"
    assert rows["ben"]["state"] == "broken" and "out of order (GPU fell off the bus)" in rows["ben"]["reason"]
    stored = store.delivery.readiness_of("lab")
    assert stored[bens.key]["state"] == "broken" and stored[store.seats.seat_of("lab", "ada").key]["state"] == "ready"


def _rename(store, tmp_path, who: str, login: str) -> None:
    """A roster re-import (the organizer's ``roster import``) that gives ``who`` the unix_user ``login``."""
    path = tmp_path / f"roster-{login}.csv"
    path.write_text(f"key,name,email,group,unix_user\n{who},{who.title()},{who}@example.edu,participants,{login}\n")
    store.roster.import_roster("lab", path)


def test_a_rename_stops_the_old_hub_users_server_and_the_new_one_gets_the_seat(hub, cli, tmp_path):
    """ada's server runs on her seat; a re-import gives her the unix_user ada2 (the hub's user name here). After
    ONLY ``gpuseat apply``: the old hub user ada has no server, cannot start one (no seat is hers), the new hub
    user ada2 starts on exactly the seat's device, and a second apply plans nothing."""
    h, store, _ = hub
    seat = store.seats.seat_of("lab", "ada")
    server = start_as(h, "ada")
    assert environ_of(server["state"]["pid"])["CUDA_VISIBLE_DEVICES"] == seat.device_uuid
    db = ("--course", "lab", "--db", store.url)
    try:
        _rename(store, tmp_path, "ada", "ada2")
        done = cli("apply", "--engine", "jupyterhub", *db)
        assert done.code == 0, done.out + done.err
        assert "- hub.server.stop" in done.out and "ada/" in done.out, done.out
        assert "ada" not in h.servers() and h.api("GET", "/users/ada").json()["servers"] == {}
        r = as_user(h, "ada").post("/hub/api/users/ada/server")
        assert r.status_code in (404, 503) and "ada" not in h.servers(), r.text
        server = start_as(h, "ada2")
        assert environ_of(server["state"]["pid"])["CUDA_VISIBLE_DEVICES"] == seat.device_uuid
        assert store.delivery.access_of("lab")[seat.key]["url"] == f"{h.url}/user/ada2/"
        again = cli("apply", "--engine", "jupyterhub", *db)
        assert again.code == 0 and "nothing to change" in again.out, again.out
    finally:
        for name in ("ada", "ada2"):
            h.stop_server(name)
        _rename(store, tmp_path, "ada", "ada")  # her own login back
        assert cli("apply", "--engine", "jupyterhub", *db).code == 0
