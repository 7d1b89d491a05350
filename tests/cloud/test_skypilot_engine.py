"""The SkyPilot engine at its SDK boundary: a recording fake of the ``sky`` module (every call bound to
the installed SDK's signature), ssh through a :class:`RecordingRunner`, the store for real.

Plan and apply through ``one_pass`` (what ``gpuseat apply`` and the agent run): a held seat is launched
with its holder's login while the access window is open and stops itself at its end; a closed window, a
release and an archive stop clusters, a deleted course's clusters are torn down; a hand-over takes the
previous holder out (over ssh) before the cluster is launched for the new one; each seat's honest state
(not launched, launching, running, stopped) and its reason is in the store, ``seats status`` and
``seats check``; a second plan after an apply is empty. From the participant's side: their stop stops
their cluster until their start (never a neighbour's), a restart keeps the disk, a reset gives a new one,
a new key reaches an up cluster, and at 0 seat hours the cluster stops.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from delivery.test_webhook import Receiver, receiver  # noqa: F401  (the receiver fixture)
from gpuseat.core.roster import RosterText
from gpuseat.engines import registry
from gpuseat.engines.apply import one_pass, plan_all
from gpuseat.engines.runner import RecordingRunner
from gpuseat.engines.skypilot.engine import SkyPilotEngine, SkyPilotSettings
from gpuseat.store import open_store
from session_soon import session_soon

from .fakesky import FakeSky, check_signatures, installed_sky  # noqa: F401 (the real_sky fixture)
from .skysetup import ssh_key

EXAMPLES = Path(__file__).parents[2] / "examples"
OPTION = {
    "rank": 1,
    "offers": [{"offer": "aws:g4dn.xlarge", "count": 2}],
    "groups": [{"group": "students", "offer": "aws:g4dn.xlarge", "units": 2, "seats": 2}],
}
OPEN = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)  # Monday 10:00, inside 09:00-17:00 (UTC course)
CLOSED = datetime(2026, 3, 2, 20, 0, tzinfo=UTC)
NEXT_DAY = datetime(2026, 3, 3, 9, 30, tzinfo=UTC)


class Runner(RecordingRunner):
    """ssh answered by a recording runner; each call also goes on the fake SDK's timeline, with its timeout."""

    def __init__(self, fake: FakeSky, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fake = fake
        self.timeouts: list[float] = []

    def _execute(self, args, timeout, user, env, input, cwd):
        self.fake.timeline.append(f"{args[0]} {args[-2]} {args[-1][:60]}")
        self.timeouts.append(timeout)
        return super()._execute(args, timeout, user, env, input, cwd)


@pytest.fixture
def lab(tmp_path, monkeypatch, real_sky):
    yield from _lab(tmp_path, monkeypatch, real_sky, EXAMPLES / "course-lab-hours.toml")


def _lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real_sky: Any, course_file: Path) -> Any:
    url = f"sqlite:///{tmp_path / 'course.db'}"
    st = open_store(url, create=True)
    st.courses.create_course(course_file, key="lab", timezone="UTC", plan_option=OPTION)
    ann, bob = ssh_key(tmp_path, "ann"), ssh_key(tmp_path, "bob")
    roster = (
        "name,email,group,unix_user,ssh_key\n"
        f"Ann,ann@example.edu,students,ann,{ann}\n"
        f"Bob,bob@example.edu,students,,{bob}\n"  # no unix_user: the derived login, as on every engine
    )
    st.roster.import_roster("lab", RosterText(roster, where="roster.csv"))
    st.seats.add_seats("lab", [{"key": f"cloud-{i}", "kind": "cloud", "engine": "skypilot"} for i in (1, 2)])
    st.seats.assign("lab", "ann", "cloud-1")
    fake = FakeSky(real_sky)
    monkeypatch.setattr("gpuseat.engines.skypilot.sdk.load_sky", lambda: fake)
    yield st, fake, url
    st.close()


def run(store, fake: FakeSky, now: datetime, *, failing: bool = False, **kwargs: Any):
    """One pass of the agent for the skypilot engine; returns the pass and the runner."""
    runner = Runner(fake, **kwargs)
    done = one_pass(store, course="lab", engine="skypilot", runner=runner, now=now)
    assert failing or not done.failed, done.failed
    return done, runner


def steps(done) -> list[str]:
    return [f"{o.step.action} {o.step.target}" for r in done.reports for o in r.outcomes]


def empty_plan(store, fake: FakeSky, now: datetime) -> bool:
    planned = plan_all(store, course="lab", engine="skypilot", runner=Runner(fake), now=now)
    assert not [p.error for p in planned if p.error]
    return all(p.changes is not None and p.changes.empty for p in planned)


