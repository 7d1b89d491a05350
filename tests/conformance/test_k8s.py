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

import re
from collections import Counter
from pathlib import Path

import pytest
import yaml
from kubernetes_validate import validate as k8s_validate
from kubernetes_validate.utils import all_versions

from gpuseat.catalog.bundle import load_catalog
from gpuseat.core.carve import CarveRequest, carve
from gpuseat.core.inventory import server_from_toml
from gpuseat.core.needs import SeatNeed
from gpuseat.engines.runner import RecordingRunner
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


# -- the kubernetes engine: plan and apply through the Runner, against a recording stand-in cluster ------


COURSE_TOML = """name = "K8s lab"
participants = 3

[needs]
min_gpu_memory_gb = 8
isolation = "partitioned"

[schedule]
start = 2026-09-07
days = 5
"""
# ann and cy have no Unix user of their own (their derived logins are "ann", "cy"); bob's has an underscore,
# which a Kubernetes name cannot have
ROSTER = "name,email,group,unix_user\nAnn,ann@example.edu,participants,\nBob,bob@example.edu,participants,bob_s\n"
ROSTER += "Cy,cy@example.edu,participants,\n"
KUBECONFIG = "/etc/gpuseat/lab.kubeconfig"
MIG = "MIG-{n:08d}-0000-0000-0000-00000000000{n}"


