"""The libvirt engine's plan and apply against libvirt's own test driver: a private in-memory host per test.

A real SQLite course store says who holds which seat; the engine (built through the registry, its
commands through a ``RecordingRunner``) plans from it and applies the steps. The XML is validated by
libvirt itself (``VIR_DOMAIN_DEFINE_VALIDATE``) and what libvirt stores is read back: hostdevs,
disks, the seed CD-ROM, the owner metadata. The mock driver is told to record into the store here
on purpose (by default its made-up addresses never reach a course).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import libvirt
import pytest

from gpuseat.engines import registry
from gpuseat.engines.apply import course_state
from gpuseat.engines.base import Engine
from gpuseat.engines.libvirt.engine import TEST_DRIVER_NOTE, LibvirtEngine
from gpuseat.engines.libvirt.machine import VmOptions, seat_mac
from gpuseat.engines.runner import RecordingRunner
from gpuseat.errors import EngineError, InputError
from gpuseat.render.libvirt import METADATA_NS
from gpuseat.store import open_store

from .conftest import EXAMPLES, layout, public_key

IMAGE = "/var/lib/libvirt/images/debian-12-genericcloud-amd64.qcow2"
INVENTORY = str(EXAMPLES / "ibm-2xM60.toml")


@pytest.fixture
def store(tmp_path):
    s = open_store(f"sqlite:///{tmp_path / 'course.db'}", create=True)
    yield s
    s.close()


def fill(store, *, seats=4, assign=3, kind="gpu", lay=None, key="demo", source=EXAMPLES / "course-2016.toml"):
    """The 2016 course (or the course file ``source``), its roster, ``seats`` libvirt seats of the M60
    server, the first ``assign`` held."""
    store.courses.create_course(source, key=key)
    store.roster.import_roster(key, EXAMPLES / "roster-16.csv")
    lay = lay or layout("ibm-2xM60.toml", mode="passthrough")
    store.seats.add_seats(key, [{"key": s.name, "kind": kind, "engine": "libvirt"} for s in lay.slices[:seats]])
    people = [p.key for p in store.roster.participants(key)]
    for person, s in zip(people[:assign], lay.slices, strict=False):
        store.seats.assign(key, person, s.name)
    return lay


def build(store, test_host, *, records=True, runner=None, course="demo", on=None, **settings) -> LibvirtEngine:
    values = {"connect": "test:///default", "inventory": INVENTORY, "image": IMAGE, "disk_gb": 8, **settings}
    eng = registry.build("libvirt", store, course, settings=values, runner=runner or RecordingRunner(), host=on)
    assert isinstance(eng, LibvirtEngine)
    eng.use(test_host)
    eng.records = records
    return eng


def apply(eng, store, course="demo"):
    """Plan, apply (nothing may fail), and the plan's steps as (phase, action, target)."""
    changes = eng.plan(course_state(store, course))
    report = eng.apply(changes)
    assert not report.failed, [o.to_dict() for o in report.failed]
    return [(s.phase, s.action, s.target) for s in changes.ordered()], report


def again_empty(eng, store, course="demo"):
    changes = eng.plan(course_state(store, course))
    assert changes.empty, [s.to_dict() for s in changes.steps]


def xml_of(host, name):
    return ET.fromstring(host.lookup(name).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))


def holder(store, seat, course="demo"):
    return next(p for p in store.roster.participants(course) if p.seat == seat)


def test_the_registry_builds_an_engine_that_walks_the_interface(store, test_host):
    fill(store)
    eng = build(store, test_host)
    assert isinstance(eng, Engine) and eng.name == "libvirt"
    state = course_state(store, "demo")
    changes = eng.plan(state)
    assert [s.action for s in changes.steps].count("domain.create") == 3  # seat-04 is held by nobody: no VM
    report = eng.apply(changes)
    assert len(report.done) == len(changes.steps) and not report.failed
    seen = eng.observe(state)
    assert sorted((h.seat, h.login, h.what) for h in seen) == [
        ("seat-01", "amartin", "vm"), ("seat-02", "bcosta", "vm"), ("seat-03", "cwei", "vm"),
    ]  # fmt: skip
    seat = store.seats.get_seat("demo", "seat-01")
    way = eng.connect(seat)
    assert way is not None and way.holder == "amartin" and way.command.startswith("ssh amartin@192.168.122.")
    assert seat.connect == way.command and seat.state == "running"
    checked = eng.check([seat])  # no probe key set: broken, with the reason
    assert [(r.state, r.reason) for r in checked] == [("broken", "no probe key set (libvirt setting probe_key)")]
    assert eng.refused(holder(store, "seat-02")) is None
    again_empty(eng, store)


