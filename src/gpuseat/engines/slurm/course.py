"""Slurm seats for a course: config files, enrolment, one reservation per lab session, status.

The CLI (``gpuseat slurm …``) and the portal call these functions; they take the course's facts as
values (:class:`SlurmCourse`, built from the store by :func:`course_from_store`) and a
:class:`~gpuseat.slurm.engine.Slurm` adapter, and return reports with ``to_dict()``.

Each Slurm seat records where it lives in the store's ``engine_ref`` (``node=… gres=gpu:TYPE core=N
files=…``), written by ``gpuseat slurm config --course``, so enrol, sessions and status read one source.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from gpuseat.errors import EngineError, InputError
from gpuseat.slurm import config, names
from gpuseat.slurm.config import GresDevice, Reservation, SeatLimit
from gpuseat.slurm.engine import Job, Slurm, pending_meaning, sacctmgr_enroll_commands

if TYPE_CHECKING:
    from gpuseat.services.courses import CourseStore

_State = Literal["planned", "requested", "running", "failed", "released"]
_REF = re.compile(r"^node=(\S+) gres=gpu:(\S+) core=(\d{1,4}) files=(\S+)$")


def engine_ref(device: GresDevice) -> str:
    """The ``engine_ref`` a Slurm seat keeps in the store."""
    return f"node={device.node} gres=gpu:{device.gres_type} core={device.core} files={','.join(device.files)}"


def device_from_ref(seat: str, ref: str | None) -> GresDevice:
    """Read back :func:`engine_ref`; a seat without one was never configured for Slurm."""
    m = _REF.match(ref or "")
    if m is None:
        raise InputError(
            f"seat {seat} has no Slurm device recorded",
            where=f"seat {seat}",
            fix="run `gpuseat slurm config --course KEY --inventory … --node …` first",
        )
    files = tuple(m.group(4).split(","))
    return GresDevice(
        node=m.group(1), gres_type=m.group(2), core=int(m.group(3)), files=files, mig=len(files) > 1, seat=seat
    )


@dataclass(frozen=True)
class Member:
    """A participant as Slurm sees them: their unix user and the seat they hold (None: no seat)."""

    participant: str
    unix_user: str | None
    seat: str | None


@dataclass(frozen=True)
class SlurmCourse:
    """What the Slurm engine needs of one course."""

    key: str
    intervals: tuple[tuple[datetime, datetime], ...]
    members: tuple[Member, ...]
    devices: tuple[GresDevice, ...]

    @property
    def partition(self) -> str:
        """The course's partition."""
        return names.course_partition(self.key)

    def device_of(self, seat: str) -> GresDevice | None:
        """The device backing ``seat``."""
        return next((d for d in self.devices if d.seat == seat), None)

    def limits(self) -> list[SeatLimit]:
        """Each seated participant's limit: one GRES of their seat's type in the course partition."""
        out = []
        for m in self.members:
            dev = self.device_of(m.seat) if m.seat else None
            if dev is None or m.unix_user is None:
                continue
            out.append(
                SeatLimit(
                    self.partition,
                    names.unix_user(m.unix_user, where=f"participant {m.participant}"),
                    dev.gres_type,
                    1,
                    seat_type=dev.slurm_type,
                )
            )
        return out

    def users(self) -> list[str]:
        """Unix users of the participants who hold a Slurm seat."""
        return sorted({lim.user for lim in self.limits()})


class _Report:
    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready)."""
        return _jsonable(asdict(self))  # type: ignore[call-overload]


def _jsonable(v: Any) -> Any:
    if isinstance(v, datetime):
        return v.isoformat()
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    return v


# -- config ----------------------------------------------------------------------------------------


def config_files(
    devices: Sequence[GresDevice],
    course_keys: Iterable[str] = (),
    *,
    cpus: int | None = None,
    real_memory_mb: int | None = None,
) -> dict[str, str]:
    """The files ``gpuseat slurm config`` writes: gres.conf, slurm.conf lines, cgroup.conf."""
    nodes = sorted({d.node for d in devices})
    slurm_conf = config.cluster_settings() + config.node_lines(devices, cpus=cpus, real_memory_mb=real_memory_mb)
    for key in course_keys:
        slurm_conf += " ".join(config.partition_words(key, nodes)) + "\n"
    return {
        "gres.conf": config.gres_conf(devices),
        "slurm.conf.gpuseat": slurm_conf,
        "cgroup.conf": config.cgroup_conf(),
    }


def write_files(files: dict[str, str], out: Path, *, force: bool = False) -> list[Path]:
    """Write the generated files into ``out`` with carve's safe writer (manifest; foreign files kept)."""
    from gpuseat.render.base import Artifact
    from gpuseat.services.carving import write_artifacts

    done = write_artifacts(out, [Artifact(path=n, kind="slurm", text=t) for n, t in files.items()], force=force)
    return list(done.paths)