def test_a_held_seat_is_launched_for_its_holder_and_recorded_running(lab):
    store, fake, _ = lab
    done, _ = run(store, fake, OPEN)
    assert steps(done) == ["cloud.launch gs-lab-cloud-1", "seat.record cloud-1", "seat.clear cloud-2"]
    (task,) = fake.launched()
    assert "P_USER=ann" in task["setup"] and task["resources"]["instance_type"] == "g4dn.xlarge"
    (launch,) = [c for c in fake.calls if c[0] == "launch"]
    assert launch[2]["cluster_name"] == "gs-lab-cloud-1"
    assert launch[2]["idle_minutes_to_autostop"] == 7 * 60  # until the window closes at 17:00
    assert launch[2]["wait_for"].value == "none"  # a hard limit: it stops at the window's end, idle or not
    seat = store.seats.get_seat("lab", "cloud-1")
    assert (seat.state, seat.engine_ref) == ("running", "gs-lab-cloud-1")
    assert seat.state_reason.startswith("running: cluster gs-lab-cloud-1 is up until the access window closes")
    access = store.delivery.access_of("lab")["cloud-1"]
    assert (access["host"], access["user"], access["holder"]) == ("54.12.3.10", "ann", "ann")
    assert access["command"] == "ssh ann@54.12.3.10"
    engine = registry.build("skypilot", store, "lab", runner=Runner(fake))
    assert (engine.connect(seat) or pytest.fail("no way in")).command == "ssh ann@54.12.3.10"
    free = store.seats.get_seat("lab", "cloud-2")
    assert free.state_reason == "not launched: nobody holds it"
    assert empty_plan(store, fake, OPEN)  # idempotent: nothing left to do
    assert check_signatures(fake) > 5


def test_every_sdk_call_binds_to_the_installed_sdk(lab):
    """Launch, status, autostop, stop, down: each recorded call fits the installed SDK's signature."""
    store, fake, _ = lab
    run(store, fake, OPEN)
    fake.clusters["gs-lab-cloud-1"]["autostop"] = -1  # someone cancelled the autostop by hand
    done, _ = run(store, fake, OPEN)
    assert steps(done) == ["cloud.autostop gs-lab-cloud-1"]
    run(store, fake, CLOSED)
    store.seats.release("lab", participant="ann")
    run(store, fake, NEXT_DAY)
    store.lifecycle.remove_seats("lab", ["cloud-1"])
    run(store, fake, NEXT_DAY)
    assert fake.verbs() == [
        "launch gs-lab-cloud-1",
        "autostop gs-lab-cloud-1",
        "stop gs-lab-cloud-1",
        "down gs-lab-cloud-1",
    ]
    assert check_signatures(fake) == len(fake.calls)
    names = {c[0] for c in fake.calls}
    assert names == {"Task.from_yaml_config", "launch", "status", "get", "autostop", "stop", "down"}


def test_a_closed_window_stops_the_cluster_and_the_next_window_starts_it(lab):
    store, fake, _ = lab
    run(store, fake, OPEN)
    done, _ = run(store, fake, CLOSED)
    assert steps(done) == ["cloud.stop gs-lab-cloud-1", "seat.record cloud-1"]
    seat = store.seats.get_seat("lab", "cloud-1")
    assert seat.state == "requested" and seat.state_reason.startswith("stopped: outside the course's access hours")
    access = store.delivery.access_of("lab")["cloud-1"]
    assert access["host"] is None and access["holder"] == "ann"  # no stale address: it changes on restart
    assert empty_plan(store, fake, CLOSED)
    done, _ = run(store, fake, NEXT_DAY)
    assert steps(done) == ["cloud.launch gs-lab-cloud-1", "seat.record cloud-1"]
    assert store.seats.get_seat("lab", "cloud-1").state == "running"
    assert [c[2]["idle_minutes_to_autostop"] for c in fake.calls if c[0] == "launch"] == [420, 450]
    assert empty_plan(store, fake, NEXT_DAY)


def test_hand_over_removes_the_old_holder_before_the_new_holders_key_is_added(lab):
    store, fake, _ = lab
    run(store, fake, OPEN)
    store.seats.release("lab", participant="ann")
    store.seats.assign("lab", "bob", "cloud-1")
    engine = registry.build("skypilot", store, "lab", runner=Runner(fake))
    assert engine.connect(store.seats.get_seat("lab", "cloud-1")) is None  # being prepared, never ann's login
    fake.timeline.clear()
    done, _ = run(store, fake, OPEN)
    assert steps(done) == ["account.revoke ann", "cloud.launch gs-lab-cloud-1", "seat.record cloud-1"]
    order = [t for t in fake.timeline if not t.startswith(("sky.get", "sky.status"))]
    assert order[0].startswith("ssh gs-lab-cloud-1 bash -c 'set -eu")  # ann out first, over ssh …
    assert order[1:] == ["sky.Task.from_yaml_config", "sky.launch gs-lab-cloud-1"]  # … then bob's launch
    (revoke,) = [c for r in done.reports for o in r.outcomes for c in o.commands if c.argv[0] == "ssh"]
    assert "OLD=ann" in revoke.argv[-1] and "--expiredate 1" in revoke.argv[-1]
    task = fake.launched()[-1]
    # the new holder's setup also expires every earlier holder before it adds bob's key
    assert task["setup"].index('for OLD in $(cat "$HOLDERS")') < task["setup"].index('authorized_keys"\n')
    assert "P_USER=bob" in task["setup"]
    access = store.delivery.access_of("lab")["cloud-1"]
    assert (access["user"], access["holder"]) == ("bob", "bob")
    assert empty_plan(store, fake, OPEN)


