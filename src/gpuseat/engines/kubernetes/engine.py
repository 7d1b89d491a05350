"""The Kubernetes engine: each seat holder gets a namespace of their own on a cluster whose GPU operator
advertises the seats' resources, with a quota of exactly one GPU of their seat's kind (0 of every other
GPU resource), an ``edit`` RoleBinding for them alone and a probe Pod pinned to the seat's resource
(and node, when the seat names one): the manifests :func:`gpuseat.render.k8s.seat_objects` renders. A seat
whose host no node can be selected by (:func:`gpuseat.render.k8s.node_flaw`) gets none of them: its grant
fails with the reason (its Pod would stay Pending forever), as a namespace that is not the course's does, and
stores the refusal as the seat's state (failed, :func:`refused`), which its holder's page shows; while that
state says it, later passes only note it (a refusal said every pass was an events row a minute), and once the
seat's host names a node ``seat.mend`` makes it planned again.

:meth:`KubernetesEngine.plan` renders the course's manifests per holder and compares them with what
is applied (``kubectl get`` of the objects labelled with the course), each object carrying a hash of
what was rendered (``gpuseat/hash``), so a second plan after an apply is empty:

* ``namespace.delete`` (revoke): a namespace of someone who holds no seat now (released, moved to a
  seat of another resource or node, course archived or deleted) goes, with their workloads and access;
  ``kubectl delete --wait`` returns once it is gone, so the GPU is free before the next holder's grant;
* ``access.revoke`` and ``pods.end`` (revoke) while the course's access window is shut, and while the
  holder's seat is stopped (their stop, or no seat hours left);
* ``pod.delete`` (revoke) then ``pod.create``: a probe Pod that differs from the render (Pods are
  immutable);
* ``namespace.create``, ``quota.set``, ``access.grant``, ``pod.create`` (grant): ``kubectl apply``,
  the quota before any Pod (a quota only counts Pods admitted after it);
* ``seat.record`` / ``seat.clear`` (record): the holder's way in (their namespace) is stored.
* ``seat.check`` / ``session.report`` (record): from ``lead_minutes`` before a lab session, each seat
  checked as ``seats check`` does (its probe Pod's log) and the broken ones posted to the course webhook
  (:mod:`gpuseat.engines.sessions`, the rule of every engine).
* the participants' seat requests (stop, start, restart, reset; a key is refused) and seat hours:
  :mod:`gpuseat.engines.kubernetes.requests`.

Every ``kubectl`` call goes through the :class:`~gpuseat.engines.runner.Runner`. A cluster is
*configured* when the settings name a ``kubeconfig`` or a ``context``; without one the plan assumes
nothing is applied, ``gpuseat apply --dry-run`` prints the rendered plan and the commands, and a real
apply stops with one clear message. With one, a dry run also runs ``kubectl apply --dry-run=server``
for each manifest (the API server's admission, nothing stored).
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpuseat.core.readiness import Access, Readiness, judge
from gpuseat.core.seating import AGENT_ACTOR, transition_error
from gpuseat.engines import sessions as session_checks
from gpuseat.engines.base import Changes, CourseState, Holding, Step, StepEngine
from gpuseat.engines.kubernetes import requests
from gpuseat.engines.setting_types import AbsolutePath, tool, trusted_file
from gpuseat.engines.wishes import Wish, do_record, read_requests, stale_steps
from gpuseat.errors import EngineError, InputError
from gpuseat.render.k8s import GPU, MANAGED_BY, NODE_FIX, PROBE_POD, SEAT_LABEL, mig_resource, node_flaw, seat_objects

if TYPE_CHECKING:
    from gpuseat.store import ParticipantView, SeatView

ENGINE = "kubernetes"
HASH = "gpuseat/hash"
COURSE_LABEL = "gpuseat/course"
#: the label selector of every object the engine applies (the render marks them so)
MANAGED = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
_DNS = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
#: the verb of each kind of object the engine applies, by whether it exists already
_VERBS = {"Namespace": "namespace", "ResourceQuota": "quota", "RoleBinding": "access", "Pod": "pod"}
#: what the reason of a seat this engine refused for its host says (:func:`refused`)
_MARK = " cannot be its Kubernetes node: "


class KubernetesSettings(BaseModel):
    """The Kubernetes engine's settings (stored per course: ``gpuseat engines settings kubernetes k=v``)."""

    model_config = ConfigDict(extra="forbid")

    namespace: str = Field("gpuseat", description="prefix of each holder's namespace (NAMESPACE-LOGIN)")
    kubeconfig: AbsolutePath | None = Field(None, description="the kubeconfig file of the cluster (absolute path)")
    context: str | None = Field(None, description="the kubeconfig context to use")
    image: str = Field(
        "nvidia/cuda:12.4.1-base-ubuntu22.04",
        pattern=r"^[a-z0-9][a-z0-9._/:@-]{0,250}$",
        description="the probe Pod's image (it runs nvidia-smi -L)",
    )
    kubectl: str = Field("kubectl", description="the kubectl to run")
    timeout: float = Field(120.0, gt=0, le=3600, description="seconds one kubectl call (or a probe) may take")

    @field_validator("namespace")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if not _DNS.fullmatch(v) or len(v) > 40:
            raise ValueError("must be a DNS label of at most 40 characters (lowercase letters, digits, '-')")
        if v == "kube" or v.startswith("kube-"):
            # <prefix>-<login>: kube + a login "system" is kube-system, where edit reaches every secret
            raise ValueError(f"{v}: the kube- namespaces are the cluster's own; use a prefix such as gpuseat")
        return v

    @field_validator("context", "kubectl")
    @classmethod
    def _word(cls, v: str | None) -> str | None:
        if v is not None and (not v or v.startswith("-") or any(c.isspace() or ord(c) < 32 for c in v)):
            raise ValueError("must be one word, not starting with '-'")
        return v

    @field_validator("kubectl")
    @classmethod
    def _kubectl(cls, v: str) -> str:
        # the agent runs this program with the cluster's credentials: kubectl from PATH, or a kubectl by its
        # absolute path (a program of another name, or one found from the current folder, ran instead)
        return tool(v, "kubectl", example="/usr/local/bin/kubectl", versioned=True)


