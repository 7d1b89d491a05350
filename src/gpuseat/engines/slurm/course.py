"""A course as Slurm sees it: its seats' devices, members and sessions; config files, job_submit.lua,
status and the probe jobs of ``slurm check``.

The engine (:mod:`.engine`) plans from these values; the CLI (``gpuseat slurm config|status|check``)
calls the functions here. Each Slurm seat records where it lives in the store's ``engine_ref``
(``node=… gres=gpu:TYPE core=N files=…``), written by ``gpuseat slurm config --course --record``; ``core=N``
is the seat's slot on its node, bound to cores N*n … N*n+n-1 with the engine's ``cores_per_seat`` n.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from gpuseat.core.delivery import login_name
from gpuseat.engines.base import record_machine
from gpuseat.engines.slurm import config, names
from gpuseat.engines.slurm.adapter import Job, Slurm, pending_meaning
from gpuseat.engines.slurm.config import GresDevice, Reservation, SeatLimit
from gpuseat.errors import InputError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from gpuseat.store import CourseStore

_REF = re.compile(r"^node=(\S+) gres=gpu:(\S+) core=(\d{1,4}) files=(\S+)$")


def gres_ref(device: GresDevice) -> str:
    """The ``engine_ref`` a Slurm seat keeps in the store."""
    return f"node={device.node} gres=gpu:{device.gres_type} core={device.core} files={','.join(device.files)}"


def device_from_ref(seat: str, ref: str | None) -> GresDevice:
    """Read back :func:`gres_ref`; a seat without one was never configured for Slurm."""
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
    """A participant as Slurm sees them: their login (``unix_user``: the roster's, else the one derived
    name every engine uses) and the Slurm seat they hold (None: no seat)."""

    participant: str
    unix_user: str
    seat: str | None


@dataclass(frozen=True)
class SlurmCourse:
    """What the Slurm engine needs of one course."""

    key: str
    intervals: tuple[tuple[datetime, datetime], ...]
    members: tuple[Member, ...]
    devices: tuple[GresDevice, ...]  # bound to their cores (:func:`config.seat_cores`)
    cores_per_seat: int = 1

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
            if dev is None:
                continue
            out.append(
                SeatLimit(
                    self.partition,
                    names.participant_login(m.unix_user, where=f"participant {m.participant}"),
                    dev.gres_type,
                    1,
                    seat_type=dev.slurm_type,
                    cpus=self.cores_per_seat,
                )
            )
        return out

    def users(self) -> list[str]:
        """Unix users of the participants who hold a Slurm seat."""
        return sorted({lim.user for lim in self.limits()})


class _Report:
    def to_dict(self: DataclassInstance) -> dict[str, Any]:
        """Plain data (JSON-ready)."""
        return {k: _jsonable(x) for k, x in asdict(self).items()}


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


def write_files(files: dict[str, str], out: Path, *, force: bool = False, check: bool = False) -> list[Path]:
    """Write the generated files into ``out`` with carve's safe writer (manifest; foreign files kept);
    with ``check``, only refuse what the write would refuse (nothing written)."""
    from gpuseat.render.base import Artifact
    from gpuseat.services.carving import check_artifacts, write_artifacts

    artifacts = [Artifact(path=n, kind="slurm", text=t) for n, t in files.items()]
    if check:
        check_artifacts(out, artifacts, force=force)
        return []
    return list(write_artifacts(out, artifacts, force=force).paths)


# -- job_submit.lua ----------------------------------------------------------------------------------


def write_job_submit(courses: Sequence[SlurmCourse], conf_dir: Path | None) -> Path:
    """Write ``job_submit.lua`` (every course's seats; none yet is fine) next to slurm.conf, atomically.

    Run before slurm.conf names ``JobSubmitPlugins=lua``: slurmctld refuses to start without the script.
    """
    lua = lua_path(conf_dir)
    every = [lim for c in courses for lim in c.limits()]
    write_lua(lua, config.job_submit_lua(every, uids(lim.user for lim in every)))
    return lua


def write_lua(lua: Path, text: str) -> None:
    """Replace ``lua`` with ``text`` atomically, its mtime moved on by at least a second."""
    from gpuseat.files import write_file

    # job_submit/lua re-reads the script when its mtime (whole seconds) changes: two writes within one
    # second must still differ, or the second (a revocation!) would go unnoticed
    old = int(lua.stat().st_mtime) if lua.exists() else 0
    write_file(lua, text, mode=0o644, mtime=max(time.time(), old + 1.0))


def uids(users: Iterable[str]) -> dict[str, int]:
    """The uids of the users this host knows (a job change names its owner by uid only)."""
    import pwd

    out = {}
    for user in users:
        try:
            out[user] = pwd.getpwnam(user).pw_uid
        except KeyError:
            continue
    return out


def lua_path(conf_dir: Path | None) -> Path:
    """Where job_submit.lua goes; a script gpuseat did not write is never replaced."""
    if conf_dir is None:
        raise InputError(
            "without accounting gpuseat writes job_submit.lua next to slurm.conf",
            where="--conf-dir",
            fix="give the directory of slurm.conf (e.g. /etc/slurm)",
        )
    if not conf_dir.is_dir():
        raise InputError(
            f"{conf_dir} is not a folder", where="conf_dir", fix="give the folder of slurm.conf (e.g. /etc/slurm)"
        )
    path = conf_dir / "job_submit.lua"
    if not path.is_symlink():
        from gpuseat.files import check_target

        check_target(path, where=str(path))  # a FIFO or device: refused before it is read (never blocks)
    if path.is_symlink() or (path.exists() and not path.read_text(errors="replace").startswith(config.LUA_MARK)):
        raise InputError(
            "job_submit.lua exists and gpuseat did not write it",
            where=str(path),
            fix="merge its rules by hand (docs/slurm.md) or move it away; or use accounting (slurm.accounting=true)",
        )
    return path


# -- sessions -----------------------------------------------------------------------------------------


def plan_sessions(course: SlurmCourse) -> list[Reservation]:
    """The reservations the course's schedule asks for (pure)."""
    return config.session_reservations(course.key, course.intervals, course.users(), course.devices)


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
    strays: list[dict[str, Any]] = field(default_factory=list)  # jobs of people who hold no seat (or not that one)
    #: the job_submit.lua read for whom the cluster ties to their seat's type (None: none read, see
    #: :func:`job_submit_read`)
    job_submit: str | None = None

    def seat_states(self) -> dict[str, tuple[Literal["requested", "running"], str]]:
        """Per seat: the store state it should have and why (what ``status`` records)."""
        out: dict[str, tuple[Literal["requested", "running"], str]] = {}
        for m in self.members:
            if m.seat is None:
                continue
            running = [j for j in m.jobs if j["state"] == "RUNNING"]
            if not self.partition_exists:
                out[m.seat] = ("requested", f"partition {self.partition} missing: run gpuseat apply --engine slurm")
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


def course_status(
    slurm: Slurm, course: SlurmCourse, *, tied: set[str] | None = None, conf_dir: Path | None = None
) -> StatusReport:
    """Each participant's jobs (state, Slurm's reason, GRES with device index), and who blocks whom.

    A participant whose job waits while a job of another user holds their seat's GPU is flagged
    (``blocked_by``): the seat's GPU is its own GRES type, so the holder is read from the GRES each
    running job was given. ``tied``: the logins the cluster ties to their seat's type (None: read from
    the job_submit.lua in ``conf_dir``, the folder the Slurm engine writes it to, :func:`job_submit_read`),
    for the strays ``gpuseat apply`` would cancel.
    """
    part = course.partition
    exists = part in slurm.partitions()
    users = {m.unix_user for m in course.members}
    every = slurm.jobs()
    held: dict[str, Job] = {}  # seat GRES type -> the running job holding it
    idx: dict[int, str] = {}
    seat_types = {d.slurm_type: d for d in course.devices}
    for job in every:
        if job.state != "RUNNING":
            continue
        idx[job.job_id] = slurm.job_gres_index(job.job_id)
        given = seat_types_of(job, idx[job.job_id])
        for st in seat_types:
            if st in given or f"gpu:{st}(" in idx[job.job_id]:
                held[st] = job
    by_user: dict[str, list[Job]] = {}
    for job in every:
        if job.user in users:
            by_user.setdefault(job.user, []).append(job)
    resv = sorted(n for n in slurm.reservations() if config.is_session(n, part))
    members = []
    for m in course.members:
        dev = course.device_of(m.seat) if m.seat else None
        mine = by_user.get(m.unix_user, [])
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
    lua = None
    if tied is None:
        lua = job_submit_read(slurm, conf_dir)
        tied = tied_users(lua, part)
    strays = stray_jobs(course, every, idx, known=users, tied=tied)
    return StatusReport(course.key, part, exists, resv, members, strays, str(lua) if lua else None)


def in_course(course: SlurmCourse, job: Job, gres_idx: str = "", *, known: Iterable[str] | None = None) -> bool:
    """Whether a job is the course's: in its partition or one of its reservations, or (of a user in
    ``known``, when given) on one of its seats."""
    if course.partition in job.partition.split(",") or config.is_session(job.reservation, course.partition):
        return True
    if known is not None and job.user not in known:
        return False  # an operator's job on a seat's GPU: shown as blocking, never cancelled
    return bool(seat_types_of(job, gres_idx) & {d.slurm_type for d in course.devices})


def seat_types_of(job: Job, gres_idx: str = "") -> set[str]:
    """The GPU types a job asks for or holds (its request, and for a running job what it was given). An
    untyped job's GRES names every type, those it was not given with 0 (``gpu:m60.seat-02:0(IDX:)``)."""
    given = re.findall(r"gpu:([A-Za-z0-9_.+-]+):(\d+)", gres_idx)
    return job.gres_types() | {t for t, n in given if int(n)}


def job_submit_folder(conf_dir: str | None, slurm_conf: str | None) -> Path | None:
    """Where the Slurm engine keeps job_submit.lua and its partitions include, as its settings say: its
    ``conf_dir``, else the folder of its ``slurm_conf``. None: neither is set (the engine then takes the
    folder of the slurm.conf scontrol reports)."""
    if conf_dir:
        return Path(conf_dir)
    return Path(slurm_conf).parent if slurm_conf and slurm_conf.startswith("/") else None


def job_submit_read(slurm: Slurm, conf_dir: Path | None) -> Path | None:
    """The job_submit.lua that ties users to their seat's type, while slurmctld runs the lua plugin: the one
    in ``conf_dir`` (where the Slurm engine writes it: its ``conf_dir`` setting, else slurm.conf's folder)
    when given, else the one next to the slurm.conf scontrol reports. None: the cluster runs no lua plugin,
    or no slurm.conf folder is known."""
    cfg = slurm.config()
    if "lua" not in cfg.get("JobSubmitPlugins", "").split(","):
        return None
    if conf_dir is not None:
        return conf_dir / "job_submit.lua"
    conf = cfg.get("SLURM_CONF", "")
    return Path(conf).parent / "job_submit.lua" if conf.startswith("/") else None


def tied_users(lua: Path | None, partition: str) -> set[str]:
    """The users of ``partition`` in gpuseat's job_submit.lua ``lua`` (:func:`job_submit_read`): their GPU
    jobs are rewritten to their seat's type. Anyone else may be given any GPU of the partition by Slurm
    (accounting alone), so a job on another seat is no sign of a lost seat."""
    if lua is None:
        return set()
    try:
        text = lua.read_text(errors="replace")
    except OSError:
        return set()
    return {x.user for x in config.job_submit_limits(text) if x.partition == partition}


def off_seat(
    jobs: Sequence[Job], idx: dict[int, str], own: str, course_types: set[str], count: int, *, tied: bool
) -> list[Job]:
    """A holder's live jobs on course seats not theirs that ``gpuseat apply`` cancels.

    ``tied`` (job_submit.lua rewrites their jobs to their seat's type): every such job, as it was submitted
    under a seat they lost (a move). Untied, Slurm itself places an untyped job on any GPU of the partition:
    such a job is theirs to keep; only running GPUs over their seat's ``count`` are cancelled (newest first).
    """
    out: list[Job] = []
    held = 0
    others: list[tuple[Job, int]] = []
    for job in sorted(jobs, key=lambda j: j.job_id):
        if not job.live:
            continue
        types = seat_types_of(job, idx.get(job.job_id, "")) & course_types
        if not types - {own}:
            held += len(types) if job.state == "RUNNING" else 0
        elif tied:
            out.append(job)
        elif job.state == "RUNNING":
            others.append((job, len(types)))
    for job, n in others:
        if held + n > count:
            out.append(job)
        else:
            held += n
    return out


def stray_jobs(
    course: SlurmCourse,
    jobs: Sequence[Job],
    idx: dict[int, str],
    *,
    known: Iterable[str],
    tied: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """Live course jobs of people who hold no seat now, and holders' jobs off their seat (:func:`off_seat`):
    what ``gpuseat apply`` cancels. ``known``: the logins that are the course's people."""
    own = {m.unix_user: d.slurm_type for m in course.members if m.seat and (d := course.device_of(m.seat))}
    seat_of = {d.slurm_type: d.seat for d in course.devices}
    people, tied = set(known), set(tied)
    course_jobs = [j for j in jobs if j.live and in_course(course, j, idx.get(j.job_id, ""), known=people)]
    off = {
        j.job_id
        for user, mine in own.items()
        for j in off_seat([j for j in course_jobs if j.user == user], idx, mine, set(seat_of), 1, tied=user in tied)
    }
    out = []
    for job in course_jobs:
        types = seat_types_of(job, idx.get(job.job_id, "")) & set(seat_of)
        mine = own.get(job.user)
        if mine is not None and job.job_id not in off:
            continue
        seats = sorted(str(seat_of[t]) for t in types)
        why = "holds no seat now" if mine is None else f"moved: the job is on {', '.join(seats)}"
        if mine is not None and job.user not in tied:
            why = f"over the seat's GPU: the job is on {', '.join(seats)}"
        out.append(
            {
                "job_id": job.job_id,
                "user": job.user,
                "state": job.state,
                "gres": idx.get(job.job_id) or job.gres,
                "seats": seats,
                "why": why,
            }
        )
    return out


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
            fix="run the check during a session (gpuseat slurm status lists the session reservations)",
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    out_dir.chmod(0o1777)  # the participants' jobs write their output here
    rows = []
    for m in course.members:
        dev = course.device_of(m.seat) if m.seat else None
        if dev is None or (participants and m.participant not in participants):
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
    *,
    skip: list[str] | None = None,
    cores_per_seat: int = 1,
) -> SlurmCourse:
    """A :class:`SlurmCourse` from store views: seats whose engine is slurm, participants with their
    login and seat, each seat bound to ``cores_per_seat`` cores. ``skip``: a Slurm seat without a recorded
    device is named there instead of refused."""
    names.slurm_name(key, where="course key")
    devices = []
    for s in seats:
        if s.engine != "slurm":
            continue
        if skip is not None and not s.engine_ref:
            skip.append(s.key)
            continue
        devices.append(device_from_ref(s.key, s.engine_ref))
    slurm_seats = {d.seat for d in devices}
    members = tuple(
        Member(p.key, login_name(p.key, p.unix_user), p.seat if p.seat in slurm_seats else None) for p in participants
    )
    bound = tuple(config.seat_cores(devices, cores_per_seat))
    return SlurmCourse(key, tuple(intervals), members, bound, cores_per_seat)


def _local(dt: datetime, timezone: str) -> datetime:
    """A course-local time as the controller's local wall time (what ``scontrol`` StartTime means)."""
    from zoneinfo import ZoneInfo

    return dt.replace(tzinfo=ZoneInfo(timezone)).astimezone().replace(tzinfo=None)


def slurm_course_from_store(store: CourseStore, course: str | None) -> SlurmCourse:
    """The course's Slurm seats, roster and session times (in the controller's local time) from the store;
    its seats' cores from the engine's ``cores_per_seat`` setting."""
    view = store.courses.get_course(course)
    sched = store.courses.course_file(view.key).schedule
    intervals = [(_local(a, view.timezone), _local(b, view.timezone)) for a, b in sched.intervals()]
    per_seat = cores_per_seat(store, view.key)
    people, seats = store.roster.participants(view.key), store.seats.seats(view.key)
    return course_from_values(view.key, intervals, people, seats, cores_per_seat=per_seat)


def cores_per_seat(store: CourseStore, course: str) -> int:
    """The Slurm engine's ``cores_per_seat`` setting of the course (checked when stored; 1 when unset)."""
    return int(store.agents.engine_settings(course, "slurm").get("cores_per_seat", 1))


def courses_from_store(store: CourseStore) -> list[SlurmCourse]:
    """Every course with Slurm seats (``job_submit.lua`` holds them all)."""
    out = []
    for view in store.courses.list_courses():
        if any(s.engine == "slurm" for s in store.seats.seats(view.key)):
            out.append(slurm_course_from_store(store, view.key))
    return out


def record_config(store: CourseStore, course: str | None, devices: Sequence[GresDevice]) -> list[str]:
    """Record each configured seat's Slurm device in the store (engine slurm, ``engine_ref``, host)."""
    view = store.courses.get_course(course)
    seats = {s.key: s for s in store.seats.seats(view.key)}
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
        ref = gres_ref(d)
        if (seat.engine, seat.engine_ref, seat.host) == ("slurm", ref, d.node):
            continue
        record_machine(store, view.key, seat, "slurm", ref, f"slurm config: gpu:{d.gres_type} on {d.node}", d.node)
        done.append(seat.key)
    return done


def record_status(store: CourseStore, report: StatusReport) -> list[str]:
    """Write the seats' engine state from ``status`` into the store when it changed."""
    current = {s.key: s for s in store.seats.seats(report.course)}
    changed = []
    for seat, (state, reason) in report.seat_states().items():
        row = current.get(seat)
        if row is None or (row.state, row.state_reason) == (state, reason):
            continue
        store.seats.set_seat_state(report.course, seat, state, reason=reason[:2000])
        changed.append(seat)
    return changed


def status_from_store(
    store: CourseStore, course: str | None, slurm: Slurm, *, slurm_conf: Path | None = None
) -> StatusReport:
    """``gpuseat slurm status``: :func:`course_status` of the course, the seat limits read from the
    job_submit.lua where its Slurm engine writes it (the engine's ``conf_dir`` setting, else the folder of
    ``slurm_conf`` or of the engine's ``slurm_conf`` setting, else of the slurm.conf scontrol reports),
    and each seat's engine state recorded in the store (:func:`record_status`)."""
    from gpuseat.engines.apply import settings_for

    sc = slurm_course_from_store(store, course)
    given = settings_for(store, sc.key, "slurm", {"slurm_conf": str(slurm_conf.absolute()) if slurm_conf else None})
    report = course_status(slurm, sc, conf_dir=job_submit_folder(given.get("conf_dir"), given.get("slurm_conf")))
    record_status(store, report)
    return report