def test_a_failed_revoke_blocks_the_new_holders_launch(lab):
    store, fake, _ = lab
    run(store, fake, OPEN)
    store.seats.release("lab", participant="ann")
    store.seats.assign("lab", "bob", "cloud-1")
    answers = {("ssh",): (255, "", "ssh: connect to host gs-lab-cloud-1 port 22: Connection refused")}
    done, _ = run(store, fake, OPEN, answers=answers, failing=True)
    states = {f"{o.step.action} {o.step.target}": o.state for r in done.reports for o in r.outcomes}
    assert states == {"account.revoke ann": "failed", "cloud.launch gs-lab-cloud-1": "skipped",
                      "seat.record cloud-1": "skipped"}  # fmt: skip
    assert len(fake.launched()) == 1  # only ann's launch
    assert store.delivery.access_of("lab")["cloud-1"]["user"] == "ann"  # bob's page: being prepared


def test_release_archive_and_delete(lab, cli):
    store, fake, url = lab
    run(store, fake, OPEN)
    store.seats.release("lab", participant="ann")
    done, _ = run(store, fake, OPEN)
    assert steps(done) == ["account.revoke ann", "cloud.stop gs-lab-cloud-1", "seat.clear cloud-1"]
    seat = store.seats.get_seat("lab", "cloud-1")
    assert seat.state_reason.startswith("stopped: nobody holds it") and "cloud-1" not in store.delivery.access_of("lab")
    assert empty_plan(store, fake, OPEN)
    store.seats.assign("lab", "ann", "cloud-1")
    run(store, fake, OPEN)
    store.lifecycle.archive_course("lab")
    done, _ = run(store, fake, OPEN)
    assert steps(done) == ["account.revoke ann", "cloud.stop gs-lab-cloud-1"]
    assert fake.clusters["gs-lab-cloud-1"]["status"] == "STOPPED"
    holdings = store.agents.holdings("lab")
    assert [(h["what"], h["login"]) for h in holdings] == [("cluster", "gs-lab-cloud-1")]  # a stopped disk
    r = cli("course", "delete", "lab", "--yes", "--db", url)
    assert r.code == 0, r.err
    assert "deleted once the engines have taken every access away" in r.out
    done, _ = run(store, fake, OPEN)
    assert steps(done) == ["cloud.down gs-lab-cloud-1"] and not fake.clusters
    assert done.deleted == ["lab"]


def test_a_failed_launch_says_not_launched_with_skypilots_error(lab):
    store, fake, _ = lab
    fake.fail_launch = "Failed to acquire resources in all zones in us-east-1 for g4dn.xlarge"
    done, _ = run(store, fake, OPEN, failing=True)
    (failed,) = done.failed
    assert "ResourcesUnavailableError" in failed["error"] and failed["exit_code"] == 1
    seat = store.seats.get_seat("lab", "cloud-1")
    assert seat.state == "failed"
    assert seat.state_reason.startswith("not launched: sky.launch gs-lab-cloud-1 failed: ResourcesUnavailableError")


def test_a_dry_run_lists_the_sdk_calls_and_makes_none(lab):
    store, fake, _ = lab
    done, _ = run(store, fake, OPEN, dry_run=True)
    commands = [c.line for r in done.reports for o in r.outcomes for c in o.commands]
    assert "sky.launch gs-lab-cloud-1 idle_minutes=420" in commands
    assert "launch" not in {c[0] for c in fake.calls} and not fake.clusters
    assert store.seats.get_seat("lab", "cloud-1").state == "planned"


def test_states_in_seats_status_and_not_launched_in_seats_check(lab, cli):
    store, fake, url = lab
    run(store, fake, CLOSED)  # held, window closed: nothing launched yet
    r = cli("seats", "status", "--course", "lab", "--db", url, "--format", "json")
    assert r.code == 0, r.err
    import json

    rows = {row["seat"]: row for row in json.loads(r.out)}
    assert rows["cloud-1"]["state"] == "requested"
    assert rows["cloud-1"]["reason"].startswith("not launched yet: the agent launches gs-lab-cloud-1 when the access")
    assert rows["cloud-2"]["reason"] == "not launched: nobody holds it"
    fake.calls.clear()
    r = cli("seats", "check", "--course", "lab", "--db", url, "--format", "json", "--timeout", "5")
    assert r.code == 3
    (result,) = json.loads(r.out)["seats"]
    assert result["reason"].startswith("not launched yet") and "resolve" not in r.out
    assert not fake.calls  # no SDK call and no ssh to a seat that is not up


def test_the_probe_uses_the_stored_way_in_and_honours_the_timeout(lab):
    store, fake, _ = lab
    run(store, fake, OPEN)
    listing = "GPU 0: Tesla T4 (UUID: GPU-aaaaaaaa-0000-0000-0000-000000000000)\n"
    runner = Runner(fake, answers={("ssh",): (0, listing, "")})
    engine = SkyPilotEngine(store, "lab", settings=SkyPilotSettings(timeout=7), runner=runner)
    got = engine.probe(store.seats.get_seat("lab", "cloud-1"), store.roster.find_participant("lab", "ann"))
    assert got.state == "ready", got
    (ran,) = runner.take()
    assert ran.argv == ("ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=7", "-o", "HostName=54.12.3.10",
                        "gs-lab-cloud-1", "sudo -n -u ann -- nvidia-smi -L")  # fmt: skip
    assert runner.timeouts == [7]
    runner = Runner(fake, answers={("ssh",): (124, "", "")})
    slow = SkyPilotEngine(store, "lab", settings=SkyPilotSettings(timeout=7), runner=runner)
    got = slow.probe(store.seats.get_seat("lab", "cloud-1"), store.roster.find_participant("lab", "ann"))
    assert got.state == "broken" and got.reason == "the probe on gs-lab-cloud-1 did not answer within 7 s"