def test_m60_passthrough_seats_get_their_gpus_disks_and_seeds(store, test_host):
    lay = fill(store, assign=4)
    steps, _ = apply(build(store, test_host), store)
    assert [a for _p, a, _t in steps] == ["domain.create"] * 4 + ["seat.record"] * 4
    for seat in lay.slices:
        name = f"gpuseat-demo-{seat.name}"
        assert test_host.lookup(name).isActive()
        root = xml_of(test_host, name)
        bus = root.find("devices/hostdev/source/address").get("bus")
        assert f"0000:{bus[2:]}:00.0" == seat.pci and root.find("devices/hostdev").get("managed") == "yes"
        meta = root.find(f"metadata/{{{METADATA_NS}}}seat")
        assert (meta.get("course"), meta.get("seat"), meta.get("participant")) == (
            "demo", seat.name, holder(store, seat.name).key
        )  # fmt: skip
        sources = {d.get("device"): d.find("source").get("file") for d in root.findall("devices/disk")}
        assert "-disk-" in sources["disk"] and "-cidata-" in sources["cdrom"]
        vol = test_host.conn.storageVolLookupByPath(sources["disk"])
        assert ET.fromstring(vol.XMLDesc(0)).find("backingStore/path").text == IMAGE


def test_seven_vgpu_seats_get_mediated_devices(store, test_host):
    lay = layout("ibm-2xM60.toml", mode="vgpu", seats=7, need={"cuda": False})
    fill(store, seats=7, assign=7, kind="vgpu", lay=lay)
    eng = build(store, test_host, mode="vgpu")
    eng.layout = lay  # the 7-seat desktop carve the seats came from
    apply(eng, store)
    uuids = set()
    for s in lay.slices:
        hostdev = xml_of(test_host, f"gpuseat-demo-{s.name}").find("devices/hostdev")
        assert (hostdev.get("type"), hostdev.get("model")) == ("mdev", "vfio-pci")
        uuids.add(hostdev.find("source/address").get("uuid"))
    assert len(uuids) == 7


def test_a_second_apply_changes_nothing(store, test_host):
    fill(store)
    eng = build(store, test_host)
    apply(eng, store)
    before = {d.name(): d.XMLDesc(0) for d in test_host.conn.listAllDomains()}
    events = len(store.events.events("demo"))
    again_empty(build(store, test_host), store)
    assert {d.name(): d.XMLDesc(0) for d in test_host.conn.listAllDomains()} == before
    assert len(store.events.events("demo")) == events


def test_drift_is_repaired_and_named(store, test_host):
    fill(store)
    apply(build(store, test_host), store)
    dom = test_host.lookup("gpuseat-demo-seat-02")
    dom.destroy()
    tampered = dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE).replace(
        "<vcpu placement='static'>4</vcpu>", "<vcpu placement='static'>2</vcpu>"
    )
    root = ET.fromstring(tampered)
    devices = root.find("devices")
    devices.remove(devices.find("hostdev"))  # someone took the GPU away
    test_host.conn.defineXML(ET.tostring(root, encoding="unicode"))
    eng = build(store, test_host)
    changes = eng.plan(course_state(store, "demo"))
    (update,) = [s for s in changes.steps if s.action != "seat.record"]
    assert (update.action, update.target) == ("domain.update", "gpuseat-demo-seat-02")
    assert "vcpu" in update.why and "hostdevs" in update.why
    assert not eng.apply(changes).failed
    root = xml_of(test_host, "gpuseat-demo-seat-02")
    assert root.findtext("vcpu") == "4" and root.find("devices/hostdev") is not None
    assert test_host.lookup("gpuseat-demo-seat-02").isActive()
    again_empty(eng, store)


