"""``vms up`` against a real libvirtd (QEMU driver): define, the VFIO error, the pre-flight, a TCG boot.

This machine has no GPU and no usable KVM for stock kernels (platform.md B2), so a passthrough seat's
start must fail with libvirt's own error, reported as one message naming the seat and the fix; and
two GPU-less seats boot under TCG (``type='qemu'``) a Debian kernel with a busybox initramfs that
prints, from the seed gpuseat attached, the seat's hostname and the participant's key fingerprint.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import libvirt
import pytest

from gpuseat.engines import registry
from gpuseat.engines.apply import course_state
from gpuseat.engines.libvirt.libvirt_host import LibvirtHost
from gpuseat.engines.runner import Runner
from gpuseat.errors import EngineError
from gpuseat.store import open_store

from . import guest
from .conftest import EXAMPLES, SSH_KEYS, public_key, require_tool
from .libvirtd import remove_pools, shared_libvirtd

# one libvirtd at a time (tests/vms/libvirtd.py locks it): one xdist worker runs them all in turn, instead of
# a second worker waiting on the lock
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(name="libvirtd")]


def _doctor_trees():
    path = Path(__file__).resolve().parents[1] / "doctor" / "doctor_trees.py"
    spec = importlib.util.spec_from_file_location("gpuseat_test_doctor_trees", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def daemon(pytestconfig):
    return shared_libvirtd(pytestconfig)  # one daemon for every libvirtd module of this run


@pytest.fixture
def host(daemon):
    uri, _ = daemon
    h = LibvirtHost(uri)
    yield h
    for dom in h.conn.listAllDomains(0):
        if dom.name().startswith("gpuseat-"):
            if dom.isActive():
                dom.destroy()
            dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_NVRAM)
    h.close()
    remove_pools(uri, "gpuseat-t")  # no pool (and no autostart link) outlives the test


@pytest.fixture
def store(tmp_path):
    """A course per test (its key is the test's token): alice and bob hold the M60 server's first two seats."""
    s = open_store(f"sqlite:///{tmp_path / 'course.db'}", create=True)
    roster = tmp_path / "roster.csv"
    roster.write_text(
        "name,email,group,unix_user,ssh_key\n"
        + "".join(f"{n},{n}@example.edu,participants,{n},{public_key(n)}\n" for n in ("alice", "bob"))
    )
    yield s, roster
    s.close()


def engine(store, host, work: Path, course: str, *, holders=("alice",), **settings):
    """The libvirt engine for ``course`` on the real daemon (``holders`` hold seat-01, seat-02 …)."""
    s, roster = store
    s.courses.create_course(EXAMPLES / "course-2016.toml", key=course)
    s.roster.import_roster(course, roster)
    s.seats.add_seats(course, [{"key": f"seat-0{i}", "kind": "gpu", "engine": "libvirt"} for i in (1, 2, 3, 4)])
    for i, who in enumerate(holders, start=1):
        s.seats.assign(course, who, f"seat-0{i}")
    values = {"connect": host.uri, "inventory": str(EXAMPLES / "ibm-2xM60.toml"), "network": "none", "vcpus": 1,
              "memory_mib": 256, "pool": f"gpuseat-t{course}", "pool_dir": str(work / f"pool-{course}"), "disk_gb": 1,
              **settings}  # fmt: skip
    eng = registry.build("libvirt", s, course, settings=values, runner=Runner())
    eng.use(host)  # type: ignore[attr-defined]
    return eng


def test_define_succeeds_and_a_passthrough_start_fails_with_one_clear_message(host, daemon, store):
    _, work = daemon
    eng = engine(store, host, work, "vfio", preflight=False)
    changes = eng.plan(course_state(eng.store, "vfio"))
    report = eng.apply(changes)
    (failed,) = report.failed
    assert failed.step.action == "domain.create" and failed.exit_code == 1
    message = failed.message
    assert message.startswith("seat seat-01 on qemu:///system")
    assert "libvirt failed starting the VM" in message
    assert re.search(r"host doesn't support (VFIO PCI passthrough|passthrough of host PCI devices)", message)
    assert "To fix:" in message and "gpuseat doctor --for passthrough" in message
    assert "\n" not in message.split("\nTo fix: ")[0]  # what went wrong is one line
    skipped = [o for o in report.outcomes if o.state == "skipped"]
    assert [o.step.action for o in skipped] == ["seat.record"]  # a failed grant blocks the seat's record
    dom = host.lookup("gpuseat-vfio-seat-01")
    assert host.state(dom) == "shut off"  # defined: libvirt accepted (and validated) the domain
    xml = ET.fromstring(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
    assert xml.find("devices/hostdev/source/address").get("bus") == "0x86"


def test_preflight_stops_before_defining_anything(host, daemon, store, tmp_path):
    _, work = daemon
    trees = _doctor_trees()
    broken = trees.replace(trees.HEALTHY_VFIO, cmdline="BOOT_IMAGE=/vmlinuz ro quiet", iommu_units=(), groups={})
    root = trees.write_host(tmp_path / "broken", broken)
    eng = engine(store, host, work, "pre", holders=("alice", "bob"), doctor_root=str(root))
    with pytest.raises(EngineError) as exc:
        eng.plan(course_state(eng.store, "pre"))
    text = exc.value.message
    assert "nothing was defined" in text and "iommu" in text.lower() and "intel_iommu=on" in text
    assert host.lookup("gpuseat-pre-seat-01") is None
    ready = trees.write_host(tmp_path / "ready", trees.HEALTHY_VFIO)
    eng.settings = eng.settings.model_copy(update={"doctor_root": str(ready), "start": False})
    eng.__dict__.pop("options", None)  # settings changed: the options again
    report = eng.apply(eng.plan(course_state(eng.store, "pre")))
    assert [o.step.action for o in report.done] == ["domain.create", "domain.create", "seat.record", "seat.record"]
    assert host.state(host.lookup("gpuseat-pre-seat-01")) == "shut off"


def test_two_seats_boot_under_tcg_and_print_their_hostname_and_key(host, daemon, store):
    _, work = daemon
    boot_dir = work / "boot"
    boot_dir.mkdir()
    initrd = guest.build_initramfs(boot_dir / "initrd.cpio")
    console = work / "console"
    console.mkdir()
    base = work / "base.qcow2"
    subprocess.run([require_tool("qemu-img"), "create", "-q", "-f", "qcow2", str(base), "1G"], check=True)
    eng = engine(store, host, work, "boot", holders=("alice", "bob"), gpu=False, virt_type="qemu",
                 serial_dir=str(console), image=str(base), boot_kernel=str(guest.kernel(boot_dir)),
                 boot_initrd=str(initrd), boot_cmdline="console=ttyS0 quiet loglevel=3 panic=-1")  # fmt: skip
    changes = eng.plan(course_state(eng.store, "boot"))
    report = eng.apply(changes)
    assert not report.failed and not any("cannot upload" in (o.message or "") for o in report.outcomes)
    names = ("gpuseat-boot-seat-01", "gpuseat-boot-seat-02")
    doms = [host.lookup(n) for n in names]
    # each VM's disk is a real qcow2 overlay on the base image
    disk = ET.fromstring(doms[0].XMLDesc(0)).find("devices/disk[@device='disk']/source").get("file")
    info = subprocess.run(
        [require_tool("qemu-img"), "info", "-U", "--output=json", disk], capture_output=True, text=True, check=True
    ).stdout
    assert str(base) in info
    deadline = time.monotonic() + 240
    while any(d.isActive() for d in doms) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(d.isActive() for d in doms), "the guests did not power off within 240 s"
    for who, seat, name in zip(("alice", "bob"), ("seat-01", "seat-02"), names, strict=True):
        log = (console / f"{name}.log").read_text(errors="replace")
        line = next((ln for ln in log.splitlines() if ln.startswith(guest.MARKER)), None)
        assert line is not None, log[-2000:]
        want = subprocess.run(
            [require_tool("ssh-keygen"), "-lf", str(SSH_KEYS / f"{who}.pub")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()[1]
        assert line == f"{guest.MARKER} label=cidata hostname={seat} fingerprint={want}"
    # the VMs powered themselves off: the next apply starts each holder's VM again (level-triggered)
    again = eng.plan(course_state(eng.store, "boot"))
    assert {(s.action, s.target) for s in again.steps if s.phase == "grant"} == {("domain.start", n) for n in names}
    # the course is deleted: domains, disks and seeds go
    from dataclasses import replace

    gone = eng.plan(replace(course_state(eng.store, "boot"), course=None))
    assert {s.action for s in gone.steps} == {"domain.remove"}
    assert not eng.apply(gone).failed
    assert all(host.lookup(n) is None for n in names)
    assert list((work / "pool-boot").iterdir()) == []
