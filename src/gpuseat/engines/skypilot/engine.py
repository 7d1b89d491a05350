"""The SkyPilot engine: one SkyPilot cluster per cloud seat, launched for its holder, stopped outside
the course's access windows, torn down with the course.

* **launch** (``cloud.launch``): a held seat whose cluster is missing, stopped or made for someone else
  is launched (``sky.launch``) with its task (:func:`~gpuseat.engines.skypilot.tasks.task`: the holder's
  login and SSH key made by the task's setup) while the course's access window is open; the cluster
  stops itself at the window's end (SkyPilot autostop with ``wait_for`` none: a hard limit), so a seat
  never runs on after its window even while no agent runs;
* **stop** (``cloud.stop``): a seat nobody holds, an archived course, or a closed access window;
  **down** (``cloud.down``): a deleted course, or a seat no longer in the course;
* **hand-over**: the previous holder's key is removed and their account expired on the cluster
  (``account.revoke``, :func:`revoke_script` over ssh) *before* the cluster is launched again for the
  new holder (whose setup also expires every earlier holder before it adds the new key);
* **record** (``seat.record``, ``seat.clear``): the seat's honest state with its reason in the store:
  ``not launched`` (state requested, or failed when the launch failed), ``launching`` (requested),
  ``running`` (the participant's ``ssh`` line, made for them) or ``stopped`` (requested); a seat nobody
  holds is planned (free to hand out), its way in cleared — what ``seats status``, the participant page
  and ``seats check`` show. Launches are submitted for every seat first and each seat's record step
  waits for its own, so seats launch side by side;
* **requests** (stop, start, restart, reset, key on the participant's page or ``gpuseat seat``): a stopped
  seat's cluster is stopped and stays so until a start; a restart stops and launches it, a reset tears
  it down and launches a fresh one (:mod:`gpuseat.engines.skypilot.requests`).
* **ready before every session** (``seat.check`` / ``session.report``, record): from ``lead_minutes``
  before a lab session each running seat is checked as ``seats check`` does (its probe over ssh) and the
  broken ones posted to the course webhook (:mod:`gpuseat.engines.sessions`, the rule of every engine);
  a cluster launched in the same pass is checked after its record step, which waits for the launch.

SkyPilot is reached through its Python API (:class:`~gpuseat.engines.skypilot.sdk.SkyPilot`); ssh (the
hand-over's revoke, the probe) goes through the :class:`~gpuseat.engines.runner.Runner`. The one line a
remote shell reads is built with ``shlex`` from words checked against the Unix user pattern.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Literal
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpuseat.core import hosts
from gpuseat.core.hosts import jump_target
from gpuseat.core.logins import SYSTEM_LOGINS, UNIX_USER
from gpuseat.core.readiness import Access, Readiness, judge
from gpuseat.core.seating import AGENT_ACTOR
from gpuseat.engines import sessions as session_checks
from gpuseat.engines.base import Changes, CourseState, Holding, Step, StepEngine, ssh_access
from gpuseat.engines.setting_types import tool
from gpuseat.engines.skypilot import requests, tasks
from gpuseat.engines.skypilot.sdk import Cluster, SkyPilot
from gpuseat.engines.wishes import Wish, do_record, read_requests, stale_steps
from gpuseat.errors import EngineError, GpuseatError, InputError

if TYPE_CHECKING:
    from gpuseat.catalog.offers import Offer
    from gpuseat.store import ParticipantView, SeatView

ENGINE: Final[Literal["skypilot"]] = "skypilot"
#: the first word of a cloud seat's state reason: its honest state (issue 37 item 8)
CLOUD_RUN_STATES = ("not launched", "launching", "running", "stopped")
_RUNNING = ("UP",)
#: the images' own admin users (SkyPilot logs in as one of them): never a participant's login to revoke
_ADMINS = frozenset({"root", "ubuntu", "ec2-user", "gcpuser", "azureuser", "sky", "admin", "debian", "centos",
                     "cloud-user", "fedora", "rocky", "almalinux", "opc", "core"})  # fmt: skip
_STOPPABLE = ("UP", "INIT")
#: the fix of a failed step whose error has none of its own
_RETRY_FIX = "fix the setting or roster value; the agent retries"
_LAUNCH_FIX = (
    "SkyPilot's error says why (no capacity or quota in the region, cloud credentials: sky check); "
    "apply again, or let the agent retry on its next pass"
)
#: the note of a running seat's way in that names the key its cluster's setup installed (``SHA256:…``, as
#: ``ssh-keygen -lf`` prints it): a roster's new key launches the up cluster again, which re-runs the setup
KEY_NOTE = "logs in with the SSH key "


def at_seat(seat: str, where: str | None, what: str) -> str | None:
    """The ``where`` of a seat's failed step, so that its message names the seat once: ``seat KEY`` before
    the error's own ``where`` (a participant, a setting), unless that or the error's ``what`` names it."""
    own = f"seat {seat}"
    named = re.search(rf"\bseat {re.escape(seat)}(?![\w.-])", what) is not None
    if where is None or where == own:
        return None if named else own
    if where.startswith(f"{own}:") or named:
        return where
    return f"{own}: {where}"


def _key_notes(key: str | None) -> tuple[str, ...]:
    """The way in's note naming the key the cluster's setup installed (none without a key)."""
    from gpuseat.engines.libvirt.seed import key_fingerprint

    try:
        return (KEY_NOTE + key_fingerprint(key),) if key else ()
    except InputError:  # a key the roster's rule refuses: its launch fails with the reason
        return ()


def _keyed(stored: dict[str, Any], p: ParticipantView) -> bool:
    """Whether the stored way in was made with ``p``'s key as the roster has it now (a re-import may give a
    new one: the cluster's setup must run again, else the old key stays the one it accepts)."""
    made = [n for n in stored.get("notes") or () if str(n).startswith(KEY_NOTE)]
    return made == list(_key_notes(p.ssh_key))