# -- enrol ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnrollReport(_Report):
    """What ``enroll`` did: the partition (or account), the users and their limits, the files written."""

    course: str
    mode: str  # "partition" (no accounting) | "accounting"
    partition: str
    created: bool
    limits: list[dict[str, Any]]
    skipped: list[str]
    job_submit: str | None = None
    commands: list[list[str]] = field(default_factory=list)


def enroll(
    slurm: Slurm, courses: Sequence[SlurmCourse], course: str, *, conf_dir: Path | None, accounting: bool | None = None
) -> EnrollReport:
    """Enrol one course's participants.

    With accounting (``AccountingStorageType`` is slurmdbd, or ``accounting=True``): ``sacctmgr`` adds an
    account per course and a user association per participant with ``GrpTRES``/``MaxTRESPerJob`` =
    their seat. Without: a partition per course (``ReqResv=YES``) and ``job_submit.lua`` in
    ``conf_dir`` holding every course's seat limits (``courses`` gives them all: the file is one).
    """
    this = next((c for c in courses if c.key == course), None)
    if this is None or not this.devices:
        raise InputError(
            f"course {course} has no Slurm seats",
            where="--course",
            fix="record them first: gpuseat slurm config --inventory FILE --node NAME --course KEY --record",
        )
    skipped = [
        m.participant for m in this.members if m.seat is None or m.unix_user is None or this.device_of(m.seat) is None
    ]
    limits = this.limits()
    if not limits:
        raise InputError(
            "no participant holds a Slurm seat with a unix user",
            where=f"course {course}",
            fix="import a roster with unix_user, configure seats, assign them (gpuseat seats assign)",
        )
    if accounting is None:
        accounting = (slurm.config_value("AccountingStorageType") or "").endswith("slurmdbd")
    lua = None if accounting else _lua_path(conf_dir)  # checked before Slurm is touched
    nodes = sorted({d.node for d in this.devices})
    created = slurm.create_partition(config.partition_words(course, nodes))
    lims = [{"user": x.user, "gres": f"gpu:{x.gres_type}:{x.count}"} for x in limits]
    if lua is None:
        # gres/gpu counts every GPU type, so a request for an untyped or another type is capped too
        cmds = sacctmgr_enroll_commands(this.partition, {x.user: f"gres/gpu={x.count}" for x in limits})
        for cmd in cmds:
            proc = slurm.run("sacctmgr", cmd, check=False)
            if proc.returncode != 0 and "Nothing new added" not in proc.stdout + proc.stderr:
                raise EngineError(
                    f"sacctmgr {' '.join(cmd[1:4])} failed: {proc.stderr.strip() or proc.stdout.strip()}",
                    where="sacctmgr",
                    fix="check that slurmdbd runs (sacctmgr show cluster)",
                )
        written = None
        if conf_dir is not None:  # the limits count GPUs; the script also makes them the participant's own
            try:
                written = str(write_job_submit(courses, conf_dir))
            except InputError:
                written = None  # the site's own job_submit.lua: the association limits still hold
        return EnrollReport(
            course, "accounting", this.partition, created, lims, skipped, job_submit=written, commands=cmds
        )
    write_job_submit(courses, lua.parent)
    plugins = slurm.config_value("JobSubmitPlugins") or ""
    if "lua" not in plugins.split(","):
        raise InputError(
            f"the cluster runs JobSubmitPlugins={plugins or '(none)'}: the seat limits in {lua} are not applied",
            where="slurm.conf",
            fix="add JobSubmitPlugins=lua to slurm.conf (job_submit.lua is in place), `scontrol reconfigure`, "
            "then run enroll again",
        )
    return EnrollReport(course, "partition", this.partition, created, lims, skipped, job_submit=str(lua))


