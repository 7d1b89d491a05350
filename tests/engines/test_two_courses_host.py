"""Two courses on one GPU server (a January course not archived, then a February one on the same GPUs): the host
engine never lets two people open one GPU, and the two courses' passes do not undo each other's device ACLs.

Real Unix users and stand-in device files (the delivery lab), the host engine's own plan and apply, on SQLite and
PostgreSQL (the ``url`` fixture).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from delivery import conftest as delivery
from delivery.hostlab import MIG_AND_WHOLE, Lab
from gpuseat.core.roster import RosterText
from gpuseat.engines.apply import one_pass, plan_all
from gpuseat.engines.host.machine import Machine
from gpuseat.engines.runner import Runner
from gpuseat.store import CourseStore, SeatSpec, open_store

MIG = [str(m["uuid"]) for m in MIG_AND_WHOLE[0]["mig"]]  # type: ignore[index]
# the stand-in host (two GPUs: three MIG devices on GPU 0, GPU 1 whole), as the delivery tests'
bare_lab, lab = delivery.bare_lab, delivery.lab
PARENT = str(MIG_AND_WHOLE[0]["uuid"])
WHOLE = str(MIG_AND_WHOLE[1]["uuid"])
TWENTY_FOUR_SEVEN = 'name = "{name}"\nparticipants = 2\n[schedule]\nstart = 2026-09-07\ndays = 5\n'


def _course(
    store: CourseStore,
    lab: Lab,
    tmp_path: Path,
    key: str,
    seats: dict[str, str | None],
    host: str = "gpu1",
    **held: str,
) -> None:
    """Course ``key`` (24/7: it never closes by date) with host seats on ``host`` (key → device UUID; None: a whole
    GPU seat with no UUID yet) and one participant per ``held`` entry (participant → the seat they are given)."""
    (tmp_path / f"{key}.toml").write_text(TWENTY_FOUR_SEVEN.format(name=key))
    store.courses.create_course(tmp_path / f"{key}.toml", key=key)
    rows = ["key,name,email,unix_user,ssh_key"]
    for who in held:
        p = lab.person(who)
        rows.append(f"{who},{who},{who}@example.org,{p.user},{p.public_key}")
    store.roster.import_roster(key, RosterText("\n".join(rows) + "\n", where="roster"))
    kind = {k: ("mig" if (u or "").startswith("MIG-") else "gpu") for k, u in seats.items()}
    specs = [SeatSpec(key=k, kind=kind[k], host=host, device_uuid=u, engine="host") for k, u in seats.items()]
    store.seats.add_seats(key, specs)
    settings: dict[str, Any] = {k: v for k, v in lab.settings().items() if k != "ssh_port"}
    settings["profile_d"] = str(lab.root / "profile.d" / f"gpuseat-{key}.sh")
    store.agents.set_engine_settings(key, "host", settings)
    for who, seat in held.items():
        store.seats.assign(key, who, seat)


def _uid(lab: Lab, who: str) -> int:
    return int(subprocess.run(["id", "-u", lab.people[who].user], capture_output=True, text=True, check=True).stdout)


def _acl(path: Path) -> set[int] | None:
    return Machine(Runner()).acl_users(path)


def _pass(url: str, course: str) -> Any:
    with open_store(url) as store:
        return one_pass(store, course=course, runner=Runner())


def _plan(url: str, course: str) -> list[Any]:
    with open_store(url) as store:
        [planned] = plan_all(store, course=course, runner=Runner(dry_run=True))
    assert planned.changes is not None
    return planned.changes.ordered()


def test_a_second_course_on_the_same_gpu_gets_no_access_and_the_passes_do_not_fight(
    lab: Lab, url: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    """jan (24/7, not archived) holds GPU 1 for ann; feb's ben is then given GPU 1 too (feb names the server
    gpu1.lab.example.org: the same device UUID is the same GPU whatever the host name). Before: feb's pass gave
    ben /dev/nvidia1 and took it from ann, jan's next pass gave it back to ann and took it from ben, and so on at
    every pass, both accounts open. Now feb's pass refuses ben's seat (no account, no ACL), naming jan's seat and
    the fix; ann keeps her GPU; neither course's next plan touches the device. Once jan is archived, ben gets it."""
    gpu = lab.dev / "nvidia1"
    with open_store(url, create=True) as store:
        _course(store, lab, tmp_path, "jan", {"gpu-1": WHOLE}, ann="gpu-1")
        _course(store, lab, tmp_path, "feb", {"gpu-1": WHOLE}, "gpu1.lab.example.org", ben="gpu-1")  # same machine
    first = _pass(url, "jan")
    assert not first.failed, first.failed
    ann = _uid(lab, "ann")
    assert _acl(gpu) == {ann}

    second = _pass(url, "feb")
    assert _acl(gpu) == {ann}, "feb's pass gave ben the GPU that jan's ann holds, or took it from her"
    failed = " ".join(str(f) for f in second.failed)
    assert "jan" in failed and "gpuseat course archive jan" in failed, second.failed
    # no fight: each course's next plan changes no device file
    for course in ("jan", "feb"):
        again = [s for s in _plan(url, course) if s.action.startswith("device.")]
        assert not again, (course, again)
    assert subprocess.run(["id", lab.people["ben"].user], capture_output=True).returncode != 0  # no account made

    # gpuseat apply says what is wrong and how to fix it (exit 2: the store's data), and changes nothing
    r = cli("apply", "--course", "feb", "--db", url)
    assert r.code == 2, (r.out, r.err)
    assert "course jan is not archived and its seat gpu-1" in r.err and "gpuseat course archive jan" in r.err, r.err
    assert _acl(gpu) == {ann}
    # and seats check says the same of ben's seat (without trying to log in as him)
    r = cli("seats", "check", "--course", "feb", "--format", "json", "--db", url)
    [checked] = json.loads(r.out)["seats"]
    assert checked["state"] == "broken" and "course jan is not archived and its seat gpu-1" in checked["reason"]

    # January ends: once jan is archived, feb's next pass gives ben the GPU, and jan's pass leaves him on it
    with open_store(url) as store:
        store.lifecycle.archive_course("jan")
    assert not _pass(url, "feb").failed
    ben = _uid(lab, "ben")
    assert _acl(gpu) == {ben}
    assert not _pass(url, "jan").failed  # an archived course's pass took everyone off its seats' devices
    assert _acl(gpu) == {ben}
    for course in ("jan", "feb"):
        again = [s for s in _plan(url, course) if s.action.startswith("device.")]
        assert not again, (course, again)


