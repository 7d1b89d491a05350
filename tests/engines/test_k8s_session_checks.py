"""Ready before every session on Kubernetes seats (:mod:`gpuseat.engines.sessions`, the rule of every
engine), against the recording stand-in cluster of tests/conformance/test_k8s.py: 10 minutes before a lab
session (lead 15) one pass checks each holder's seat as ``seats check`` does (its probe Pod's log) and
stores the verdict; a ready seat is not checked again, a broken one (its probe Pod still Pending) only
after four minutes."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from conformance.test_k8s import COURSE_TOML, KUBECONFIG, MIG, StandInCluster
from gpuseat.engines import registry
from gpuseat.engines.apply import course_state
from session_soon import session_soon

from .test_k8s_requests import _lab


class PendingFor(StandInCluster):
    """The stand-in cluster, where the probe Pod in ``namespace`` is never scheduled (no GPU free)."""

    def __init__(self) -> None:
        super().__init__()
        self.pending = ""

    def _execute(self, args: Any, *rest: Any) -> subprocess.CompletedProcess[str]:
        done = super()._execute(args, *rest)
        argv = list(args)
        if argv[3:5] == ["get", "pod"] and argv[argv.index("-n") + 1] == self.pending and done.returncode == 0:
            done.stdout = done.stdout.replace('"phase": "Succeeded"', '"phase": "Pending"')
        return done


def test_before_a_session_each_holders_seat_is_checked_once_a_broken_one_again_after_four_minutes(
    tmp_path: Path,
) -> None:
    at, schedule = session_soon(10)
    head = COURSE_TOML.split("[schedule]")[0]
    store = _lab(tmp_path, f"{head}{schedule}[policy]\nlead_minutes = 15\n", second="cy")
    try:
        cluster = PendingFor()
        engine = registry.build("kubernetes", store, "k8s-lab", settings={"kubeconfig": KUBECONFIG}, runner=cluster)
        cluster.pending = engine.namespace_of(next(p for p in store.roster.participants("k8s-lab") if p.key == "cy"))
        early = engine.plan(course_state(store, "k8s-lab", now=at - timedelta(minutes=30)))
        assert "seat.check" not in {s.action for s in early.steps}  # no session near yet
        assert not engine.apply(early).failed

        changes = engine.plan(course_state(store, "k8s-lab"))
        assert [(s.action, s.target, s.participant) for s in changes.steps] == [
            ("seat.check", "seat-1", "ann"), ("seat.check", "seat-2", "cy"),
        ]  # fmt: skip
        assert not engine.apply(changes).failed
        found = store.delivery.readiness_of("k8s-lab")
        assert (found["seat-1"]["state"], found["seat-1"]["visible"]) == ("ready", [MIG.format(n=1)])
        assert found["seat-2"]["state"] == "broken"
        assert found["seat-2"]["reason"] == f"the probe Pod in {cluster.pending} is Pending, not Succeeded"

        assert engine.plan(course_state(store, "k8s-lab")).empty  # right after: nothing to check
        later = engine.plan(course_state(store, "k8s-lab", now=datetime.now(UTC) + timedelta(minutes=5)))
        assert [(s.action, s.target) for s in later.steps] == [("seat.check", "seat-2")]
    finally:
        store.close()
