"""A participant's stop, start, restart, reset and key on a Kubernetes seat, and seat hours there
(:mod:`gpuseat.engines.kubernetes.requests`), against the recording stand-in cluster of
tests/conformance/test_k8s.py: a stopped seat is a closed access window for one participant (her RoleBinding
deleted, her pods ended) and stays so until her start; a reset makes her namespace afresh (her volume claim
gone); bob's namespace is never touched; each request ends done or failed with the reason, and the pass
after it plans nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from conformance.test_k8s import COURSE_TOML, KUBECONFIG, MIG, ROSTER, StandInCluster
from gpuseat.core.roster import RosterText
from gpuseat.core.seating import AGENT_ACTOR
from gpuseat.engines.apply import Pass, course_state, one_pass
from gpuseat.engines.kubernetes.requests import NO_SSH_LOGIN
from gpuseat.store import CourseStore, open_store

ANN = "gpuseat-ann"
BINDING = ("RoleBinding", ANN, "gpuseat-participant")
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGQXt3Pm4gjV0FwTsjmdZ3jwGQdcdzSx92Euav4GCXzs ann@laptop"


def _lab(tmp_path: Path, toml: str, second: str = "bob_s") -> CourseStore:
    """The conformance lab (ann on seat-1, ``second`` on seat-2) from ``toml``, its cluster configured."""
    store = open_store(f"sqlite:///{tmp_path / 'k8s.db'}", create=True)
    (tmp_path / "lab.toml").write_text(toml)
    store.courses.create_course(tmp_path / "lab.toml", key="k8s-lab", timezone="UTC")
    store.roster.import_roster("k8s-lab", RosterText(ROSTER, where="roster.csv"))
    store.seats.add_seats("k8s-lab", [
        {"key": f"seat-{n}", "kind": "mig", "host": "gpu-node-1", "device_uuid": MIG.format(n=n),
         "profile": "1g.10gb", "memory_gb": 10.0, "engine": "kubernetes"} for n in (1, 2)
    ])  # fmt: skip
    store.seats.assign("k8s-lab", "ann", "seat-1")
    store.seats.assign("k8s-lab", second, "seat-2")
    store.agents.set_engine_settings("k8s-lab", "kubernetes", {"kubeconfig": KUBECONFIG}, actor="test")
    return store


def _pass(store: CourseStore, cluster: StandInCluster, now: datetime | None = None) -> list[tuple[str, str]]:
    """One agent pass; the (action, target) of each step carried out."""
    result: Pass = one_pass(store, course="k8s-lab", engine="kubernetes", runner=cluster, now=now)
    assert not result.failed, result.failed
    return [(o.step.action, o.step.target) for r in result.reports for o in r.outcomes if o.state == "done"]


def _asked(store: CourseStore, action: str) -> tuple[str, str | None]:
    """(state, reason) of ann's latest request of ``action``."""
    r = next(x for x in store.requests.seat_requests("k8s-lab", participant="ann") if x.action == action)
    return r.state, r.reason


def _bobs(cluster: StandInCluster) -> dict[Any, Any]:
    return {k: v for k, v in cluster.objects.items() if "bob" in k[1] + k[2]}