class StandInCluster(RecordingRunner):
    """A RecordingRunner that answers kubectl like an API server keeping objects: ``apply`` stores each
    manifest (validated with kubernetes-validate --strict first, as admission would refuse a malformed
    one), ``delete`` removes (a namespace with everything in it), ``get`` lists by the course label (or every
    namespace, without one)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.validated = 0

    def _execute(self, args, timeout, user, env, input, cwd):
        import json
        import subprocess

        argv = list(args)
        assert argv[:3] == ["kubectl", "--kubeconfig", KUBECONFIG], argv
        verb, rest = argv[3], argv[4:]

        def done(out: str = "", code: int = 0, err: str = ""):
            return subprocess.CompletedProcess(argv, code, out, err)

        if verb == "apply":
            doc = yaml.safe_load(input)
            assert k8s_validate(doc, VERSION, strict=True)
            self.validated += 1
            if "--dry-run=server" in rest:
                return done("created (server dry run)")
            meta = doc["metadata"]
            self.objects[(doc["kind"], meta.get("namespace", ""), meta["name"])] = doc
            return done("configured")
        if verb == "delete":
            kind, name = rest[0], rest[1]
            if kind == "namespace":
                self.objects = {k: v for k, v in self.objects.items() if name not in (k[1], k[2])}
            elif kind == "pods" and name == "--all":
                ns = rest[rest.index("-n") + 1]
                self.objects = {k: v for k, v in self.objects.items() if not (k[0] == "Pod" and k[1] == ns)}
            else:
                ns = rest[rest.index("-n") + 1]
                found = next(k for k in self.objects if k[0].lower() == kind and k[1:] == (ns, name))
                del self.objects[found]
            return done("deleted")
        if verb == "get":
            if rest[0] == "pod":
                ns = rest[rest.index("-n") + 1]
                if ("Pod", ns, rest[1]) not in self.objects:
                    return done(code=1, err=f'Error from server (NotFound): pods "{rest[1]}" not found')
                return done(json.dumps({**self.objects[("Pod", ns, rest[1])], "status": {"phase": "Succeeded"}}))
            kinds = {"namespaces": ("Namespace",), "pods": ("Pod",)}.get(
                rest[0], ("ResourceQuota", "RoleBinding", "Pod")
            )
            if "-l" in rest:
                want = dict(x.split("=") for x in rest[rest.index("-l") + 1].split(","))
                items = [v for k, v in self.objects.items() if k[0] in kinds
                         and all(v["metadata"].get("labels", {}).get(a) == b for a, b in want.items())]  # fmt: skip
            elif "-n" in rest:
                ns = rest[rest.index("-n") + 1]
                items = [v for k, v in self.objects.items() if k[0] in kinds and k[1] == ns]
            else:  # every namespace, whoever made it
                items = [v for k, v in self.objects.items() if k[0] in kinds]
            return done(json.dumps({"items": items}))
        if verb == "logs":
            ns = rest[rest.index("-n") + 1]
            seat = self.objects[("Pod", ns, "gpuseat-probe")]["metadata"]["labels"]["gpuseat/seat"]
            n = int(seat.rsplit("-", 1)[1])
            return done(f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)\n"
                        f"  MIG 1g.10gb     Device  0: (UUID: {MIG.format(n=n)})\n")  # fmt: skip
        raise AssertionError(f"unexpected kubectl call {argv}")

    def namespaces(self) -> set[str]:
        return {k[2] for k in self.objects if k[0] == "Namespace"}


@pytest.fixture
def lab(tmp_path):
    from gpuseat.core.roster import RosterText
    from gpuseat.store import open_store

    store = open_store(f"sqlite:///{tmp_path / 'k8s.db'}", create=True)
    course = tmp_path / "k8s-lab.toml"
    course.write_text(COURSE_TOML, encoding="utf-8")
    store.courses.create_course(course, key="k8s-lab")
    store.roster.import_roster("k8s-lab", RosterText(ROSTER, where="roster.csv"))
    store.seats.add_seats(
        "k8s-lab",
        [
            {"key": f"seat-{n}", "kind": "mig", "host": "gpu-node-1", "device_uuid": MIG.format(n=n),
             "profile": "1g.10gb" if n < 3 else "2g.20gb", "memory_gb": 10.0 if n < 3 else 20.0, "engine": "kubernetes"}
            for n in (1, 2, 3)
        ],
    )  # fmt: skip
    store.seats.assign("k8s-lab", "ann", "seat-1")
    store.seats.assign("k8s-lab", "bob_s", "seat-2")
    yield store
    store.close()


def k8s_pass(store, runner):
    from gpuseat.engines.apply import one_pass

    result = one_pass(store, course="k8s-lab", engine="kubernetes", runner=runner)
    assert not result.failed, result.failed
    (planned,) = result.planned
    return planned, result


def test_without_a_cluster_the_dry_run_prints_the_rendered_plan_and_a_real_apply_says_what_to_set(lab, cli):
    from gpuseat.engines.apply import course_state
    from gpuseat.engines.registry import build

    engine = build("kubernetes", lab, "k8s-lab", runner=RecordingRunner(dry_run=True))
    changes = engine.plan(course_state(lab, "k8s-lab"))
    grants = [(s.action, s.target) for s in changes.steps if s.phase == "grant"]
    bob_ns = engine.namespace_of(lab.roster.find_participant("k8s-lab", "bob_s"))
    assert re.fullmatch(r"gpuseat-bob-s-[0-9a-f]{8}", bob_ns)  # bob_s is no Kubernetes name: a DNS label of it
    assert grants == [
        ("namespace.create", "gpuseat-ann"), ("quota.set", "gpuseat-ann/gpuseat-one-gpu"),
        ("access.grant", "gpuseat-ann/gpuseat-participant"), ("pod.create", "gpuseat-ann/gpuseat-probe"),
        ("namespace.create", bob_ns), ("quota.set", f"{bob_ns}/gpuseat-one-gpu"),
        ("access.grant", f"{bob_ns}/gpuseat-participant"), ("pod.create", f"{bob_ns}/gpuseat-probe"),
    ]  # fmt: skip
    manifests = [s.data["manifest"] for s in changes.steps if "manifest" in s.data]
    for version in (VERSION, max(all_versions(), key=lambda v: tuple(int(x) for x in v.split(".")))):
        for doc in manifests:
            assert k8s_validate(doc, version, strict=True), doc["metadata"]
    pods = [d for d in manifests if d["kind"] == "Pod"]
    assert [d["spec"]["containers"][0]["resources"]["limits"] for d in pods] == [{"nvidia.com/mig-1g.10gb": "1"}] * 2
    assert {d["spec"]["nodeSelector"]["kubernetes.io/hostname"] for d in pods} == {"gpu-node-1"}
    quota = next(d for d in manifests if d["kind"] == "ResourceQuota")
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "0", "requests.nvidia.com/mig-1g.10gb": "1",
                                     "requests.nvidia.com/mig-2g.20gb": "0"}  # fmt: skip
    binding = next(d for d in manifests if d["kind"] == "RoleBinding")
    assert binding["subjects"][0]["name"] == "ann" and binding["roleRef"]["name"] == "edit"
    assert any("no cluster is configured" in n for n in changes.notes)

    r = cli("apply", "--engine", "kubernetes", "--dry-run", "--course", "k8s-lab", "--db", lab.url)
    assert r.code == 0, r.out + r.err
    assert "+ namespace.create" in r.out and "would run: kubectl apply -f -" in r.out
    assert "--dry-run=server" not in r.out  # only against a configured cluster
    assert lab.delivery.access_of("k8s-lab") == {}  # a dry run records nothing

    r = cli("apply", "--engine", "kubernetes", "--course", "k8s-lab", "--db", lab.url)
    assert r.code == 2 and "Traceback" not in r.err
    assert "no Kubernetes cluster is configured" in r.err and "kubeconfig=" in r.err
    assert r.err.count("no Kubernetes cluster is configured") <= 2  # one line for the plan, one summary


def test_apply_then_a_second_plan_is_empty_and_a_hand_over_revokes_before_it_grants(lab):
    lab.agents.set_engine_settings("k8s-lab", "kubernetes", {"kubeconfig": KUBECONFIG}, actor="test")
    cluster = StandInCluster()
    planned, _ = k8s_pass(lab, cluster)
    ann_ns = "gpuseat-ann"
    bob_ns = planned.engine.namespace_of(lab.roster.find_participant("k8s-lab", "bob_s"))
    assert cluster.namespaces() == {ann_ns, bob_ns} and cluster.validated == 8
    access = lab.delivery.access_of("k8s-lab")
    assert access["seat-1"]["holder"] == "ann" and access["seat-1"]["kind"] == "kubernetes"
    assert access["seat-1"]["command"] == f"kubectl config set-context --current --namespace={ann_ns}"
    assert planned.engine.connect(lab.seats.get_seat("k8s-lab", "seat-1")).user == "ann"

    again, _ = k8s_pass(lab, cluster)
    assert again.changes.empty, again.changes.to_dict()

    # hand-over: ann's seat goes to cy (store only); the pass deletes ann's namespace before cy's is made
    lab.seats.release("k8s-lab", participant="ann")
    lab.seats.assign("k8s-lab", "cy", "seat-1")
    assert planned.engine.connect(lab.seats.get_seat("k8s-lab", "seat-1")) is None  # being prepared, never ann's way in
    planned, result = k8s_pass(lab, cluster)
    (report,) = result.reports
    order = [(o.step.action, o.step.target) for o in report.outcomes]
    assert order[0] == ("namespace.delete", ann_ns) and order[1] == ("namespace.create", "gpuseat-cy")
    commands = [c.argv[3:] for o in report.outcomes for c in o.commands]
    assert commands[0] == ("delete", "namespace", ann_ns, "--ignore-not-found", "--wait=true", "--timeout=120s")
    assert commands[1] == ("apply", "-f", "-")
    assert cluster.namespaces() == {"gpuseat-cy", bob_ns}
    assert lab.delivery.access_of("k8s-lab")["seat-1"]["holder"] == "cy"
    again, _ = k8s_pass(lab, cluster)
    assert again.changes.empty, again.changes.to_dict()
    holdings = {(h["what"], h["participant"]) for h in lab.agents.holdings("k8s-lab")}
    assert ("namespace", "cy") in holdings and ("namespace", "ann") not in holdings


def test_a_move_to_another_slice_size_remakes_the_namespace_with_the_new_quota(lab):
    lab.agents.set_engine_settings("k8s-lab", "kubernetes", {"kubeconfig": KUBECONFIG}, actor="test")
    cluster = StandInCluster()
    k8s_pass(lab, cluster)
    lab.seats.move("k8s-lab", "ann", "seat-3")
    planned, _ = k8s_pass(lab, cluster)
    steps = [(s.phase, s.action) for s in planned.changes.ordered()]
    assert steps[0] == ("revoke", "namespace.delete") and ("grant", "namespace.create") in steps
    delete = planned.changes.ordered()[0]
    assert set(delete.seats) == {"seat-1", "seat-3"} and "moved from seat-1 to seat-3" in delete.why
    pod = cluster.objects[("Pod", "gpuseat-ann", "gpuseat-probe")]
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-2g.20gb": "1"}
    quota = cluster.objects[("ResourceQuota", "gpuseat-ann", "gpuseat-one-gpu")]["spec"]["hard"]
    assert quota["requests.nvidia.com/mig-2g.20gb"] == "1" and quota["requests.nvidia.com/mig-1g.10gb"] == "0"
    assert k8s_pass(lab, cluster)[0].changes.empty


def test_a_renamed_login_keeps_no_namespace_nor_binding_and_the_new_one_gets_the_seat(lab):
    """A roster re-import gives ann (login made from her key) the unix_user ann2. After one pass: her old
    namespace is gone with the workload she left running in it, no binding anywhere names the old login (it
    may create no Pod, so it reaches no GPU), and the new login has a namespace with exactly one GPU of her
    seat's kind and the ``edit`` binding; her way in names it; a second pass plans nothing."""
    from gpuseat.core.roster import RosterText

    lab.agents.set_engine_settings("k8s-lab", "kubernetes", {"kubeconfig": KUBECONFIG}, actor="test")
    cluster = StandInCluster()
    k8s_pass(lab, cluster)
    work = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train", "namespace": "gpuseat-ann"}}
    cluster.objects[("Pod", "gpuseat-ann", "train")] = work  # her training job, left running
    renamed = RosterText("name,email,unix_user\nAnn,ann@example.edu,ann2\n", where="r.csv")
    lab.roster.import_roster("k8s-lab", renamed)
    _, result = k8s_pass(lab, cluster)
    (report,) = result.reports
    order = [(o.step.phase, o.step.action, o.step.target) for o in report.outcomes]
    assert order[0] == ("revoke", "namespace.delete", "gpuseat-ann"), order
    assert "holds no seat" in report.outcomes[0].step.why
    assert not any(k[1] == "gpuseat-ann" or k[2] == "gpuseat-ann" for k in cluster.objects), cluster.objects
    bindings = [d for d in cluster.objects.values() if d["kind"].endswith("RoleBinding")]
    subjects = [s["name"] for d in bindings for s in d["subjects"]]
    assert "ann" not in subjects and subjects.count("ann2") == 1, subjects
    assert cluster.objects[("RoleBinding", "gpuseat-ann2", "gpuseat-participant")]["roleRef"]["name"] == "edit"
    quota = cluster.objects[("ResourceQuota", "gpuseat-ann2", "gpuseat-one-gpu")]["spec"]["hard"]
    assert quota["requests.nvidia.com/mig-1g.10gb"] == "1" and quota["requests.nvidia.com/mig-2g.20gb"] == "0"
    access = lab.delivery.access_of("k8s-lab")["seat-1"]
    ann = lab.roster.find_participant("k8s-lab", "ann@example.edu")  # no key column: the key follows the login
    assert access["holder"] == ann.key and access["user"] == "ann2" and "gpuseat-ann2" in access["command"]
    assert k8s_pass(lab, cluster)[0].changes.empty


