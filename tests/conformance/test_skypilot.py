"""Cloud seats from the participant's side, as the adversary, without a cloud: a generated setup and the
engine's remote commands run against a throw-away root (``useradd --prefix``), the remote line of each
``ssh`` executed by a local shell as sshd would hand it to one.

* hostile roster values (a user name with a ``;``, a key with a line break or a ``$(…)`` comment) are
  refused or reach the VM as data, never as code;
* the holder's key is the only one in their ``authorized_keys``; a hand-over (the engine's
  ``account.revoke`` step over ssh, and the new holder's setup) takes the previous holder's key away and
  expires their account;
* the probe runs ``nvidia-smi -L`` as the participant, at the seat's stored address; what a real driver
  lists (one GPU, or a whole MIG set) is judged by the one readiness rule; a hostile user name never becomes
  part of the remote line; a seat not launched is not probed and says so.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from cloud.skysetup import Vm, new_vm, ssh_key
from gpuseat.catalog.bundle import load_catalog
from gpuseat.core.roster import RosterText
from gpuseat.engines import registry
from gpuseat.engines.base import Changes, Step
from gpuseat.engines.runner import RecordingRunner
from gpuseat.engines.skypilot import tasks as cloud
from gpuseat.engines.skypilot.engine import SkyPilotEngine, revoke_script
from gpuseat.errors import InputError
from gpuseat.store import open_store

pytestmark = pytest.mark.slow
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
OFFER = next(o for o in load_catalog().offers if o.id == "aws:g4dn.xlarge")
OPTION = {
    "rank": 1,
    "offers": [{"offer": "aws:g4dn.xlarge", "count": 2}],
    "groups": [{"group": "students", "offer": "aws:g4dn.xlarge", "units": 2, "seats": 2}],
}


def listing(name: str) -> str:
    """The ``nvidia-smi -L`` section of a real capture."""
    lines = (FIXTURES / name).read_text(encoding="utf-8").splitlines()
    i = lines.index("# capabilities :: list (-L)") + 1
    while lines[i].startswith("#"):
        i += 1
    out = []
    while i < len(lines) and not lines[i].startswith("####"):
        out.append(lines[i])
        i += 1
    return "\n".join(out).strip() + "\n"


@pytest.fixture
def vm(tmp_path) -> Vm:
    if os.geteuid() != 0:
        pytest.skip("useradd --prefix needs root (CI runs as root)")
    return new_vm(tmp_path / "vm", Path(sys.executable).parent)


def setup_for(vm: Vm, user: str, key: str) -> subprocess.CompletedProcess[str]:
    seat = cloud.CloudSeat("lab", "cloud-1", OFFER, user=user, ssh_key=key)
    return vm.setup(cloud.task(seat, cloud.TaskOptions()))


@pytest.mark.parametrize("user", ["ann;touch /tmp/x", "Ann", "-rf", "a" * 40, "ann\n", "$(id)"])
def test_hostile_user_names_are_refused(user):
    with pytest.raises(InputError, match="Unix user name"):
        cloud.CloudSeat("lab", "s1", OFFER, user=user, ssh_key=None)
    runner = RecordingRunner()
    engine = SkyPilotEngine(None, "lab", runner=runner)  # type: ignore[arg-type]
    with pytest.raises(InputError):
        engine.probe_command("gs-lab-s1", user)
    assert not runner.log
    with pytest.raises(InputError):
        revoke_script(user)


def test_hostile_keys_are_refused_or_stay_data(vm, tmp_path):
    good = ssh_key(tmp_path, "ann")
    for bad in (good + "\nssh-ed25519 AAAA evil", "not a key", good.split()[1]):
        with pytest.raises(InputError):
            cloud.CloudSeat("lab", "s1", OFFER, user="ann", ssh_key=bad)
    marker = tmp_path / "PWNED"
    sneaky = f"{' '.join(good.split()[:2])} $(touch {marker})`touch {marker}`"
    done = setup_for(vm, "ann", sneaky)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    assert (vm.root / "home" / "ann" / ".ssh" / "authorized_keys").read_text().strip() == sneaky


def test_only_the_holders_key_and_a_hand_over_locks_the_previous_holder_out(vm, tmp_path):
    ann, bob = ssh_key(tmp_path, "ann"), ssh_key(tmp_path, "bob")
    keys = vm.root / "home" / "ann" / ".ssh" / "authorized_keys"
    assert setup_for(vm, "ann", ann).returncode == 0
    keys.write_text(keys.read_text() + "ssh-ed25519 AAAAplanted intruder\n")  # planted by ann herself
    assert setup_for(vm, "ann", ann).returncode == 0  # the next sky launch
    assert keys.read_text().splitlines() == [ann]
    assert setup_for(vm, "bob", bob).returncode == 0  # the seat moved to bob
    assert not keys.exists() and vm.shadow("ann")[7] == "1"
    assert (vm.root / "home" / "bob" / ".ssh" / "authorized_keys").read_text().splitlines() == [bob]
    assert setup_for(vm, "ann", ann).returncode == 0  # and back: ann in, bob out
    assert vm.shadow("ann")[7] == "" and vm.shadow("bob")[7] == "1"
    assert not (vm.root / "home" / "bob" / ".ssh" / "authorized_keys").exists()


@pytest.fixture
def course(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'course.db'}", create=True)
    store.courses.create_course(
        EXAMPLES / "course-lab-hours.toml", key="lab", timezone="Europe/Berlin", plan_option=OPTION
    )
    key = ssh_key(tmp_path, "ann")
    roster = f"name,email,group,unix_user,ssh_key\nAnn,ann@example.edu,students,ann,{key}\n"
    store.roster.import_roster("lab", RosterText(roster, where="roster.csv"))
    store.seats.add_seats("lab", [{"key": "cloud-1", "kind": "cloud"}])
    store.seats.assign("lab", "ann", "cloud-1")
    yield store, key
    store.close()


class OverSsh(RecordingRunner):
    """What sshd does with the remote line: hand it to the login shell (here: a local ``sh -c`` in the VM's env)."""

    def __init__(self, vm: Vm) -> None:
        super().__init__()
        self.vm = vm
        self.calls: list[tuple[str, ...]] = []

    def _execute(self, args, timeout, user, env, input, cwd):
        self.calls.append(args)
        assert args[0] == "ssh" and args[-2] == "gs-lab-cloud-1"
        return subprocess.run(["sh", "-c", args[-1]], env=self.vm.env(), capture_output=True, text=True, check=False)


def test_the_hand_over_revoke_runs_on_the_vm_as_its_shell_reads_it(course, vm):
    store, key = course
    assert setup_for(vm, "ann", key).returncode == 0
    runner = OverSsh(vm)
    engine = registry.build("skypilot", store, "lab", runner=runner)
    step = Step("skypilot", "account.revoke", "ann", "ann released cloud-1", "revoke", None, ("cloud-1",), None,
                {"cluster": "gs-lab-cloud-1", "login": "ann"})  # fmt: skip
    report = engine.apply(Changes("skypilot", "lab", steps=[step]))
    assert [o.state for o in report.outcomes] == ["done"], report.to_dict()
    assert not (vm.root / "home" / "ann" / ".ssh" / "authorized_keys").exists()
    assert vm.shadow("ann")[7] == "1"
    assert shlex.split(runner.calls[0][-1])[:2] == ["bash", "-c"]
    again = engine.apply(Changes("skypilot", "lab", steps=[step]))  # idempotent: a user already gone is fine
    assert [o.state for o in again.outcomes] == ["done"]


def test_a_previous_holder_is_refused_only_once_revoked(course, vm, tmp_path):
    """Exclusivity (``seats check``): ann's key and account on the cluster are seen until the revoke."""
    from gpuseat.core.readiness import Access

    store, key = course
    assert setup_for(vm, "ann", key).returncode == 0
    store.seats.release("lab", participant="ann")
    store.roster.import_roster("lab", RosterText(f"name,email,group,unix_user,ssh_key\nBob,bob@example.edu,students,bob,"
                                          f"{ssh_key(tmp_path, 'bob')}\n", where="roster.csv"))  # fmt: skip
    store.seats.assign("lab", "bob", "cloud-1")
    store.delivery.record_delivery(
        "lab", "cloud-1", access=Access(kind="ssh", host="54.12.3.4", user="bob", holder="bob")
    )
    runner = OverSsh(vm)
    engine = SkyPilotEngine(store, "lab", runner=runner)
    ann = store.roster.find_participant("lab", "ann")
    assert engine.refused(ann) == "ann still has a key and an unexpired account on gs-lab-cloud-1"
    step = Step("skypilot", "account.revoke", "ann", "ann released cloud-1", "revoke", None, ("cloud-1",), None,
                {"cluster": "gs-lab-cloud-1", "login": "ann"})  # fmt: skip
    assert [o.state for o in engine.apply(Changes("skypilot", "lab", steps=[step])).outcomes] == ["done"]
    assert engine.refused(ann) is None
    assert all("HostName=54.12.3.4" in c for c in runner.calls if "gpuseat-check" in c[-1])


def _with_access(store, host: str = "54.12.3.4") -> None:
    """The way in the engine records once ann's cluster is up."""
    from gpuseat.core.readiness import Access

    access = Access(kind="ssh", host=host, user="ann", command=f"ssh ann@{host}", holder="ann")
    store.delivery.record_delivery(
        "lab", "cloud-1", access=access, state="running", reason="running: cluster gs-lab-cloud-1 is up"
    )


@pytest.mark.parametrize(
    ("capture", "seat_uuid", "state", "why"),
    [
        ("nvidia_gpu_exporter__linux-x86_64__nvidia-l40s__595.80.txt", None, "ready", None),
        ("nvidia_gpu_exporter__linux-x86_64__nvidia-l40s__595.80.txt", "GPU-00000000-0000-0000-0000-000000000000",
         "ready", None),
        ("nvidia_gpu_exporter__linux-x86_64__nvidia-l40s__595.80.txt", "GPU-11111111-0000-0000-0000-000000000000",
         "broken", "not the seat's"),
        ("nvidia_gpu_exporter__linux-x86_64__nvidia-h100-mig__590.48.01.txt", None, "broken", "4 GPUs visible"),
    ],
)  # fmt: skip
def test_the_probe_runs_as_the_participant_and_judges_what_the_driver_lists(course, capture, seat_uuid, state, why):
    store, _ = course
    _with_access(store)
    runner = RecordingRunner(answers={("ssh",): (0, listing(capture), "")})
    engine = SkyPilotEngine(store, "lab", runner=runner)
    seat = store.seats.get_seat("lab", "cloud-1")
    seat = dataclasses.replace(seat, device_uuid=seat_uuid)  # what the store knows of the seat's device
    got = engine.probe(seat, store.roster.find_participant("lab", "ann"))
    assert [r.argv for r in runner.take()] == [("ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=30",
                                                "-o", "HostName=54.12.3.4", "gs-lab-cloud-1",
                                                "sudo -n -u ann -- nvidia-smi -L")]  # fmt: skip
    assert got.state == state and (why is None or why in (got.reason or "")), got
    assert got.engine == "skypilot" and got.participant == "ann"


def test_a_failed_probe_is_broken_with_the_remote_error(course):
    store, _ = course
    _with_access(store)
    refused = (255, "", "ssh: connect to host 54.12.3.4 port 22: Connection refused")
    runner = RecordingRunner(answers={("ssh",): refused})
    got = SkyPilotEngine(store, "lab", runner=runner).probe(
        store.seats.get_seat("lab", "cloud-1"), store.roster.find_participant("lab", "ann")
    )
    assert got.state == "broken" and "Connection refused" in (got.reason or "")


def test_a_seat_not_launched_is_not_probed_and_says_so(course):
    store, _ = course
    runner = RecordingRunner()
    got = SkyPilotEngine(store, "lab", runner=runner).probe(
        store.seats.get_seat("lab", "cloud-1"), store.roster.find_participant("lab", "ann")
    )
    assert got.state == "broken" and (got.reason or "").startswith("not launched yet"), got
    assert not runner.log  # never "Could not resolve hostname gs-lab-cloud-1"
