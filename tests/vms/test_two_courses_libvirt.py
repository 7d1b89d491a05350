"""Two courses on one libvirt host, seats carved from the same server (a course left unarchived, then the next one):
their VMs pass through the same GPUs. The libvirt engine follows the host engine's rule
(:mod:`gpuseat.engines.host.others`): the older holder keeps the GPU, the newer seat gets no VM and its
``seat.device`` step fails with the other course's seat and holder and the fix; ``seats check`` says the same.

libvirt's test driver (one private in-memory host shared by both courses' engines) and a real SQLite store. The test
driver, unlike QEMU, starts two domains with one hostdev: so the plan itself must not make the second.
"""

from __future__ import annotations

import pytest

from gpuseat.engines.apply import course_state
from gpuseat.engines.libvirt.domain import hostdevs
from gpuseat.store import open_store

from .conftest import EXAMPLES, layout
from .test_test_driver import build, fill, xml_of

OLD, NEW = "spring", "autumn"  # the older course's key sorts last: the assignment's time decides, not the key


@pytest.fixture
def store(tmp_path):
    s = open_store(f"sqlite:///{tmp_path / 'course.db'}", create=True)
    yield s
    s.close()


def _pass(eng, store, course):
    changes = eng.plan(course_state(store, course))
    report = eng.apply(changes)
    return [(s.action, s.target) for s in changes.ordered()], report


def test_the_newer_course_gets_no_vm_on_a_gpu_the_older_one_holds(store, test_host):
    fill(store, seats=2, assign=2, key=OLD)
    fill(store, seats=2, assign=1, key=NEW)  # autumn's seat-01 holder came later: same GPU as spring's seat-01
    old, new = build(store, test_host, course=OLD), build(store, test_host, course=NEW)
    _steps, report = _pass(old, store, OLD)
    assert not report.failed
    steps, report = _pass(new, store, NEW)
    assert ("domain.create", "gpuseat-autumn-seat-01") not in steps
    assert test_host.lookup("gpuseat-autumn-seat-01") is None
    (failed,) = report.failed
    assert (failed.step.action, failed.step.target, failed.exit_code) == ("seat.device", "seat-01", 2)
    msg = failed.message or ""
    assert f"course {OLD} is not archived and its seat seat-01 (held by amartin since" in msg
    assert f"gpuseat course archive {OLD}" in msg and f"gpuseat seats release --course {OLD} --seat seat-01" in msg
    # seats check says the same, before any ssh
    seat = store.seats.get_seat(NEW, "seat-01")
    person = next(p for p in store.roster.participants(NEW) if p.key == "amartin")
    ready = new.probe(seat, person)
    assert ready.state == "broken" and f"course {OLD} is not archived" in (ready.reason or "")
    # the older course's own pass is untouched by the newer one
    assert old.plan(course_state(store, OLD)).empty
    # spring archived: autumn's holder gets their VM, with spring's GPU
    store.lifecycle.archive_course(OLD)
    steps, report = _pass(new, store, NEW)
    assert not report.failed and ("domain.create", "gpuseat-autumn-seat-01") in steps
    a, b = xml_of(test_host, "gpuseat-autumn-seat-01"), xml_of(test_host, "gpuseat-spring-seat-01")
    assert hostdevs(_text(a)) == hostdevs(_text(b)) != ()


def test_a_vm_made_first_for_the_newer_holder_is_stopped(store, test_host):
    """The newer course's VM was made first (its pass ran before the older course's VM existed, or before this
    rule): the older course's pass makes its own, and the newer course's next pass stops its VM."""
    fill(store, seats=1, assign=1, key=OLD)
    fill(store, seats=1, assign=1, key=NEW)
    old, new = build(store, test_host, course=OLD), build(store, test_host, course=NEW)
    _steps, report = _pass(new, store, NEW)  # no spring domain yet: nothing clashes on the host
    assert not report.failed and test_host.lookup("gpuseat-autumn-seat-01").isActive()
    _steps, report = _pass(old, store, OLD)
    assert not report.failed and test_host.lookup("gpuseat-spring-seat-01").isActive()
    steps, report = _pass(new, store, NEW)
    assert ("domain.stop", "gpuseat-autumn-seat-01") in steps
    assert [o.step.action for o in report.failed] == ["seat.device"]
    assert not test_host.lookup("gpuseat-autumn-seat-01").isActive()
    assert test_host.lookup("gpuseat-spring-seat-01").isActive()
    # no fight: each course's next plan keeps it so (autumn's says the refusal again, nothing else)
    assert old.plan(course_state(store, OLD)).empty
    assert [s.action for s in new.plan(course_state(store, NEW)).steps] == ["seat.device"]


def test_an_ssh_seat_of_another_course_keeps_the_gpu_a_newer_vm_names(store, test_host):
    """spring's seat on GPU 0 of the server is an SSH seat of the host engine (amartin logs in and uses it); autumn
    then carves a libvirt seat whose VM passes that GPU through, naming its device UUID. Before, the libvirt engine
    compared only other courses' VMs: it made and started autumn's VM on the GPU spring's holder uses. Now the rule
    compares the held seats of every engine that delivers a GPU of the server, by device UUID: no VM, the step
    names spring's seat and the fix, and seats check says the same."""
    store.courses.create_course(EXAMPLES / "course-2016.toml", key=OLD)
    store.roster.import_roster(OLD, EXAMPLES / "roster-16.csv")
    store.seats.add_seats(OLD, [{"key": "gpu-0", "kind": "gpu", "engine": "host", "device_uuid": "GPU-M60-0"}])
    store.seats.assign(OLD, "amartin", "gpu-0")
    lay = layout("ibm-2xM60.toml", mode="passthrough")
    store.courses.create_course(EXAMPLES / "course-2016.toml", key=NEW)
    store.roster.import_roster(NEW, EXAMPLES / "roster-16.csv")
    slice_ = lay.slices[0].name
    store.seats.add_seats(NEW, [{"key": slice_, "kind": "gpu", "engine": "libvirt", "device_uuid": "GPU-M60-0"}])
    who = next(p.key for p in store.roster.participants(NEW) if p.key != "amartin")
    store.seats.assign(NEW, who, slice_)
    new = build(store, test_host, course=NEW)
    steps, report = _pass(new, store, NEW)
    assert ("domain.create", f"gpuseat-{NEW}-{slice_}") not in steps
    assert test_host.lookup(f"gpuseat-{NEW}-{slice_}") is None
    (failed,) = report.failed
    assert (failed.step.action, failed.step.target, failed.exit_code) == ("seat.device", slice_, 2)
    assert f"course {OLD} is not archived and its seat gpu-0 (held by amartin since" in (failed.message or "")
    person = next(p for p in store.roster.participants(NEW) if p.key == who)
    ready = new.probe(store.seats.get_seat(NEW, slice_), person)
    assert ready.state == "broken" and f"course {OLD} is not archived" in (ready.reason or "")
    store.lifecycle.archive_course(OLD)
    steps, report = _pass(new, store, NEW)
    assert not report.failed and ("domain.create", f"gpuseat-{NEW}-{slice_}") in steps


def _text(el) -> str:
    import xml.etree.ElementTree as ET

    return ET.tostring(el, encoding="unicode")
