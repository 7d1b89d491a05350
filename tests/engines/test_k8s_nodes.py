"""A Kubernetes seat's host is the name of the node its probe Pod is pinned to (``kubernetes.io/hostname``),
against the recording stand-in cluster of tests/conformance/test_k8s.py. gpuseat's host rule takes hosts no
node can be selected by (an IPv6 address, upper case: the selector is case-sensitive and node names are lower
case): such a seat got a Pod that stayed Pending forever; now it gets no objects, its grant fails with the
reason and the fix, and the other seats are served as before."""

from __future__ import annotations

from pathlib import Path

from conformance.test_k8s import COURSE_TOML, KUBECONFIG, MIG, ROSTER, StandInCluster
from gpuseat.core.roster import RosterText
from gpuseat.engines.apply import course_state, one_pass
from gpuseat.engines.registry import build
from gpuseat.render.k8s import HOSTNAME_LABEL
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
    for _pass in range(2):  # the second pass refuses the same, and adds nothing for cy
        result = one_pass(store, course="k8s-lab", engine="kubernetes", runner=cluster)
        outcomes = [o for r in result.reports for o in r.outcomes]
        failed = {o.step.seats: o for o in outcomes if o.state == "failed"}
        assert sorted(failed) == [("seat-1",), ("seat-2",)], [(o.step.action, o.message) for o in outcomes]
        for (seat,), o in failed.items():
            assert (o.step.action, o.exit_code) == ("namespace.create", 2)
            assert o.commands == []  # nothing sent to the cluster for it
            assert o.message.startswith(f"seat {seat}: its host {HOSTS[seat]!r} cannot be its Kubernetes node: ")
            assert "`kubectl get nodes`" in o.message and "gpuseat seats add --host NODE" in o.message, o.message
        assert "IPv6 address" in failed[("seat-1",)].message
        assert "upper-case" in failed[("seat-2",)].message and "'gpu-node-1'?" in failed[("seat-2",)].message
        waiting = {o.step.seats for o in outcomes if o.state == "skipped"}
        assert waiting == {("seat-1",), ("seat-2",)}  # their way in (seat.record) waits for the refused grant
        assert not [o for o in outcomes if o.state == "done" and set(o.step.seats) & {"seat-1", "seat-2"}]
        assert {k[1] or k[2] for k in cluster.objects} == {"gpuseat-cy"}  # ann and bob_s: no objects at all
        if _pass == 0:
            assert {o.step.action for o in outcomes if o.state == "done"} >= {"pod.create", "seat.record"}
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