def test_archive_takes_every_namespace_away_and_the_dry_run_asks_the_api_server(lab):
    from dataclasses import replace

    from gpuseat.engines.apply import course_state
    from gpuseat.engines.registry import build

    lab.agents.set_engine_settings("k8s-lab", "kubernetes", {"kubeconfig": KUBECONFIG}, actor="test")
    cluster = StandInCluster(dry_run=True)
    _, result = k8s_pass(lab, cluster)  # a dry run against a configured cluster: the API server admits, stores nothing
    assert cluster.objects == {} and cluster.validated == 8 and lab.delivery.access_of("k8s-lab") == {}
    grants = [o for o in result.reports[0].outcomes if o.step.phase == "grant"]
    assert len(grants) == 8
    for o in grants:
        assert [(c.argv[3:], c.dry) for c in o.commands] == [
            (("apply", "-f", "-"), True),
            (("apply", "--dry-run=server", "-f", "-"), False),
        ]
    cluster = StandInCluster()
    k8s_pass(lab, cluster)
    engine = build("kubernetes", lab, "k8s-lab", settings={"kubeconfig": KUBECONFIG}, runner=cluster)
    state = replace(course_state(lab, "k8s-lab"), archived=True)
    changes = engine.plan(state)
    assert {(s.action, s.why) for s in changes.steps} == {("namespace.delete", "the course is archived")}
    gone = replace(state, course=None, seats=(), people={}, access={}, archived=False)  # deleted from the store
    deleted = engine.plan(gone)
    assert [(s.action, s.why) for s in deleted.steps] == [("namespace.delete", "the course is deleted")] * 2
    assert len(engine.observe(gone)) == 4  # two namespaces, two RoleBindings: what `course delete` waits for
    engine.apply(changes)
    assert cluster.objects == {} and engine.observe(state) == [] and engine.plan(gone).empty


