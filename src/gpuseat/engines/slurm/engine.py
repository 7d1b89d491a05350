"""The Slurm engine: a participant's seat is their own GRES type in the course partition, inside the
course's session reservations.

:meth:`SlurmEngine.plan` reads the cluster (``scontrol show partition|reservation``, ``squeue``,
``sacctmgr show assoc``, the ``job_submit.lua`` and partitions include gpuseat writes) and the store,
and lists only what differs:

* **revoke** (first): each session reservation's ``Users`` loses whoever no longer holds a seat; the
  seat limits in ``job_submit.lua`` drop or move them; their live jobs are cancelled (``scancel``,
  waiting until the GPU is free), and so are a mover's jobs still on their old seat; their association
  is removed (``sacctmgr``). A course archived or deleted loses its reservations and partition too.
* **grant**: the course partition (``scontrol create``, and its line in the partitions include so
  that ``scontrol reconfigure`` keeps it), the course account and one association per holder with
  ``GrpTRES``/``MaxTRESPerJob=gres/gpu=1`` (accounting), the seat limits, a reservation per session
  still to come with ``Users`` = exactly the current holders and ``CoreCnt`` the cores bound to the seats
  (made again when ``cores_per_seat`` or the seats' nodes changed, or it holds other cores than its seats', and
  no job is in it; notes say when gres.conf or the node bind the seats otherwise), its ``EndTime`` the session's
  end (``reservation.retime``); a session the schedule no longer has is deleted (revoke), unless a job is in it
  (a note; it admits nobody then: ``Users=root``).
* **record**: each holder's way in (``srun -p … --reservation=… --gres=gpu:1``) in the store.
* the participants' own stop, start, restart (reset and key are refused) and seat hours: a stopped holder
  keeps their seat but is no user of the session reservations (and submits nothing with accounting), and
  their jobs are cancelled (:mod:`gpuseat.engines.slurm.requests`).

A grant on a seat whose revoke failed waits (:class:`~gpuseat.engines.base.StepEngine`), so the new
holder is let in only once the old holder's jobs are gone. A second plan after an apply is empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpuseat.core import logins
from gpuseat.core.readiness import Access, Readiness
from gpuseat.engines import other_courses, wishes
from gpuseat.engines.base import Changes, CourseState, Holding, Phase, Step, StepEngine
from gpuseat.engines.host import others as courses_rule
from gpuseat.engines.setting_types import trusted_file
from gpuseat.engines.slurm import config, names, reading, stale
from gpuseat.engines.slurm import requests as seat_requests
from gpuseat.engines.slurm.adapter import Job, Slurm
from gpuseat.engines.slurm.config import PLACEHOLDER_USER, Reservation, SeatLimit, reservation_users
from gpuseat.engines.slurm.course import (
    Member,
    SlurmCourse,
    course_from_values,
    device_from_ref,
    in_course,
    job_submit_folder,
    lua_path,
    off_seat,
    plan_sessions,
    seat_types_of,
    uids,
    write_lua,
)
from gpuseat.errors import EngineError, GpuseatError, InputError
from gpuseat.files import write_file

if TYPE_CHECKING:
    from gpuseat.store import ParticipantView, SeatView


class SlurmSettings(BaseModel):
    """The Slurm engine's settings (stored per course; ``gpuseat engines settings slurm k=v``)."""

    model_config = ConfigDict(extra="forbid")

    slurm_conf: str | None = Field(None, description="the cluster's slurm.conf (default: SLURM_CONF, as scontrol says)")
    conf_dir: str | None = Field(None, description="where job_submit.lua goes (default: slurm.conf's folder)")
    partitions_conf: str | None = Field(
        None, description="the slurm.conf include holding course partitions (default: gpuseat-partitions.conf there)"
    )
    accounting: bool | None = Field(None, description="associations via sacctmgr (default: when slurmdbd is used)")
    cancel_wait_s: float = Field(30.0, gt=0, le=600, description="seconds a cancelled job may take to free its GPU")
    timeout: float = Field(60.0, gt=0, le=3600, description="seconds a probe job may wait for its GPU")
    cores_per_seat: int = Field(
        1, ge=1, le=256, description="cores each seat's GPU is bound to: a GPU job may ask for -c up to this"
    )

    @field_validator("slurm_conf", "conf_dir", "partitions_conf")
    @classmethod
    def _plain_path(cls, v: str | None) -> str | None:
        if v is not None and (not v.startswith("/") or any(c.isspace() or ord(c) < 32 or c in ",=" for c in v)):
            raise ValueError("must be an absolute path without spaces, commas or '=' (it goes into slurm.conf)")
        if v is not None and ".." in v.split("/"):
            raise ValueError("must be an absolute path without '..' (name the folder itself)")
        return v

    @field_validator("partitions_conf")
    @classmethod
    def _include_name(cls, v: str | None) -> str | None:
        # gpuseat rewrites this file as root (mode 0644): /etc/shadow or /etc/environment are never one
        if v is not None and not (v.endswith(".conf") and len(v.rsplit("/", 1)[-1]) > len(".conf")):
            raise ValueError(f"{v}: must be a slurm.conf include named *.conf, like /etc/slurm/gpuseat-partitions.conf")
        return v