def write_job_submit(courses: Sequence[SlurmCourse], conf_dir: Path | None) -> Path:
    """Write ``job_submit.lua`` (every course's seats; none yet is fine) next to slurm.conf, atomically.

    Run before slurm.conf names ``JobSubmitPlugins=lua``: slurmctld refuses to start without the script.
    """
    lua = _lua_path(conf_dir)
    every = [lim for c in courses for lim in c.limits()]
    text = config.job_submit_lua(every, _uids(lim.user for lim in every))
    tmp = lua.with_name(".job_submit.lua.gpuseat-tmp")
    tmp.write_text(text)
    tmp.chmod(0o644)
    # job_submit/lua re-reads the script when its mtime (whole seconds) changes: two writes within one
    # second must still differ, or the second (a revocation!) would go unnoticed
    old = int(lua.stat().st_mtime) if lua.exists() else 0
    stamp = max(time.time(), old + 1.0)
    os.utime(tmp, (stamp, stamp))
    tmp.replace(lua)
    return lua


def _uids(users: Iterable[str]) -> dict[str, int]:
    """The uids of the users this host knows (a job change names its owner by uid only)."""
    import pwd

    out = {}
    for user in users:
        try:
            out[user] = pwd.getpwnam(user).pw_uid
        except KeyError:
            continue
    return out


def _lua_path(conf_dir: Path | None) -> Path:
    """Where job_submit.lua goes; a script gpuseat did not write is never replaced."""
    if conf_dir is None:
        raise InputError(
            "without accounting gpuseat writes job_submit.lua next to slurm.conf",
            where="--conf-dir",
            fix="give the directory of slurm.conf (e.g. /etc/slurm)",
        )
    if not conf_dir.is_dir():
        raise InputError("is not a folder", where=f"--conf-dir {conf_dir}", fix="give the folder of slurm.conf")
    path = conf_dir / "job_submit.lua"
    if path.is_symlink() or (path.exists() and not path.read_text(errors="replace").startswith(config.LUA_MARK)):
        raise InputError(
            "job_submit.lua exists and gpuseat did not write it",
            where=str(path),
            fix="merge its rules by hand (see docs/slurm.md) or move it away; or enrol with --accounting",
        )
    return path


# -- sessions -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionsReport(_Report):
    """Reservations for the course's lab sessions: created, already there (users refreshed), past."""

    course: str
    created: list[str]
    existing: list[str]
    past: list[str]
    reservations: list[dict[str, Any]]


def plan_sessions(course: SlurmCourse) -> list[Reservation]:
    """The reservations the course's schedule asks for (pure)."""
    return config.session_reservations(course.key, course.intervals, course.users(), course.devices)


def sessions(slurm: Slurm, course: SlurmCourse, *, now: datetime) -> SessionsReport:
    """Create one reservation per lab session still to come (idempotent: re-running refreshes users)."""
    wanted = plan_sessions(course)
    have = slurm.reservations()
    created, existing, past = [], [], []
    for res in wanted:
        if res.end <= now:
            past.append(res.name)
        elif res.name in have:
            slurm.update_reservation_users(res.name, res.users)
            existing.append(res.name)
        else:
            slurm.create_reservation(res if res.start > now else _from_now(res, now))
            created.append(res.name)
    rows = [
        {
            "name": r.name,
            "start": r.start,
            "end": r.end,
            "users": list(r.users),
            "nodes": list(r.nodes),
            "cores": list(r.cores),
        }
        for r in wanted
    ]
    return SessionsReport(course.key, created, existing, past, rows)


def _from_now(res: Reservation, now: datetime) -> Reservation:
    """A session already running starts its reservation now (Slurm refuses a start in the past)."""
    from dataclasses import replace

    return replace(res, start=now.replace(microsecond=0))


# -- status ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemberStatus(_Report):
    """One participant on the cluster: their seat, the jobs Slurm lists and the GRES each holds."""

    participant: str
    unix_user: str | None
    seat: str | None
    gres: str | None
    jobs: list[dict[str, Any]]
    blocked_by: str | None = None  # another user's job holds this participant's GPU while theirs waits


@dataclass(frozen=True)
class StatusReport(_Report):
    """The course on the cluster now."""

    course: str
    partition: str
    partition_exists: bool
    reservations: list[str]
    members: list[MemberStatus]

    def seat_states(self) -> dict[str, tuple[Literal["requested", "running"], str]]:
        """Per seat: the store state it should have and why (what ``status`` records)."""
        out: dict[str, tuple[Literal["requested", "running"], str]] = {}
        for m in self.members:
            if m.seat is None:
                continue
            running = [j for j in m.jobs if j["state"] == "RUNNING"]
            if not self.partition_exists:
                out[m.seat] = ("requested", f"partition {self.partition} missing: run gpuseat slurm enroll")
            elif m.blocked_by:
                out[m.seat] = ("running", f"waiting: {m.blocked_by}")
            elif running:
                out[m.seat] = (
                    "running",
                    f"{len(running)} job(s) running: "
                    + ", ".join(f"{j['job_id']} {j['gres_idx'] or j['gres']}" for j in running),
                )
            else:
                waiting = [f"{j['job_id']} {j['state'].lower()} ({j['reason']})" for j in m.jobs]
                out[m.seat] = ("running", "enrolled; " + ("; ".join(waiting) if waiting else "no job now"))
        return out


