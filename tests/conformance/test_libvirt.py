"""libvirt seats from the participant's side: a seat changes hands on a booted TCG guest.

A private libvirtd (tests/vms/libvirtd.py) boots each seat's VM under TCG with a Debian kernel and a
busybox initramfs whose /init stands in for cloud-init and sshd on the VM's persistent disk
(tests/vms/guest.py ``HOLDER_INIT``): it adds the seed's user and key to the accounts already on
the disk, as cloud-init does on a new instance id (it never removes a former user), and prints every
key the guest accepts. The course lives in a real store; ``vms up``/``status``/``down`` run through
the service the CLI calls. The adversary is the previous holder: after the hand-over their key must
not be accepted, and nothing of theirs may survive on the host.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from gpuseat.render.libvirt import DirectBoot
from gpuseat.services import vms
from gpuseat.services.courses import CourseStore, open_store
from gpuseat.vms.libvirt_host import LibvirtHost

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from vms import guest  # tests/vms: the TCG boot machinery
from vms.conftest import EXAMPLES, SSH_KEYS, layout, public_key, require_tool
from vms.libvirtd import libvirtd, remove_pools

libvirt = pytest.importorskip("libvirt")
pytestmark = pytest.mark.slow
COURSE = "handover"


@dataclass
class Lab:
    uri: str
    work: Path
    host: LibvirtHost
    store: CourseStore
    options: vms.VmOptions
    layout: object


def _fingerprint(who: str) -> str:
    out = subprocess.run(
        [require_tool("ssh-keygen"), "-lf", str(SSH_KEYS / f"{who}.pub")], capture_output=True, text=True, check=True
    )
    return out.stdout.split()[1]


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with libvirtd() as (uri, work):
        boot = work / "boot"
        boot.mkdir()
        initrd = guest.build_initramfs(boot / "holder.gz", init_text=guest.HOLDER_INIT, modules=guest.DISK_MODULES)
        base = work / "base.qcow2"
        subprocess.run([require_tool("qemu-img"), "create", "-q", "-f", "qcow2", str(base), "64M"], check=True)
        (work / "console").mkdir()
        pool = "gpuseat-t" + re.sub(r"[^a-z0-9]", "x", work.name[-8:].lower())
        options = vms.VmOptions(
            connect=uri, image=str(base), disk_gb=1, pool=pool, pool_dir=str(work / "pool"), network=None,
            vcpus=1, memory_mib=256, virt_type="qemu", gpu=False, serial_dir=str(work / "console"),
            boot=DirectBoot(str(guest.kernel(boot)), str(initrd), "console=ttyS0 quiet loglevel=3 panic=-1"),
        )  # fmt: skip
        (work / "roster.csv").write_text(
            "name,email,group,unix_user,ssh_key\n"
            + "".join(f"{n},{n}@example.edu,participants,{n},{public_key(n)}\n" for n in ("alice", "bob"))
        )
        store = open_store(f"sqlite:///{work / 'course.db'}", create=True)
        host = LibvirtHost(uri)
        try:
            store.create_course(EXAMPLES / "course-2016.toml", key=COURSE)
            store.import_roster(COURSE, work / "roster.csv")
            lay = layout("ibm-2xM60.toml", mode="passthrough")
            store.add_seats(COURSE, [{"key": lay.slices[0].name, "kind": "gpu", "engine": "libvirt"}])
            yield Lab(uri, work, host, store, options, lay)
        finally:
            for dom in host.conn.listAllDomains(0):
                if dom.name().startswith(f"gpuseat-{COURSE}-"):
                    if dom.isActive():
                        dom.destroy()
                    dom.undefine()
            for net in host.conn.listAllNetworks(0):
                if net.name().startswith("gpuseat-tnet"):
                    net.undefine()
            host.close()
            store.close()
            remove_pools(uri, "gpuseat-t")


def _fresh(lab: Lab, holder: str) -> str:
    """Start a test from nothing on the host and the seat held by ``holder`` (tests run in any order)."""
    seat = lab.layout.slices[0].name
    vms.down(lab.store, COURSE, lab.uri, delete_disks=True, pool=lab.options.pool, host=lab.host)
    _hand(lab, seat, holder)
    return seat


def _hand(lab: Lab, seat: str, holder: str) -> None:
    """The seat goes to ``holder`` (released from whoever held it; a released seat is requested again)."""
    lab.store.release(COURSE, seat=seat)
    if lab.store.get_seat(COURSE, seat).state in ("released", "failed"):
        lab.store.set_seat_state(COURSE, seat, "requested", reason="test: next holder")
    lab.store.assign(COURSE, holder, seat)


def _boot(lab: Lab, seat: str) -> tuple[vms.SeatResult, dict[str, str]]:
    """``vms up`` for the course, wait for the guest to power off, and what its last boot printed."""
    name = vms.domain_name(COURSE, seat)
    log = lab.work / "console" / f"{name}.log"
    before = log.read_text(errors="replace") if log.exists() else ""
    report = vms.up(lab.store, COURSE, lab.layout, lab.options, lab.host)
    (result,) = report.seats
    dom = lab.host.lookup(name)
    deadline = time.monotonic() + 300
    while dom.isActive() and time.monotonic() < deadline:
        time.sleep(0.5)
    text = log.read_text(errors="replace")[len(before) :]
    lines = dict(
        ln.removeprefix(guest.HOLDER + " ").split("=", 1)
        for ln in text.splitlines()
        if ln.startswith(guest.HOLDER + " ") and "=" in ln
    )
    assert "accepts" in lines, text[-3000:]
    return result, lines


def _disk_text(path: str, work: Path) -> str:
    """The first 4 KiB of a qcow2 overlay as the guest saw them (read on the host)."""
    raw = work / "disk.raw"
    subprocess.run([require_tool("qemu-img"), "convert", "-U", "-O", "raw", path, str(raw)], check=True)
    try:
        with raw.open("rb") as f:
            return f.read(4096).replace(b"\0", b"").decode(errors="replace")
    finally:
        raw.unlink()


def test_a_seat_handed_over_refuses_the_previous_holders_key(lab: Lab) -> None:
    alice_fp, bob_fp = _fingerprint("alice"), _fingerprint("bob")
    seat = _fresh(lab, "alice")
    first, seen = _boot(lab, seat)
    assert first.action == "defined+started", first
    assert seen == {"disk": "", "accepts": alice_fp}
    assert f"AUTH alice {alice_fp}" in _disk_text(first.disk, lab.work)  # her account lives on the VM's disk

    # the hand-over: alice's seat goes to bob
    _hand(lab, seat, "bob")
    second, seen = _boot(lab, seat)
    assert second.action == "handed-over+started", second
    assert "handed over from alice" in second.detail
    assert seen["disk"] == ""  # a fresh overlay of the base image: nothing of alice's
    assert seen["accepts"] == bob_fp  # alice's key is refused; only bob's is accepted
    assert not Path(first.disk).exists() and not Path(first.seed).exists()  # her disk and seed are gone
    assert second.disk != first.disk

    # the same holder again keeps the disk: the overlay is what carries accounts between boots
    third, seen = _boot(lab, seat)
    assert third.disk == second.disk and seen == {"disk": bob_fp, "accepts": bob_fp}


def test_a_hand_deleted_domain_is_not_running_in_the_store_and_down_leaves_no_file(lab: Lab) -> None:
    seat = _fresh(lab, "alice")
    report = vms.up(lab.store, COURSE, lab.layout, replace(lab.options, start=False), lab.host)
    assert not report.failed, report
    name = vms.domain_name(COURSE, seat)
    lab.store.set_seat_state(COURSE, seat, "running", reason="test: as if the guest had booted", connect="ssh x@y")
    dom = lab.host.lookup(name)
    if dom.isActive():
        dom.destroy()
    dom.undefine()  # by hand, outside gpuseat
    status = vms.status(lab.store, COURSE, lab.uri, lab.host)
    assert {r.seat: r.state for r in status.seats} == {seat: "absent"}
    row = lab.store.get_seat(COURSE, seat)
    assert row.state == "failed" and not row.connect and "domain is gone" in (row.state_reason or "")

    pool_dir = Path(lab.options.pool_dir or "")
    assert any(pool_dir.iterdir())  # the disk and the seed are still there
    plain = vms.down(lab.store, COURSE, lab.uri, pool=lab.options.pool, host=lab.host)
    assert [r.action for r in plain.seats] == ["cleaned"] and "seed deleted" in plain.seats[0].detail
    assert [p.suffix for p in pool_dir.iterdir()] == [".qcow2"]  # a plain down keeps only the disk
    full = vms.down(lab.store, COURSE, lab.uri, delete_disks=True, pool=lab.options.pool, host=lab.host)
    assert "disk deleted" in full.seats[0].detail
    assert list(pool_dir.iterdir()) == []  # no disk, no seed ISO (user names and keys) left


def test_the_mac_is_stable_per_seat_across_a_hand_over(lab: Lab) -> None:
    """A defined (not started) network is enough for libvirt to validate the NIC."""
    seat = _fresh(lab, "alice")
    net = "gpuseat-tnet" + str(os.getpid() % 10000)
    network = lab.host.conn.networkDefineXML(
        f"<network><name>{net}</name><bridge name='gs{os.getpid() % 100000}'/></network>"
    )
    try:
        opts = replace(lab.options, network=net, start=False)
        vms.up(lab.store, COURSE, lab.layout, opts, lab.host)
        name = vms.domain_name(COURSE, seat)
        mac = re.search(r"<mac address='([0-9a-f:]+)'", lab.host.lookup(name).XMLDesc(0))
        assert mac and mac.group(1) == vms.seat_mac(COURSE, seat)
        _hand(lab, seat, "bob")
        moved = vms.up(lab.store, COURSE, lab.layout, opts, lab.host)
        assert moved.seats[0].action == "handed-over"
        again = re.search(r"<mac address='([0-9a-f:]+)'", lab.host.lookup(name).XMLDesc(0))
        assert again and again.group(1) == mac.group(1)
        assert re.search(r"<console type='pty'>", lab.host.lookup(name).XMLDesc(0))  # virsh console works
    finally:
        vms.down(lab.store, COURSE, lab.uri, delete_disks=True, pool=lab.options.pool, host=lab.host)
        network.undefine()
    assert net not in [n.name() for n in lab.host.conn.listAllNetworks(0)]


def test_libvirt_engine_provision_probe_revoke_teardown(lab: Lab) -> None:
    """LibvirtEngine on the real daemon: the probe key is authorised in the seed, a VM without an
    address is not ready, revoke powers the VM off and deletes the seed, teardown leaves nothing."""
    from gpuseat.services.engine import load_engine

    key = lab.work / "probe_key"
    if not key.exists():
        subprocess.run([require_tool("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    seat_key = _fresh(lab, "alice")
    settings = dict(
        connect=lab.uri, inventory=str(EXAMPLES / "ibm-2xM60.toml"), mode="passthrough", image=lab.options.image,
        pool=lab.options.pool, pool_dir=lab.options.pool_dir, network="", virt_type="qemu", vcpus="1",
        memory_mib="128", disk_gb="1", gpu="no", probe_key=str(key),
    )  # fmt: skip
    engine = load_engine("libvirt", lab.store, COURSE, **settings)  # type: ignore[arg-type]
    seat = lab.store.get_seat(COURSE, seat_key)
    alice = next(p for p in lab.store.participants(COURSE) if p.key == "alice")
    name = vms.domain_name(COURSE, seat_key)
    try:
        assert engine.provision(seat, alice) is None  # no network here: no address to connect to yet
        assert lab.host.lookup(name).isActive()
        pool_dir = Path(lab.options.pool_dir or "")
        (seed,) = [p for p in pool_dir.iterdir() if "cidata" in p.name]
        text = seed.read_bytes().decode(errors="replace")
        assert public_key("alice") in text and (key.with_name("probe_key.pub").read_text().strip()) in text
        seen = engine.probe(seat, alice)
        assert not seen.ready and "no address" in (seen.reason or "") and seen.engine == "libvirt"
        engine.revoke(seat, alice)
        assert not lab.host.lookup(name).isActive()
        assert not [p for p in pool_dir.iterdir() if "cidata" in p.name]  # her login is gone with the seed
    finally:
        engine.teardown(seat)
    assert lab.host.lookup(name) is None
    assert list(Path(lab.options.pool_dir or "").iterdir()) == []