def test_readiness_comes_from_the_probe_pods_log(lab):
    lab.agents.set_engine_settings("k8s-lab", "kubernetes", {"kubeconfig": KUBECONFIG}, actor="test")
    cluster = StandInCluster()
    planned, _ = k8s_pass(lab, cluster)
    (ready,) = planned.engine.check([lab.seats.get_seat("k8s-lab", "seat-1")])
    assert ready.ready and ready.visible == (MIG.format(n=1),), ready.evidence


@pytest.mark.parametrize(
    ("value", "message"),
    [("namespace=Bad_NS", "kubernetes setting namespace"), ("kubeconfig=relative/path", "absolute path"),
     ("context=--all", "one word"), ("token=x", "kubernetes setting token")],
)  # fmt: skip
def test_bad_settings_are_one_clear_message(lab, cli, value, message):
    r = cli("engines", "settings", "kubernetes", value, "--course", "k8s-lab", "--db", lab.url)
    assert r.code == 2 and message in r.err and "Traceback" not in r.err


def test_the_settings_table_shows_every_setting(lab, cli):
    r = cli("engines", "settings", "kubernetes", f"kubeconfig={KUBECONFIG}", "--course", "k8s-lab", "--db", lab.url)
    assert r.code == 0, r.err
    assert KUBECONFIG in r.out and "kubectl" in r.out and "namespace" in r.out


