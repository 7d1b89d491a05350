"""Kubernetes seats from the participant's side, as the adversary, against ``carve --render k8s`` output.

No cluster runs here, so admission is judged by the rules Kubernetes documents for what the render
relies on, written out below and applied to the rendered objects:

* ResourceQuota ("Resource Quotas", extended resources): only ``requests.<resource>`` can be limited; a
  container that sets only a limit for an extended resource gets an equal request; a Pod is refused when
  the namespace's summed requests would pass any ``hard`` value; resources the quota does not list are
  not limited (the nodes offer only the layout's resources, so an unlisted one cannot be scheduled).
* RBAC: a RoleBinding grants its ClusterRole inside its own namespace only; nothing else is bound.

Every attack Pod is first checked with ``kubernetes-validate --strict``, so that the quota or RBAC, not a
malformed manifest, is what stops it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml
from kubernetes_validate import validate as k8s_validate

from gpuseat.catalog.bundle import load_catalog
from gpuseat.core.carve import CarveRequest, carve
from gpuseat.core.inventory import server_from_toml
from gpuseat.core.needs import SeatNeed
from gpuseat.files import read_toml
from gpuseat.render.base import RenderOptions, render
from gpuseat.render.k8s import resource_for

CATALOG = load_catalog()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
VERSION = "1.30"
PEOPLE = ("ann", "bob", "cy", "dee", "eve")


def mixed_layout():
    """An H200 server carved into MIG slices of several sizes (so there are other resources to steal)."""
    server = server_from_toml(read_toml(EXAMPLES / "h200-2x-server.toml"), CATALOG, where="inventory")
    request = CarveRequest(
        need=SeatNeed(isolation="shared"), profiles=("3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb", "1g.18gb+me")
    )
    return carve(server, request, CATALOG)


class Cluster:
    """The rendered objects, and admission by the documented quota and RBAC rules."""

    def __init__(self, layout, people):
        self.docs = [
            yaml.safe_load(a.text)
            for a in render(layout, "k8s", CATALOG, RenderOptions(participants=people))
            if a.kind != "runbook"
        ]
        self.quota = {d["metadata"]["namespace"]: d["spec"]["hard"] for d in self.docs if d["kind"] == "ResourceQuota"}
        self.bindings = [d for d in self.docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")]
        self.used: dict[str, Counter[str]] = {ns: Counter() for ns in self.quota}

    def namespace_of(self, user: str) -> str:
        (ns,) = [b["metadata"]["namespace"] for b in self.bindings if b["subjects"][0]["name"] == user]
        return ns

    def may_create_pods(self, user: str, namespace: str) -> bool:
        return any(
            b["kind"] == "RoleBinding"
            and b["metadata"]["namespace"] == namespace
            and b["roleRef"]["name"] in ("edit", "admin")
            and any(s["kind"] == "User" and s["name"] == user for s in b["subjects"])
            for b in self.bindings
        )

    def submit(self, user: str, pod: dict) -> str:
        """'admitted' or why not."""
        assert k8s_validate(pod, VERSION, strict=True)
        ns = pod["metadata"]["namespace"]
        if not self.may_create_pods(user, ns):
            return f"forbidden: {user} cannot create pods in {ns}"
        want: Counter[str] = Counter()
        for c in pod["spec"]["containers"]:
            res = c.get("resources", {})
            requests = {**{k: v for k, v in res.get("limits", {}).items() if "/" in k}, **res.get("requests", {})}
            for name, qty in requests.items():
                want[name] += int(qty)
        hard = self.quota.get(ns, {})
        for name, qty in want.items():
            limit = hard.get(f"requests.{name}")
            if limit is not None and self.used[ns][name] + qty > int(limit):
                return f"exceeded quota: gpuseat-one-gpu, requested: requests.{name}={qty}"
        self.used[ns] += want
        return "admitted"


def gpu_pod(namespace: str, name: str, limits: dict[str, str], containers: int = 1) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "containers": [
                {"name": f"c{i}", "image": "nvidia/cuda:12.4.1-base-ubuntu22.04", "resources": {"limits": limits}}
                for i in range(containers)
            ]
        },
    }


@pytest.fixture
def cluster():
    layout = mixed_layout()
    return Cluster(layout, PEOPLE[: len(layout.slices)]), layout


def test_each_participant_gets_one_gpu_of_their_kind_and_not_one_more(cluster):
    c, layout = cluster
    for person, item in zip(PEOPLE, layout.slices, strict=False):
        ns = c.namespace_of(person)
        own = resource_for(item)
        assert c.submit(person, gpu_pod(ns, "train", {own: "1"})) == "admitted"
        # a second Pod, two in one Pod, two containers: all over the quota
        assert c.submit(person, gpu_pod(ns, "again", {own: "1"})).startswith("exceeded quota")
        assert c.submit(person, gpu_pod(ns, "two", {own: "2"})).startswith("exceeded quota")
        assert c.submit(person, gpu_pod(ns, "pair", {own: "1"}, containers=2)).startswith("exceeded quota")


def test_other_slice_sizes_and_whole_gpus_are_out_of_reach(cluster):
    c, layout = cluster
    small = next(i for i, s in enumerate(layout.slices) if s.profile == "1g.18gb")
    person, ns = PEOPLE[small], c.namespace_of(PEOPLE[small])
    for other in sorted({resource_for(s) for s in layout.slices} - {resource_for(layout.slices[small])}):
        assert c.submit(person, gpu_pod(ns, "bigger", {other: "1"})).startswith("exceeded quota"), other
    assert c.submit(person, gpu_pod(ns, "whole", {"nvidia.com/gpu": "1"})).startswith("exceeded quota")


def test_nobody_reaches_another_participants_namespace(cluster):
    c, layout = cluster
    ann_ns, bob_ns = c.namespace_of("ann"), c.namespace_of("bob")
    bob_resource = resource_for(layout.slices[1])
    assert c.submit("ann", gpu_pod(bob_ns, "steal", {bob_resource: "1"})).startswith("forbidden")
    assert c.submit("ann", gpu_pod("default", "elsewhere", {bob_resource: "1"})).startswith("forbidden")
    assert c.submit("mallory", gpu_pod(ann_ns, "x", {"nvidia.com/gpu": "1"})).startswith("forbidden")
    # no cluster-wide grant, and the role cannot change quotas (edit reads ResourceQuotas only)
    assert all(b["kind"] == "RoleBinding" and b["roleRef"]["name"] == "edit" for b in c.bindings)
    assert {len(b["subjects"]) for b in c.bindings} == {1}


def test_a_hand_over_leaves_the_previous_holder_no_binding(cluster):
    _, layout = cluster
    before = Cluster(layout, ("ann", "bob"))
    after = Cluster(layout, ("cy", "bob"))  # seat 1 moved from ann to cy
    assert before.namespace_of("ann") == "gpuseat-ann"
    assert not any(s["name"] == "ann" for b in after.bindings for s in b["subjects"])
    assert after.submit("ann", gpu_pod("gpuseat-ann", "x", {resource_for(layout.slices[0]): "1"})).startswith(
        "forbidden"
    )
    assert after.submit("cy", gpu_pod("gpuseat-cy", "x", {resource_for(layout.slices[0]): "1"})) == "admitted"
