"""A participant's reset of their libvirt seat, carried out by the libvirt engine against a real libvirtd.

Two seats boot TCG guests (tests/vms/guest.py's hand-over guest) whose /init keeps a record on the VM's
own disk (the first 4 KiB: one line per login it has seen) and prints what the disk held before this
boot, then powers off. alice asks for a reset (a request row, as her page makes it); the next pass
gives her VM a fresh overlay of the course's base image: what she wrote is gone, the request is done,
and bob's VM boots on his own disk with his record still on it.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from gpuseat.engines.apply import course_state

from . import guest
from .conftest import require_tool
from .test_libvirtd import daemon, engine, host, store  # noqa: F401 (the same real daemon and course)

# one libvirtd at a time (tests/vms/libvirtd.py locks it): one xdist worker runs them all in turn, instead of
# a second worker waiting on the lock
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(name="libvirtd")]

NAMES = ("gpuseat-reset-seat-01", "gpuseat-reset-seat-02")


def _booted(eng, console) -> dict[str, str]:
    """Wait for both guests to power off; what each printed of its disk (``disk=…``), by domain."""
    doms = [eng.libvirt.lookup(n) for n in NAMES]
    deadline = time.monotonic() + 240
    while any(d.isActive() for d in doms) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(d.isActive() for d in doms), "the guests did not power off within 240 s"
    out = {}
    for name in NAMES:
        log = (console / f"{name}.log").read_text(errors="replace")
        said = [ln for ln in log.splitlines() if ln.startswith(f"{guest.HOLDER} disk=")]
        assert said and f"{guest.HOLDER}-ERROR" not in log, log[-2000:]
        out[name] = said[-1].removeprefix(f"{guest.HOLDER} disk=")
    return out


def test_a_reset_gives_the_participant_a_fresh_disk_and_leaves_the_other_seat_alone(host, daemon, store):  # noqa: F811
    _, work = daemon
    boot = work / "boot-reset"
    boot.mkdir()
    initrd = guest.build_initramfs(boot / "initrd.cpio", init_text=guest.HOLDER_INIT, modules=guest.DISK_MODULES)
    console = work / "console-reset"
    console.mkdir()
    base = work / "base-reset.qcow2"
    subprocess.run([require_tool("qemu-img"), "create", "-q", "-f", "qcow2", str(base), "1G"], check=True)
    eng = engine(store, host, work, "reset", holders=("alice", "bob"), gpu=False, virt_type="qemu",
                 serial_dir=str(console), image=str(base), boot_kernel=str(guest.kernel(boot)),
                 boot_initrd=str(initrd), boot_cmdline="console=ttyS0 quiet loglevel=3 panic=-1")  # fmt: skip
    s = eng.store
    assert not eng.apply(eng.plan(course_state(s, "reset"))).failed
    first = _booted(eng, console)
    assert first == dict.fromkeys(NAMES, "")  # fresh disks; each guest now wrote its login's line on its disk

    asked = s.requests.request_seat("reset", "alice", "reset", actor="alice")
    assert asked.state == "pending"
    changes = eng.plan(course_state(s, "reset"))
    grants = {(x.action, x.target) for x in changes.steps if x.phase == "grant"}
    assert grants == {("domain.reset", NAMES[0]), ("domain.start", NAMES[1])}  # bob's VM just powered off
    report = eng.apply(changes)
    assert not report.failed, [o.message for o in report.failed]
    second = _booted(eng, console)
    assert second[NAMES[0]] == ""  # alice's record is gone with her old disk
    assert second[NAMES[1]].startswith("SHA256:")  # bob's disk kept what his guest wrote

    (done,) = s.requests.seat_requests("reset", participant="alice")
    assert (done.id, done.state) == (asked.id, "done")
    assert done.reason is not None and done.reason.startswith("reset: a fresh disk")
    assert s.requests.seat_requests("reset", participant="bob") == []
