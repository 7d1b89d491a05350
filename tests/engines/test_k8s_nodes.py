"""A Kubernetes seat's host is the name of the node its probe Pod is pinned to (``kubernetes.io/hostname``),
against the recording stand-in cluster of tests/conformance/test_k8s.py. gpuseat's host rule takes hosts no
node can be selected by (an IPv6 address, upper case: the selector is case-sensitive and node names are lower
case): such a seat got a Pod that stayed Pending forever; now it gets no objects, its grant fails once with the
reason and the fix, stored as the seat's state (failed) that its holder's page shows, and the other seats are
served as before; once its host names a node (or its holder is moved to a seat that does) it is set up."""

from __future__ import annotations

from pathlib import Path

from conformance.test_k8s import COURSE_TOML, KUBECONFIG, MIG, ROSTER, StandInCluster
from gpuseat.core.roster import RosterText
from gpuseat.engines.apply import course_state, one_pass
from gpuseat.engines.registry import build
from gpuseat.render.k8s import HOSTNAME_LABEL
from gpuseat.services.delivery import way_in
from gpuseat.store import CourseStore, open_store
from session_soon import session_soon

#: seat → its host (ann, bob_s, cy hold them in this order); only gpu-node-1 can be a node's name
HOSTS = {"seat-1": "2001:db8::5", "seat-2": "GPU-Node-1", "seat-3": "gpu-node-1"}


def _lab(tmp_path: Path, toml: str = COURSE_TOML) -> CourseStore:
    """ann, bob_s and cy on seat-1, seat-2 and seat-3 of :data:`HOSTS`, the cluster configured."""
    store = open_store(f"sqlite:///{tmp_path / 'k8s.db'}", create=True)
    (tmp_path / "lab.toml").write_text(toml)
    store.courses.create_course(tmp_path / "lab.toml", key="k8s-lab", timezone="UTC")
    store.roster.import_roster("k8s-lab", RosterText(ROSTER, where="roster.csv"))
    store.seats.add_seats("k8s-lab", [
        {"key": k, "kind": "mig", "host": h, "device_uuid": MIG.format(n=n), "profile": "1g.10gb",
         "memory_gb": 10.0, "engine": "kubernetes"} for n, (k, h) in enumerate(HOSTS.items(), 1)
    ])  # fmt: skip
    for person, seat in zip(("ann", "bob_s", "cy"), HOSTS, strict=True):
        store.seats.assign("k8s-lab", person, seat)
    store.agents.set_engine_settings("k8s-lab", "kubernetes", {"kubeconfig": KUBECONFIG}, actor="test")
    return store


def test_a_seat_whose_host_can_name_no_node_gets_no_objects_and_its_grant_fails_saying_why(tmp_path: Path) -> None:
    store = _lab(tmp_path)
    cluster = StandInCluster()
    people = {p.key: p for p in store.roster.participants("k8s-lab")}
    for seat in store.seats.seats("k8s-lab"):  # before a pass: a node's name is never an SSH host (ssh ann@2001:db8::5)
        way = way_in(store, seat, people[str(seat.participant)])
        assert way.command is None and str(way.missing).startswith("being prepared"), way
    result = one_pass(store, course="k8s-lab", engine="kubernetes", runner=cluster)
    outcomes = [o for r in result.reports for o in r.outcomes]
    failed = {o.step.seats: o for o in outcomes if o.state == "failed"}
    assert sorted(failed) == [("seat-1",), ("seat-2",)], [(o.step.action, o.message) for o in outcomes]
    for (seat,), o in failed.items():
        assert (o.step.action, o.exit_code) == ("namespace.create", 2)
        assert o.commands == []  # nothing sent to the cluster for it
        assert o.message.startswith(f"seat {seat}: its host {HOSTS[seat]!r} cannot be its Kubernetes node: ")
        assert "`kubectl get nodes`" in o.message and "gpuseat seats add --host NODE" in o.message, o.message
        stored = store.seats.get_seat("k8s-lab", seat)  # the refusal is the seat's state from now on
        assert stored.state == "failed" and f"its host {HOSTS[seat]!r} cannot be its Kubernetes node: " in str(
            stored.state_reason
        )
    assert "IPv6 address" in failed[("seat-1",)].message
    assert "upper-case" in failed[("seat-2",)].message and "'gpu-node-1'?" in failed[("seat-2",)].message
    assert not [o for o in outcomes if o.state != "failed" and set(o.step.seats) & {"seat-1", "seat-2"}]
    assert {o.step.action for o in outcomes if o.state == "done"} >= {"pod.create", "seat.record"}
    again = one_pass(store, course="k8s-lab", engine="kubernetes", runner=cluster)  # refused as stored: said once
    assert [o for r in again.reports for o in r.outcomes] == [] and not again.failed
    assert {k[1] or k[2] for k in cluster.objects} == {"gpuseat-cy"}  # ann and bob_s: no objects at all
    probe = cluster.objects[("Pod", "gpuseat-cy", "gpuseat-probe")]
    assert probe["spec"]["nodeSelector"] == {HOSTNAME_LABEL: "gpu-node-1"}  # a node's name: as before
    assert set(store.delivery.access_of("k8s-lab")) == {"seat-3"}  # no way in recorded for ann or bob_s
    engine = build("kubernetes", store, "k8s-lab", settings={"kubeconfig": KUBECONFIG}, runner=cluster)
    checked = {r.seat: r for r in engine.check(store.seats.seats("k8s-lab"))}  # what seats check says
    assert checked["seat-3"].ready, checked["seat-3"].reason
    for seat in ("seat-1", "seat-2"):  # the reason, not "no probe Pod (not applied yet?)"
        assert not checked[seat].ready and "cannot be its Kubernetes node" in str(checked[seat].reason)
    store.close()