def test_a_mig_slice_beside_a_whole_gpu_is_two_devices(lab):
    """The probe reads nvidia-smi -L by the one reader (gpuseat.core.listing): per GPU its MIG devices, else the
    GPU. The engine once kept only the MIG devices when any GPU had them: a cloud machine that showed the
    participant a MIG slice of one GPU and all of another was "ready". Lines from two real listings."""
    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    h100 = (fixtures / "nvidia_gpu_exporter__linux-x86_64__nvidia-h100-mig__590.48.01.txt").read_text().splitlines()
    at = h100.index(next(ln for ln in h100 if ln.startswith("GPU 0: ")))
    pro = (fixtures / "rtxpro6000__L.txt").read_text().splitlines()
    whole = next(ln for ln in pro if ln.startswith("GPU 0: ")).replace("GPU 0: ", "GPU 1: ", 1)
    store, fake, _ = lab
    run(store, fake, OPEN)
    runner = Runner(fake, answers={("ssh",): (0, "\n".join([*h100[at : at + 2], whole]) + "\n", "")})
    engine = SkyPilotEngine(store, "lab", settings=SkyPilotSettings(timeout=7), runner=runner)
    got = engine.probe(store.seats.get_seat("lab", "cloud-1"), store.roster.find_participant("lab", "ann"))
    assert got.state == "broken" and got.reason == "2 GPUs visible to the participant (expected exactly one)", got
    assert got.visible == (h100[at + 1].rpartition("UUID: ")[2].rstrip(")"), whole.rpartition("UUID: ")[2].rstrip(")"))


def test_the_launched_task_loads_with_skypilots_own_loader(lab, tmp_path):
    import yaml

    from .test_skypilot import _sky_load

    store, fake, _ = lab
    run(store, fake, OPEN)
    path = tmp_path / "launched.yaml"
    path.write_text(yaml.safe_dump(fake.launched()[0]))
    (loaded,) = _sky_load([path], tmp_path / "home")
    assert "error" not in loaded, loaded
    assert (loaded["name"], loaded["instance_type"]) == ("gs-lab-cloud-1", "g4dn.xlarge")
    assert "P_USER=ann" in loaded["setup"] and loaded["idle_minutes"] is None  # autostop is set by the launch


def test_the_participant_page_says_not_launched_running_or_stopped(lab):
    from gpuseat.services.delivery import way_in

    store, fake, _ = lab
    ann = store.roster.find_participant("lab", "ann")

    def page():
        return way_in(store, store.seats.get_seat("lab", "cloud-1"), ann)

    assert page().missing.startswith("not launched yet: the agent launches your seat")  # no agent ran yet
    run(store, fake, CLOSED)
    assert page().missing.startswith("not launched yet: the agent launches gs-lab-cloud-1 when the access window")
    assert "ssh_host" not in page().missing and page().command is None
    run(store, fake, OPEN)
    assert page().command == "ssh ann@54.12.3.10" and page().missing is None
    run(store, fake, CLOSED)
    assert page().missing.startswith("stopped: outside the course's access hours") and page().command is None


def test_settings_in_the_store_and_apply_from_the_cli(lab, cli, tmp_path):
    store, fake, url = lab
    r = cli("engines", "settings", "skypilot", "disk_gb=0", "--course", "lab", "--db", url)
    assert r.code == 2 and "disk_gb" in r.err and "Traceback" not in r.err
    r = cli("engines", "settings", "skypilot", f"wheelhouse={tmp_path}", "--course", "lab", "--db", url)
    assert r.code == 0, r.err
    done, _ = run(store, fake, OPEN, failing=True)  # an empty wheelhouse: one clear message, exit 2
    (failed,) = done.failed
    assert failed["exit_code"] == 2 and "0 gpuseat wheels" in failed["error"], failed
    assert store.seats.get_seat("lab", "cloud-1").state_reason.startswith("not launched: ")
    assert not fake.clusters
    r = cli("engines", "settings", "skypilot", "wheelhouse=", "--course", "lab", "--db", url)
    assert r.code == 0, r.err
    r = cli("apply", "--course", "lab", "--engine", "skypilot", "--dry-run", "--db", url)
    assert r.code == 0 and "Traceback" not in r.err, (r.out, r.err)
    # today the lab course (March 2026) is over: nothing launches, each seat says so
    assert "not launched: the course's schedule has ended" in r.out, r.out
    assert not fake.clusters


def test_seats_launch_side_by_side(lab):
    """Every launch is submitted before the first is waited for (a launch takes minutes each)."""
    store, fake, _ = lab
    store.seats.assign("lab", "bob", "cloud-2")
    done, _ = run(store, fake, OPEN)
    assert steps(done) == ["cloud.launch gs-lab-cloud-1", "cloud.launch gs-lab-cloud-2", "seat.record cloud-1",
                           "seat.record cloud-2"]  # fmt: skip
    names = [n for n, *_ in fake.calls if n in ("launch", "get")]
    first = names.index("launch")
    assert names[first : first + 3] == ["launch", "launch", "get"], names  # both submitted, then waited for
    assert {store.seats.get_seat("lab", k).state for k in ("cloud-1", "cloud-2")} == {"running"}
    assert store.delivery.access_of("lab")["cloud-2"]["command"] == "ssh bob@54.12.3.11"
    assert empty_plan(store, fake, OPEN)


