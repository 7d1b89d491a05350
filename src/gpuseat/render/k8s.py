"""Kubernetes manifests for the NVIDIA GPU Operator: the device plugin's config (MIG strategy or sharing) and,
for MIG, the layout itself (the mig-parted config the operator's MIG manager applies when the node carries
the ``nvidia.com/mig.config`` label, with the operator's ``all-disabled`` entry kept) as ConfigMaps in the
operator's namespace, where the operator mounts them from; and per seat a namespace of its own (named
after its participant when known) whose ResourceQuota allows exactly one GPU resource of the seat's kind,
the participant's RoleBinding, and a probe Pod requesting ``nvidia.com/gpu`` or ``nvidia.com/mig-<profile>``.

:func:`check_manifest` is gpuseat's own check of resource names and quantities, which the
Kubernetes schema does not do (platform.md B3); :func:`node_flaw` says when a seat's host can never be
the node its Pod is pinned to (``kubernetes.io/hostname``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import yaml

from gpuseat.core.carve import Layout, Slice
from gpuseat.render import mig_parted
from gpuseat.render.base import Artifact, Renderer, RenderOptions, header, runbook

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog

GPU = "nvidia.com/gpu"
PLUGIN_CONFIG = "gpuseat-device-plugin"
PLUGIN_CONFIG_KEY = "gpuseat"
MIG_CONFIG = "gpuseat-mig-config"
PROBE_POD = "gpuseat-probe"
#: on every object gpuseat renders (what the kubernetes engine finds its own objects by), with the seat's key
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpuseat"}
SEAT_LABEL = "gpuseat/seat"
_RESOURCE = re.compile(r"^nvidia\.com/(gpu|gpu\.shared|mig-\d+g\.\d+gb(\.me)?)$")
_COUNT = re.compile(r"^[1-9][0-9]*$")
#: the label a seat's Pod is pinned to its node by; the kubelet sets it to the node's (lower-cased) name
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: a node's name (a lower-case DNS subdomain) that is also a label value: at most 63 characters
_NODE = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*", re.ASCII)
#: how to give a seat a node it can be pinned to (a seat's host is set when it is added)
NODE_FIX = (
    "give the node's name as `kubectl get nodes` prints it: add a seat with it (gpuseat seats add --host NODE …) "
    "and move the participant there (gpuseat seats move --participant P --seat NEW)"
)


def mig_resource(profile: str) -> str:
    """The device plugin's name for a MIG profile (mixed strategy): ``1g.10gb+me`` → ``nvidia.com/mig-1g.10gb.me``."""
    return "nvidia.com/mig-" + profile.replace("+", ".")


def resource_for(item: Slice) -> str:
    """The extended resource a slice's Pod asks for."""
    return mig_resource(item.profile or "") if item.mode == "mig" else GPU


def device_plugin_config(layout: Layout) -> dict[str, Any]:
    """The device plugin's ``version: v1`` config for this layout."""
    if layout.mode == "mig":
        return {"version": "v1", "flags": {"migStrategy": "mixed"}}
    if layout.mode in ("timeslice", "mps"):
        replicas = max(Counter(s.gpu_index for s in layout.slices).values())
        key = "timeSlicing" if layout.mode == "timeslice" else "mps"
        sharing: dict[str, Any] = {"resources": [{"name": GPU, "replicas": replicas}]}
        if layout.mode == "timeslice":
            sharing = {"failRequestsGreaterThanOne": True, **sharing}
        return {"version": "v1", "sharing": {key: sharing}}
    return {"version": "v1", "flags": {"migStrategy": "none"}}


def node_flaw(host: str) -> str | None:
    """Why ``host`` can never select a node as ``kubernetes.io/hostname=<host>`` (None when it can).

    gpuseat's host rule (:mod:`gpuseat.core.hosts`) takes IPv6 addresses, upper case, ``_`` and names of
    253 characters, as ssh does; a label value is at most 63 characters, and the selector is compared
    case-sensitively with the name the kubelet set, so such a seat's Pod would stay Pending forever."""
    if ":" in host:
        return "it is an IPv6 address, and a node is selected by its name (a label value never has ':')"
    if len(host) > 63:
        return f"it has {len(host)} characters, more than the 63 a label value (kubernetes.io/hostname) may have"
    if host != host.lower():
        lower = host.lower()
        guess = f" (did you mean {lower!r}?)" if _NODE.fullmatch(lower) else ""
        return f"it has upper-case letters, and node names are lower case: the selector is case-sensitive{guess}"
    if "_" in host:
        return "it has '_', which a node name never has"
    for end, char in (("starts", host[:1]), ("ends", host[-1:])):
        if char in (".", "-"):
            return f"it {end} with {char!r}, which a label value (kubernetes.io/hostname) never does"
    if not _NODE.fullmatch(host):
        return "a node name is lower-case letters, digits and '-', in parts joined by single dots"
    return None