class SlurmEngine(StepEngine[SlurmSettings]):
    """The ``slurm`` engine (see the module docstring)."""

    name = "slurm"
    settings_model = SlurmSettings

    def setup(self) -> None:
        """The engine's own parts, from its settings."""
        self.partition = names.course_partition(self.course)
        s = self.settings
        if s.slurm_conf:  # scontrol (as root) loads the plugins it names (PluginDir=): never a file others can write
            trusted_file(s.slurm_conf, setting="slurm_conf")
        self.slurm = Slurm(self.runner, conf=Path(s.slurm_conf) if s.slurm_conf else None)
        self._config: dict[str, str] | None = None

    # -- the cluster's configuration ---------------------------------------------------------------------

    def _cfg(self) -> dict[str, str]:
        if self._config is None:
            self._config = self.slurm.config()
        return self._config

    def accounting(self) -> bool:
        """Whether the cluster keeps associations (slurmdbd), unless the settings say."""
        if self.settings.accounting is not None:
            return self.settings.accounting
        return self._cfg().get("AccountingStorageType", "").endswith("slurmdbd")

    def conf_path(self) -> Path | None:
        """The cluster's slurm.conf (the setting, else what scontrol reports)."""
        given = self.settings.slurm_conf or self._cfg().get("SLURM_CONF")
        return Path(given) if given and given.startswith("/") else None

    def conf_dir(self) -> Path | None:
        """Where job_submit.lua and the partitions include live."""
        folder = job_submit_folder(self.settings.conf_dir, self.settings.slurm_conf)
        if folder is None and (conf := self.conf_path()) is not None:
            folder = conf.parent
        return folder

    def include_path(self) -> Path | None:
        """The slurm.conf include gpuseat keeps course partitions in (one it did not write is refused)."""
        if self.settings.partitions_conf:
            return config.own_include(Path(self.settings.partitions_conf))
        folder = self.conf_dir()
        return config.own_include(folder / "gpuseat-partitions.conf") if folder else None

    def _lua(self, *, required: bool) -> Path | None:
        """The job_submit.lua gpuseat keeps (None: not gpuseat's to keep, with accounting)."""
        try:
            path = lua_path(self.conf_dir())
        except InputError:
            if required:
                raise
            return None
        return path if required or path.exists() else None

    # -- what the store wants --------------------------------------------------------------------------

    def wanted(self, state: CourseState, notes: list[str]) -> SlurmCourse:
        """The course as Slurm should see it: its devices, and members with seats only while active."""
        if state.course is None:
            return SlurmCourse(state.key, (), (), ())
        skipped: list[str] = []
        intervals = self._intervals(state)
        people = list(state.people.values())
        per_seat = self.settings.cores_per_seat
        sc = course_from_values(state.key, intervals, people, state.seats, skip=skipped, cores_per_seat=per_seat)
        if skipped:
            notes.append(
                f"seat(s) {', '.join(skipped)} have no Slurm device recorded: "
                "gpuseat slurm config --inventory FILE --node NAME --course KEY --record"
            )
        if not state.active:
            members = tuple(Member(m.participant, m.unix_user, None) for m in sc.members)
            return SlurmCourse(sc.key, sc.intervals, members, sc.devices, sc.cores_per_seat)
        for m in sc.members:
            if m.seat is not None:
                names.participant_login(m.unix_user, where=f"participant {m.participant}")
        return sc

    def _intervals(self, state: CourseState) -> list[tuple[datetime, datetime]]:
        from gpuseat.engines.slurm.course import _local

        assert state.course is not None
        try:
            sched = self.store.courses.course_file(state.key).schedule
        except GpuseatError:
            return []
        tz = state.course.timezone
        return [(_local(a, tz), _local(b, tz)) for a, b in sched.intervals()]

    def _yield(self, state: CourseState, sc: SlurmCourse, changes: Changes) -> SlurmCourse:
        """``sc`` without the holders whose GPU an older holder of another course keeps (:meth:`_yielded`): no
        session, seat limit or association for them (their jobs are cancelled); their seat.device step fails."""
        lost = self._yielded(state, sc)
        for key, other in sorted(lost.items()):
            what, fix = courses_rule.refusal(key, next(m.participant for m in sc.members if m.seat == key), other)
            changes.steps.append(self._step("seat.device", key, what, "grant", fix=fix))
        return replace(sc, members=tuple(replace(m, seat=None) if m.seat in lost else m for m in sc.members))

    def _yielded(self, state: CourseState, sc: SlurmCourse) -> dict[str, courses_rule.Holder]:
        """This course's held seats whose GRES device (its files on its node) a held Slurm seat of another course not
        archived also names, held since before: seat → that holding (the host engine's rule)."""
        devices = {d.seat: d for d in sc.devices}
        since = {s.key: s.assigned_since or datetime.max.replace(tzinfo=UTC) for s in state.seats}
        held = [(m, d) for m in sc.members if (d := devices.get(m.seat or "")) is not None]
        mine = [courses_rule.Holder((since[m.seat or ""], self.course, m.seat or ""), m.participant, m.unix_user,
                                    *_files(d)) for m, d in held]  # fmt: skip
        return other_courses.yielded_by_files(self.store, self.course, self.name, mine, _ref_files)

    # -- plan ------------------------------------------------------------------------------------------

    def plan(self, course: CourseState) -> Changes:
        """Every step that makes the cluster match the store (see the module docstring)."""
        changes = Changes(self.name, self.course, self.host)
        sc = self._yield(course, self.wanted(course, changes.notes), changes)
        holders = {lim.user: lim for lim in sc.limits()}  # login -> their seat's limit
        seat_of_type = {d.slurm_type: str(d.seat) for d in sc.devices}
        seat_of = {login: seat_of_type[lim.seat_type or lim.gres_type] for login, lim in holders.items()}
        accounting = self.accounting()
        lua = self._lua(required=not accounting)
        lua_text = lua.read_text(errors="replace") if lua and lua.exists() else ""
        old_limits = {x.user: x for x in config.job_submit_limits(lua_text) if x.partition == self.partition}
        others = [x for x in config.job_submit_limits(lua_text) if x.partition != self.partition]
        every_resv = self.slurm.reservations()  # the course's sessions; others may hold its seats' cores
        resvs = {n: f for n, f in every_resv.items() if config.is_session(n, self.partition)}
        assocs = self.slurm.associations(self.partition) if accounting else {}
        known = {m.unix_user for m in sc.members} | set(old_limits) | set(assocs)
        for f in resvs.values():
            known |= reservation_users(f)
        formerly = self._former_seats(course)
        jobs = self.slurm.jobs()
        idx = {j.job_id: self.slurm.job_gres_index(j.job_id) for j in jobs if j.state == "RUNNING" and j.user in known}
        # the holders' own requests, run states and seat hours: a stopped holder keeps their seat, association
        # and seat limit, but is no user of the session reservations (and, with accounting, submits no job)
        hold = {
            m.unix_user: (str(m.seat), course.people[m.participant])
            for m in sc.members
            if m.unix_user in holders and m.participant in course.people
        }
        live: dict[str, list[int]] = {}
        for j in jobs:
            if j.user in hold and self._course_job(sc, j, idx.get(j.job_id, ""), known):
                live.setdefault(j.user, []).append(j.job_id)
        asked = seat_requests.plan_requests(self, course, hold, live)
        stopped = asked.stopped

        def seats_for(login: str) -> tuple[str, ...]:
            return tuple(sorted(set(formerly.get(login, ())) | ({seat_of[login]} if login in seat_of else set())))

        step = self._step
        add = changes.steps.append
        gone = "the course is deleted" if course.course is None else None
        if gone is None and course.archived:
            gone = "the course is archived"

        def why_out(login: str) -> str:
            return gone or stopped.get(login) or f"{login} holds no Slurm seat in {self.course} now"

        keep_jobs = {u: x for u, x in holders.items() if u not in stopped and u not in asked.restart}
        plugins = self._cfg().get("JobSubmitPlugins", "").split(",")
        tied = set(old_limits) if lua is not None and "lua" in plugins else set()  # else Slurm picks the GPU
        cancels = self._cancel(sc, jobs, idx, keep_jobs, known, tied)
        now = datetime.now().replace(microsecond=0)
        is_open = bool(holders) and course.active  # else every session reservation is deleted (below)
        sessions = {r.name: r for r in plan_sessions(sc) if r.end > now} if is_open else {}
        ending = {j.job_id for found in cancels.values() for j in found}
        dropped, held_up = stale.stale_sessions(self.partition, resvs, sessions, jobs, ending, changes.notes,
                                                open_course=is_open)  # fmt: skip

        # revoke 1: reservations lose whoever holds no seat now, or whose seat is stopped; a session still to
        # come only once their jobs are cancelled (slurmctld refuses "nodes are busy" while a job without an
        # end time runs on its nodes)
        want_users = sorted(u for u in holders if u not in stopped)
        revoked: dict[str, set[str]] = {}  # reservation -> its users once revoke 1 is done
        coming: list[Step] = []
        for name, fields in sorted(resvs.items()):
            if name in dropped:
                continue
            have = reservation_users(fields)
            if name in held_up:  # kept only for the jobs in it: it admits nobody now, so no new job starts there
                if have != {PLACEHOLDER_USER}:
                    add(step("reservation.revoke", name, stale.closed_why(held_up[name]), "revoke",
                             users=[PLACEHOLDER_USER]))  # fmt: skip
                continue
            out = sorted(have - set(want_users) - {PLACEHOLDER_USER})
            if out and (course.active and holders):
                keep = sorted(have & set(want_users)) or [PLACEHOLDER_USER]
                revoked[name] = set(keep)
                lost = tuple(sorted({s for u in out for s in seats_for(u)}))
                why = f"{', '.join(out)}: {why_out(out[0])}"
                revoke = step("reservation.revoke", name, why, "revoke", seats=lost, users=keep)
                (coming.append if stale.starts_later(fields) else add)(revoke)
        # revoke 2: the seat limits (job_submit.lua) drop or move them
        mine = [holders[u] for u in sorted(holders)]
        new_text = config.job_submit_lua([*others, *mine], uids(x.user for x in [*others, *mine])) if lua else ""
        moved = sorted(u for u, x in old_limits.items() if u not in holders or holders[u] != x)
        if lua is not None and new_text != lua_text:
            lost = tuple(sorted({s for u in moved for s in seats_for(u)}))
            phase: Phase = "revoke" if moved else "grant"
            why = f"{', '.join(moved)}: seat limits change" if moved else "seat limits of the holders"
            add(
                step(
                    "limits.set",
                    str(lua),
                    why,
                    phase,
                    seats=lost if moved else tuple(sorted(seat_of.values())),
                    text=new_text,
                )
            )
        # revoke 2b (accounting): a stopped holder's association takes no new job (before their jobs are cancelled)
        for login in sorted(stopped):
            a = assocs.get(login)
            if accounting and a is not None and a.get("maxsubmitjobs") != seat_requests.STOPPED_SUBMIT:
                tres = f"gres/gpu={holders[login].count}"
                why = f"{stopped[login]}: no new job of {login} in account {self.partition}"
                add(step("limit.set", login, why, "revoke", seats=(seat_of[login],), user=login, tres=tres,
                         submit=seat_requests.STOPPED_SUBMIT))  # fmt: skip
        # revoke 3: live jobs of people without a seat or whose seat is stopped or restarted, and of movers on
        # their old seat
        for login, found in sorted(cancels.items()):
            lost = tuple(
                sorted(
                    {s for j in found for t in seat_types_of(j, idx.get(j.job_id, "")) if (s := seat_of_type.get(t))}
                    | set(formerly.get(login, ()))
                )
            )
            ids = [j.job_id for j in found]
            if login not in holders or login in stopped:
                why = why_out(login)
            elif login in asked.restart:
                why = f"{login} asked for a restart: their jobs end, their access stays"
            else:
                on = ", ".join(s for s in lost if s != seat_of[login])
                why = f"{login} moved to {seat_of[login]}: the job is on {on}"
                if login not in tied:
                    why = f"{login} holds {seat_of[login]}, over its GPU: the job is on {on}"
            add(step("jobs.cancel", login, f"{len(ids)} job(s): {why}", "revoke", seats=lost, job_ids=ids, user=login))
        changes.steps += coming
        # revoke 4: associations of people without a seat
        for login in sorted(set(assocs) - set(holders)):
            add(step("association.remove", login, why_out(login), "revoke", seats=seats_for(login), user=login))
        for name in dropped:  # a session the schedule no longer has (moved, cancelled, over): before any new one
            add(step("reservation.delete", name, "the course's schedule has no such session now", "revoke"))
        if not is_open:
            for name in sorted(resvs):
                add(step("reservation.delete", name, gone or "nobody holds a seat now", "revoke"))
        if not course.active or not sc.devices:
            self._plan_teardown(changes, accounting, gone or "the course has no Slurm seats now")
            self._plan_record(course, sc, {}, changes)
            changes.steps += asked.steps
            return changes

        # grant: partition (kept across reconfigure), account, associations, reservations
        self._plan_partition(sc, changes)
        changes.notes += reading.binding_notes(self, sc)
        if holders and accounting and not self.slurm.account_exists(self.partition):
            add(step("account.add", self.partition, "associations of the course's people belong to it", "grant"))
        for login, lim in sorted(holders.items()):
            tres = f"gres/gpu={lim.count}"
            have_assoc = assocs.get(login)
            seats = (seat_of[login],)
            submit = seat_requests.STOPPED_SUBMIT if login in stopped else ""
            if have_assoc is None:
                action = "association.add"
            elif (have_assoc["grptres"], have_assoc["maxtresperjob"], have_assoc.get("maxsubmitjobs", "")) != (
                tres,
                tres,
                submit,
            ) and not (login in stopped and have_assoc.get("maxsubmitjobs") != submit):  # that one: revoke 2b
                action = "limit.set"
            else:
                action = ""
            if accounting and action:
                why = f"{login} holds {seat_of[login]}: at most {lim.count} GPU"
                if login in stopped:
                    why += f"; no job while the seat is stopped ({stopped[login]})"
                elif have_assoc and have_assoc.get("maxsubmitjobs"):
                    why += f"; {login} may submit again"
                add(step(action, login, why, "grant", seats=seats, user=login, tres=tres, submit=submit))
        if lua is None and not accounting:
            changes.notes.append("no job_submit.lua: the seat limits are not applied")
        elif not accounting and "lua" not in self._cfg().get("JobSubmitPlugins", "").split(","):
            changes.notes.append(
                f"the cluster runs JobSubmitPlugins={self._cfg().get('JobSubmitPlugins') or '(none)'}: the seat "
                f"limits in {lua} are not applied; add JobSubmitPlugins=lua to slurm.conf and `scontrol reconfigure`"
            )
        if holders:
            users = want_users or [PLACEHOLDER_USER]  # every holder stopped: Users= cannot be empty
            for res in sessions.values():
                every = tuple(sorted(seat_of.values()))
                if res.name not in resvs and (old := stale.kept_overlapping(res, held_up, resvs)):
                    changes.notes.append(f"session {res.name} is made once {old} is gone (it holds the cores then)")
                    continue
                if res.name not in resvs:
                    start = res.start if res.start > now else now
                    why = f"session {res.start:%Y-%m-%d %H:%M} for {len(want_users)} holder(s)"
                    words = stale.replace_start(res, start, users).words()
                    add(step("reservation.create", res.name, why, "grant", seats=every, words=words))
                    continue
                have = revoked.get(res.name) or reservation_users(resvs[res.name])
                if have != set(users):
                    new = sorted(set(want_users) - have)
                    lost = tuple(sorted(seat_of[u] for u in new))
                    why = f"{', '.join(new)} may use the session" if new else "exactly the holders"
                    add(step("reservation.set", res.name, why, "grant", seats=lost or every, users=users))
                elsewhere = {n: f for n, f in every_resv.items() if n != res.name and n not in dropped}
                reasons, blocked = reading.remade_for(resvs[res.name], res, sc, elsewhere)
                asks = "; ".join(reasons)
                if blocked:  # a new one would get other cores again
                    changes.notes.append(f"session {res.name} holds other cores than its seats', but {blocked}: "
                                         "it stays as it is until that one is gone")  # fmt: skip
                inside = sorted(j.job_id for j in jobs if j.live and j.reservation == res.name)
                if asks and not inside:
                    words = stale.replace_start(res, res.start if res.start > now else now, users).words()
                    add(step("reservation.resize", res.name, f"{asks}: made again", "grant", seats=every, words=words))
                    continue
                if asks:  # Slurm 22.05 changes no core reservation's CoreCnt or Nodes, and deletes none with jobs in it
                    changes.notes.append(
                        f"session {res.name} needs {asks}; job(s) {', '.join(map(str, inside[:5]))} are in it, so "
                        "it stays as it is (making it again would end them): the first apply after they end makes "
                        "it again"
                    )
                end = reading.shown_time(resvs[res.name], "EndTime")
                if end is not None and abs((end - res.end).total_seconds()) >= 60:  # made from now: < 30 s off
                    why = f"the session ends at {res.end:%Y-%m-%d %H:%M} now, not {end:%Y-%m-%d %H:%M}"
                    phase = "grant" if res.end > end else "revoke"
                    until = f"{res.end:%Y-%m-%dT%H:%M:%S}"
                    add(step("reservation.retime", res.name, why, phase, seats=every, end=until))
        self._plan_record(course, sc, holders, changes, asked.notes)
        changes.steps += asked.steps
        return changes

    def _former_seats(self, state: CourseState) -> dict[str, list[str]]:
        """Login → the seats whose stored way in names it (where a released or moved person was)."""
        out: dict[str, list[str]] = {}
        for seat, acc in state.access.items():
            if acc.get("kind") == "slurm" and acc.get("user"):
                out.setdefault(str(acc["user"]), []).append(seat)
        return out

    def _cancel(
        self,
        sc: SlurmCourse,
        jobs: Sequence[Job],
        idx: dict[int, str],
        holders: dict[str, SeatLimit],
        known: set[str],
        tied: set[str],
    ) -> dict[str, list[Job]]:
        """Login → the live jobs to cancel: course jobs of people without a seat, a holder's off their seat
        (:func:`~gpuseat.engines.slurm.course.off_seat`; ``tied``: whom job_submit.lua keeps to their type)."""
        course_types = {d.slurm_type for d in sc.devices}
        out: dict[str, list[Job]] = {}
        for job in jobs:
            if job.live and job.user not in holders and self._course_job(sc, job, idx.get(job.job_id, ""), known):
                out.setdefault(job.user, []).append(job)
        for login, lim in holders.items():
            mine = [j for j in jobs if j.user == login]
            own = lim.seat_type or lim.gres_type
            if off := off_seat(mine, idx, own, course_types, lim.count, tied=login in tied):
                out[login] = off
        return out

    def _course_job(self, sc: SlurmCourse, job: Job, gres_idx: str, known: set[str]) -> bool:
        """Whether a live job is the course's: in its partition, a session, its account, or on its seats."""
        strict = self.partition in job.partition.split(",") or config.is_session(job.reservation, self.partition)
        if job.account == self.partition and self.accounting():
            strict = True
        return job.live and (strict or in_course(sc, job, gres_idx, known=known))

    def course_jobs(self, logins: Sequence[str]) -> list[Job]:
        """The live course jobs of ``logins`` now (what a stop or restart cancels)."""
        sc = self._course()
        mine = set(logins)
        return [j for j in self.slurm.jobs(logins) if j.user in mine and self._course_job(sc, j, "", mine)]

    def _plan_partition(self, sc: SlurmCourse, changes: Changes) -> None:
        nodes = sorted({d.node for d in sc.devices})
        line = config.partition_line(self.course, nodes)
        exists = self.partition in self.slurm.partitions()
        conf = self.conf_path()
        conf_text = _read(conf)
        include = self.include_path()
        persisted = config.defines_partition(conf_text, self.partition)
        inc_text = _read(include)
        in_include = line in inc_text.splitlines()
        if not exists or (not persisted and include is not None and not in_include):
            changes.steps.append(
                self._step(
                    "partition.create",
                    self.partition,
                    f"the course's jobs run in it (nodes {','.join(nodes)})",
                    "grant",
                    words=config.partition_words(self.course, nodes),
                    include=None if persisted or include is None else str(include),
                    line=line,
                )
            )
        if (
            not persisted
            and include is not None
            and conf is not None
            and not config.includes(conf_text, str(include), str(conf.parent))
        ):
            changes.notes.append(
                f"add this line to {conf} so that `scontrol reconfigure` keeps {self.partition} and its "
                f"session reservations: Include {include}"
            )
        elif not persisted and include is None:
            changes.notes.append(
                f"the partition {self.partition} is made at run time only (no slurm.conf folder known): "
                "set slurm.slurm_conf, or add its line from `gpuseat slurm config --course` to slurm.conf"
            )

    def _plan_teardown(self, changes: Changes, accounting: bool, why: str) -> None:
        include = self.include_path()
        if self.partition in self.slurm.partitions() or (
            include is not None and f"PartitionName={self.partition} " in _read(include)
        ):
            changes.steps.append(
                self._step(
                    "partition.delete",
                    self.partition,
                    why,
                    "revoke",
                    include=str(include) if include is not None else None,
                )
            )
        if accounting and self.slurm.account_exists(self.partition):
            changes.steps.append(self._step("account.delete", self.partition, why, "revoke"))

    def _plan_record(
        self,
        state: CourseState,
        sc: SlurmCourse,
        holders: dict[str, SeatLimit],
        changes: Changes,
        stopped: dict[str, str] | None = None,
    ) -> None:
        if state.course is None or state.archived:
            return
        by_seat = {m.seat: m for m in sc.members if m.seat and m.unix_user in holders}
        session = reading.current_session(sc, datetime.now()) if holders else None
        for seat in state.seats:
            dev = sc.device_of(seat.key)
            if dev is None:
                continue
            old = dict(state.access.get(seat.key) or {})
            m = by_seat.get(seat.key)
            if m is None:
                if old.get("holder") or old.get("user"):
                    base = Access(kind="slurm", host=old.get("host") or dev.node, device_uuid=seat.device_uuid)
                    changes.steps.append(self._clear_step(seat.key, access=base.to_dict()))
                continue
            note = (stopped or {}).get(m.unix_user)
            access = self._access(sc, seat, m.unix_user, m.participant, session, note).to_dict()
            if old != access or seat.state != "running":
                why = f"{m.participant} submits as {m.unix_user}"
                changes.steps.append(self._record_step(seat.key, m.participant, why, access=access))

    def _access(
        self,
        sc: SlurmCourse,
        seat: SeatView,
        login: str,
        holder: str,
        session: Reservation | None,
        stopped: str | None = None,
    ) -> Access:
        """The holder's way in: ``srun`` in the course partition and session; while their seat is stopped
        its first note says so, and why."""
        dev = sc.device_of(seat.key)
        assert dev is not None
        resv = f" --reservation={session.name}" if session else ""
        notes = (
            f"your seat is Slurm GRES gpu:{dev.slurm_type} on {dev.node}; jobs asking for more are refused",
            f"sbatch works the same way: sbatch -p {sc.partition}{resv} --gres=gpu:1 job.sh",
        )
        return Access(
            kind="slurm",
            host=dev.node,
            user=login,
            command=f"srun -p {sc.partition}{resv} --gres=gpu:1 --pty bash",
            device_uuid=seat.device_uuid,
            notes=(stopped, *notes) if stopped else notes,
            holder=holder,
        )

    # -- apply -----------------------------------------------------------------------------------------

    def do(self, step: Step) -> str | None:
        """Carry out one planned step (each is a no-op when the cluster already is so)."""
        d, sl = step.data, self.slurm
        match step.action:
            case "reservation.revoke" | "reservation.set":
                sl.update_reservation_users(step.target, d["users"])
            case "reservation.create":
                if step.target not in sl.reservations():
                    sl.run("scontrol", ["create", "reservation", *d["words"]])
            case "reservation.delete":
                self._delete_reservation(step.target)
            case "reservation.retime":  # Slurm 22.05 takes a core reservation's EndTime (not its CoreCnt or Nodes);
                # without IGNORE_JOBS it answers "Requested nodes are busy" while a job with no time limit runs on
                # its nodes outside it (or, for one still to come, at all); the flag keeps the cores it holds
                sl.update_reservation(step.target, [f"EndTime={d['end']}", "Flags=IGNORE_JOBS"])
            case "reservation.resize":  # Slurm 22.05: "Core-based reservation can not be updated"
                self._delete_reservation(step.target)
                sl.run("scontrol", ["create", "reservation", *d["words"]])
            case "limits.set":
                if not self.runner.dry_run:
                    write_lua(Path(step.target), d["text"])
                return "job_submit/lua reads it at the next submission"
            case "jobs.cancel":
                left = sl.cancel(d["job_ids"], wait_s=self.settings.cancel_wait_s)
                if left:
                    raise EngineError(
                        f"job(s) {', '.join(map(str, left))} of {d['user']} still hold their GPU "
                        f"{self.settings.cancel_wait_s:g} s after scancel",
                        where=step.target,
                        fix="see `squeue -j ID` (a node not responding?); the next apply tries again",
                    )
            case "association.remove":
                sl.sacctmgr(["delete", "user", logins.unix_user(d["user"]), f"account={self.partition}"])
            case "association.add":
                stop = [f"MaxSubmitJobs={d['submit']}"] if d.get("submit") == seat_requests.STOPPED_SUBMIT else []
                sl.sacctmgr(
                    [
                        "add",
                        "user",
                        logins.unix_user(d["user"]),
                        f"Account={self.partition}",
                        f"GrpTRES={d['tres']}",
                        f"MaxTRESPerJob={d['tres']}",
                        *stop,
                    ]
                )
            case "limit.set":
                sl.sacctmgr(
                    [
                        "modify",
                        "user",
                        "where",
                        f"name={logins.unix_user(d['user'])}",
                        f"account={self.partition}",
                        "set",
                        f"GrpTRES={d['tres']}",
                        f"MaxTRESPerJob={d['tres']}",
                        f"MaxSubmitJobs={d.get('submit') or '-1'}",  # -1: no limit (a start puts it back)
                    ]
                )
            case "account.add":
                sl.sacctmgr(
                    [
                        "add",
                        "account",
                        self.partition,
                        f"Description={self.partition}",
                        f"Organization={self.partition}",
                    ]
                )
            case "account.delete":
                sl.sacctmgr(["delete", "account", self.partition])
            case "partition.create":
                if d.get("include") and not self.runner.dry_run:
                    path = Path(d["include"])
                    write_file(path, config.include_with(_read(path), self.partition, d["line"]))
                sl.create_partition(d["words"])
            case "partition.delete":
                if d.get("include") and not self.runner.dry_run and Path(d["include"]).exists():
                    path = Path(d["include"])
                    write_file(path, config.include_with(_read(path), self.partition, None))
                sl.delete_partition(self.partition)
            case "seat.record" | "seat.clear":
                self.record_way_in(step)
            case "request.record" | "seat.stop":
                return wishes.do_record(self, step, partial(seat_requests.verdict, self))
            case "seat.device":  # planned so that apply names the seat and fails it (exit 2); the rest goes on
                raise InputError(step.why, where=f"seat {step.target}", fix=d.get("fix") or None)
            case _:
                raise InputError(f"the slurm engine has no step {step.action!r}", where="plan")
        return None

    def _delete_reservation(self, name: str) -> None:
        """Delete a reservation; jobs in it (cancelled by an earlier step) may take a moment to end."""
        import time

        deadline = time.monotonic() + self.settings.cancel_wait_s
        while True:
            try:
                self.slurm.delete_reservation(name)
                return
            except EngineError:
                if self.runner.dry_run or time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    # -- observe, check, connect (engines/slurm/reading.py) ----------------------------------------------

    def observe(self, course: CourseState) -> list[Holding]:
        """What the course's people hold on the cluster (:func:`~gpuseat.engines.slurm.reading.holdings`)."""
        return reading.holdings(self, course)

    def _course(self) -> SlurmCourse:
        from gpuseat.engines.apply import course_state

        return self.wanted(course_state(self.store, self.course), [])

    def probe(self, seat: SeatView, participant: ParticipantView) -> Readiness:
        """``srun`` as the participant, judged (:func:`~gpuseat.engines.slurm.reading.srun_probe`)."""
        from gpuseat.engines.apply import course_state

        state = course_state(self.store, self.course)
        other = self._yielded(state, self.wanted(state, [])).get(seat.key)
        if other is not None:  # what apply says: another course's older holder keeps this GPU
            why = courses_rule.refusal(seat.key, participant.key, other)[0]
            return Readiness(
                self.course, seat.key, participant.key, "broken", why, "", (), datetime.now(UTC), self.name
            )
        return reading.srun_probe(self, seat, participant)

    def refused(self, participant: ParticipantView) -> str | None:
        """What still lets a former holder use the course's GPUs (:func:`.reading.still_let_in`)."""
        return reading.still_let_in(self, participant)


def _files(d: config.GresDevice) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A GRES device's (own files, all files) on its node: a MIG instance owns its capability files, not the GPU."""
    every = tuple(f"{d.node}:{f}" for f in d.files)
    return (every[1:] if d.mig else every), every


def _ref_files(seat: str, ref: str | None) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """:func:`_files` of a seat's recorded GRES device (``engine_ref``); None: none recorded."""
    try:
        return _files(device_from_ref(seat, ref))
    except InputError:
        return None


def _read(path: Path | None) -> str:
    if path is None:
        return ""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