def test_foreign_domains_are_never_touched(store, test_host):
    fill(store)
    foreign = "<domain type='test'><name>{}</name><memory>65536</memory><os><type>hvm</type></os></domain>"
    test_host.conn.defineXML(foreign.format("someone-elses-vm"))
    store.courses.create_course(EXAMPLES / "course-2016.toml", key="other")
    # seat-04: a GPU no demo holder has (two courses' holders of one GPU: tests/vms/test_two_courses_libvirt.py)
    store.seats.add_seats("other", [{"key": "seat-04", "kind": "gpu", "engine": "libvirt"}])
    store.roster.import_roster("other", EXAMPLES / "roster-16.csv")
    store.seats.assign("other", "amartin", "seat-04")
    apply(build(store, test_host), store)
    apply(build(store, test_host, course="other"), store, "other")
    # the demo course is deleted: only its own domains go
    gone = build(store, test_host)
    state = course_state(store, "demo")
    from dataclasses import replace

    changes = gone.plan(replace(state, course=None, seats=(), people={}, access={}))
    assert {s.action for s in changes.steps} == {"domain.remove"} and len(changes.steps) == 3
    assert not gone.apply(changes).failed
    left = sorted(d.name() for d in test_host.conn.listAllDomains())
    assert left == ["gpuseat-other-seat-04", "someone-elses-vm"]
    # a domain that has a seat's name but is not gpuseat's: the plan refuses before anything is defined
    test_host.conn.defineXML(foreign.format("gpuseat-demo-seat-03"))
    with pytest.raises(EngineError, match="gpuseat-demo-seat-03 exists and has no gpuseat metadata"):
        build(store, test_host).plan(course_state(store, "demo"))
    assert test_host.lookup("gpuseat-demo-seat-01") is None
    assert "metadata" not in test_host.lookup("gpuseat-demo-seat-03").XMLDesc(0)


def test_a_move_hands_the_vm_over_revoke_first_and_the_old_login_never_survives(store, test_host):
    fill(store, assign=1)
    old = holder(store, "seat-01")
    apply(build(store, test_host), store)
    name = "gpuseat-demo-seat-01"
    mac = xml_of(test_host, name).find("devices/interface/mac").get("address")
    first = {d.get("device"): d.find("source").get("file") for d in xml_of(test_host, name).findall("devices/disk")}
    assert store.seats.get_seat("demo", "seat-01").connect.startswith(f"ssh {old.unix_user}@")
    # the seat changes hands: amartin moves to seat-02, bcosta gets seat-01
    store.seats.move("demo", old.key, "seat-02")
    store.seats.assign("demo", "bcosta", "seat-01")
    eng = build(store, test_host)
    changes = eng.plan(course_state(store, "demo"))
    steps = [(s.phase, s.action, s.target) for s in changes.ordered() if s.seats == ("seat-01",)]
    assert steps == [
        ("revoke", "domain.stop", name),
        ("revoke", "disk.remove", first["disk"].rsplit("/", 1)[1]),
        ("revoke", "seed.remove", first["cdrom"].rsplit("/", 1)[1]),
        ("grant", "domain.reimage", name),
        ("record", "seat.record", "seat-01"),
    ]
    assert "from amartin to bcosta" in changes.steps[0].why
    report = eng.apply(changes)
    assert not report.failed
    root = xml_of(test_host, name)
    assert root.find(f"metadata/{{{METADATA_NS}}}seat").get("participant") == "bcosta"
    now = {d.get("device"): d.find("source").get("file") for d in root.findall("devices/disk")}
    assert now["disk"] != first["disk"] and now["cdrom"] != first["cdrom"]
    pool = test_host.conn.storagePoolLookupByName("gpuseat")
    mine = sorted(v for v in pool.listVolumes() if v.startswith(name))
    assert mine == sorted(p.rsplit("/", 1)[1] for p in now.values())  # nothing of amartin's is left
    assert root.find("devices/interface/mac").get("address") == mac == seat_mac("demo", "seat-01")
    seat = store.seats.get_seat("demo", "seat-01")
    assert seat.connect.startswith("ssh bcosta@") and store.delivery.access_of("demo")["seat-01"]["holder"] == "bcosta"
    assert eng.refused(holder(store, "seat-02")) is None  # amartin's new seat is theirs; seat-01 is not
    again_empty(eng, store)


def test_a_released_seat_is_stopped_and_stays_stopped(store, test_host):
    fill(store, assign=2)
    apply(build(store, test_host), store)
    gone = holder(store, "seat-02")
    store.seats.release("demo", seat="seat-02")
    eng = build(store, test_host)
    assert eng.refused(gone) == f"VM gpuseat-demo-seat-02 still runs with {gone.unix_user}'s login"
    steps, _ = apply(eng, store)
    assert [(p, a) for p, a, t in steps] == [("revoke", "domain.stop"), ("revoke", "seed.remove"),
                                             ("record", "seat.clear")]  # fmt: skip
    assert not test_host.lookup("gpuseat-demo-seat-02").isActive()
    seat = store.seats.get_seat("demo", "seat-02")
    assert (
        not seat.connect and seat.state == "requested" and not store.delivery.access_of("demo")["seat-02"].get("holder")
    )
    assert eng.refused(gone) is None
    again_empty(build(store, test_host), store)  # nobody's VM is never started again
    assert not test_host.lookup("gpuseat-demo-seat-02").isActive()
    assert test_host.lookup("gpuseat-demo-seat-01").isActive()
    # drift: someone starts the vacated VM by hand; the next apply stops it again
    test_host.lookup("gpuseat-demo-seat-02").create()
    steps, _ = apply(build(store, test_host), store)
    assert steps == [("revoke", "domain.stop", "gpuseat-demo-seat-02")]
    assert not test_host.lookup("gpuseat-demo-seat-02").isActive()