def node_problem(seat: str, host: str | None) -> str | None:
    """What keeps ``seat`` from being pinned to its host's node, with the fix (None when nothing does)."""
    flaw = node_flaw(host) if host else None
    if host is None or flaw is None:
        return None
    return f"seat {seat}'s host {host[:100]!r} cannot be its Kubernetes node: {flaw}; {NODE_FIX}"


def seat_namespace(options: RenderOptions, item: Slice, participant: str | None) -> str:
    """The namespace of one seat: ``<namespace>-<participant>`` when known, else ``<namespace>-<seat>``."""
    return f"{options.namespace}-{participant or item.name}"[:63].rstrip("-")


def quota(layout: Layout, item: Slice, namespace: str) -> dict[str, Any]:
    """One GPU of the seat's kind for the whole namespace, none of any other GPU resource the nodes offer.

    Kubernetes quotas extended resources by their requests only; a Pod that sets only the limit gets an
    equal request, so the quota counts it too. A second Pod, or a Pod asking for another slice size,
    is refused at admission.
    """
    return _quota(resource_for(item), [resource_for(s) for s in layout.slices], namespace, _labels(item))


def _quota(own: str, resources: Iterable[str], namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    names = sorted({GPU, own, *resources})
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpuseat-one-gpu", "namespace": namespace, "labels": dict(labels)},
        "spec": {"hard": {f"requests.{name}": "1" if name == own else "0" for name in names}},
    }


def namespace_doc(item: Slice, namespace: str, participant: str | None) -> dict[str, Any]:
    """The participant's own namespace."""
    return _namespace(namespace, participant, _labels(item))


#: each seat's namespace enforces the baseline Pod Security Standard (the probe Pod meets it): with ``edit``
#: there a participant must not run a privileged Pod or mount the node's disk (root on the GPU node)
POD_SECURITY = {
    "pod-security.kubernetes.io/enforce": "baseline",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


def _namespace(namespace: str, participant: str | None, labels: dict[str, str]) -> dict[str, Any]:
    labels = {**labels, **POD_SECURITY}
    if participant:
        labels["gpuseat/participant"] = participant
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}}


def access(item: Slice, namespace: str, participant: str) -> dict[str, Any]:
    """The participant may create and delete workloads in their namespace and nowhere else (``edit``)."""
    return _access(namespace, participant, _labels(item))


def _access(namespace: str, participant: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "gpuseat-participant", "namespace": namespace, "labels": dict(labels)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": participant}],
    }


def pod(layout: Layout, item: Slice, options: RenderOptions, namespace: str | None = None) -> dict[str, Any]:
    """One seat's probe Pod: lists the GPUs it sees (``nvidia-smi -L``) and exits; its log is the check."""
    return _pod(resource_for(item), options.container_image, namespace or options.namespace, _labels(item))


def _pod(resource: str, image: str, namespace: str, labels: dict[str, str], node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [
            {
                "name": "probe",
                "image": image,
                "command": ["nvidia-smi", "-L"],
                "resources": {"limits": {resource: "1"}},
            }
        ],
    }
    if node:
        spec["nodeSelector"] = {HOSTNAME_LABEL: node}  # node_flaw says when it can never match
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": PROBE_POD, "namespace": namespace, "labels": dict(labels)},
        "spec": spec,
    }