@pytest.mark.parametrize(
    "owner",
    [{}, {"gpuseat/course": "other-lab", "app.kubernetes.io/managed-by": "gpuseat"}],
    ids=["made-by-hand", "another-course"],
)
def test_a_namespace_that_is_not_the_courses_is_never_taken_over(lab, owner):
    # the namespace is <prefix>-<login>: it may exist already (kube-system, gpu-operator, another course's
    # participant of the same login); apply relabelled it as this course's, bound the participant to edit
    # there, and a later release deleted it with everything in it
    from gpuseat.engines.apply import one_pass

    lab.agents.set_engine_settings("k8s-lab", "kubernetes", {"kubeconfig": KUBECONFIG}, actor="test")
    cluster = StandInCluster()
    theirs = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpuseat-ann", "labels": dict(owner)}}
    work = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train", "namespace": "gpuseat-ann"}}
    cluster.objects[("Namespace", "", "gpuseat-ann")] = theirs
    cluster.objects[("Pod", "gpuseat-ann", "train")] = work
    before = {k: dict(v) for k, v in cluster.objects.items()}
    result = one_pass(lab, course="k8s-lab", engine="kubernetes", runner=cluster)
    (failed,) = [o for r in result.reports for o in r.outcomes if o.state == "failed"]
    assert (failed.step.action, failed.step.target) == ("namespace.create", "gpuseat-ann")
    assert failed.message.startswith("namespace gpuseat-ann: it exists and is "), failed.message
    assert failed.message.count("gpuseat-ann") == 1 and "k8s-lab" in failed.message, failed.message  # said once
    assert failed.commands == []  # nothing sent to the cluster for it
    assert {k: v for k, v in cluster.objects.items() if "gpuseat-ann" in k} == before  # untouched, not relabelled
    assert ("RoleBinding", "gpuseat-ann", "gpuseat-participant") not in cluster.objects
    assert "seat-1" not in lab.delivery.access_of("k8s-lab")  # no way in recorded for ann
    bob_ns = next(n for n in cluster.namespaces() if n.startswith("gpuseat-bob-s"))
    assert ("RoleBinding", bob_ns, "gpuseat-participant") in cluster.objects  # the others are granted
    lab.seats.release("k8s-lab", participant="ann")
    result = one_pass(lab, course="k8s-lab", engine="kubernetes", runner=cluster)
    assert not result.failed and cluster.objects[("Namespace", "", "gpuseat-ann")] == theirs  # never deleted


def test_a_kubeconfig_that_another_user_can_change_is_refused_before_kubectl_reads_it(lab, tmp_path):
    # kubectl runs a kubeconfig's exec credential plugin: a file others can write names a program the agent runs
    from gpuseat.engines.apply import plan_all

    config = tmp_path / "lab.kubeconfig"
    config.write_text("apiVersion: v1\nkind: Config\n")
    config.chmod(0o666)
    lab.agents.set_engine_settings("k8s-lab", "kubernetes", {"kubeconfig": str(config)}, actor="test")
    runner = RecordingRunner()
    (planned,) = plan_all(lab, course="k8s-lab", engine="kubernetes", runner=runner)
    assert planned.error and "kubeconfig" in planned.error and "can be changed by another user" in planned.error
    assert runner.take() == []  # kubectl never ran
    config.chmod(0o600)
    (planned,) = plan_all(lab, course="k8s-lab", engine="kubernetes", runner=RecordingRunner(dry_run=True))
    assert planned.error is None, planned.error