def revoke_script(user: str) -> str:
    """What runs on the VM to take a holder's access away (``$GPUSEAT_ROOT`` as in the setup)."""
    if not UNIX_USER.match(user):
        raise InputError(f"{user!r} is not a Unix user name", where="participant", fix="a roster unix_user")
    return "\n".join(
        [
            "set -eu",
            'ROOT="${GPUSEAT_ROOT:-}"',
            'SUDO=""',
            'if [ "$(id -u)" != 0 ]; then SUDO="sudo -n"; fi',
            f"OLD={user}",
            'OLD_HOME=$(awk -F: -v u="$OLD" \'$1 == u {print $6}\' "$ROOT/etc/passwd")',
            'if [ -z "$OLD_HOME" ]; then echo "gpuseat: no user $OLD here"; exit 0; fi',
            '$SUDO rm -f "$ROOT$OLD_HOME/.ssh/authorized_keys"',
            '$SUDO usermod ${ROOT:+--prefix "$ROOT"} --expiredate 1 "$OLD"',
            'if [ -z "$ROOT" ]; then $SUDO pkill -KILL -u "$OLD" || true; fi',
            'echo "gpuseat: $OLD has no access any more"',
        ]
    )


#: on the cluster (``$1`` the login; ``$GPUSEAT_ROOT`` as in the setup): "open" while the account can
#: still log in with a key, else "expired", "nokey" or "gone"
_STILL_IN = "\n".join(
    [
        'ROOT="${GPUSEAT_ROOT:-}"',
        'SUDO=""',
        'if [ "$(id -u)" != 0 ]; then SUDO="sudo -n"; fi',
        'H=$(awk -F: -v u="$1" \'$1 == u {print $6}\' "$ROOT/etc/passwd")',
        'if [ -z "$H" ]; then echo gone; exit 0; fi',
        'E=$($SUDO awk -F: -v u="$1" \'$1 == u {print $8}\' "$ROOT/etc/shadow")',
        'if [ "$E" = 1 ]; then echo expired; elif $SUDO test -s "$ROOT$H/.ssh/authorized_keys"; then echo open;'
        " else echo nokey; fi",
    ]
)