def test_a_stop_revokes_ann_alone_until_her_start_a_restart_ends_her_pods_and_a_reset_remakes_her_namespace(
    tmp_path: Path,
) -> None:
    store = _lab(tmp_path, COURSE_TOML)
    try:
        cluster = StandInCluster()
        _pass(store, cluster)
        bobs = _bobs(cluster)
        assert BINDING in cluster.objects and len(bobs) == 4
        train = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train", "namespace": ANN}}
        claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": ANN}}
        cluster.objects[("Pod", ANN, "train")] = train
        cluster.objects[("PersistentVolumeClaim", ANN, "data")] = claim

        store.requests.request_seat("k8s-lab", "ann", "stop", actor="ann")
        done = _pass(store, cluster)
        assert ("access.revoke", f"{ANN}/gpuseat-participant") in done and ("pods.end", ANN) in done
        assert BINDING not in cluster.objects and not [k for k in cluster.objects if k[:2] == ("Pod", ANN)]
        assert ("PersistentVolumeClaim", ANN, "data") in cluster.objects  # a stop keeps her data
        said = f"stopped: your access to namespace {ANN} is revoked and your pods ended, until a start"
        assert _asked(store, "stop") == ("done", said)
        page = store.requests.page_of("k8s-lab", "ann")
        assert page.run_state is not None and not page.run_state.running and page.run_state.reason == said
        way = store.delivery.access_of("k8s-lab")["seat-1"]
        assert way["notes"][0] == f"stopped: on ann's request; no access to namespace {ANN} until a start", way
        assert _pass(store, cluster) == []  # it stays so: nothing binds her again
        assert BINDING not in cluster.objects

        store.requests.request_seat("k8s-lab", "ann", "key", actor="ann", key=KEY)
        assert _pass(store, cluster) == [("request.record", ANN)]
        assert _asked(store, "key") == ("failed", NO_SSH_LOGIN)
        assert BINDING not in cluster.objects  # a key starts nothing

        store.requests.request_seat("k8s-lab", "ann", "start", actor="ann")
        done = _pass(store, cluster)
        assert ("access.grant", f"{ANN}/gpuseat-participant") in done and BINDING in cluster.objects
        assert ("Pod", ANN, "gpuseat-probe") in cluster.objects
        assert _asked(store, "start") == ("done", f"started: you can use namespace {ANN} again")
        assert not store.delivery.access_of("k8s-lab")["seat-1"]["notes"][0].startswith("stopped")
        assert _pass(store, cluster) == []

        cluster.objects[("Pod", ANN, "train")] = train
        store.requests.request_seat("k8s-lab", "ann", "restart", actor="ann")
        done = _pass(store, cluster)
        assert done[0] == ("pods.end", ANN) and ("pod.create", f"{ANN}/gpuseat-probe") in done
        assert ("Pod", ANN, "train") not in cluster.objects and ("Pod", ANN, "gpuseat-probe") in cluster.objects
        assert BINDING in cluster.objects and ("PersistentVolumeClaim", ANN, "data") in cluster.objects
        assert _asked(store, "restart")[0] == "done" and "your access stays" in str(_asked(store, "restart")[1])
        assert _pass(store, cluster) == []

        store.requests.request_seat("k8s-lab", "ann", "reset", actor="ann")
        done = _pass(store, cluster)
        assert done[:2] == [("namespace.delete", ANN), ("namespace.create", ANN)], done
        assert ("PersistentVolumeClaim", ANN, "data") not in cluster.objects  # everything in it is gone
        assert BINDING in cluster.objects and ("ResourceQuota", ANN, "gpuseat-one-gpu") in cluster.objects
        state, reason = _asked(store, "reset")
        assert state == "done" and reason is not None and "PersistentVolumeClaims and their data too" in reason
        assert _pass(store, cluster) == []
        assert _bobs(cluster) == bobs  # bob's namespace was never touched
        assert store.requests.seat_requests("k8s-lab", participant="bob_s") == []
    finally:
        store.close()


def test_a_key_asked_before_a_move_is_kept_without_saying_a_seat_that_takes_none_gets_it(tmp_path: Path) -> None:
    """Ann asks for a new key on her Kubernetes seat and is moved to another before the agent comes by: the
    request ends done (the key is hers, stored), and its record no longer says the key goes to the seat she
    holds now, which takes no SSH key (it said "stored: your key goes to the seat you hold now")."""
    store = _lab(tmp_path, COURSE_TOML)
    try:
        cluster = StandInCluster()
        _pass(store, cluster)
        store.seats.add_seats("k8s-lab", [
            {"key": "seat-3", "kind": "mig", "host": "gpu-node-1", "device_uuid": MIG.format(n=3),
             "profile": "1g.10gb", "memory_gb": 10.0, "engine": "kubernetes"}
        ])  # fmt: skip
        store.requests.request_seat("k8s-lab", "ann", "key", actor="ann", key=KEY)
        store.seats.move("k8s-lab", "ann", "seat-3")
        _pass(store, cluster)
        assert _asked(store, "key") == (
            "done",
            "stored: your key is installed on the seat you hold now (or get next) if that seat takes an SSH key; "
            "you left seat-1 before it was installed there",
        )
    finally:
        store.close()


