"""The roster changes after day one and a cloud seat follows, seen from the participant's and the adversary's
side: the SkyPilot engine at its SDK boundary (the recording fake of ``sky``), the store for real, and the
cluster a throw-away root (``useradd --prefix``, tests/cloud/skysetup.py) on which each launch's setup runs
as SkyPilot runs it, and each ``ssh`` line of the engine as sshd hands it to the login shell.

* a new ``ssh_key`` in the roster: the up cluster is launched again (its setup re-run, the same cluster and
  disk: no second machine), the new key is the only one its holder's account accepts, the old one is refused;
* a new ``unix_user``: the old login is taken out first (``account.revoke``: its key removed, the account
  expired), then the same cluster is launched for the new login; a second plan is empty.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuseat.core.roster import RosterText
from gpuseat.engines.apply import one_pass

from .fakesky import FakeSky, installed_sky  # noqa: F401 (the real_sky fixture)
from .skysetup import Vm, new_vm, ssh_key
from .test_skypilot_engine import EXAMPLES, OPEN, Runner, _lab, empty_plan, steps

pytestmark = pytest.mark.slow


class OnTheCluster(Runner):
    """The engine's ``ssh CLUSTER LINE`` run by a local shell against the cluster's throw-away root."""

    def __init__(self, fake: FakeSky, vm: Vm) -> None:
        super().__init__(fake)
        self.vm = vm

    def _execute(self, args, timeout, user, env, input, cwd):
        if args[0] != "ssh" or args[-2] != "gs-lab-cloud-1":
            return super()._execute(args, timeout, user, env, input, cwd)
        self.fake.timeline.append(f"ssh {args[-2]} {args[-1][:60]}")
        return subprocess.run(["sh", "-c", args[-1]], env=self.vm.env(), capture_output=True, text=True, check=False)


@pytest.fixture
def seat(tmp_path, monkeypatch, real_sky):
    """Ann's cluster up (its setup run on the throw-away root): the store, the fake, the cluster, ann's key."""
    if os.geteuid() != 0:
        pytest.skip("useradd --prefix needs root (CI runs as root)")
    gen = _lab(tmp_path, monkeypatch, real_sky, EXAMPLES / "course-lab-hours.toml")
    store, fake, _url = next(gen)
    vm = new_vm(tmp_path / "vm", Path(sys.executable).parent)
    passed = launched(store, fake, vm)
    assert steps(passed)[:2] == ["cloud.launch gs-lab-cloud-1", "seat.record cloud-1"], steps(passed)
    yield store, fake, vm, (tmp_path / "ann_key.pub").read_text().strip()
    gen.close()


def launched(store, fake: FakeSky, vm: Vm) -> Any:
    """One pass of the agent; each cluster it launches runs its (new) setup, as SkyPilot does."""
    before = len(fake.launched())
    done = _pass(store, fake, vm)
    for task in fake.launched()[before:]:
        made = vm.setup(task)
        assert made.returncode == 0, made.stdout + made.stderr
    return done


def _pass(store, fake: FakeSky, vm: Vm) -> Any:
    done = one_pass(store, course="lab", engine="skypilot", runner=OnTheCluster(fake, vm), now=OPEN)
    assert not done.failed, done.failed
    return done


def reimport(store, tmp_path: Path, *, login: str = "ann", key: str) -> None:
    roster = f"name,email,group,unix_user,ssh_key\nAnn,ann@example.edu,students,{login},{key}\n"
    store.roster.import_roster("lab", RosterText(roster, where="roster.csv"))


def keys_of(vm: Vm, login: str) -> list[str] | None:
    """The keys ``login`` may log in with on the cluster (None: no keys file)."""
    path = vm.root / "home" / login / ".ssh" / "authorized_keys"
    return path.read_text().splitlines() if path.exists() else None


def test_a_new_ssh_key_reaches_the_up_cluster_and_the_old_one_is_refused(seat, tmp_path):
    store, fake, vm, old = seat
    assert keys_of(vm, "ann") == [old]
    new = ssh_key(tmp_path, "ann-laptop")
    reimport(store, tmp_path, key=new)
    fake.calls.clear()
    done = launched(store, fake, vm)
    assert "cloud.launch gs-lab-cloud-1" in steps(done), steps(done)
    assert fake.verbs() == ["launch gs-lab-cloud-1"]  # the same cluster, its setup re-run: no second machine
    assert fake.clusters["gs-lab-cloud-1"]["disk"] == "disk-1"
    assert keys_of(vm, "ann") == [new]  # the old key is refused, the new one accepted
    assert vm.shadow("ann")[7] == ""
    assert empty_plan(store, fake, OPEN)


def test_a_new_unix_user_takes_the_old_login_out_on_the_same_cluster(seat, tmp_path):
    store, fake, vm, key = seat
    reimport(store, tmp_path, login="ann2", key=key)
    fake.calls.clear()
    fake.timeline.clear()
    done = launched(store, fake, vm)
    assert steps(done)[:3] == ["account.revoke ann", "cloud.launch gs-lab-cloud-1", "seat.record cloud-1"], steps(done)
    order = [t for t in fake.timeline if not t.startswith(("sky.get", "sky.status"))]
    assert order[0].startswith("ssh gs-lab-cloud-1 bash -c") and order[-1] == "sky.launch gs-lab-cloud-1", order
    assert fake.verbs() == ["launch gs-lab-cloud-1"] and fake.clusters["gs-lab-cloud-1"]["disk"] == "disk-1"
    # the old login: no key, its account expired (sshd refuses every key); its home stays, for her files
    assert keys_of(vm, "ann") is None and vm.shadow("ann")[7] == "1"
    assert (vm.root / "home" / "ann").is_dir()
    # the new login: in with her key
    assert keys_of(vm, "ann2") == [key] and vm.shadow("ann2")[7] == ""
    access = store.delivery.access_of("lab")["cloud-1"]
    assert (access["user"], access["command"]) == ("ann2", f"ssh ann2@{access['host']}"), access
    assert store.seats.get_seat("lab", "cloud-1").participant == access["holder"]
    assert empty_plan(store, fake, OPEN)


def test_a_key_taken_out_of_the_roster_is_refused_on_the_cluster(seat, tmp_path):
    """A leaked key the organizer removes (an empty ssh_key cell) before the participant sends a new one."""
    store, fake, vm, _old = seat
    reimport(store, tmp_path, key="")
    done = launched(store, fake, vm)
    assert "cloud.launch gs-lab-cloud-1" in steps(done), steps(done)
    assert not keys_of(vm, "ann")  # no key lets anyone in as ann
    assert empty_plan(store, fake, OPEN)