def test_two_long_logins_never_share_a_namespace_under_a_long_prefix(lab):
    # <prefix>-<login> was cut at 63 characters: under a 40-character prefix two logins that differ only
    # after their 21st character got one namespace (the second RoleBinding replaced the first holder's)
    from gpuseat.core.roster import RosterText

    prefix = "course-2026-spring-deep-learning-lab-gpu"
    assert len(prefix) == 40
    roster = "name,email,group,unix_user\n" + "".join(
        f"S{n},s{n}@example.edu,participants,student-2026-group-a-0{n}\n" for n in (1, 2)
    )
    lab.roster.import_roster("k8s-lab", RosterText(roster, where="roster.csv"))
    lab.seats.release("k8s-lab", participant="ann")
    lab.seats.release("k8s-lab", participant="bob_s")
    people = {p.unix_user: p for p in lab.roster.participants("k8s-lab") if p.unix_user}
    lab.seats.assign("k8s-lab", people["student-2026-group-a-01"].key, "seat-1")
    lab.seats.assign("k8s-lab", people["student-2026-group-a-02"].key, "seat-2")
    lab.agents.set_engine_settings("k8s-lab", "kubernetes", {"kubeconfig": KUBECONFIG, "namespace": prefix})
    cluster = StandInCluster()
    planned, _ = k8s_pass(lab, cluster)
    spaces = {u: planned.engine.namespace_of(people[u]) for u in ("student-2026-group-a-01", "student-2026-group-a-02")}
    assert len(set(spaces.values())) == 2, spaces
    assert all(len(ns) <= 63 and ns.startswith(prefix + "-student-") for ns in spaces.values()), spaces
    for user, ns in spaces.items():
        binding = cluster.objects[("RoleBinding", ns, "gpuseat-participant")]
        assert binding["subjects"][0]["name"] == user
    assert k8s_pass(lab, cluster)[0].changes.empty
    assert (
        planned.engine.namespace_of(lab.roster.find_participant("k8s-lab", "cy")) == f"{prefix}-cy"
    )  # short: as before


def test_each_participants_namespace_enforces_the_baseline_pod_security_standard(lab):
    # edit in a namespace without a Pod Security label let the participant run a privileged Pod with a
    # hostPath mount of / (and hostNetwork, hostPID): root on the GPU node, every GPU of every seat on it
    lab.agents.set_engine_settings("k8s-lab", "kubernetes", {"kubeconfig": KUBECONFIG}, actor="test")
    cluster = StandInCluster()
    k8s_pass(lab, cluster)
    spaces = [v for k, v in cluster.objects.items() if k[0] == "Namespace"]
    assert len(spaces) == 2
    for doc in spaces:
        labels = doc["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "baseline", labels
        assert labels["pod-security.kubernetes.io/enforce-version"] == "latest", labels
    for (kind, _ns, _n), pod in cluster.objects.items():  # the probe itself passes baseline
        if kind == "Pod":
            spec = pod["spec"]
            assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC", "volumes"))
            assert all("securityContext" not in c for c in spec["containers"])
    assert k8s_pass(lab, cluster)[0].changes.empty


@pytest.mark.parametrize(
    "forged",
    [{"command": ["sh", "-c", "echo '  MIG 1g.10gb Device 0: (UUID: MIG-x)'"]}, {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]},
     {"image": "busybox"}],
    ids=["command", "env", "image"],
)  # fmt: skip
def test_a_probe_pod_the_participant_replaced_is_never_taken_for_readiness(lab, forged):
    # the participant (edit in their namespace) may delete gpuseat-probe and make their own of that name,
    # labels and hash copied: its log was read as what the seat gives
    lab.agents.set_engine_settings("k8s-lab", "kubernetes", {"kubeconfig": KUBECONFIG}, actor="test")
    cluster = StandInCluster()
    planned, _ = k8s_pass(lab, cluster)
    pod = cluster.objects[("Pod", "gpuseat-ann", "gpuseat-probe")]
    pod["spec"]["containers"][0].update(forged)
    (seen,) = planned.engine.check([lab.seats.get_seat("k8s-lab", "seat-1")])
    assert not seen.ready and "not the probe gpuseat made" in (seen.reason or ""), seen