def test_outside_the_access_window_a_start_fails_with_the_reason_and_inside_it_grants(tmp_path: Path) -> None:
    toml = COURSE_TOML.replace("days = 5\n", 'days = 5\nhours = "09:00-17:00"\naccess = "08:00-22:00"\n')
    store = _lab(tmp_path, toml)
    try:
        cluster = StandInCluster()
        open_at, shut_at = datetime(2026, 9, 8, 12, tzinfo=UTC), datetime(2026, 9, 9, 3, tzinfo=UTC)
        _pass(store, cluster, open_at)
        store.requests.request_seat("k8s-lab", "ann", "stop", actor="ann")
        _pass(store, cluster, open_at)
        assert BINDING not in cluster.objects

        closed = course_state(store, "k8s-lab", now=shut_at).closed
        assert closed
        store.requests.request_seat("k8s-lab", "ann", "start", actor="ann")
        done = _pass(store, cluster, shut_at)  # the window shuts bob out; ann's start is refused
        assert [x for x in done if ANN in x[1]] == [("request.record", ANN)], done
        assert _asked(store, "start") == ("failed", f"the seat cannot run now: {closed}")
        assert BINDING not in cluster.objects
        done = _pass(store, cluster, open_at)  # bob is let in again, ann's seat stays stopped
        assert [x for x in done if ANN in x[1]] == [], done

        store.requests.request_seat("k8s-lab", "ann", "start", actor="ann")
        assert ("access.grant", f"{ANN}/gpuseat-participant") in _pass(store, cluster, open_at)
        assert BINDING in cluster.objects and _asked(store, "start")[0] == "done"
    finally:
        store.close()


def test_out_of_hours_the_seat_stops_a_start_is_refused_and_after_a_topup_a_start_grants(tmp_path: Path) -> None:
    from sqlalchemy import create_engine, text

    store = _lab(tmp_path, COURSE_TOML + "\n[policy]\nquota_hours = 1\n")
    try:
        cluster = StandInCluster()
        _pass(store, cluster)
        bobs = _bobs(cluster)
        db = create_engine(f"sqlite:///{tmp_path / 'k8s.db'}")
        with db.begin() as conn:  # as if ann had held her seat for 2 h
            conn.execute(text("UPDATE assignments SET valid_from = :t WHERE valid_to IS NULL AND participant_id = "
                              "(SELECT id FROM participants WHERE key = 'ann')"),
                         {"t": datetime.now(UTC) - timedelta(hours=2)})  # fmt: skip
        db.dispose()

        done = _pass(store, cluster)
        assert {("access.revoke", f"{ANN}/gpuseat-participant"), ("pods.end", ANN), ("seat.stop", "seat-1")} <= set(
            done
        ), done
        assert BINDING not in cluster.objects
        page = store.requests.page_of("k8s-lab", "ann")
        assert page.run_state is not None and not page.run_state.running
        assert (page.run_state.reason or "").startswith("no seat hours left: 2.0 of 1 h used"), page.run_state
        stop = store.requests.seat_requests("k8s-lab", participant="ann")[0]
        assert (stop.action, stop.state, stop.actor) == ("stop", "done", AGENT_ACTOR)
        way = store.delivery.access_of("k8s-lab")["seat-1"]
        assert way["notes"][0] == f"stopped: {page.run_state.reason}", way
        assert _pass(store, cluster) == []  # the stop is recorded once

        store.requests.request_seat("k8s-lab", "ann", "start", actor="ann")
        assert _pass(store, cluster) == [("request.record", ANN)]
        assert _asked(store, "start") == ("failed", "no seat hours left (0 of 1 h): ask the organizer for more")
        assert BINDING not in cluster.objects

        store.requests.add_seat_hours("k8s-lab", "ann", 5, actor="organizer")
        assert _pass(store, cluster) == []  # a top-up alone starts nothing: her start does
        store.requests.request_seat("k8s-lab", "ann", "start", actor="ann")
        _pass(store, cluster)
        assert BINDING in cluster.objects and _asked(store, "start")[0] == "done"
        assert _pass(store, cluster) == []
        assert _bobs(cluster) == bobs
    finally:
        store.close()