def test_an_archived_course_stops_every_vm_and_removes_the_logins(store, test_host):
    fill(store)
    apply(build(store, test_host), store)
    from dataclasses import replace

    eng = build(store, test_host)
    changes = eng.plan(replace(course_state(store, "demo"), archived=True))
    assert {s.action for s in changes.steps} == {"domain.stop", "seed.remove"}  # nothing written to the store
    assert not eng.apply(changes).failed
    assert [d.name() for d in test_host.conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)] == []
    assert eng.observe(course_state(store, "demo")) == []


def test_a_dry_run_lists_virsh_commands_and_changes_nothing(store, test_host):
    fill(store, assign=1)
    runner = RecordingRunner(dry_run=True)
    eng = build(store, test_host, runner=runner)
    changes = eng.plan(course_state(store, "demo"))
    report = eng.apply(changes)
    commands = [c.line for o in report.outcomes for c in o.commands]
    assert commands == [
        "virsh -c test:///default define gpuseat-demo-seat-01.xml",
        "virsh -c test:///default start gpuseat-demo-seat-01",
    ]
    assert all(c.dry for o in report.outcomes for c in o.commands)
    assert test_host.conn.listAllDomains() == [] and store.seats.get_seat("demo", "seat-01").state == "planned"


def test_the_mock_driver_never_writes_into_the_course_store(store, test_host):
    fill(store)
    before = [(s.state, s.connect) for s in store.seats.seats("demo")]
    events = len(store.events.events("demo"))
    eng = build(store, test_host, records=None)
    changes = eng.plan(course_state(store, "demo"))
    assert TEST_DRIVER_NOTE in changes.notes and "seat.record" not in {s.action for s in changes.steps}
    assert not eng.apply(changes).failed
    assert [(s.state, s.connect) for s in store.seats.seats("demo")] == before
    assert len(store.events.events("demo")) == events


def test_no_gpu_and_tcg_options_reach_the_domain(store, test_host):
    fill(store, assign=1)
    eng = build(store, test_host, gpu="no", virt_type="qemu", memory_mib=256, vcpus=1, network="none", image=None)
    changes = eng.plan(course_state(store, "demo"))
    assert any("no image" in n for n in changes.notes)
    assert not eng.apply(changes).failed
    root = xml_of(test_host, "gpuseat-demo-seat-01")
    assert root.get("type") == "qemu" and root.find("devices/hostdev") is None
    assert root.find("devices/interface") is None and root.findtext("vcpu") == "1"
    # no NIC, no address: the seat runs, and its way in names no one until it has one
    seat = store.seats.get_seat("demo", "seat-01")
    assert seat.state == "running" and not seat.connect and eng.connect(seat) is None
    again_empty(eng, store)


def test_every_domain_has_a_serial_console(store, test_host):
    fill(store, assign=2)
    apply(build(store, test_host, serial_dir="/var/log/gpuseat"), store)
    for name in ("gpuseat-demo-seat-01", "gpuseat-demo-seat-02"):
        devices = xml_of(test_host, name).find("devices")
        assert devices.find("serial").get("type") == "pty"  # virsh console NAME
        assert devices.find("console/target").get("type") == "serial"
        assert devices.find("serial/log").get("file") == f"/var/log/gpuseat/{name}.log"


def test_an_engine_for_a_course_gone_from_the_store_plans_without_failing(store, test_host):
    eng = build(store, test_host, course="gone")
    changes = eng.plan(course_state(store, "gone"))
    assert changes.empty and eng.observe(course_state(store, "gone")) == []


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("vcpus", "0"),
        ("memory_mib", "10"),
        ("disk_gb", str(10**9)),
        ("image", "relative.qcow2"),
        ("pool", "../x"),
        ("network", "a b"),
        ("image_format", "vmdk"),
        ("connect", "not a uri"),
        ("serial_dir", "/var/log\nx"),
        ("nonsense", "1"),
    ],
)
def test_bad_settings_are_refused_with_one_message(field, value):
    with pytest.raises(InputError, match=f"libvirt setting {field}"):
        registry.validate_settings("libvirt", {field: value})