def test_the_images_admin_user_is_never_revoked_nor_given_to_a_participant(lab, tmp_path):
    from gpuseat.core.readiness import Access

    store, fake, _ = lab
    run(store, fake, OPEN)
    # the organizer set the way in by hand (seats connect --ssh ubuntu@…): no holder, the image's admin user
    store.delivery.record_delivery("lab", "cloud-1", access=Access(kind="ssh", host="54.12.3.10", user="ubuntu"))
    done, _ = run(store, fake, OPEN)
    assert steps(done) == ["cloud.launch gs-lab-cloud-1", "seat.record cloud-1"]  # ann's login made sure of
    assert "account.revoke" not in " ".join(steps(done))
    roster = f"name,email,group,unix_user,ssh_key\nUbu,ubu@example.edu,students,ubuntu,{ssh_key(tmp_path, 'u')}\n"
    store.roster.import_roster("lab", RosterText(roster, where="more.csv"))
    store.seats.assign("lab", "ubuntu", "cloud-2")
    done, _ = run(store, fake, OPEN, failing=True)
    (failed,) = done.failed
    assert failed["exit_code"] == 2 and "the cloud image's own admin user" in failed["error"]
    assert "gs-lab-cloud-2" not in fake.clusters


def test_two_seats_whose_keys_differ_only_in_case_never_share_one_cluster(lab):
    """``Cloud-1`` and ``cloud-1`` are two seats but one cluster name: each pass launched the cluster for the
    other holder (the setup expiring the first), so two participants took turns on one machine."""
    store, fake, _ = lab
    store.seats.add_seats("lab", [{"key": "Cloud-1", "kind": "cloud", "engine": "skypilot"}])
    store.seats.assign("lab", "bob", "Cloud-1")
    done, _ = run(store, fake, OPEN, failing=True)
    (failed,) = done.failed
    assert failed["exit_code"] == 2 and "seats Cloud-1 and cloud-1 of course lab map to one" in failed["error"]
    assert not fake.launched()


def test_a_seat_whose_cluster_name_is_another_courses_cluster_is_not_launched_onto_it(lab):
    """Course ``lab`` seat ``x-1`` and course ``lab-x`` seat ``1`` are both ``gs-lab-x-1``: the engine took the
    other course's running cluster for missing and launched it for its own holder."""
    store, fake, _ = lab
    fake.clusters["gs-lab-x-1"] = {"status": "UP", "autostop": -1, "ip": "54.12.3.99",
                                   "envs": {"GPUSEAT_COURSE": "lab-x", "GPUSEAT_SEAT": "1"}, "setup": ""}  # fmt: skip
    store.seats.add_seats("lab", [{"key": "x-1", "kind": "cloud", "engine": "skypilot"}])
    store.seats.assign("lab", "bob", "x-1")
    done, _ = run(store, fake, OPEN, failing=True)
    (failed,) = done.failed
    assert failed["exit_code"] == 2 and "belongs to course lab-x" in failed["error"], failed
    assert not fake.launched() and fake.clusters["gs-lab-x-1"]["envs"]["GPUSEAT_COURSE"] == "lab-x"


@pytest.mark.parametrize("login", ["admin", "daemon", "nobody"])
def test_a_roster_login_that_is_an_image_account_is_never_launched_for(lab, tmp_path, login):
    """Debian's image admin (sudo) or a daemon's account passed the roster's Unix name rule; the setup then
    put the participant's key on that account (the setup now refuses any account the image has, too)."""
    from sqlalchemy import text

    store, fake, _ = lab
    roster = f"name,email,group,unix_user,ssh_key\nEve,eve@example.edu,students,eve,{ssh_key(tmp_path, 'e')}\n"
    store.roster.import_roster("lab", RosterText(roster, where="more.csv"))
    with store.database.engine.begin() as conn:  # the roster refuses system accounts since; one stored before
        conn.execute(text("UPDATE participants SET unix_user = :u WHERE key = 'eve'"), {"u": login})
    store.seats.assign("lab", "eve", "cloud-2")
    done, _ = run(store, fake, OPEN, failing=True)
    (failed,) = done.failed
    assert failed["exit_code"] == 2 and "or a system account" in failed["error"], failed
    assert "gs-lab-cloud-2" not in fake.clusters


# -- the participant's seat requests (stop, start, restart, reset, key) ----------------------------------


def _ask(store, action: str, **kwargs: Any) -> int:
    return store.requests.request_seat("lab", "ann", action, actor="ann", **kwargs).id


def _said(store, request_id: int) -> tuple[str, str]:
    (r,) = [r for r in store.requests.seat_requests("lab", participant="ann", limit=50) if r.id == request_id]
    return r.state, r.reason or ""