def test_objects_an_older_gpuseat_applied_for_such_a_seat_are_kept_and_a_stop_still_revokes_its_access(
    tmp_path: Path,
) -> None:
    store = _lab(tmp_path)
    cluster = StandInCluster()
    engine = build("kubernetes", store, "k8s-lab", settings={"kubeconfig": KUBECONFIG}, runner=cluster)
    for doc in engine.rendered(course_state(store, "k8s-lab"))["seat-1"]:  # what the old apply made (Pending Pod)
        cluster.objects[(doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"])] = doc
    before = dict(cluster.objects)
    result = one_pass(store, course="k8s-lab", engine="kubernetes", runner=cluster)
    assert [o.step.seats for r in result.reports for o in r.failed] == [("seat-1",), ("seat-2",)]
    assert {k: v for k, v in cluster.objects.items() if k in before} == before  # nothing of ann's is deleted
    store.requests.request_seat("k8s-lab", "ann", "stop", actor="ann")
    result = one_pass(store, course="k8s-lab", engine="kubernetes", runner=cluster)
    done = [(o.step.action, o.step.target) for r in result.reports for o in r.outcomes if o.state == "done"]
    assert ("access.revoke", "gpuseat-ann/gpuseat-participant") in done and ("pods.end", "gpuseat-ann") in done
    assert ("RoleBinding", "gpuseat-ann", "gpuseat-participant") not in cluster.objects
    assert ("Namespace", "", "gpuseat-ann") in cluster.objects  # her namespace (and what is in it) stays
    store.close()


def test_before_a_session_such_a_seat_is_checked_and_found_broken_with_the_reason(tmp_path: Path) -> None:
    _at, schedule = session_soon(10)
    head = COURSE_TOML.split("[schedule]")[0]
    store = _lab(tmp_path, f"{head}{schedule}[policy]\nlead_minutes = 15\n")
    one_pass(store, course="k8s-lab", engine="kubernetes", runner=StandInCluster())
    found = store.delivery.readiness_of("k8s-lab")
    assert found["seat-3"]["state"] == "ready", found["seat-3"]
    for seat in ("seat-1", "seat-2"):  # broken for its host, not skipped, and not "no probe Pod"
        assert found[seat]["state"] == "broken" and "cannot be its Kubernetes node" in found[seat]["reason"]
    store.close()


def test_a_refused_seat_tells_its_holder_why_is_logged_once_and_after_the_fix_grants_her_way_in(
    tmp_path: Path,
) -> None:
    from fastapi.testclient import TestClient

    from gpuseat.catalog.bundle import load_catalog
    from gpuseat.readings import SeatEntry
    from gpuseat.services.delivery import checklist
    from gpuseat.web.app import Portal, create_app

    from .test_k8s_requests import _lab as lab_of_two

    store = lab_of_two(tmp_path, COURSE_TOML)  # ann on seat-1, bob_s on seat-2, both on node gpu-node-1
    seat = {"kind": "mig", "profile": "1g.10gb", "memory_gb": 10.0, "engine": "kubernetes"}
    store.seats.add_seats("k8s-lab", [{**seat, "key": k, "host": h, "device_uuid": MIG.format(n=n)}
                                      for n, k, h in ((3, "seat-3", "GPU-Node-1"), (5, "seat-5", "gpu_node_1"))])  # fmt: skip
    store.seats.move("k8s-lab", "ann", "seat-3")  # the organizer typed the node's name in upper case
    store.seats.assign("k8s-lab", "cy", "seat-5")  # and with '_'
    cluster = StandInCluster()
    links = {t.participant: t.token for t in store.tokens.issue_tokens("k8s-lab")}
    portal = Portal(store, load_catalog(), "k8s-lab", link_days_after_end=None)
    try:
        with TestClient(create_app(portal)) as client:
            page = client.get(f"/t/{links['ann']}").text  # before the first pass: set up in a minute, it says
            assert "being prepared" in page and "ssh_host" not in page  # never the host engine's fix
            result = one_pass(store, course="k8s-lab", engine="kubernetes", runner=cluster)
            failed = {o.step.target: o for r in result.reports for o in r.failed}
            assert sorted(failed) == ["gpuseat-ann", "gpuseat-cy"] and failed["gpuseat-ann"].exit_code == 2, failed
            refused = store.seats.get_seat("k8s-lab", "seat-3")
            reason = str(refused.state_reason)
            assert refused.state == "failed" and reason.startswith("its host 'GPU-Node-1' cannot be its Kubernetes")
            assert "\nTo fix: give the node's name as `kubectl get nodes` prints it" in reason  # seats status says
            page = client.get(f"/t/{links['ann']}").text
            said = page.split('id="no-connect">')[1].split("</p>")[0]
            assert said.startswith("Your seat seat-3 is out of order (its host &#39;GPU-Node-1&#39; cannot be"), said
            assert "will not appear here on its own; your organizer has to fix the seat" in said, said
            assert "being prepared" not in page and "within a minute" not in page
            assert "To fix" not in said and "gpuseat seats" not in said  # the organizer's commands stay theirs
            assert "--namespace=gpuseat-bob-s" in client.get(f"/t/{links['bob_s']}").text  # bob is served
            ready = checklist(store, "k8s-lab")
            assert dict(ready.broken)["seat-3"].startswith("out of order: its host 'GPU-Node-1'")
            assert not {"seat-3", "seat-5"} & set(ready.preparing)

            logged = len(store.events.events("k8s-lab", limit=10_000))
            for _again in range(2):  # the agent's next passes: nothing fails, nothing is logged, it is noted
                again = one_pass(store, course="k8s-lab", engine="kubernetes", runner=cluster)
                assert not again.failed and not [o for r in again.reports for o in r.outcomes]
                assert any(n.startswith("seat seat-3 (ann's) is failed") for p in again.planned
                           for n in (p.changes.notes if p.changes else []))  # fmt: skip
            assert len(store.events.events("k8s-lab", limit=10_000)) == logged
            assert not [k for k in cluster.objects if {"gpuseat-ann", "gpuseat-cy"} & set(k[1:])]  # nothing applied

            # ann: the fix the refusal names (a seat on the node's name, ann moved there); cy: her seat's host
            # corrected in place by a seats file
            store.seats.add_seats("k8s-lab", [{**seat, "key": "seat-4", "host": "gpu-node-1",
                                               "device_uuid": MIG.format(n=4)}])  # fmt: skip
            store.seats.move("k8s-lab", "ann", "seat-4")
            fixed = SeatEntry("seat-5", MIG.format(n=5), participant="cy", host="gpu-node-1", profile="1g.10gb")
            store.seatfile.import_seat_file("k8s-lab", [fixed])
            result = one_pass(store, course="k8s-lab", engine="kubernetes", runner=cluster)
            done = {(o.step.action, o.step.target) for r in result.reports for o in r.outcomes if o.state == "done"}
            assert not result.failed and {("access.grant", "gpuseat-ann/gpuseat-participant"),
                                          ("access.grant", "gpuseat-cy/gpuseat-participant"),
                                          ("seat.mend", "seat-3"), ("seat.mend", "seat-5")} <= done, done  # fmt: skip
            for who, ns in (("ann", "gpuseat-ann"), ("cy", "gpuseat-cy")):
                page = client.get(f"/t/{links[who]}").text
                assert f"kubectl config set-context --current --namespace={ns}" in page and "out of order" not in page
            assert store.seats.get_seat("k8s-lab", "seat-5").state == "planned"
            old = store.seats.get_seat("k8s-lab", "seat-3")  # nobody holds it: planned again, so it can be removed
            assert old.state == "planned" and "still names no node" in str(old.state_reason), old
            assert store.lifecycle.remove_seats("k8s-lab", ["seat-3"], actor="test") == ["seat-3"]
            assert one_pass(store, course="k8s-lab", engine="kubernetes", runner=cluster).reports[0].outcomes == []
    finally:
        store.close()