@pytest.mark.parametrize(("field", "value"), [("vcpus", 0), ("memory_mib", 10), ("pool", "../x")])
def test_bad_options_are_refused(field, value):
    with pytest.raises(InputError):
        VmOptions(**{field: value})


def test_a_new_key_gives_the_same_holder_a_new_seed_and_a_restart(store, test_host, tmp_path):
    fill(store, assign=1)
    apply(build(store, test_host), store)
    name = "gpuseat-demo-seat-01"
    disk = xml_of(test_host, name).find("devices/disk[@device='disk']/source").get("file")
    rows = (EXAMPLES / "roster-16.csv").read_text().splitlines()
    head, first = rows[0], rows[1].split(",")
    first[-1] = public_key("carol")  # amartin's new key
    roster = tmp_path / "roster.csv"
    roster.write_text("\n".join([head, ",".join(first), *rows[2:]]) + "\n")
    store.roster.import_roster("demo", roster)
    eng = build(store, test_host)
    changes = eng.plan(course_state(store, "demo"))
    assert [(s.phase, s.action) for s in changes.ordered()] == [
        ("revoke", "seed.remove"), ("grant", "domain.update"), ("record", "seat.record")
    ]  # fmt: skip
    update = changes.ordered()[1]
    assert update.data["restart"] and "a new seed" in update.why
    assert not eng.apply(changes).failed
    root = xml_of(test_host, name)
    assert root.find("devices/disk[@device='disk']/source").get("file") == disk  # their work stays
    assert test_host.lookup(name).isActive()
    again_empty(eng, store)


def test_outside_the_access_hours_the_vm_stops_and_comes_back(store, test_host):
    from dataclasses import replace

    fill(store, assign=1)
    eng = build(store, test_host)
    apply(eng, store)
    shut = replace(course_state(store, "demo"), closed="outside the course's access hours")
    changes = eng.plan(shut)
    assert [(s.phase, s.action) for s in changes.ordered()] == [("revoke", "domain.stop"), ("record", "seat.record")]
    assert not eng.apply(changes).failed
    assert not test_host.lookup("gpuseat-demo-seat-01").isActive()
    seat = store.seats.get_seat("demo", "seat-01")
    assert seat.state == "requested" and not seat.connect and eng.connect(seat) is None
    assert eng.plan(replace(course_state(store, "demo"), closed="outside the course's access hours")).empty
    steps, _ = apply(eng, store)  # open again
    assert [a for _p, a, _t in steps] == ["domain.start", "seat.record"]
    assert store.seats.get_seat("demo", "seat-01").connect.startswith("ssh amartin@")


def test_a_dry_run_of_a_hand_over_lists_the_revokes_first(store, test_host):
    fill(store, assign=1)
    apply(build(store, test_host), store)
    store.seats.release("demo", seat="seat-01")
    store.seats.assign("demo", "bcosta", "seat-01")
    eng = build(store, test_host, runner=RecordingRunner(dry_run=True))
    report = eng.apply(eng.plan(course_state(store, "demo")))
    lines = [c.line for o in report.outcomes for c in o.commands]
    assert lines[0] == "virsh -c test:///default destroy gpuseat-demo-seat-01"
    assert [ln.split()[3] for ln in lines] == ["destroy", "vol-delete", "vol-delete", "define", "start"]
    root = xml_of(test_host, "gpuseat-demo-seat-01")  # nothing changed: still amartin's, running
    assert root.find(f"metadata/{{{METADATA_NS}}}seat").get("participant") == "amartin"
    assert test_host.lookup("gpuseat-demo-seat-01").isActive()
    assert store.delivery.access_of("demo")["seat-01"]["holder"] == "amartin"
    assert eng.connect(store.seats.get_seat("demo", "seat-01")) is None  # bcosta sees "being prepared"


def test_an_engine_for_one_host_leaves_the_other_hosts_seats_alone(store, test_host):
    fill(store, assign=2)
    apply(build(store, test_host), store)
    here = build(store, test_host, on="another-server")  # `apply --host another-server`: none of its seats
    assert here.plan(course_state(store, "demo")).empty
    assert test_host.lookup("gpuseat-demo-seat-01").isActive()