def test_a_participant_stops_their_cloud_seat_and_starts_it_again_inside_the_window(lab, cli):
    """Ann's stop stops her cluster (not Bob's) and it stays stopped, a new access window included, until her
    start; a start outside the window fails with the reason and launches nothing."""
    import json

    from gpuseat.services.delivery import way_in

    store, fake, url = lab
    store.seats.assign("lab", "bob", "cloud-2")
    run(store, fake, OPEN)
    r = cli("seat", "stop", "--participant", "ann", "--course", "lab", "--db", url)  # was refused: not carried out
    assert r.code == 0 and "stop of ann's seat cloud-1 is pending" in r.out, (r.out, r.err)
    (stop,) = [x.id for x in store.requests.seat_requests("lab", pending=True)]
    done, _ = run(store, fake, OPEN)
    assert steps(done) == ["cloud.stop gs-lab-cloud-1", "seat.record cloud-1", "request.record gs-lab-cloud-1"]
    assert fake.clusters["gs-lab-cloud-1"]["status"] == "STOPPED" and fake.clusters["gs-lab-cloud-2"]["status"] == "UP"
    state, reason = _said(store, stop)
    assert state == "done" and reason.startswith(
        "stopped: your cloud machine gs-lab-cloud-1 is stopped; its disk is kept"
    )
    seat = store.seats.get_seat("lab", "cloud-1")
    assert seat.state_reason == "stopped: on ann's request; gs-lab-cloud-1 keeps its disk until a start"
    ann = store.roster.find_participant("lab", "ann")
    page = way_in(store, seat, ann)
    assert page.command is None and page.missing == seat.state_reason
    r = cli("seats", "status", "--course", "lab", "--db", url, "--format", "json")
    assert r.code == 0, r.err
    assert {row["seat"]: row["reason"] for row in json.loads(r.out)}["cloud-1"] == seat.state_reason
    assert empty_plan(store, fake, OPEN)
    early = _ask(store, "start")
    run(store, fake, CLOSED)
    assert _said(store, early) == ("failed", "the seat cannot run now: outside the course's access hours "
                                             "(next opens 2026-03-03 08:45)")  # fmt: skip
    run(store, fake, NEXT_DAY)  # the next window opens: her seat stays stopped
    assert fake.verbs() == ["launch gs-lab-cloud-1", "launch gs-lab-cloud-2", "stop gs-lab-cloud-1",
                            "stop gs-lab-cloud-2", "launch gs-lab-cloud-2"]  # fmt: skip
    assert empty_plan(store, fake, NEXT_DAY)
    start = _ask(store, "start")
    done, _ = run(store, fake, NEXT_DAY)
    assert steps(done) == ["cloud.launch gs-lab-cloud-1", "seat.record cloud-1", "request.record gs-lab-cloud-1"]
    assert _said(store, start) == ("done", "started: you can log in")
    assert fake.clusters["gs-lab-cloud-1"]["disk"] == "disk-1"  # the same disk
    ip = fake.clusters["gs-lab-cloud-1"]["ip"]  # (a started cluster's address may be new)
    assert way_in(store, store.seats.get_seat("lab", "cloud-1"), ann).command == f"ssh ann@{ip}"
    assert empty_plan(store, fake, NEXT_DAY)
    assert [v for v in fake.verbs() if v.endswith("cloud-2")] == ["launch gs-lab-cloud-2", "stop gs-lab-cloud-2",
                                                                   "launch gs-lab-cloud-2"]  # fmt: skip
    assert check_signatures(fake) == len(fake.calls)


def test_restart_keeps_the_disk_reset_gives_a_fresh_machine_and_a_new_key_is_installed(lab, tmp_path):
    store, fake, _ = lab
    store.seats.assign("lab", "bob", "cloud-2")
    run(store, fake, OPEN)
    restart = _ask(store, "restart")
    fake.calls.clear()
    done, _ = run(store, fake, OPEN)
    assert steps(done) == ["cloud.stop gs-lab-cloud-1", "cloud.launch gs-lab-cloud-1", "seat.record cloud-1",
                           "request.record gs-lab-cloud-1"]  # fmt: skip
    assert fake.verbs() == ["stop gs-lab-cloud-1", "launch gs-lab-cloud-1"]
    assert _said(store, restart)[0] == "done" and fake.clusters["gs-lab-cloud-1"]["disk"] == "disk-1"
    reset = _ask(store, "reset")
    fake.calls.clear()
    done, _ = run(store, fake, OPEN)
    assert fake.verbs() == ["down gs-lab-cloud-1", "launch gs-lab-cloud-1"]
    assert fake.clusters["gs-lab-cloud-1"]["disk"] == "disk-3"  # a new machine: nothing of disk-1 is left
    assert _said(store, reset) == ("done", "reset: a fresh cloud machine (everything on the old one is gone); "
                                           "you can log in")  # fmt: skip
    assert store.seats.get_seat("lab", "cloud-1").state == "running"
    new = ssh_key(tmp_path, "ann2")
    key = _ask(store, "key", key=new)
    fake.calls.clear()
    run(store, fake, OPEN)
    assert fake.verbs() == ["launch gs-lab-cloud-1"]  # its setup runs again on the up cluster, with her new key
    assert new.split()[1] in fake.launched()[-1]["setup"] and fake.clusters["gs-lab-cloud-1"]["disk"] == "disk-3"
    assert _said(store, key) == ("done", "your new key is installed on gs-lab-cloud-1 (the old one is removed)")
    assert empty_plan(store, fake, OPEN)
    assert fake.clusters["gs-lab-cloud-2"]["disk"] == "disk-2" and not any("cloud-2" in v for v in fake.verbs())
    assert check_signatures(fake) == len(fake.calls)


