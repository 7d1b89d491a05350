"""``vms up/down/status`` against libvirt's own test driver: a private in-memory host per test.

The XML is validated by libvirt itself (``VIR_DOMAIN_DEFINE_VALIDATE``), and what libvirt stores is
read back: hostdevs, disks, the seed CD-ROM, the owner metadata.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace

import libvirt
import pytest

from gpuseat.errors import EngineError, InputError
from gpuseat.render.libvirt import METADATA_NS
from gpuseat.services.vms import Login, VmOptions, VmSeat, down_seats, seat_mac, status_seats, up_seats

from .conftest import layout, public_key

OPTIONS = VmOptions(connect="test", image="/var/lib/libvirt/images/debian-12-genericcloud-amd64.qcow2", disk_gb=8)
PEOPLE = ("alice", "bob", "carol")


def vm_seats(lay):
    return [
        VmSeat(
            key=s.name,
            seat=s,
            participant=PEOPLE[i % 3] if i < 3 else None,
            user=PEOPLE[i % 3] if i < 3 else "gpuseat",
            ssh_keys=(public_key(PEOPLE[i % 3]),) if i < 3 else (),
        )
        for i, s in enumerate(lay.slices)
    ]


def xml_of(host, name):
    return ET.fromstring(host.lookup(name).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))


def test_m60_passthrough_four_seats_defined_started_with_their_gpus(test_host):
    lay = layout("ibm-2xM60.toml", mode="passthrough")
    assert len(lay.slices) == 4
    report = up_seats("demo", lay, vm_seats(lay), OPTIONS, test_host)
    assert [r.action for r in report.seats] == ["defined+started"] * 4
    assert all(r.state == "running" for r in report.seats)
    for seat, result in zip(lay.slices, report.seats, strict=True):
        root = xml_of(test_host, result.domain)
        bus = root.find("devices/hostdev/source/address").get("bus")
        assert f"0000:{bus[2:]}:00.0" == seat.pci
        assert root.find("devices/hostdev").get("managed") == "yes"
        meta = root.find(f"metadata/{{{METADATA_NS}}}seat")
        assert (meta.get("course"), meta.get("seat")) == ("demo", seat.name)
        sources = {d.get("device"): d.find("source").get("file") for d in root.findall("devices/disk")}
        assert sources == {"disk": result.disk, "cdrom": result.seed}
        vol = test_host.conn.storageVolLookupByPath(result.disk)
        backing = ET.fromstring(vol.XMLDesc(0)).find("backingStore/path").text
        assert backing == OPTIONS.image
    # assigned seats with a key and an address get an ssh line; the unassigned one does not
    assert report.seats[0].connect.startswith("ssh alice@192.168.122.")
    assert report.seats[3].connect is None


def test_seven_vgpu_seats_get_mediated_devices(test_host):
    # 7 desktop vGPUs (no CUDA: Maxwell vGPU runs CUDA on full-chip profiles only)
    lay = layout("ibm-2xM60.toml", mode="vgpu", seats=7, need={"cuda": False})
    assert len(lay.slices) == 7
    report = up_seats("lab", lay, vm_seats(lay), OPTIONS, test_host)
    assert not report.failed
    uuids = set()
    for r in report.seats:
        hostdev = xml_of(test_host, r.domain).find("devices/hostdev")
        assert (hostdev.get("type"), hostdev.get("model")) == ("mdev", "vfio-pci")
        uuids.add(hostdev.find("source/address").get("uuid"))
    assert len(uuids) == 7


def test_up_again_changes_nothing(test_host):
    lay = layout("ibm-2xM60.toml", mode="passthrough")
    seats = vm_seats(lay)
    up_seats("demo", lay, seats, OPTIONS, test_host)
    before = {d.name(): d.XMLDesc(0) for d in test_host.conn.listAllDomains()}
    report = up_seats("demo", lay, seats, OPTIONS, test_host)
    assert [r.action for r in report.seats] == ["unchanged"] * 4
    assert {d.name(): d.XMLDesc(0) for d in test_host.conn.listAllDomains()} == before


def test_drift_is_repaired_and_named(test_host):
    lay = layout("ibm-2xM60.toml", mode="passthrough")
    seats = vm_seats(lay)
    up_seats("demo", lay, seats, OPTIONS, test_host)
    dom = test_host.lookup("gpuseat-demo-seat-02")
    dom.destroy()
    tampered = dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE).replace(
        "<vcpu placement='static'>4</vcpu>", "<vcpu placement='static'>2</vcpu>"
    )
    root = ET.fromstring(tampered)
    devices = root.find("devices")
    devices.remove(devices.find("hostdev"))  # someone took the GPU away
    test_host.conn.defineXML(ET.tostring(root, encoding="unicode"))
    report = up_seats("demo", lay, seats, OPTIONS, test_host)
    by_seat = {r.seat: r for r in report.seats}
    assert by_seat["seat-02"].action == "redefined+started"
    assert "vcpu" in by_seat["seat-02"].detail and "hostdevs" in by_seat["seat-02"].detail
    assert {by_seat[k].action for k in ("seat-01", "seat-03", "seat-04")} == {"unchanged"}
    root = xml_of(test_host, "gpuseat-demo-seat-02")
    assert root.findtext("vcpu") == "4" and root.find("devices/hostdev") is not None


def test_foreign_domains_are_never_touched(test_host):
    lay = layout("ibm-2xM60.toml", mode="passthrough")
    seats = vm_seats(lay)
    foreign = "<domain type='test'><name>{}</name><memory>65536</memory><os><type>hvm</type></os></domain>"
    test_host.conn.defineXML(foreign.format("someone-elses-vm"))
    up_seats("demo", lay, seats, OPTIONS, test_host)
    up_seats("other", lay, seats[:1], OPTIONS, test_host)
    report = down_seats("demo", "test", host=test_host)
    assert sorted(r.seat for r in report.seats) == ["seat-01", "seat-02", "seat-03", "seat-04"]
    left = sorted(d.name() for d in test_host.conn.listAllDomains())
    assert left == ["gpuseat-other-seat-01", "someone-elses-vm"]
    # a domain that has a seat's name but is not gpuseat's: up refuses before defining anything
    test_host.conn.defineXML(foreign.format("gpuseat-demo-seat-03"))
    with pytest.raises(EngineError, match="gpuseat-demo-seat-03 exists and has no gpuseat metadata"):
        up_seats("demo", lay, seats, OPTIONS, test_host)
    assert test_host.lookup("gpuseat-demo-seat-01") is None
    assert "metadata" not in test_host.lookup("gpuseat-demo-seat-03").XMLDesc(0)


def test_down_keeps_disks_unless_asked(test_host):
    lay = layout("ibm-2xM60.toml", mode="passthrough")
    seats = vm_seats(lay)[:2]
    first = up_seats("demo", lay, seats, OPTIONS, test_host)
    pool = test_host.conn.storagePoolLookupByName("gpuseat")
    report = down_seats("demo", "test", host=test_host)
    assert all("disk kept" in r.detail for r in report.seats)
    disks = sorted(v for v in pool.listVolumes() if v.endswith(".qcow2"))
    assert [d.rsplit("-", 1)[0] for d in disks] == ["gpuseat-demo-seat-01-disk", "gpuseat-demo-seat-02-disk"]
    assert not [v for v in pool.listVolumes() if "cidata" in v]  # seeds (user names, keys) never stay
    again = up_seats("demo", lay, seats, OPTIONS, test_host)  # the kept disk is reused, not replaced
    assert [r.disk for r in again.seats] == [r.disk for r in first.seats]
    report = down_seats("demo", "test", delete_disks=True, host=test_host)
    assert all("disk deleted" in r.detail for r in report.seats)
    assert pool.listVolumes() == []
    assert test_host.conn.listDefinedDomains() == []


def test_status_lists_domains_states_and_participants(test_host):
    lay = layout("ibm-2xM60.toml", mode="passthrough")
    seats = vm_seats(lay)
    up_seats("demo", lay, seats[:3], OPTIONS, test_host)
    test_host.lookup("gpuseat-demo-seat-02").destroy()
    logins = {vm.key: Login(vm.participant, vm.user, vm.ssh_keys) for vm in seats}
    report = status_seats("demo", "test", logins, test_host)
    rows = {r.seat: (r.state, r.participant) for r in report.seats}
    assert rows == {
        "seat-01": ("running", "alice"),
        "seat-02": ("shut off", "bob"),
        "seat-03": ("running", "carol"),
        "seat-04": ("absent", None),
    }


def test_no_gpu_and_tcg_options_reach_the_domain(test_host):
    lay = layout("ibm-2xM60.toml", mode="passthrough")
    opts = VmOptions(connect="test", gpu=False, virt_type="qemu", memory_mib=256, vcpus=1, network=None)
    report = up_seats("demo", lay, vm_seats(lay)[:1], opts, test_host)
    root = xml_of(test_host, report.seats[0].domain)
    assert root.get("type") == "qemu" and root.find("devices/hostdev") is None
    assert root.find("devices/interface") is None and root.findtext("vcpu") == "1"
    assert "no --image" in " ".join(report.notes)


@pytest.mark.parametrize("course", ["Demo", "de/mo", "demo--", "-x", "a" * 70, "demo\nx"])
def test_bad_course_keys_are_refused(test_host, course):
    lay = layout("ibm-2xM60.toml", mode="passthrough")
    with pytest.raises(InputError):
        up_seats(course, lay, vm_seats(lay), OPTIONS, test_host)
    assert test_host.conn.listAllDomains() == []


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("vcpus", 0),
        ("memory_mib", 10),
        ("disk_gb", 10**9),
        ("image", "relative.qcow2"),
        ("pool", "../x"),
        ("network", "a b"),
        ("image_format", "vmdk"),
    ],
)
def test_bad_options_are_refused(field, value):
    with pytest.raises(InputError):
        VmOptions(**{field: value})


def test_a_seat_changing_hands_ends_the_old_holders_vm_and_disk_at_once(test_host):
    lay = layout("ibm-2xM60.toml", mode="passthrough")
    seats = vm_seats(lay)[:1]
    first = up_seats("demo", lay, seats, replace(OPTIONS, network="default"), test_host)
    mac = xml_of(test_host, first.seats[0].domain).find("devices/interface/mac").get("address")
    moved = [replace(seats[0], participant="bob", user="bob", ssh_keys=(public_key("bob"),))]
    second = up_seats("demo", lay, moved, replace(OPTIONS, network="default"), test_host)
    (result,) = second.seats
    assert result.action == "handed-over+started", result
    assert "handed over from alice" in result.detail and "previous disk deleted" in result.detail
    assert result.seed != first.seats[0].seed and result.disk != first.seats[0].disk
    assert result.connect.startswith("ssh bob@")  # alice's guest was stopped; bob's boots with his login
    flags = libvirt.VIR_DOMAIN_AFFECT_CONFIG
    meta = test_host.lookup(result.domain).metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, METADATA_NS, flags)
    assert 'participant="bob"' in meta
    pool = test_host.conn.storagePoolLookupByName("gpuseat")
    assert sorted(pool.listVolumes()) == sorted(p.rsplit("/", 1)[1] for p in (result.disk, result.seed))
    # the seat keeps its MAC (and so its DHCP address) across the hand-over, derived from course + seat
    assert (
        xml_of(test_host, result.domain).find("devices/interface/mac").get("address")
        == mac
        == seat_mac("demo", "seat-01")
    )
    again = up_seats("demo", lay, moved, replace(OPTIONS, network="default"), test_host)
    assert again.seats[0].action == "unchanged" and again.seats[0].disk == result.disk


def test_every_domain_has_a_serial_console(test_host):
    lay = layout("ibm-2xM60.toml", mode="passthrough")
    report = up_seats("demo", lay, vm_seats(lay)[:2], replace(OPTIONS, serial_dir="/var/log/gpuseat"), test_host)
    for r in report.seats:
        devices = xml_of(test_host, r.domain).find("devices")
        assert devices.find("serial").get("type") == "pty"  # virsh console NAME
        assert devices.find("console/target").get("type") == "serial"
        assert devices.find("serial/log").get("file") == f"/var/log/gpuseat/{r.domain}.log"