def status(slurm: Slurm, course: SlurmCourse) -> StatusReport:
    """Each participant's jobs (state, Slurm's reason, GRES with device index), and who blocks whom.

    A participant whose job waits while a job of another user holds their seat's GPU is flagged
    (``blocked_by``): the seat's GPU is its own GRES type, so the holder is read from the GRES each
    running job was given.
    """
    part = course.partition
    exists = part in slurm.partitions()
    users = {m.unix_user for m in course.members if m.unix_user}
    every = slurm.jobs()
    held: dict[str, Job] = {}  # seat GRES type -> the running job holding it
    idx: dict[int, str] = {}
    seat_types = {d.slurm_type: d for d in course.devices}
    for job in every:
        if job.state != "RUNNING":
            continue
        idx[job.job_id] = slurm.job_gres_index(job.job_id)
        for st in seat_types:
            if f"gpu:{st}:" in idx[job.job_id] or f"gpu:{st}(" in idx[job.job_id]:
                held[st] = job
    by_user: dict[str, list[Job]] = {}
    for job in every:
        if job.user in users:
            by_user.setdefault(job.user, []).append(job)
    prefix = f"gpuseat-{course.key}-"
    resv = sorted(n for n in slurm.reservations() if n.startswith(prefix))
    members = []
    for m in course.members:
        dev = course.device_of(m.seat) if m.seat else None
        mine = by_user.get(m.unix_user or "", [])
        jobs = [
            {
                "job_id": j.job_id,
                "state": j.state,
                "reason": j.reason,
                "meaning": pending_meaning(j.reason) if j.state == "PENDING" else "",
                "gres": j.gres,
                "gres_idx": idx.get(j.job_id, ""),
                "partition": j.partition,
                "reservation": j.reservation,
            }
            for j in mine
        ]
        blocked = None
        holder = held.get(dev.slurm_type) if dev else None
        if dev and holder and holder.user != m.unix_user and any(j.state == "PENDING" for j in mine):
            blocked = (
                f"{dev.seat}'s GPU is held by job {holder.job_id} of {holder.user} "
                f"(partition {holder.partition}{', reservation ' + holder.reservation if holder.reservation else ''})"
            )
        members.append(
            MemberStatus(
                m.participant, m.unix_user, m.seat, f"gpu:{dev.gres_type}:1" if dev else None, jobs, blocked_by=blocked
            )
        )
    return StatusReport(course.key, part, exists, resv, members)


# -- check ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckRow(_Report):
    """One participant's probe job: the device their job saw, or Slurm's refusal."""

    participant: str
    unix_user: str
    seat: str
    ok: bool
    cuda_visible_devices: str | None
    slurm_job_gpus: str | None
    refusal: str