def test_two_courses_on_slices_of_one_gpu_share_its_parent_and_a_whole_gpu_over_them_waits(
    lab: Lab, url: str, tmp_path: Path
) -> None:
    """jan's ann on MIG GI 7 and feb's ben on GI 8 of GPU 0 (feb also has a free seat on GI 7): both keep
    their slice and the parent GPU file, whichever course's pass runs (before: each course's pass took the
    other course's holder off the parent, and feb's free seat took ann off GI 7). mar's cat is then given
    the whole GPU 0 over them: refused, naming the older holding."""
    parent, gi7, gi8 = lab.dev / "nvidia0", lab.cap_file(0, 7), lab.cap_file(0, 8)
    with open_store(url, create=True) as store:
        _course(store, lab, tmp_path, "jan", {"mig-7": MIG[0]}, ann="mig-7")
        _course(store, lab, tmp_path, "feb", {"mig-7": MIG[0], "mig-8": MIG[1]}, ben="mig-8")
    for course in ("jan", "feb", "jan"):
        done = _pass(url, course)
        assert not done.failed, (course, done.failed)
    ann, ben = _uid(lab, "ann"), _uid(lab, "ben")
    assert _acl(parent) == {ann, ben} and _acl(gi7) == {ann} and _acl(gi8) == {ben}
    with open_store(url) as store:
        _course(store, lab, tmp_path, "mar", {"gpu-0": PARENT}, cat="gpu-0")
    refused = _pass(url, "mar")
    assert "course jan is not archived and its seat mig-7" in " ".join(str(f) for f in refused.failed), refused.failed
    assert _acl(parent) == {ann, ben} and _acl(gi7) == {ann} and _acl(gi8) == {ben}
    for course in ("jan", "feb", "mar"):
        again = [s for s in _plan(url, course) if s.action.startswith("device.")]
        assert not again, (course, again)


def test_a_seat_without_a_device_yet_is_not_given_another_courses_held_gpu(lab: Lab, url: str, tmp_path: Path) -> None:
    """feb's seat gpu-x was carved from an inventory: no device UUID yet, so feb's pass picks a free device of its
    kind on this server. Before, "free" meant free in feb only: it picked jan's GPU 1, which ann holds, and gave
    ben /dev/nvidia1 beside her (held_on_devices could not see a seat with no UUID, so the older-holder rule never
    ran). Now a device another course's holder keeps is not free: ben's seat waits for a device, ann keeps hers."""
    gpu = lab.dev / "nvidia1"
    with open_store(url, create=True) as store:
        _course(store, lab, tmp_path, "jan", {"gpu-1": WHOLE}, ann="gpu-1")
        _course(store, lab, tmp_path, "feb", {"gpu-x": None}, ben="gpu-x")
    assert not _pass(url, "jan").failed
    ann = _uid(lab, "ann")
    done = _pass(url, "feb")
    assert _acl(gpu) == {ann}, "feb's seat without a UUID took jan's held GPU for ben"
    assert not done.failed, done.failed
    with open_store(url) as store:
        assert store.seats.get_seat("feb", "gpu-x").device_uuid is None  # no device adopted: none is free here
    plan = _plan(url, "feb")
    assert not [s for s in plan if s.action.startswith("device.") or s.action == "seat.adopt"], plan
    # once jan is archived, the GPU is free: feb's seat adopts it and ben gets it
    with open_store(url) as store:
        store.lifecycle.archive_course("jan")
    assert not _pass(url, "feb").failed
    with open_store(url) as store:
        assert store.seats.get_seat("feb", "gpu-x").device_uuid == WHOLE
    assert _acl(gpu) == {_uid(lab, "ben")}