def test_a_failed_launch_fails_the_start_with_skypilots_error(lab):
    store, fake, _ = lab
    run(store, fake, OPEN)
    _ask(store, "stop")
    run(store, fake, OPEN)
    start = _ask(store, "start")
    fake.fail_launch = "Failed to acquire resources in all zones in us-east-1 for g4dn.xlarge"
    done, _ = run(store, fake, OPEN, failing=True)
    assert [f["step"] for f in done.failed] == ["skypilot::seat.record:cloud-1"], done.failed  # it waits for it
    assert store.seats.get_seat("lab", "cloud-1").state == "failed"
    state, reason = _said(store, start)
    assert state == "failed" and reason.startswith("gs-lab-cloud-1 could not be launched: sky.launch gs-lab-cloud-1")
    assert "ResourcesUnavailableError" in reason


def test_out_of_seat_hours_the_cluster_stops_a_start_is_refused_and_a_topup_lets_it_run(lab):
    """Quota 1 h, ann's seat ran 2 h (access until 22:00, outside the 09-17 sessions): one pass stops her
    cluster (bob's runs on) and records why on her timeline; her start is refused with the reason; after a
    top-up her start launches it again."""
    from sqlalchemy import text

    store, fake, _ = lab
    evening = datetime(2026, 3, 2, 19, 0, tzinfo=UTC)
    course = store.courses.course_text("lab").replace(
        'hours = "09:00-17:00"', 'hours = "09:00-17:00"\naccess = "08:00-22:00"'
    )
    store.courses.set_course_text("lab", course, changes=[])
    store.seats.assign("lab", "bob", "cloud-2")
    run(store, fake, evening)
    store.requests.add_seat_hours("lab", "ann", 1, kind="quota", actor="organizer")
    with store.database.engine.begin() as conn:  # as if her seat had run since the session's end
        conn.execute(text("UPDATE assignments SET valid_from = :t WHERE valid_to IS NULL AND participant_id = "
                          "(SELECT id FROM participants WHERE key = 'ann')"), {"t": evening - timedelta(hours=2)})  # fmt: skip
    done, _ = run(store, fake, evening)
    assert steps(done) == ["cloud.stop gs-lab-cloud-1", "seat.record cloud-1", "seat.stop cloud-1"]
    assert fake.clusters["gs-lab-cloud-1"]["status"] == "STOPPED" and fake.clusters["gs-lab-cloud-2"]["status"] == "UP"
    said = "no seat hours left: 2.0 of 1 h used"
    assert store.seats.get_seat("lab", "cloud-1").state_reason == f"stopped: {said}"
    (stop,) = store.requests.seat_requests("lab", participant="ann")
    assert (stop.action, stop.state, stop.reason) == ("stop", "done", said)
    assert empty_plan(store, fake, evening)
    start = _ask(store, "start")
    run(store, fake, evening)
    assert _said(store, start) == ("failed", "no seat hours left (0 of 1 h): ask the organizer for more")
    store.requests.add_seat_hours("lab", "ann", 5, actor="organizer")
    start = _ask(store, "start")
    done, _ = run(store, fake, evening)
    assert steps(done) == ["cloud.launch gs-lab-cloud-1", "seat.record cloud-1", "request.record gs-lab-cloud-1"]
    assert _said(store, start) == ("done", "started: you can log in")
    assert empty_plan(store, fake, evening)
    assert [v for v in fake.verbs() if v.endswith("cloud-2")] == ["launch gs-lab-cloud-2"]


# -- ready before every session (gpuseat.engines.sessions) ---------------------------------------------