class SkyPilotSettings(BaseModel):
    """The SkyPilot engine's settings (stored per course: ``gpuseat engines settings skypilot k=v``)."""

    model_config = ConfigDict(extra="forbid")

    ssh: str = Field("ssh", description="the ssh program (SkyPilot writes an ssh alias for each cluster)")
    disk_gb: int = Field(50, ge=1, le=tasks.MAX_DISK_GB, description="disk per seat, GB")
    wheelhouse: str | None = Field(None, description="a folder with one gpuseat wheel, shipped to each seat")
    offline: bool = Field(False, description="pip --no-index: the wheelhouse also holds every dependency")
    gpuseat_spec: str | None = Field(None, description="instead of a wheelhouse: a direct reference (https URL)")
    autostop: bool = Field(
        True, description="each cluster stops itself at its access window's end (SkyPilot autostop, a hard limit)"
    )
    timeout: float = Field(30.0, gt=0, le=3600, description="seconds a probe (ssh to the cluster) may take")

    @field_validator("ssh")
    @classmethod
    def _program(cls, v: str) -> str:
        if not v or any(c.isspace() or ord(c) < 32 for c in v) or v.startswith("-"):
            raise ValueError("must be a program name or path without spaces")
        # the agent runs it (with SkyPilot's keys to every seat): ssh from PATH or an ssh by its absolute path,
        # never another program (ssh=/home/me/tool) nor one found from the agent's working folder (bin/ssh)
        return tool(v, "ssh", example="/usr/bin/ssh", article="an")

    @field_validator("wheelhouse")
    @classmethod
    def _wheelhouse(cls, v: str | None) -> str | None:
        # shipped to every seat by file_mounts: stored relative, it would be whatever folder of that name the
        # agent's working folder holds; it is made absolute where it is set (``wheelhouse=wheels/`` in the checkout)
        if v is None:
            return v
        if not v or any(ord(c) < 32 or c == "\x7f" for c in v):
            raise ValueError("must be the path of a folder with one gpuseat wheel, on one line")
        return os.path.abspath(v)

    @field_validator("gpuseat_spec")
    @classmethod
    def _spec(cls, v: str | None) -> str | None:
        # refused when stored, not at the first launch (the task options check it again)
        if v is not None and not tasks.PIP_SPEC.fullmatch(v):
            raise ValueError(
                "must be a direct reference such as 'gpuseat[bench] @ https://host/gpuseat-0.1.0-py3-none-any.whl'"
                " (a bare name would come from a package index)"
            )
        return v


