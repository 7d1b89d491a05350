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

from gpuseat.errors import EngineError
from gpuseat.render.libvirt import DirectBoot
from gpuseat.services.vms import VmOptions, VmSeat, down_seats, up_seats
from gpuseat.vms.libvirt_host import LibvirtHost

from . import guest
from .conftest import SSH_KEYS, layout, public_key, require_tool
from .libvirtd import libvirtd, remove_pools

pytestmark = pytest.mark.slow


def _doctor_trees():
    path = Path(__file__).resolve().parents[1] / "doctor" / "doctor_trees.py"
    spec = importlib.util.spec_from_file_location("gpuseat_test_doctor_trees", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def daemon():
    with libvirtd() as running:
        yield running


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


def options(work: Path, **kw) -> VmOptions:
    base = dict(
        connect="real",
        network=None,
        vcpus=1,
        memory_mib=256,
        pool=f"gpuseat-t{work.name[-8:].lower()}",
        pool_dir=str(work / "pool"),
        disk_gb=1,
    )
    base["pool"] = re.sub(r"[^a-z0-9-]", "x", base["pool"])
    return VmOptions(**{**base, **kw})


def seats(lay, people=("alice", "bob")):
    return [VmSeat(s.name, s, who, who, (public_key(who),)) for s, who in zip(lay.slices, people, strict=False)]


def test_define_succeeds_and_a_passthrough_start_fails_with_one_clear_message(host, daemon):
    _, work = daemon
    lay = layout("ibm-2xM60.toml", mode="passthrough")
    report = up_seats("vfio", lay, seats(lay)[:1], options(work, preflight=False), host)
    (result,) = report.seats
    assert result.action == "failed"
    assert result.state == "shut off"  # defined: libvirt accepted (and validated) the domain
    message = result.detail
    assert message.startswith("seat seat-01 on qemu:///system")
    assert "libvirt failed starting the VM" in message
    assert re.search(r"host doesn't support (VFIO PCI passthrough|passthrough of host PCI devices)", message)
    assert "To fix:" in message and "gpuseat doctor --for passthrough" in message
    assert "\n" not in message.split("\nTo fix: ")[0]  # what went wrong is one line
    dom = host.lookup("gpuseat-vfio-seat-01")
    xml = ET.fromstring(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
    assert xml.find("devices/hostdev/source/address").get("bus") == "0x86"


def test_preflight_stops_before_defining_anything(host, daemon, tmp_path):
    _, work = daemon
    trees = _doctor_trees()
    broken = trees.replace(trees.HEALTHY_VFIO, cmdline="BOOT_IMAGE=/vmlinuz ro quiet", iommu_units=(), groups={})
    root = trees.write_host(tmp_path / "broken", broken)
    lay = layout("ibm-2xM60.toml", mode="passthrough")
    with pytest.raises(EngineError) as exc:
        up_seats("pre", lay, seats(lay), options(work, doctor_root=root), host)
    text = exc.value.message
    assert "nothing was defined" in text and "iommu" in text.lower() and "intel_iommu=on" in text
    assert host.lookup("gpuseat-pre-seat-01") is None
    ready = trees.write_host(tmp_path / "ready", trees.HEALTHY_VFIO)
    report = up_seats("pre", lay, seats(lay)[:1], options(work, doctor_root=ready, start=False), host)
    assert report.seats[0].action == "defined"
    assert {c["status"] for c in report.preflight} <= {"ok", "warn", "skip"}


def test_two_seats_boot_under_tcg_and_print_their_hostname_and_key(host, daemon):
    _, work = daemon
    boot_dir = work / "boot"
    boot_dir.mkdir()
    initrd = guest.build_initramfs(boot_dir / "initrd.gz")
    console = work / "console"
    console.mkdir()
    base = work / "base.qcow2"
    subprocess.run([require_tool("qemu-img"), "create", "-q", "-f", "qcow2", str(base), "1G"], check=True)
    lay = layout("ibm-2xM60.toml", mode="passthrough")
    opts = options(
        work,
        gpu=False,
        virt_type="qemu",
        serial_dir=str(console),
        image=str(base),
        boot=DirectBoot(str(guest.kernel(boot_dir)), str(initrd), "console=ttyS0 quiet loglevel=3 panic=-1"),
    )
    report = up_seats("boot", lay, seats(lay), opts, host)
    assert [r.action for r in report.seats] == ["defined+started", "defined+started"], report
    assert not any("cannot upload" in n for n in report.notes)  # the real daemon received the seeds
    # each VM's disk is a real qcow2 overlay on the base image
    info = subprocess.run(
        [require_tool("qemu-img"), "info", "-U", "--output=json", report.seats[0].disk],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(base) in info
    doms = [host.lookup(r.domain) for r in report.seats]
    deadline = time.monotonic() + 240
    while any(d.isActive() for d in doms) and time.monotonic() < deadline:
        time.sleep(0.5)
    for who, r in zip(("alice", "bob"), report.seats, strict=True):
        log = (console / f"{r.domain}.log").read_text(errors="replace")
        line = next((ln for ln in log.splitlines() if ln.startswith(guest.MARKER)), None)
        assert line is not None, log[-2000:]
        want = subprocess.run(
            [require_tool("ssh-keygen"), "-lf", str(SSH_KEYS / f"{who}.pub")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()[1]
        assert line == f"{guest.MARKER} label=cidata hostname={r.seat} fingerprint={want}"
    down = down_seats("boot", "real", delete_disks=True, pool_name=opts.pool, host=host)
    assert all("disk deleted" in r.detail for r in down.seats)
