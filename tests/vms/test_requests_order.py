"""Two requests of one participant that undo each other, in one pass (Stop then Start pressed before the
agent came by, or Start then Stop): the later one is carried out, the earlier one is recorded as not
carried out and names the request that came after it (it used to be marked failed for a false reason,
"the VM still runs"), on libvirt's test driver."""

from __future__ import annotations

from .test_test_driver import again_empty, apply, build, fill, holder, store  # noqa: F401 (the store fixture)


def test_the_later_of_a_stop_and_a_start_wins_and_the_earlier_says_why(store, test_host):  # noqa: F811
    lay = fill(store, seats=2, assign=2)
    eng = build(store, test_host)
    apply(eng, store)
    first, second = (s.name for s in lay.slices[:2])
    ann = holder(store, first)
    vm, neighbour = (test_host.lookup(f"gpuseat-demo-{k}") for k in (first, second))
    assert vm.isActive() and neighbour.isActive()

    def rows() -> dict[int, tuple[str, str | None]]:
        return {r.id: (r.state, r.reason) for r in store.requests.seat_requests("demo", participant=ann.key)}

    stop = store.requests.request_seat("demo", ann.key, "stop", actor=ann.key)
    start = store.requests.request_seat("demo", ann.key, "start", actor=ann.key)
    apply(eng, store)
    assert vm.isActive() and neighbour.isActive()
    assert rows()[stop.id] == ("failed", f"not carried out: your start (request {start.id}) came after it")
    assert rows()[start.id] == ("done", "started: you can log in")
    again_empty(eng, store)

    start2 = store.requests.request_seat("demo", ann.key, "start", actor=ann.key)
    stop2 = store.requests.request_seat("demo", ann.key, "stop", actor=ann.key)
    apply(eng, store)
    assert not vm.isActive() and neighbour.isActive()
    assert rows()[start2.id] == ("failed", f"not carried out: your stop (request {stop2.id}) came after it")
    assert rows()[stop2.id] == ("done", "stopped: the VM is powered off")
    again_empty(eng, store)


def test_a_stop_waiting_when_the_vm_is_first_made_is_done_in_one_pass(store, test_host):  # noqa: F811
    """A holder's stop that is pending at the pass that first defines their VM: the VM is defined and left
    off, the stop is done and the seat's record says it is stopped, all in that pass (a second is empty)."""
    lay = fill(store, seats=2, assign=2)
    first = lay.slices[0].name
    ann = holder(store, first)
    eng = build(store, test_host)
    stop = store.requests.request_seat("demo", ann.key, "stop", actor=ann.key)
    apply(eng, store)
    vm = test_host.lookup(f"gpuseat-demo-{first}")
    assert vm is not None and not vm.isActive()
    done = {r.id: r for r in store.requests.seat_requests("demo", participant=ann.key)}[stop.id]
    assert done.state == "done", done
    again_empty(eng, store)


def test_seats_check_says_a_stopped_seat_is_stopped_instead_of_probing_it(store, test_host):  # noqa: F811
    """``seats check`` of a seat its holder stopped: broken with "stopped (…): not probed" and how to start it,
    not the probe's failure (which reads like a fault); the other seat is probed as before."""
    from gpuseat.services.checks import check_seats

    from .test_test_driver import IMAGE, INVENTORY

    lay = fill(store, seats=2, assign=2)
    first, second = (s.name for s in lay.slices[:2])
    ann = holder(store, first)
    eng = build(store, test_host)
    apply(eng, store)
    store.requests.request_seat("demo", ann.key, "stop", actor=ann.key)
    apply(eng, store)
    values = {"connect": "test:///default", "inventory": str(INVENTORY), "image": str(IMAGE)}
    got = {r.seat: r for r in check_seats(store, "demo", settings={"libvirt": values}, timeout=5, record=False)}
    assert got[first].state == "broken", got[first]
    assert got[first].reason.startswith("stopped (the VM is powered off): not probed"), got[first].reason
    assert f"gpuseat seat start -p {ann.key}" in got[first].reason
    assert not got[second].reason.startswith("stopped"), got[second]