class SkyPilotEngine(StepEngine[SkyPilotSettings]):
    """The ``skypilot`` engine (see the module docstring)."""

    name = ENGINE
    settings_model = SkyPilotSettings

    def setup(self) -> None:
        """The engine's own parts, from its settings."""
        self.sky = SkyPilot(runner=self.runner)
        self._launches: dict[str, Any] = {}  # cluster → its launch request, until the record step waits for it
        self._launched: dict[str, GpuseatError | None] = {}  # cluster → this pass's launch: None, or why it failed
        self._offers: list[Offer] | None = None  # the course's offers, read by the plan's first launch

    # -- what the store wants ------------------------------------------------------------------------

    def cluster_of(self, seat: SeatView | str) -> str:
        """The seat's SkyPilot cluster name (``gs-<course>-<seat>``)."""
        return tasks.cluster_name(self.course, seat if isinstance(seat, str) else seat.key)

    def options(self) -> tasks.TaskOptions:
        """Every seat's task options, from the settings (checked: a wheelhouse holds one gpuseat wheel …)."""
        s = self.settings
        return tasks.TaskOptions(
            disk_gb=s.disk_gb, wheelhouse=s.wheelhouse, offline=s.offline, gpuseat_spec=s.gpuseat_spec
        )

    def _seats(self, state: CourseState) -> list[SeatView]:
        return sorted((s for s in state.seats if s.engine == self.name), key=lambda s: s.key)

    def _deleting(self, state: CourseState) -> bool:
        return state.course is None or self.course in self.store.agents.pending_deletions()

    def _known(self, seats: Sequence[SeatView]) -> list[str]:
        """Cluster names this course may have: its seats' and those last observed for it."""
        names = {self.cluster_of(s) for s in seats}
        for h in self.store.agents.holdings(self.course):
            if h["engine"] == self.name and h["what"] == "cluster" and tasks.CLUSTER_NAME.fullmatch(h["login"]):
                names.add(h["login"])
        return sorted(names)

    def clusters(self, state: CourseState) -> dict[str, Cluster]:
        """The course's clusters as SkyPilot reports them now (refused when a seat's cluster name is also
        another seat's, or another course's cluster: the launch would hand that machine to this seat's holder)."""
        seats = self._seats(state)
        found = self.sky.status(self._known(seats))
        by_name: dict[str, list[str]] = {}
        for seat in seats:
            by_name.setdefault(self.cluster_of(seat), []).append(seat.key)
        for name, keys in sorted(by_name.items()):
            other = found.get(name)
            if len(keys) > 1:
                raise InputError(
                    f"seats {' and '.join(keys)} of course {self.course} map to one SkyPilot cluster, {name}",
                    where=f"course {self.course} seats",
                    fix="cluster names are lower case: give each cloud seat a key that differs in more than case",
                )
            if other is not None and other.course not in (None, self.course):
                raise InputError(
                    f"cluster {name} of seat {keys[0]} belongs to course {other.course} "
                    f"(gs-<course>-<seat> names the same cluster for both courses)",
                    where=f"seat {keys[0]}",
                    fix="rename the seat (or the course) so that its cluster name is its own",
                )
        return {n: c for n, c in found.items() if c.course in (None, self.course)}

    def _course_offers(self) -> list[Offer]:
        """The offers the course's cloud seats rent: the catalog's and the course's own stored offers files'
        (read once per plan)."""
        if self._offers is None:
            from gpuseat.services.seat_sources import course_offers

            self._offers = course_offers(self.store, self.course)
        return self._offers

    def _task(self, state: CourseState, seat: SeatView, p: ParticipantView) -> dict[str, Any]:
        from gpuseat.services.seat_sources import unknown_offer_fix

        if self.login_of(p) in _ADMINS | SYSTEM_LOGINS:  # the setup would hand that account (sudo, a daemon's) over
            raise InputError(
                f"{p.key}'s login {self.login_of(p)!r} is the cloud image's own admin user or a system account",
                where=f"participant {p.key}",
                fix="give them another unix_user in the roster",
            )
        plan_option = state.course.plan_option if state.course is not None else None
        offer = tasks.offer_for(
            seat.profile,
            plan_option,
            self._course_offers(),
            seat=seat.key,
            unknown_fix=lambda: unknown_offer_fix(self.store, self.course),
        )
        target = tasks.CloudSeat(self.course, seat.key, offer, user=self.login_of(p), ssh_key=p.ssh_key)
        return tasks.task(target, self.options())

    # -- plan ----------------------------------------------------------------------------------------

    def plan(self, course: CourseState) -> Changes:
        """Every step that makes the course's clusters match the store (see the module docstring)."""
        changes = Changes(self.name, self.course, self.host)
        self._offers = None  # read anew: the course may have been created again since the last plan
        self._launched.clear()
        seats = self._seats(course)
        clusters = self.clusters(course)
        if self._deleting(course):
            for name in sorted(clusters):
                changes.steps.append(self._step("cloud.down", name, "the course is deleted", "revoke", cluster=name))
            return changes
        wanted = {self.cluster_of(s) for s in seats}
        for name in sorted(set(clusters) - wanted):
            why = "its seat is no longer in the course"
            changes.steps.append(self._step("cloud.down", name, why, "revoke", cluster=name))
        gone = "the course is archived" if course.archived else None
        holders = {seat.key: p for seat, p in course.holders()} if course.active else {}
        reading = read_requests(self, course, {s.key for s in seats}, bool(holders))
        if reading is not None:
            changes.steps += stale_steps(self, reading, holders)
        running: dict[str, ParticipantView] = {}  # seats whose cluster is up (or launched) once this pass is done
        for seat in seats:
            p, info = holders.get(seat.key), clusters.get(self.cluster_of(seat))
            wish = requests.plan_cluster(self, course, reading, seat, p, info) if p and reading else None
            self._plan_seat(course, seat, p, info, gone, changes, wish)
            changes.steps += wish.steps if wish is not None else []
            if p is not None and wish is not None and wish.runs and course.closed is None:
                running[seat.key] = p
        if reading is not None:  # ready before every session (engines/sessions.py), after every seat's record step:
            # a cluster launched in this pass is checked once its record step has stored its way in
            checks = session_checks.SessionChecks(self, course, reading.hours)
            changes.steps += checks.plan({k: p.key for k, p in running.items()})
        if holders and self.settings.wheelhouse is None and self.settings.gpuseat_spec is None:
            changes.notes.append(
                "no gpuseat wheel is shipped: seats get their holder's login, not gpuseat's benchmark "
                "(gpuseat engines settings skypilot wheelhouse=DIR)"
            )
        return changes

    def _plan_seat(
        self,
        course: CourseState,
        seat: SeatView,
        p: ParticipantView | None,
        info: Cluster | None,
        gone: str | None,
        changes: Changes,
        wish: Wish | None = None,
    ) -> None:
        add = changes.steps.append
        cluster = self.cluster_of(seat)
        key = (seat.key,)
        stored = dict(course.access.get(seat.key) or {})
        # the login the engine made on the cluster (a way in set by hand, without a holder, names none:
        # its user may be the image's own admin, which is never revoked)
        old_login = stored.get("user") if stored.get("holder") and stored.get("user") not in _ADMINS else None
        login = self.login_of(p) if p is not None else None
        status = info.status if info is not None else None
        # revoke: the previous holder leaves the cluster before anyone else gets it
        if status in _RUNNING and old_login and old_login != login:
            why = f"{old_login} no longer holds {seat.key}" + (f" ({gone})" if gone else "")
            add(self._step("account.revoke", old_login, why, "revoke", seats=key, cluster=cluster, login=old_login))
        runs = wish is None or wish.runs
        fresh = wish.fresh if wish is not None and course.closed is None else None
        stop_why = None
        if p is None:
            stop_why = gone or f"nobody holds {seat.key} now"
        elif not runs:
            stop_why = wish.why if wish is not None else None
        elif course.closed is not None:
            stop_why = f"access is closed: {course.closed}"
        elif fresh == "restart":
            stop_why = f"{p.key} asked for a restart (the disk is kept)"
        if fresh == "reset" and info is not None:  # a fresh machine: this one and its disk go
            why = f"{seat.participant} asked for a reset: a fresh machine"
            add(self._step("cloud.down", cluster, why, "revoke", seats=key, cluster=cluster, seat=seat.key))
            info = status = None
        if status in _STOPPABLE and stop_why:
            add(self._step("cloud.stop", cluster, stop_why, "revoke", seats=key, cluster=cluster, seat=seat.key))
        if gone is not None:
            return  # an archived course is read-only: its seats keep what the store says
        if p is None or login is None:
            self._plan_free(seat, info, stored, changes)
            return
        made_for_them = stored.get("holder") == p.key and stored.get("user") == login
        new_key = made_for_them and status in _RUNNING and not _keyed(stored, p)
        made_for_them = made_for_them and not new_key
        launch = course.closed is None and runs and (status not in _RUNNING or not made_for_them or fresh is not None)
        minutes = self._minutes_left(course)
        if launch:
            try:
                task, error = self._task(course, seat, p), None
            except GpuseatError as exc:  # a bad setting or roster value: the step fails with it, as it is
                task = {}
                error = {"what": exc.what, "where": exc.where, "fix": exc.fix, "exit_code": exc.exit_code}
            why = f"{p.key} holds {seat.key}" + (" (hand-over)" if old_login and old_login != login else "")
            why += " (a new SSH key: the setup makes it the only one)" if new_key else ""
            add(self._step("cloud.launch", cluster, why, "grant", participant=p.key, seats=key, cluster=cluster,
                           seat=seat.key, login=login, task=task, idle_minutes=minutes, error=error))  # fmt: skip
        elif runs and course.closed is None and info is not None and info.autostop < 0 and minutes is not None:
            add(self._step("cloud.autostop", cluster, "it stops itself at the access window's end", "grant",
                           seats=key, cluster=cluster, idle_minutes=minutes))  # fmt: skip
        # record: the seat's honest state, and the way in made for its holder
        if launch:
            why = f"{p.key} can log in as {login} once {cluster} is up"
            add(self._record_step(seat.key, p.key, why, cluster=cluster, login=login, holder=p.key, live=True,
                                  reason=self._running(course, cluster), ssh_key=p.ssh_key))  # fmt: skip
            return
        if runs and info is not None and info.up and course.closed is None:
            state, reason = "running", self._running(course, cluster)
            access = self._access(info, login, p.key, seat, p.ssh_key)
        else:
            stopped = wish.stopped if wish is not None else None
            state, reason = "requested", stopped or self._waiting(course, cluster, info)
            access = Access(kind="ssh", user=login, device_uuid=seat.device_uuid, notes=(reason,), holder=p.key)
        if stored != access.to_dict() or seat.state != state or seat.state_reason != reason:
            add(self._record_step(seat.key, p.key, f"{seat.key}: {reason}", cluster=cluster, state=state,
                                  reason=reason, access=access.to_dict()))  # fmt: skip

    def _plan_free(self, seat: SeatView, info: Cluster | None, stored: dict[str, Any], changes: Changes) -> None:
        """A seat nobody holds: its way in names no one; its state says whether its cluster exists."""
        cluster = self.cluster_of(seat)
        reason = (
            f"stopped: nobody holds it (cluster {cluster} keeps its disk for the next holder)"
            if info is not None
            else "not launched: nobody holds it"
        )
        state = "planned"  # free to hand out (and to remove): its cluster, if any, is stopped
        if stored or seat.state_reason != reason or state != seat.state:
            changes.steps.append(
                self._step("seat.clear", seat.key, reason, "record", seats=(seat.key,), state=state, reason=reason)
            )

    def _minutes_left(self, course: CourseState) -> int | None:
        """Minutes until the open access window closes (None: no autostop, or no end to wait for), on the
        store's clock the window was worked out on (the agent's may be off)."""
        if not self.settings.autostop or course.closed is not None or course.next_change is None:
            return None
        now = course.read_at or course.now or datetime.now(UTC)
        return max(1, math.ceil((course.next_change - now).total_seconds() / 60))

    def _until(self, course: CourseState) -> str:
        if course.next_change is None or course.course is None:
            return ""
        tz = course.course.timezone
        return f" until the access window closes ({course.next_change.astimezone(ZoneInfo(tz)):%Y-%m-%d %H:%M} {tz})"

    def _running(self, course: CourseState, cluster: str) -> str:
        return f"running: cluster {cluster} is up{self._until(course)}"

    def _waiting(self, course: CourseState, cluster: str, info: Cluster | None) -> str:
        closed = course.closed or "the access window is closed"
        if course.next_change is None:  # the schedule has ended: nothing opens again
            return f"not launched: {closed}" if info is None else f"stopped: {closed}"
        if info is None:
            return f"not launched yet: the agent launches {cluster} when the access window opens ({closed})"
        return f"stopped: {closed}; the agent starts {cluster} again when the access window opens"

    def _access(self, info: Cluster, login: str, holder: str, seat: SeatView, key: str | None) -> Access:
        port = info.port if info.port and info.port != 22 else None
        access = ssh_access(info.ip, login, holder, seat.device_uuid, port)
        return replace(access, notes=_key_notes(key))

    # -- apply ---------------------------------------------------------------------------------------

    def do(self, step: Step) -> str | None:
        """Carry out one planned step (a cluster already so, or a user already gone, is fine)."""
        d = step.data
        match step.action:
            case "cloud.launch":
                self._launch(d)
            case "cloud.stop":
                self.sky.stop(d["cluster"])
            case "cloud.down":
                self.sky.down(d["cluster"])
            case "cloud.autostop":
                self.sky.autostop(d["cluster"], int(d["idle_minutes"]))
            case "account.revoke":
                line = shlex.join(["bash", "-c", revoke_script(d["login"])])
                self.runner.run(self.remote(d["cluster"], line), timeout=max(self.settings.timeout, 60.0))
            case "seat.record":
                self._record(step)
            case "request.record" | "seat.stop":
                return do_record(self, step, partial(requests.cluster_verdict, self))
            case "seat.check" | "session.report":
                return session_checks.do(self, step)
            case "seat.clear":
                if not self.runner.dry_run:
                    if self.store.seats.get_seat(self.course, step.target).state == "running":  # running → planned
                        self.store.delivery.record_delivery(
                            self.course, step.target, state="requested", actor=AGENT_ACTOR
                        )
                    self.store.delivery.record_delivery(
                        self.course,
                        step.target,
                        clear_access=True,
                        state=d["state"],
                        reason=d["reason"],
                        actor=AGENT_ACTOR,
                    )
            case _:
                raise InputError(f"the skypilot engine has no step {step.action!r}", where="plan")
        return None

    def _launch(self, d: Any) -> None:
        cluster, seat = d["cluster"], d["seat"]
        if d.get("error"):
            e = d["error"]
            if not self.runner.dry_run:
                reason = f"not launched: {GpuseatError(e['what'], where=e['where'], fix=e['fix']).message}"[:1900]
                self.store.delivery.record_delivery(self.course, seat, state="failed", reason=reason, actor=AGENT_ACTOR)
            kind = InputError if e["exit_code"] == 2 else EngineError
            error = kind(e["what"], where=at_seat(seat, e["where"], e["what"]), fix=e["fix"] or _RETRY_FIX)
            self._launched[cluster] = error
            raise error
        if not self.runner.dry_run:
            started = datetime.now(UTC)
            reason = f"launching: cluster {cluster} for {d['login']} (sky launch started {started:%H:%M} UTC)"
            self.store.delivery.record_delivery(self.course, seat, state="requested", reason=reason, actor=AGENT_ACTOR)
        try:  # submitted, not waited: every seat launches side by side; its record step waits for it
            request = self.sky.launch(cluster, dict(d["task"]), idle_minutes=d.get("idle_minutes"), wait=False)
        except EngineError as exc:
            self._launched[cluster] = exc
            raise self._not_launched(seat, exc) from None
        self._launched[cluster] = None
        if request is not None:
            self._launches[cluster] = request

    def launch_result(self, cluster: str) -> tuple[bool, GpuseatError | None]:
        """Whether this pass launched ``cluster``, and why that failed (None: it did not), waited for here
        when still running: the seat's record step and a request's both ask, whichever runs first waits."""
        request = self._launches.pop(cluster, None)
        if request is not None:
            try:
                self.sky.result("launch", cluster, request)
            except EngineError as exc:
                self._launched[cluster] = exc
        return cluster in self._launched, self._launched.get(cluster)

    def _not_launched(self, seat: str, exc: EngineError) -> EngineError:
        """Store the seat as failed with SkyPilot's error; the step's error names the seat once, with one fix."""
        if not self.runner.dry_run:
            reason = f"not launched: {exc.what}"[:1900]
            self.store.delivery.record_delivery(self.course, seat, state="failed", reason=reason, actor=AGENT_ACTOR)
        where = None if exc.where == "skypilot" else exc.where  # sdk's errors say "skypilot"; the seat says more
        return EngineError(exc.what, where=at_seat(seat, where, exc.what), fix=exc.fix or _LAUNCH_FIX)

    def _record(self, step: Step) -> None:
        d = step.data
        if self.runner.dry_run:
            return
        if d.get("live"):  # just launched: wait for the launch; its address comes from SkyPilot now
            _launched, error = self.launch_result(d["cluster"])
            if isinstance(error, EngineError):
                raise self._not_launched(step.target, error) from None
            info = self.sky.status([d["cluster"]]).get(d["cluster"])
            if info is None or not info.up or not info.ip:
                state = info.status if info is not None else "gone"
                raise EngineError(
                    f"cluster {d['cluster']} is {state} after its launch",
                    where=f"seat {step.target}",
                    fix=f"sky status {d['cluster']} says why; the agent launches it again on its next pass",
                )
            seat = self.store.seats.get_seat(self.course, step.target)
            access = self._access(info, d["login"], d["holder"], seat, d.get("ssh_key")).to_dict()
            state, reason = "running", d["reason"]
        else:
            access, state, reason = d["access"], d["state"], d["reason"]
        self.store.delivery.record_delivery(
            self.course,
            step.target,
            access=Access.from_dict(access),
            state=state,
            reason=reason,
            engine_ref=d["cluster"],
            actor=AGENT_ACTOR,
        )

    def remote(self, cluster: str, line: str, *, timeout: float = 30.0) -> list[str]:
        """``ssh CLUSTER LINE`` through SkyPilot's ssh alias (its admin user and key), no prompts."""
        if not tasks.CLUSTER_NAME.fullmatch(cluster):
            raise InputError(
                f"bad cluster name {cluster!r}", where="seat", fix="cluster names come from cluster_name()"
            )
        wait = max(1, min(30, math.ceil(timeout)))
        return [self.settings.ssh, "-o", "BatchMode=yes", "-o", f"ConnectTimeout={wait}", cluster, line]

    # -- observe, check, connect ---------------------------------------------------------------------

    def observe(self, course: CourseState) -> list[Holding]:
        """The course's clusters (up, starting or stopped: each holds a disk, and maybe a login)."""
        out = []
        by_cluster = {self.cluster_of(s): s for s in self._seats(course)}
        for name, info in sorted(self.clusters(course).items()):
            seat = by_cluster.get(name)
            holder = (course.access.get(seat.key) or {}).get("holder") if seat is not None else None
            out.append(Holding(self.name, "cluster", name, holder, seat.key if seat else None, self.host, info.status))
        return out

    def connect(self, seat: SeatView) -> Access | None:
        """The stored way in, when it was made for the seat's holder and its cluster is up (else None)."""
        stored = self.store.delivery.access_of(self.course).get(seat.key)
        if not stored or not seat.participant or stored.get("holder") != seat.participant or not stored.get("host"):
            return None
        return Access.from_dict(stored)

    def probe_command(self, cluster: str, user: str, access: dict[str, Any] | None = None) -> list[str]:
        """``nvidia-smi -L`` on the cluster, run as the participant (``sudo -n -u``); the stored way in's
        host, port and jump host (``seats connect``) override the alias's address."""
        if not UNIX_USER.match(user):
            raise InputError(f"{user!r} is not a Unix user name", where="participant", fix="a roster unix_user")
        argv = self.remote(cluster, shlex.join(["sudo", "-n", "-u", user, "--", "nvidia-smi", "-L"]),
                           timeout=self.settings.timeout)  # fmt: skip
        extra: list[str] = []
        a = access or {}
        if a.get("host"):
            extra += ["-o", f"HostName={hosts.check_host(str(a['host']), field='host')}"]
        if a.get("port"):
            extra += ["-p", str(int(a["port"]))]
        if a.get("jump_host"):
            extra += ["-J", jump_target(str(a["jump_host"]), field="jump_host")]  # [user@]host[:port]
        return [*argv[:-2], *extra, *argv[-2:]]

    def state_of(self, seat: SeatView, participant: ParticipantView) -> str:
        """Why the seat cannot be reached now (not launched, launching, stopped), from its state in the store."""
        reason = seat.state_reason or ""
        if reason.startswith(CLOUD_RUN_STATES) and not reason.startswith("running"):
            return reason
        stored = self.store.delivery.access_of(self.course).get(seat.key) or {}
        if stored.get("holder") and stored.get("holder") != participant.key:
            return f"being prepared: the agent hands {self.cluster_of(seat)} over to {self.login_of(participant)}"
        return (
            f"not launched yet: the agent launches {self.cluster_of(seat)} while the access window is open "
            "(gpuseat agent, or once: gpuseat apply --engine skypilot)"
        )

    def refused(self, participant: ParticipantView) -> str | None:
        """Exclusivity: None when ``participant`` (a previous or released holder) cannot log in on any up
        cluster of a seat they held; else what still lets them in. A stopped cluster lets nobody in."""
        login = self.login_of(participant)
        held = {a.seat for a in self.store.seats.history(self.course, participant=participant.key)}
        access = self.store.delivery.access_of(self.course)
        for seat in sorted(held):
            stored = access.get(seat) or {}
            if not stored.get("host") or stored.get("holder") == participant.key:
                continue
            line = shlex.join(["sh", "-c", _STILL_IN, "gpuseat-check", login])
            argv = [*self.remote(self.cluster_of(seat), line, timeout=self.settings.timeout)]
            argv[-2:-2] = ["-o", f"HostName={hosts.check_host(str(stored['host']), field='host')}"]
            done = self.runner.try_run(argv, timeout=self.settings.timeout, mutates=False, where=f"seat {seat}")
            if done.returncode == 0 and done.stdout.strip() == "open":
                return f"{login} still has a key and an unexpired account on {self.cluster_of(seat)}"
        return None

    def probe(self, seat: SeatView, participant: ParticipantView) -> Readiness:
        """List the GPUs on the cluster as the participant and judge them (no ssh to a seat not up: one whose
        launch failed keeps its last address, which the cloud may since have given to another machine)."""
        from gpuseat.core.listing import parse_list, visible_devices

        cluster = self.cluster_of(seat)
        now = datetime.now(UTC)
        stored = self.store.delivery.access_of(self.course).get(seat.key) or {}
        made_for = stored.get("holder")
        said = seat.state_reason or ""
        down = said.startswith(CLOUD_RUN_STATES) and not said.startswith("running")
        if down or not stored.get("host") or (made_for and made_for != participant.key):
            why = self.state_of(seat, participant)
            return Readiness(self.course, seat.key, participant.key, "broken", why, "", (), now, ENGINE)
        argv = self.probe_command(cluster, self.login_of(participant), stored)
        done = self.runner.try_run(argv, timeout=self.settings.timeout, mutates=False, where=f"seat {seat.key}")
        text = (done.stdout or "") + (done.stderr or "")
        visible: tuple[str, ...] = ()
        if done.returncode == 124:
            state: Any = "broken"
            reason: str | None = f"the probe on {cluster} did not answer within {self.settings.timeout:g} s"
        elif done.returncode != 0:
            state, reason = "broken", f"the probe failed on {cluster}: {text.strip()[-300:]}"
        else:
            visible = visible_devices(parse_list(done.stdout))
            state, reason = judge(seat.device_uuid, visible)
        return Readiness(self.course, seat.key, participant.key, state, reason, text[:4000], visible, now, ENGINE)