def seat_objects(
    *,
    seat: str,
    resource: str,
    resources: Iterable[str],
    namespace: str,
    participant: str | None,
    image: str,
    labels: dict[str, str] | None = None,
    node: str | None = None,
) -> list[dict[str, Any]]:
    """One stored seat's objects, in the order they must be applied: its namespace, the one-GPU quota
    (before any Pod, since a quota only counts Pods admitted after it), the participant's ``edit``
    RoleBinding and the probe Pod asking for ``resource`` (pinned to ``node`` when given).

    What the ``kubernetes`` engine applies for each seat holder; ``resources`` are every GPU resource
    the course's seats use (the quota allows 0 of the others)."""
    marks = {**MANAGED_BY, SEAT_LABEL: seat, **(labels or {})}
    docs = [_namespace(namespace, participant, marks), _quota(resource, resources, namespace, marks)]
    if participant:
        docs.append(_access(namespace, participant, marks))
    docs.append(_pod(resource, image, namespace, marks, node))
    return docs


def _labels(item: Slice) -> dict[str, str]:
    return {**MANAGED_BY, SEAT_LABEL: item.name}


def check_manifest(doc: dict[str, Any]) -> list[str]:
    """Problems with the GPU resources of a Pod (empty when fine): names, whole-number quantities."""
    problems = []
    for container in doc.get("spec", {}).get("containers", []):
        resources = container.get("resources", {})
        for section in ("limits", "requests"):
            for name, qty in resources.get(section, {}).items():
                if not name.startswith("nvidia.com/"):
                    continue
                if not _RESOURCE.fullmatch(name):
                    problems.append(f"{container['name']}: unknown NVIDIA resource '{name}'")
                if not isinstance(qty, str) or not _COUNT.fullmatch(qty):
                    problems.append(f"{container['name']}: {name} must be a whole count as a string, got {qty!r}")
        requested = resources.get("requests", {})
        for name, qty in requested.items():
            if name.startswith("nvidia.com/") and resources.get("limits", {}).get(name) != qty:
                problems.append(f"{container['name']}: {name} request must equal its limit")
    return problems


def _yaml(layout: Layout, doc: dict[str, Any]) -> str:
    return header(layout, "#") + yaml.safe_dump(doc, sort_keys=False)


def mig_config(layout: Layout, catalog: Catalog) -> dict[str, Any]:
    """The layout as a mig-parted config, keeping the operator's ``all-disabled`` entry: the MIG manager's
    default (``migManager.config.default``) and what a node without a ``nvidia.com/mig.config`` label gets."""
    doc = mig_parted.mig_parted_config(layout, catalog)
    configs = {"all-disabled": [{"devices": "all", "mig-enabled": False}], **doc["mig-configs"]}
    return {**doc, "mig-configs": configs}