def check(
    slurm: Slurm, course: SlurmCourse, *, now: datetime, out_dir: Path, participants: Sequence[str] = ()
) -> list[CheckRow]:
    """Submit a one-GPU probe job as each seated participant in the session running now (needs root).

    What a participant would see: the seat's GPU type in the course partition and reservation. No
    session now is an input error (the course's jobs are refused outside sessions by design).
    """
    current = [r for r in plan_sessions(course) if r.start <= now < r.end]
    if not current:
        raise InputError(
            f"no lab session of course {course.key} is running now",
            where="--course",
            fix="run the check during a session (gpuseat slurm sessions lists them)",
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    out_dir.chmod(0o1777)  # the participants' jobs write their output here
    rows = []
    for m in course.members:
        dev = course.device_of(m.seat) if m.seat else None
        if dev is None or m.unix_user is None or (participants and m.participant not in participants):
            continue
        got = slurm.probe(
            m.unix_user,
            partition=course.partition,
            reservation=current[0].name,
            gres=f"gpu:{dev.gres_type}:1",
            out_dir=out_dir,
        )
        rows.append(
            CheckRow(
                m.participant,
                m.unix_user,
                dev.seat or "",
                got.ok,
                got.env.get("CUDA_VISIBLE_DEVICES"),
                got.env.get("SLURM_JOB_GPUS"),
                got.refusal,
            )
        )
    return rows


# -- the store ---------------------------------------------------------------------------------------


class _SeatLike(Protocol):
    @property
    def key(self) -> str: ...
    @property
    def engine(self) -> str: ...
    @property
    def engine_ref(self) -> str | None: ...


class _ParticipantLike(Protocol):
    @property
    def key(self) -> str: ...
    @property
    def unix_user(self) -> str | None: ...
    @property
    def seat(self) -> str | None: ...


def course_from_values(
    key: str,
    intervals: Iterable[tuple[datetime, datetime]],
    participants: Iterable[_ParticipantLike],
    seats: Iterable[_SeatLike],
) -> SlurmCourse:
    """A :class:`SlurmCourse` from store views: seats whose engine is slurm, participants with their seat."""
    names.slurm_name(key, where="course key")
    devices = tuple(device_from_ref(s.key, s.engine_ref) for s in seats if s.engine == "slurm")
    slurm_seats = {d.seat for d in devices}
    members = tuple(Member(p.key, p.unix_user, p.seat if p.seat in slurm_seats else None) for p in participants)
    return SlurmCourse(key, tuple(intervals), members, devices)


def _local(dt: datetime, timezone: str) -> datetime:
    """A course-local time as the controller's local wall time (what ``scontrol`` StartTime means)."""
    from zoneinfo import ZoneInfo

    return dt.replace(tzinfo=ZoneInfo(timezone)).astimezone().replace(tzinfo=None)


def course_from_store(store: CourseStore, course: str | None) -> SlurmCourse:
    """The course's Slurm seats, roster and session times (in the controller's local time) from the store."""
    view = store.get_course(course)
    sched = store.course_file(view.key).schedule
    intervals = [(_local(a, view.timezone), _local(b, view.timezone)) for a, b in sched.intervals()]
    return course_from_values(view.key, intervals, store.participants(view.key), store.seats(view.key))


def courses_from_store(store: CourseStore) -> list[SlurmCourse]:
    """Every course with Slurm seats (``job_submit.lua`` holds them all)."""
    out = []
    for view in store.list_courses():
        if any(s.engine == "slurm" for s in store.seats(view.key)):
            out.append(course_from_store(store, view.key))
    return out


def record_config(store: CourseStore, course: str | None, devices: Sequence[GresDevice]) -> list[str]:
    """Record each configured seat's Slurm device in the store (engine slurm, ``engine_ref``, host)."""
    view = store.get_course(course)
    seats = {s.key: s for s in store.seats(view.key)}
    if not any(d.seat in seats for d in devices):
        raise InputError(
            f"course {view.key} has no seat named like the carved ones ({', '.join(str(d.seat) for d in devices[:4])}"
            f"{', …' if len(devices) > 4 else ''}): nothing to record",
            where="--record",
            fix="add the seats from the same inventory first: gpuseat seats add --inventory FILE --mode passthrough",
        )
    done = []
    for d in devices:
        seat = seats.get(d.seat or "")
        if seat is None:
            continue
        ref = engine_ref(d)
        if (seat.engine, seat.engine_ref, seat.host) == ("slurm", ref, d.node):
            continue
        state = cast(_State, "requested" if seat.state in ("planned", "released", "failed") else seat.state)
        store.set_seat_state(
            view.key,
            seat.key,
            state,
            reason=f"slurm config: gpu:{d.gres_type} on {d.node}",
            engine="slurm",
            engine_ref=ref,
            host=d.node,
        )
        done.append(seat.key)
    return done


def record_status(store: CourseStore, report: StatusReport) -> list[str]:
    """Write the seats' engine state from ``status`` into the store when it changed."""
    current = {s.key: s for s in store.seats(report.course)}
    changed = []
    for seat, (state, reason) in report.seat_states().items():
        row = current.get(seat)
        if row is None or (row.state, row.state_reason) == (state, reason):
            continue
        store.set_seat_state(report.course, seat, state, reason=reason[:2000])
        changed.append(seat)
    return changed


def __getattr__(name: str) -> Any:
    """``SlurmEngine`` lives in :mod:`gpuseat.services.slurm_engine` (kept importable from here)."""
    if name == "SlurmEngine":
        from gpuseat.services.slurm_engine import SlurmEngine

        return SlurmEngine
    raise AttributeError(name)