def k8s_name(login: str) -> str:
    """A login name as a DNS label (Kubernetes names): ``_`` becomes ``-``, ends trimmed; a name that
    cannot be made one gets a short hash."""
    base = re.sub(r"[^a-z0-9-]+", "-", login.lower()).strip("-")
    if base and _DNS.fullmatch(base) and base == login:
        return base
    digest = hashlib.sha256(login.encode()).hexdigest()[:8]
    return f"{base[:40].strip('-') or 'p'}-{digest}"


def resource_of(seat: SeatView) -> str:
    """The extended resource a seat's Pod asks for: ``nvidia.com/mig-<profile>`` or ``nvidia.com/gpu``."""
    if seat.kind == "mig":
        if not seat.profile:
            raise InputError(
                f"seat {seat.key} is a MIG seat without a profile",
                where=f"seat {seat.key}",
                fix="add the seat again with its MIG profile (e.g. 1g.10gb)",
            )
        return mig_resource(seat.profile)
    return GPU


def object_hash(doc: dict[str, Any]) -> str:
    """A short hash of a rendered object (what ``gpuseat/hash`` records on the applied one)."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def _id(doc: dict[str, Any]) -> tuple[str, str, str]:
    meta = doc.get("metadata") or {}
    return str(doc.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name"))


class KubernetesEngine(StepEngine[KubernetesSettings]):
    """One course's seats on one cluster (see the module docstring)."""

    name = ENGINE
    settings_model = KubernetesSettings

    def setup(self) -> None:
        """kubectl runs the kubeconfig's ``exec`` credential plugin: never one another user can change."""
        if self.settings.kubeconfig:
            trusted_file(self.settings.kubeconfig, setting="kubeconfig")
        #: (action, namespace) of this apply's ``namespace.delete`` and ``pods.end`` done (a request's verdict)
        self.carried: set[tuple[str, str]] = set()

    # -- kubectl ---------------------------------------------------------------------------------------

    @property
    def cluster(self) -> bool:
        """True when the settings name a cluster (a kubeconfig or a context)."""
        return bool(self.settings.kubeconfig or self.settings.context)

    def kubectl(self, *args: str) -> list[str]:
        """A kubectl command line for the configured cluster."""
        s = self.settings
        argv = [s.kubectl]
        if s.kubeconfig:
            argv += ["--kubeconfig", s.kubeconfig]
        if s.context:
            argv += ["--context", s.context]
        return [*argv, *args]

    def _need_cluster(self) -> None:
        if not self.cluster:
            raise InputError(
                f"course {self.course}: no Kubernetes cluster is configured for the kubernetes engine "
                "(set kubeconfig= or context=)",
                where="kubernetes settings",
                fix=f"gpuseat engines settings kubernetes kubeconfig=/PATH/TO/KUBECONFIG --course {self.course} "
                "(or context=NAME); gpuseat apply --dry-run shows the plan without one",
            )

    def _get(self, what: str, *extra: str) -> list[dict[str, Any]]:
        """The course's applied objects of ``what`` (a read: it runs in a dry run too)."""
        argv = self.kubectl("get", what, *extra, "-l", f"{COURSE_LABEL}={self.course},{MANAGED}", "-o", "json")
        done = self.runner.run(argv, mutates=False, timeout=self.settings.timeout, where="kubectl get")
        try:
            items: list[dict[str, Any]] = json.loads(done.stdout or "{}").get("items") or []
        except ValueError:
            raise EngineError(f"kubectl get {what} printed no JSON: {done.stdout[:200]!r}", where="kubectl") from None
        return items

    def applied(self) -> dict[tuple[str, str, str], dict[str, Any]]:
        """What is applied for this course now, by (kind, namespace, name); empty without a cluster."""
        if not self.cluster:
            return {}
        found = self._get("namespaces")
        found += self._get("resourcequotas,rolebindings,pods", "--all-namespaces")
        return {_id(d): d for d in found}

    def foreign(self, names: set[str]) -> dict[str, str]:
        """Of ``names``, the namespaces that exist and are not this course's (made by hand, by the cluster,
        another course's), with whose they are: the engine never takes one over (relabels it, binds a
        participant to ``edit`` there, later deletes it with everything in it)."""
        if not self.cluster or not names:
            return {}
        argv = self.kubectl("get", "namespaces", "-o", "json")
        done = self.runner.run(argv, mutates=False, timeout=self.settings.timeout, where="kubectl get")
        try:
            items: list[dict[str, Any]] = json.loads(done.stdout or "{}").get("items") or []
        except ValueError:
            what = f"kubectl get namespaces printed no JSON: {done.stdout[:200]!r}"
            raise EngineError(what, where="kubectl") from None
        out = {}
        for doc in items:
            meta = doc.get("metadata") or {}
            owner = (meta.get("labels") or {}).get(COURSE_LABEL)
            if meta.get("name") in names and owner != self.course:
                out[str(meta["name"])] = f"course {owner}'s" if owner else "not made by gpuseat"
        return out

    # -- what the store wants -------------------------------------------------------------------------

    def namespace_of(self, p: ParticipantView) -> str:
        """The participant's namespace: ``<prefix>-<their login as a DNS label>``."""
        login = self.login_of(p)
        prefix, name = self.settings.namespace, k8s_name(login)
        if len(prefix) + 1 + len(name) <= 63:
            return f"{prefix}-{name}"
        # too long for a DNS label: cut, but keep a hash of the whole login (a plain cut at 63 gave two
        # logins that differ only at their end one namespace, and one holder the other's RoleBinding)
        room = 63 - len(prefix) - 1 - 9
        digest = hashlib.sha256(login.encode()).hexdigest()[:8]
        return f"{prefix}-{name[:room].strip('-') or 'p'}-{digest}"

    def rendered(self, state: CourseState) -> dict[str, list[dict[str, Any]]]:
        """Seat key → the objects to apply for its holder (each with its ``gpuseat/hash``)."""
        if not state.active:
            return {}
        seats = [s for s in state.seats if s.engine == ENGINE]
        resources = sorted({resource_of(s) for s in seats})
        out: dict[str, list[dict[str, Any]]] = {}
        for seat, p in state.holders():
            if seat.engine != ENGINE:
                continue
            login = self.login_of(p)
            labels = {COURSE_LABEL: self.course, "gpuseat/login": k8s_name(login)}
            docs = seat_objects(
                seat=seat.key,
                resource=resource_of(seat),
                resources=resources,
                namespace=self.namespace_of(p),
                participant=login,
                image=self.settings.image,
                labels=labels,
                node=seat.host,
            )
            for doc in docs:
                if doc["kind"] == "Namespace":  # a label value must be a DNS-like word: the login as a DNS label
                    doc["metadata"]["labels"]["gpuseat/participant"] = k8s_name(login)
                doc["metadata"].setdefault("annotations", {})[HASH] = object_hash(doc)
            out[seat.key] = docs
        return out

    # -- plan ------------------------------------------------------------------------------------------

    def plan(self, course: CourseState) -> Changes:
        """Every step that makes the cluster match the store (see the module docstring)."""
        state = course
        changes = Changes(self.name, self.course, self.host)
        add = changes.steps.append
        wanted = self.rendered(state)
        if not self.cluster:
            if wanted and not self.runner.dry_run:
                self._need_cluster()  # one clear message instead of one failed step per object
            if wanted:
                changes.notes.append(
                    "no cluster is configured (kubeconfig= or context=): the plan assumes nothing is applied yet"
                )
            have: dict[tuple[str, str, str], dict[str, Any]] = {}
        else:
            have = self.applied()
        seat_of_ns = {d["metadata"]["name"]: k for k, docs in wanted.items() for d in docs if d["kind"] == "Namespace"}
        seat_ns = {k: ns for ns, k in seat_of_ns.items()}
        holder = {seat.key: p for seat, p in state.holders()}
        self.carried.clear()
        reading = read_requests(self, state, {s.key for s in state.seats if s.engine == ENGINE}, bool(wanted))
        wishes: dict[str, Wish] = {}
        if reading is not None:
            changes.steps += stale_steps(self, reading, {k: holder[k] for k in wanted})
            for ns, k in seat_of_ns.items():
                made = ("Namespace", "", ns) in have
                wishes[k] = requests.plan_namespace(self, state, reading, k, holder[k], ns, made)
        people = {self.namespace_of(p): p for p in state.people.values()}
        gone = (
            "the course is deleted" if state.course is None else ("the course is archived" if state.archived else None)
        )
        # revoke: namespaces nobody (or another seat) should have now
        dropped: set[str] = set()
        for (kind, _ns, name), doc in sorted(have.items()):
            if kind != "Namespace":
                continue
            old_seat = (doc["metadata"].get("labels") or {}).get(SEAT_LABEL)
            new_seat = seat_of_ns.get(name)
            p = people.get(name)
            who = p.key if p else name
            if new_seat is not None and new_seat == old_seat:
                continue
            if gone:
                why = gone
            elif new_seat is None:
                why = f"{who} holds no seat in course {self.course} now"
            else:
                why = f"{who} moved from {old_seat} to {new_seat}: their namespace is made again for it"
            dropped.add(name)
            seats = tuple(sorted({x for x in (old_seat, new_seat) if x}))
            add(self._step("namespace.delete", name, why, "revoke", participant=p.key if p else None, seats=seats))
        for ns, k in sorted(seat_of_ns.items()):  # a reset: the namespace is made afresh, with nothing of the old
            if (w := wishes.get(k)) is not None and w.fresh == "reset" and ns not in dropped:
                dropped.add(ns)
                why = f"{holder[k].key} asked for a reset: everything in it goes, PersistentVolumeClaims too"
                add(self._step("namespace.delete", ns, why, "revoke", participant=holder[k].key, seats=(k,)))
        closed = state.closed if state.active else None
        taken = self.foreign(set(seat_of_ns) - {n for (k, _s, n) in have if k == "Namespace"})
        hosts = {s.key: s.host for s in state.seats}
        by_key = {s.key: s for s in state.seats}
        #: seats whose host can select no node (their Pod would stay Pending forever): refused, never applied
        nodeless = {k: flaw for k in wanted if hosts.get(k) and (flaw := node_flaw(str(hosts[k]))) is not None}
        changes.steps += self._mended(state)
        for seat_key, docs in sorted(wanted.items()):
            p = holder[seat_key]
            ns = docs[0]["metadata"]["name"]
            mine = f"{p.key}'s own namespace for {seat_key}"
            if ns in taken:  # one failed grant: the seat's other steps (and its way in) wait for it
                add(self._step("namespace.create", ns, mine, "grant", participant=p.key, seats=(seat_key,),
                               foreign=taken[ns]))  # fmt: skip
                continue
            fresh = ns in dropped or ("Namespace", "", ns) not in have
            # revoke: a probe Pod that differs from the render; objects of ours that the render lacks
            kept = {_id(d) for d in docs}
            for ident in sorted(have):
                if fresh or ident[1] != ns or ident in kept:
                    continue
                add(self._step(f"{_VERBS.get(ident[0], 'object')}.delete", f"{ns}/{ident[2]}",
                               f"not in the render for {p.key}", "revoke", participant=p.key, seats=(seat_key,),
                               kind=ident[0], namespace=ns, name=ident[2]))  # fmt: skip
            for doc in docs:
                ident = _id(doc)
                old = None if fresh else have.get(ident)
                if doc["kind"] == "Pod" and old is not None and _hash(old) != _hash(doc):
                    add(self._step("pod.delete", f"{ns}/{ident[2]}", "its spec changed (Pods are immutable)",
                                   "revoke", participant=p.key, seats=(seat_key,), kind="Pod", namespace=ns,
                                   name=ident[2]))  # fmt: skip
            wish = wishes.get(seat_key)
            shut = f"access is closed: {closed}" if closed else (wish.why if wish and not wish.runs else None)
            restart = not shut and not fresh and wish is not None and wish.fresh == "restart"
            if shut:  # a closed window, or a stopped seat: no access, no pods
                if not fresh and ("RoleBinding", ns, requests.BINDING) in have:
                    add(self._step("access.revoke", f"{ns}/{requests.BINDING}", shut, "revoke", participant=p.key,
                                   seats=(seat_key,), kind="RoleBinding", namespace=ns,
                                   name=requests.BINDING))  # fmt: skip
                if not fresh and self._running_pods(ns):
                    add(self._step("pods.end", ns, shut, "revoke", participant=p.key, seats=(seat_key,),
                                   namespace=ns))  # fmt: skip
            elif restart:  # every pod ends (the probe is made again below); the access stays
                add(self._step("pods.end", ns, f"{p.key} asked for a restart: their pods end, their access stays",
                               "revoke", participant=p.key, seats=(seat_key,), namespace=ns))  # fmt: skip
            if seat_key in nodeless:  # its revokes above stand; its grants are one failed step, its way in waits
                seat, refusal = by_key[seat_key], refused(str(hosts[seat_key]), nodeless[seat_key])
                if (seat.state, seat.state_reason) == ("failed", refusal):  # stored: said once, not every pass
                    changes.notes.append(f"seat {seat_key} ({p.key}'s) is failed and not set up: "
                                         f"{refusal.replace(chr(10), '; ')}")  # fmt: skip
                else:  # the failed grant stores the refusal as the seat's state, shown to its holder
                    store = transition_error(seat.state, "failed") is None
                    add(self._step("namespace.create", ns, mine, "grant", participant=p.key, seats=(seat_key,),
                                   node=hosts[seat_key], flaw=nodeless[seat_key],
                                   refusal=refusal if store else None))  # fmt: skip
            # grant: each object that is missing or differs, in the render's order
            for doc in [] if seat_key in nodeless else docs:
                if shut and doc["kind"] in ("RoleBinding", "Pod"):
                    continue
                ident = _id(doc)
                old = None if fresh or (restart and doc["kind"] == "Pod") else have.get(ident)
                if old is not None and _hash(old) == _hash(doc):
                    continue
                verb = _VERBS[doc["kind"]]
                action = {"namespace": "namespace.create", "quota": "quota.set", "access": "access.grant",
                          "pod": "pod.create"}[verb]  # fmt: skip
                if verb == "namespace":
                    why = mine
                elif verb == "quota":
                    why = f"exactly one {_own(doc)} in it, none of any other GPU"
                elif verb == "access":
                    why = f"{p.key} may run workloads there (edit), nowhere else"
                else:
                    why = f"the probe: lists the GPU {seat_key} gives"
                add(self._step(action, f"{ns}/{ident[2]}" if verb != "namespace" else ns, why, "grant",
                               participant=p.key, seats=(seat_key,), manifest=doc))  # fmt: skip
            changes.steps += wish.steps if wish is not None else []
        self._record_steps(state, {k: v for k, v in wanted.items() if k not in nodeless}, changes, wishes)
        ledger = reading.hours if reading is not None else None
        # a seat on no node is checked too: broken before a session, with the reason, like any seat that cannot run
        running = {k for k, ns in seat_ns.items() if ns not in taken and (k not in wishes or wishes[k].runs)}
        if running and not state.closed:  # ready before every session (engines/sessions.py)
            checks = session_checks.SessionChecks(self, state, ledger)
            changes.steps += checks.plan({k: holder[k].key for k in running})
        return changes

    def _mended(self, state: CourseState) -> list[Step]:
        """``seat.mend`` for each seat this engine refused (failed, :func:`refused`) whose host names a node
        now (a seats file set it), or that nobody holds now (its holder moved to a seat on the node's name, the
        fix the refusal names): planned again, so its grants run, or ``seats remove`` takes it (a failed seat
        it refuses). Tied to no seat, so it always runs."""
        out = []
        for seat in state.seats if state.active else ():
            if seat.engine != ENGINE or seat.state != "failed" or _MARK not in (seat.state_reason or ""):
                continue
            host = repr(str(seat.host)[:100])
            if not seat.host or node_flaw(seat.host) is None:
                why = f"its host {host} can name a node now: set up again"
            elif seat.participant is None:
                why = f"nobody holds it (its host {host} still names no node: a holder's grant is refused again)"
            else:
                continue
            out.append(self._step("seat.mend", seat.key, why, "record", participant=seat.participant))
        return out

    def _running_pods(self, ns: str) -> list[str]:
        argv = self.kubectl("get", "pods", "-n", ns, "-o", "json")
        done = self.runner.run(argv, mutates=False, timeout=self.settings.timeout, where="kubectl get")
        try:
            items = json.loads(done.stdout or "{}").get("items") or []
        except ValueError:
            return []
        return [
            str(i["metadata"]["name"])
            for i in items
            if (i.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]

    def _record_steps(
        self,
        state: CourseState,
        wanted: dict[str, list[dict[str, Any]]],
        changes: Changes,
        wishes: dict[str, Wish],
    ) -> None:
        if state.course is None or state.archived:
            return
        for seat in state.seats:
            if seat.engine != ENGINE:
                continue
            old = dict(state.access.get(seat.key) or {})
            docs = wanted.get(seat.key)
            p = state.people.get(seat.participant or "")
            if p is None or docs is None:
                if old.get("holder") or old.get("user"):
                    changes.steps.append(self._clear_step(seat.key))
                continue
            wish = wishes.get(seat.key)
            access = self._access(seat, p, docs[0]["metadata"]["name"], wish.stopped if wish else None).to_dict()
            if old != access:
                why = f"{p.key} works in namespace {docs[0]['metadata']['name']}"
                changes.steps.append(self._record_step(seat.key, p.key, why, access=access))

    def _access(self, seat: SeatView, p: ParticipantView, ns: str, stopped: str | None = None) -> Access:
        """The holder's way in: their namespace; while their seat is stopped its first note says so, and why."""
        login = self.login_of(p)
        notes = (f"namespace {ns}", f"one {resource_of(seat)} (quota gpuseat-one-gpu)")
        return Access(
            kind="kubernetes",
            user=login,
            command=f"kubectl config set-context --current --namespace={ns}",
            device_uuid=seat.device_uuid,
            notes=(stopped, *notes) if stopped else notes,
            holder=p.key,
        )

    # -- apply -----------------------------------------------------------------------------------------

    def do(self, step: Step) -> str | None:
        """Carry out one planned step through kubectl (each is a no-op when the cluster already is so)."""
        d = step.data
        dry = self.runner.dry_run
        t = self.settings.timeout
        wait = f"--timeout={max(1, int(t))}s"
        if step.phase != "record" and not dry:
            self._need_cluster()
        if d.get("foreign"):
            raise InputError(
                f"it exists and is {d['foreign']}, not course {self.course}'s: {step.participant} gets no seat there",
                where=f"namespace {step.target}",
                fix="set another namespace prefix (gpuseat engines settings kubernetes namespace=PREFIX "
                f"--course {self.course}), or give {step.participant} another unix_user",
            )
        if d.get("flaw"):
            if d.get("refusal") and not dry:  # the seat's state says why from now on: its holder's page, seats status
                self.store.delivery.record_delivery(self.course, step.seats[0], state="failed", reason=d["refusal"],
                                                    actor=AGENT_ACTOR)  # fmt: skip
            raise InputError(
                f"its host {str(d['node'])[:100]!r} cannot be its Kubernetes node: {d['flaw']}; "
                f"{step.participant}'s seat is not set up until it can (a Pod pinned to no node would wait forever)",
                where=f"seat {step.seats[0]}",
                fix=NODE_FIX,
            )
        match step.action:
            case "namespace.delete":
                self.runner.run(self.kubectl("delete", "namespace", step.target, "--ignore-not-found", "--wait=true",
                                             wait), timeout=t + 30, where=step.target)  # fmt: skip
                self.carried.add((step.action, step.target))
            case "pod.delete" | "access.revoke" | "quota.delete" | "access.delete" | "object.delete":
                kind = str(d["kind"]).lower()
                self.runner.run(self.kubectl("delete", kind, str(d["name"]), "-n", str(d["namespace"]),
                                             "--ignore-not-found", "--wait=true", wait), timeout=t + 30,
                                where=step.target)  # fmt: skip
            case "pods.end":
                self.runner.run(self.kubectl("delete", "pods", "--all", "-n", str(d["namespace"]), "--wait=true",
                                             wait), timeout=t + 30, where=step.target)  # fmt: skip
                self.carried.add((step.action, step.target))
            case "namespace.create" | "quota.set" | "access.grant" | "pod.create":
                text = yaml.safe_dump(d["manifest"], sort_keys=False)
                self.runner.run(self.kubectl("apply", "-f", "-"), input=text, timeout=t, where=step.target)
                if dry and self.cluster:  # the API server's admission, nothing stored
                    self.runner.run(self.kubectl("apply", "--dry-run=server", "-f", "-"), input=text, timeout=t,
                                    mutates=False, where=step.target)  # fmt: skip
            case "seat.record" | "seat.clear":
                self.record_way_in(step, running=False)
            case "seat.mend":
                if not dry:
                    self.store.delivery.record_delivery(self.course, step.target, state="planned", reason=step.why,
                                                        actor=AGENT_ACTOR)  # fmt: skip
            case "seat.check" | "session.report":
                return session_checks.do(self, step)
            case "seat.stop" | "request.record":
                return do_record(self, step, partial(requests.namespace_verdict, self))
            case _:
                raise InputError(f"the kubernetes engine has no step {step.action!r}", where="plan")
        return None

    # -- observe, connect, check -----------------------------------------------------------------------

    def _forged(self, pod: dict[str, Any], seat: SeatView) -> str | None:
        """What makes ``pod`` another than the rendered probe: the participant may delete gpuseat-probe in
        their namespace and make their own of that name (labels and hash copied), whose log would lie."""
        spec = pod.get("spec") or {}
        containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
        if len(containers) != 1:
            return f"{len(containers)} containers"
        return _container_odd(containers[0], self.settings.image, {resource_of(seat): "1"})

    def observe(self, course: CourseState) -> list[Holding]:
        """The course's namespaces and the participants' RoleBindings on the cluster now."""
        if not self.cluster:
            return []
        people = {self.namespace_of(p): p for p in course.people.values()}
        out = []
        for (kind, ns, name), doc in sorted(self.applied().items()):
            labels = doc["metadata"].get("labels") or {}
            space = name if kind == "Namespace" else ns
            p = people.get(space)
            login = labels.get("gpuseat/login") or space
            if kind == "Namespace":
                out.append(Holding(self.name, "namespace", login, p.key if p else None, labels.get(SEAT_LABEL),
                                   self.host, name))  # fmt: skip
            elif kind == "RoleBinding":
                out.append(Holding(self.name, "access", login, p.key if p else None, labels.get(SEAT_LABEL),
                                   self.host, f"{ns}/{name}"))  # fmt: skip
        return out

    def probe(self, seat: SeatView, participant: ParticipantView) -> Readiness:
        """What the seat's probe Pod saw (``nvidia-smi -L`` in its log): ready when exactly one device of
        the seat's resource was visible (the device plugin chooses which one of that resource)."""
        from gpuseat.core.listing import parse_list, visible_devices

        now = datetime.now(UTC)

        def result(state: Any, reason: str | None, evidence: str = "", visible: tuple[str, ...] = ()) -> Readiness:
            return Readiness(self.course, seat.key, participant.key, state, reason, evidence[-4000:], visible, now,
                             ENGINE)  # fmt: skip

        if not self.cluster:
            return result("broken", "no Kubernetes cluster is configured (kubeconfig= or context=)")
        if seat.host and (flaw := node_flaw(seat.host)) is not None:  # never applied: say why, not "no probe Pod"
            return result("broken", f"its host {seat.host[:100]!r} cannot be its Kubernetes node: {flaw}; {NODE_FIX}")
        ns = self.namespace_of(participant)
        argv = self.kubectl("get", "pod", PROBE_POD, "-n", ns, "-o", "json")
        got = self.runner.try_run(argv, mutates=False, timeout=self.settings.timeout)
        if got.returncode != 0:
            return result("broken", f"no probe Pod in {ns} (not applied yet?)", got.stderr)
        live = json.loads(got.stdout or "{}")
        odd = self._forged(live, seat)
        if odd:
            return result("broken", f"the Pod {PROBE_POD} in {ns} is not the probe gpuseat made ({odd})", got.stdout)
        phase = (live.get("status") or {}).get("phase")
        if phase != "Succeeded":
            return result("broken", f"the probe Pod in {ns} is {phase or 'unknown'}, not Succeeded", got.stdout)
        logs = self.runner.try_run(self.kubectl("logs", PROBE_POD, "-n", ns), mutates=False,
                                   timeout=self.settings.timeout)  # fmt: skip
        visible = visible_devices(parse_list(logs.stdout))
        state, why = judge(None, visible)
        evidence = f"kubectl logs {PROBE_POD} -n {ns} (the device plugin picks the {resource_of(seat)})\n{logs.stdout}"
        return result(state, why, evidence, visible)


def refused(host: str, flaw: str) -> str:
    """The state reason of a seat refused for its host (:func:`gpuseat.render.k8s.node_flaw`): what is wrong,
    then ``To fix:`` (its holder's page shows the first part only)."""
    return f"its host {host[:100]!r}{_MARK}{flaw}\nTo fix: {NODE_FIX}"


def _container_odd(c: dict[str, Any], image: str, limits: dict[str, str]) -> str | None:
    """What differs in a probe container from the render (its log is only evidence when nothing does)."""
    if c.get("image") != image:
        return f"image {c.get('image')!r}"
    if c.get("command") != ["nvidia-smi", "-L"] or c.get("args"):
        return "another command"
    if c.get("env") or c.get("envFrom"):
        return "environment variables set"
    if ((c.get("resources") or {}).get("limits") or {}) != limits:
        return "other resources"
    return None


def _hash(doc: dict[str, Any]) -> str | None:
    return ((doc.get("metadata") or {}).get("annotations") or {}).get(HASH)


def _own(quota: dict[str, Any]) -> str:
    hard = quota["spec"]["hard"]
    return next((k.removeprefix("requests.") for k, v in hard.items() if v == "1"), "GPU")