def render(layout: Layout, options: RenderOptions, catalog: Catalog) -> list[Artifact]:
    """Operator-native output: the device plugin's config and (MIG) the MIG config as ConfigMaps in the
    GPU operator's namespace; per seat a namespace with a one-GPU quota, the participant's access and a
    probe Pod; and ``APPLY.md``."""
    ns = options.operator_namespace
    people = list(options.participants)
    if len(people) > len(layout.slices):
        from gpuseat.errors import InputError

        raise InputError(
            f"{len(people)} participants for {len(layout.slices)} seats",
            where="participants",
            fix="give at most one participant per seat",
        )
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": PLUGIN_CONFIG, "namespace": ns},
        "data": {PLUGIN_CONFIG_KEY: yaml.safe_dump(device_plugin_config(layout), sort_keys=False)},
    }
    out = [Artifact(path="device-plugin-config.yaml", kind="k8s-manifest", text=_yaml(layout, config_map))]
    files = [("device-plugin-config.yaml", f"the device plugin's config, in the GPU operator's namespace `{ns}`")]
    sets = [f"--set devicePlugin.config.name={PLUGIN_CONFIG}", f"--set devicePlugin.config.default={PLUGIN_CONFIG_KEY}"]
    if layout.mode == "mig":
        sets += ["--set mig.strategy=mixed", f"--set migManager.config.name={MIG_CONFIG}"]
    steps = [
        "This uses the NVIDIA GPU Operator's own device plugin and MIG manager: do not install the standalone"
        " `nvidia-device-plugin` chart beside it (two plugins would advertise the same GPUs twice).",
        "`kubectl apply -f device-plugin-config.yaml`" + (" -f mig-config.yaml" if layout.mode == "mig" else "") + ".",
        f"`helm upgrade gpu-operator nvidia/gpu-operator -n {ns} --reuse-values {' '.join(sets)}`"
        " (a new install: `helm install --create-namespace` with the same `--set`s).",
    ]
    checks = [
        "`kubectl get node NODE -o jsonpath='{.status.allocatable}'` lists "
        + ", ".join(sorted({f"`{resource_for(s)}`" for s in layout.slices}))
        + ".",
        f"`kubectl get pods -n {ns}` shows one `nvidia-device-plugin-daemonset` Pod per GPU node, and no other"
        " device plugin runs in the cluster (`kubectl get ds -A | grep -i device-plugin`).",
    ]
    if layout.mode == "mig":
        name = mig_parted.config_name(layout)
        mig_map = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": MIG_CONFIG, "namespace": ns},
            "data": {"config.yaml": yaml.safe_dump(mig_config(layout, catalog), sort_keys=False)},
        }
        out.append(Artifact(path="mig-config.yaml", kind="k8s-manifest", text=_yaml(layout, mig_map)))
        files.append(("mig-config.yaml", f"the MIG layout (and `all-disabled`) for the operator's MIG manager, `{ns}`"))
        steps.append(
            f"`kubectl label node NODE nvidia.com/mig.config={name} --overwrite` (the MIG manager applies it)."
        )
        checks.insert(
            0,
            "`kubectl get node NODE -o jsonpath='{.metadata.labels.nvidia\\.com/mig\\.config\\.state}'` prints"
            " `success`.",
        )
    for i, item in enumerate(layout.slices):
        who = people[i] if i < len(people) else None
        space = seat_namespace(options, item, who)
        docs = [("1-namespace", namespace_doc(item, space, who)), ("2-quota", quota(layout, item, space))]
        if who:
            docs.append(("3-access", access(item, space, who)))
        docs.append(("4-probe", pod(layout, item, options, space)))
        out += [
            Artifact(path=f"{item.name}-{suffix}.yaml", kind="k8s-manifest", text=_yaml(layout, doc))
            for suffix, doc in docs
        ]
    files.append(
        (
            "seat-NN-1-namespace.yaml … seat-NN-4-probe.yaml",
            f"per seat its own namespace (`{options.namespace}-<participant or seat>`), a quota of one GPU of"
            " the seat's kind (0 of every other GPU resource), the participant's `edit` RoleBinding, a probe Pod",
        )
    )
    steps.append(
        "`kubectl apply -f seat-01-1-namespace.yaml -f seat-01-2-quota.yaml` … for every seat, before any"
        " workload runs there (a quota only counts Pods admitted after it)."
    )
    if len(people) < len(layout.slices):
        steps.append(
            "Seats without a participant given to the render get no RoleBinding: bind each person to their own"
            " namespace, `kubectl create rolebinding gpuseat-participant --clusterrole=edit --user=NAME -n NAMESPACE`."
        )
    if people:
        steps.append(
            "`kubectl apply -f seat-01-3-access.yaml` … (the participants' RoleBindings). A hand-over: render"
            " again with the new participant, apply, and `kubectl delete namespace "
            f"{options.namespace}-<previous participant>` (their workloads and access go with it)."
        )
    steps.append("`kubectl apply -f seat-01-4-probe.yaml` … (one probe per seat).")
    checks.append(
        "`kubectl logs -n NAMESPACE gpuseat-probe` lists exactly one GPU or MIG device per seat; a second GPU Pod"
        " in the same namespace is refused (`exceeded quota: gpuseat-one-gpu`)."
    )
    reboot = [
        "The ConfigMaps, the node label, the namespaces and quotas persist; the GPU operator's MIG manager"
        " re-applies the labelled MIG config after a node reboot."
        if layout.mode == "mig"
        else "The ConfigMap, namespaces and quotas persist; the operator's device plugin re-reads its config at start."
    ]
    out.append(runbook(layout, "Kubernetes (NVIDIA GPU Operator)", files, steps, checks, reboot))
    return out


RENDERER = Renderer(
    name="k8s",
    modes=frozenset({"passthrough", "mig", "timeslice", "mps"}),
    summary="GPU operator ConfigMaps, a namespace with a one-GPU quota per seat",
    render=render,
)