def test_before_a_session_each_running_cluster_is_checked_a_broken_one_again_later_a_stopped_one_never(
    lab,
    tmp_path,
    receiver: Receiver,  # noqa: F811
):
    """10 minutes before a lab session (lead 15), on the real clock (a check's time is this machine's): one
    pass checks ann's up cluster and bob's, launched in that same pass (after its launch), as each holder over
    ssh; cy stopped hers and is not checked. The verdicts are stored, the broken seat is posted to the course
    webhook once; right after, nothing is due; four minutes later only bob's seat is checked again."""
    store, fake, _ = lab
    at, schedule = session_soon(10)
    schedule += "\n"
    text = store.courses.course_text("lab")
    head, _, rest = text.partition("[schedule]")
    text = f'webhook = "{receiver.url}"\n{head}{schedule}[[group]]{rest.partition("[[group]]")[2]}'
    store.courses.set_course_text("lab", f"{text}\n[policy]\nlead_minutes = 15\n", changes=[])
    roster = f"name,email,group,unix_user,ssh_key\nCy,cy@example.edu,students,cy,{ssh_key(tmp_path, 'cy')}\n"
    store.roster.import_roster("lab", RosterText(roster, where="more.csv"))
    store.seats.add_seats("lab", [{"key": "cloud-3", "kind": "cloud", "engine": "skypilot"}])
    store.seats.assign("lab", "cy", "cloud-3")
    gpu = "GPU 0: Tesla T4 (UUID: GPU-aaaaaaaa-0000-0000-0000-000000000000)\n"
    probed: list[str] = []

    def ssh(argv: tuple[str, ...]) -> tuple[int, str, str]:
        probed.append(argv[-1])
        return (0, gpu, "") if " ann " in argv[-1] else (1, "", "sudo: unknown user bob\n")

    early, _ = run(store, fake, at - timedelta(minutes=30), answers={("ssh",): ssh})
    assert "seat.check" not in " ".join(steps(early)) and not probed  # no session near yet
    store.requests.request_seat("lab", "cy", "stop", actor="cy")
    store.seats.assign("lab", "bob", "cloud-2")
    receiver.refused = 1  # a receiver that takes the first body at once (its retry is tested elsewhere)
    fake.timeline.clear()
    done, _ = run(store, fake, None, answers={("ssh",): ssh})
    assert steps(done) == ["cloud.stop gs-lab-cloud-3", "cloud.launch gs-lab-cloud-2", "seat.record cloud-2",
                           "seat.record cloud-3", "request.record gs-lab-cloud-3", "seat.check cloud-1",
                           "seat.check cloud-2", f"session.report session {at:%Y-%m-%d %H:%M} UTC"]  # fmt: skip
    order = [t for t in fake.timeline if t.startswith(("sky.launch", "ssh"))]
    assert order == ["sky.launch gs-lab-cloud-2", "ssh gs-lab-cloud-1 sudo -n -u ann -- nvidia-smi -L",
                     "ssh gs-lab-cloud-2 sudo -n -u bob -- nvidia-smi -L"]  # fmt: skip
    found = store.delivery.readiness_of("lab")
    assert (found["cloud-1"]["state"], found["cloud-1"]["visible"]) == ("ready", [gpu.split("UUID: ")[1][:-2]])
    said = "the probe failed on gs-lab-cloud-2: sudo: unknown user bob"
    assert (found["cloud-2"]["state"], found["cloud-2"]["reason"]) == ("broken", said)
    assert "cloud-3" not in found and fake.clusters["gs-lab-cloud-3"]["status"] == "STOPPED"
    body = receiver.wait("session.check")
    assert (body["engine"], body["checked"], datetime.fromisoformat(body["session_starts"])) == ("skypilot", 2, at)
    assert body["broken"] == [{"seat": "cloud-2", "participant": "bob", "reason": said}]

    assert empty_plan(store, fake, None)  # right after: the ready seat is done, the broken one waits 4 minutes
    later, _ = run(store, fake, datetime.now(UTC) + timedelta(minutes=5), answers={("ssh",): ssh})
    assert steps(later) == ["seat.check cloud-2", f"session.report session {at:%Y-%m-%d %H:%M} UTC"]
    assert [o.message for r in later.reports for o in r.outcomes][-1] == "unchanged since the last post"
    assert len(probed) == 3 and len(receiver.bodies) == 1  # the same broken list is not posted twice


def test_a_seat_whose_relaunch_failed_is_not_probed_at_its_old_address(lab):
    """A restart whose launch fails leaves the seat's last way in stored, an address the cloud may since have
    given to another machine: the check (before a session, or ``seats check``) says not launched with
    SkyPilot's error, and runs no ssh there."""
    store, fake, _ = lab
    run(store, fake, OPEN)
    _ask(store, "restart")
    fake.fail_launch = "Failed to acquire resources in all zones in us-east-1 for g4dn.xlarge"
    run(store, fake, OPEN, failing=True)
    assert store.delivery.access_of("lab")["cloud-1"]["host"] == "54.12.3.10"
    runner = Runner(fake)
    engine = SkyPilotEngine(store, "lab", runner=runner)
    got = engine.probe(store.seats.get_seat("lab", "cloud-1"), store.roster.find_participant("lab", "ann"))
    assert got.state == "broken" and got.reason.startswith("not launched: sky.launch gs-lab-cloud-1 failed"), got
    assert not runner.take()


def test_the_autostop_counts_to_the_window_end_on_the_stores_clock(tmp_path, monkeypatch, real_sky):
    """The course is open all day from yesterday to tomorrow (UTC); a pass on a machine whose clock is 5 hours
    ahead launches ann's cluster with an autostop at the window's end by the store's clock (it counted from its
    own clock: 5 hours early, and a seat stopped 5 hours before the course closes)."""
    from stepped_clock import REAL_DATETIME, stepped

    today = REAL_DATETIME.now(UTC).date()
    text = (EXAMPLES / "course-lab-hours.toml").read_text()
    schedule = text[text.index("[schedule]") : text.index("[[group]]")]
    window = (
        f"[schedule]\nstart = {today - timedelta(days=1)}\nend = {today + timedelta(days=1)}\n"
        'hours = "09:00-10:00"\naccess = "00:00-24:00"\n\n'
    )
    (tmp_path / "now.toml").write_text(text.replace(schedule, window))
    store, fake, _ = next(_lab(tmp_path, monkeypatch, real_sky, tmp_path / "now.toml"))
    ends = datetime.combine(today + timedelta(days=2), datetime.min.time(), UTC)
    with stepped(timedelta(hours=5)):
        done = one_pass(store, course="lab", engine="skypilot", runner=Runner(fake))
    assert not done.failed, done.failed
    (launch,) = [c for c in fake.calls if c[0] == "launch"]
    left = (ends - REAL_DATETIME.now(UTC)).total_seconds() / 60
    assert abs(launch[2]["idle_minutes_to_autostop"] - left) < 3, (launch[2]["idle_minutes_to_autostop"], left)
    store.close()
