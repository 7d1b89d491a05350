"""A participant's stop, start, restart and new key on their libvirt seat, against libvirt's test driver
(an in-memory host per test): each request row is carried out on their VM and marked done with the
reason; a stopped VM stays off; another seat is never touched; a reset without a base image fails."""

from __future__ import annotations

from gpuseat.engines.apply import course_state

from .conftest import public_key
from .test_test_driver import again_empty, apply, build, fill, holder, store  # noqa: F401 (the store fixture)


def test_stop_start_restart_and_a_new_key_act_on_the_own_vm_only(store, test_host):  # noqa: F811
    lay = fill(store, seats=2, assign=2)
    eng = build(store, test_host)
    apply(eng, store)
    first, second = (s.name for s in lay.slices[:2])
    ann, other = holder(store, first), holder(store, second)
    vm, neighbour = (test_host.lookup(f"gpuseat-demo-{k}") for k in (first, second))
    assert vm.isActive() and neighbour.isActive()

    def last(who: str):
        return store.requests.seat_requests("demo", participant=who)[0]

    store.requests.request_seat("demo", ann.key, "stop", actor=ann.key)
    steps, _ = apply(eng, store)
    assert ("revoke", "domain.stop", f"gpuseat-demo-{first}") in steps
    assert (last(ann.key).state, last(ann.key).reason) == ("done", "stopped: the VM is powered off")
    assert not vm.isActive() and neighbour.isActive()
    again_empty(eng, store)  # a stopped seat's VM is not started again

    store.requests.request_seat("demo", ann.key, "start", actor=ann.key)
    apply(eng, store)
    assert vm.isActive() and (last(ann.key).state, last(ann.key).reason) == ("done", "started: you can log in")

    store.requests.request_seat("demo", ann.key, "restart", actor=ann.key)
    steps, _ = apply(eng, store)
    assert ("grant", "domain.restart", f"gpuseat-demo-{first}") in steps
    assert vm.isActive() and last(ann.key).state == "done"
    again_empty(eng, store)

    asked = store.requests.request_seat("demo", ann.key, "key", actor=ann.key, key=public_key("bob"))
    assert asked.state == "pending"
    steps, _ = apply(eng, store)
    assert ("grant", "domain.update", f"gpuseat-demo-{first}") in steps
    assert last(ann.key).state == "done" and "new key" in (last(ann.key).reason or ""), last(ann.key)
    again_empty(eng, store)
    assert store.requests.seat_requests("demo", participant=other.key) == [] and neighbour.isActive()


def test_a_reset_without_a_base_image_fails_and_says_why(store, test_host):  # noqa: F811
    lay = fill(store, seats=1, assign=1)
    eng = build(store, test_host, image=None)
    apply(eng, store)
    ann = holder(store, lay.slices[0].name)
    store.requests.request_seat("demo", ann.key, "reset", actor=ann.key)
    changes = eng.plan(course_state(store, "demo"))
    assert "domain.reset" not in {s.action for s in changes.steps}
    eng.apply(changes)
    done = store.requests.seat_requests("demo", participant=ann.key)[0]
    assert done.state == "failed" and "no base image" in (done.reason or "")


def test_outside_the_access_hours_a_start_or_restart_is_refused_and_the_vm_stays_off(store, test_host):  # noqa: F811
    """The participant asks to start and to restart their seat while the course's hours are closed: both
    requests end ``failed`` with the reason, no VM step runs, and the VM stays off until the hours open."""
    from dataclasses import replace

    lay = fill(store, seats=2, assign=2)
    eng = build(store, test_host)
    apply(eng, store)
    first, second = (s.name for s in lay.slices[:2])
    ann = holder(store, first)
    vm, neighbour = (test_host.lookup(f"gpuseat-demo-{k}") for k in (first, second))
    closed = "outside the course's access hours"
    assert not eng.apply(eng.plan(replace(course_state(store, "demo"), closed=closed))).failed
    assert not vm.isActive() and not neighbour.isActive()

    store.requests.request_seat("demo", ann.key, "start", actor=ann.key)
    store.requests.request_seat("demo", ann.key, "restart", actor=ann.key)
    changes = eng.plan(replace(course_state(store, "demo"), closed=closed))
    assert not {"domain.start", "domain.restart", "domain.create"} & {s.action for s in changes.steps}
    assert not eng.apply(changes).failed
    asked = store.requests.seat_requests("demo", participant=ann.key)
    assert [(r.action, r.state) for r in sorted(asked, key=lambda r: r.id)] == [
        ("start", "failed"),
        ("restart", "failed"),
    ]
    assert all(r.reason and closed in r.reason and "cannot run now" in r.reason for r in asked), asked
    assert not vm.isActive() and not neighbour.isActive()
    assert eng.plan(replace(course_state(store, "demo"), closed=closed)).empty  # nothing left to do, no retry

    steps, _ = apply(eng, store)  # the hours open: the seats run again without a new request
    assert vm.isActive() and neighbour.isActive()
    assert ("grant", "domain.start", f"gpuseat-demo-{first}") in steps