def test_a_refused_holders_requests_and_stops_never_touch_the_other_courses_holder(
    lab: Lab, url: str, tmp_path: Path
) -> None:
    """ann holds GPU 1 in jan and is given it in feb too (one person, one Unix login, two courses): feb's seat is
    refused (jan's holding is older). Before, feb's request planner still worked on her login, which is jan's
    account: her stop in feb locked the account she uses for jan and ended its processes (the request said
    'stopped'), and feb's never-connected rule stopped her feb seat (she cannot log in to it) and locked it too.
    Now feb plans nothing for her but the request's record, which fails with the refusal's words."""
    with open_store(url, create=True) as store:
        _course(store, lab, tmp_path, "jan", {"gpu-1": WHOLE}, ann="gpu-1")
        (tmp_path / "feb.toml").write_text(
            TWENTY_FOUR_SEVEN.format(name="feb") + "[policy]\nnever_connected_hours = 1\n"
        )
        store.courses.create_course(tmp_path / "feb.toml", key="feb")
        p = lab.people["ann"]
        row = f"ann,ann,ann@example.org,{p.user},{p.public_key}"
        store.roster.import_roster("feb", RosterText(f"key,name,email,unix_user,ssh_key\n{row}\n", where="roster"))
        store.seats.add_seats("feb", [SeatSpec(key="gpu-1", kind="gpu", host="gpu1", device_uuid=WHOLE, engine="host")])
        settings: dict[str, Any] = {k: v for k, v in lab.settings().items() if k != "ssh_port"}
        settings["profile_d"] = str(lab.root / "profile.d" / "gpuseat-feb.sh")
        (tmp_path / "sshd.log").write_text("")  # readable, and no login of ann's in it
        settings["sshd_log"] = str(tmp_path / "sshd.log")
        store.agents.set_engine_settings("feb", "host", settings)
        store.seats.assign("feb", "ann", "gpu-1")
    assert not _pass(url, "jan").failed
    machine = Machine(Runner())
    assert machine.account(p.user) is not None and not machine.locked(p.user)
    with open_store(url) as store:
        later = store.requests.now() + timedelta(hours=3)  # past feb's never-connected window
    with open_store(url) as store:
        [planned] = plan_all(store, course="feb", runner=Runner(dry_run=True), now=later)
    assert planned.changes is not None
    steps = planned.changes.ordered()
    assert not [s for s in steps if s.action in ("seat.stop", "account.lock", "processes.end")], steps

    with open_store(url) as store:
        asked = store.requests.request_seat("feb", "ann", "stop", actor="ann")
    done = _pass(url, "feb")
    assert not machine.locked(p.user), "feb's stop locked the account ann uses for jan"
    with open_store(url) as store:
        [request] = [r for r in store.requests.seat_requests("feb", participant="ann") if r.id == asked.id]
    assert request.state == "failed", request
    assert "course jan is not archived and its seat gpu-1" in (request.reason or ""), request
    assert any("course jan is not archived" in str(f) for f in done.failed), done.failed


def test_a_hub_holder_of_another_course_keeps_the_gpu_from_a_newer_ssh_seat(lab: Lab, url: str, tmp_path: Path) -> None:
    """jan's seat on this server's GPU 1 is a JupyterHub seat (ann's server runs on it, CUDA_VISIBLE_DEVICES); feb
    then gives ben the same GPU as an SSH seat of the host engine. Before, only host seats were compared: ben got
    /dev/nvidia1 beside ann's server. Now the rule compares the held seats of every engine that delivers a GPU of
    this server, by device UUID: ben gets nothing, the step names jan's seat and the fix; a feb seat with no UUID
    yet does not adopt that GPU either. Once jan is archived, ben gets it."""
    gpu = lab.dev / "nvidia1"
    with open_store(url, create=True) as store:
        _course(store, lab, tmp_path, "jan", {"gpu-1": WHOLE}, ann="gpu-1")
        store.seats.set_seat_state("jan", "gpu-1", "running", engine="jupyterhub", reason="a hub seat")
        _course(store, lab, tmp_path, "feb", {"gpu-1": WHOLE, "gpu-x": None}, ben="gpu-1", cat="gpu-x")
    done = _pass(url, "feb")
    assert _acl(gpu) in (None, set()), "feb's pass gave the GPU of jan's hub holder to an SSH seat"
    failed = " ".join(str(f) for f in done.failed)
    assert "course jan is not archived and its seat gpu-1 (held by ann since" in failed, done.failed
    assert "gpuseat course archive jan" in failed
    with open_store(url) as store:
        assert store.seats.get_seat("feb", "gpu-x").device_uuid is None  # not adopted: jan's hub holder keeps it
        store.lifecycle.archive_course("jan")
    assert not _pass(url, "feb").failed
    assert _uid(lab, "ben") in (_acl(gpu) or set())
