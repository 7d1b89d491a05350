"""What the Slurm engine reads back from the cluster, apart from its plan, for
:class:`~gpuseat.engines.slurm.engine.SlurmEngine`'s ``observe`` (:func:`holdings`: what the course's people
hold there), ``probe`` (:func:`srun_probe`: an ``srun`` job as the participant, judged by the one readiness
rule) and ``refused`` (:func:`still_let_in`: what still lets a former holder use the course's GPUs)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpuseat.core.delivery import login_name, parse_probe
from gpuseat.core.readiness import Readiness, ReadyState, judge
from gpuseat.engines.base import CourseState, Holding
from gpuseat.engines.slurm import config
from gpuseat.engines.slurm.adapter import explain
from gpuseat.engines.slurm.config import Reservation
from gpuseat.engines.slurm.course import SlurmCourse, in_course, plan_sessions
from gpuseat.errors import EngineError

if TYPE_CHECKING:
    from gpuseat.engines.slurm.engine import SlurmEngine
    from gpuseat.store import ParticipantView, SeatView

NO_NVIDIA_SMI = "gpuseat: no nvidia-smi on this node"
# What the srun probe job runs: CUDA_VISIBLE_DEVICES in the form core.delivery.parse_probe reads, then
# nvidia-smi -L. Slurm's own variant of core.delivery.PROBE_SCRIPT: a node without nvidia-smi (a test
# cluster, a node image without the driver tools) must not fail the job, so it says so in one line the
# judge recognises; an nvidia-smi that is there but fails is a failure (no GPU seen), not a fallback.
SRUN_PROBE_SCRIPT = (
    'printf "CUDA_VISIBLE_DEVICES=%s\\n" "${CUDA_VISIBLE_DEVICES-}"; echo "SLURM_JOB_GPUS=${SLURM_JOB_GPUS-}"; '
    f'if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L; else echo "{NO_NVIDIA_SMI}"; fi; true'
)


def judge_srun_probe(text: str, device_uuid: str | None) -> tuple[ReadyState, str | None, tuple[str, ...]]:
    """What a probe job printed (:data:`SRUN_PROBE_SCRIPT`) → state, reason and the devices it saw, by
    the one parser (:func:`~gpuseat.core.delivery.parse_probe`: a MIG device counts, not its parent GPU)
    and the one rule (:func:`~gpuseat.core.readiness.judge`).

    Where the node has no nvidia-smi, the only evidence is Slurm's allocation: the ``CUDA_VISIBLE_DEVICES``
    entries, which Slurm sets to GRES indices (``0``), not UUIDs, so exactly one is ready without a UUID
    comparison. Unlike the host engine, ``CUDA_VISIBLE_DEVICES`` is never compared with the seat's UUID
    either: Slurm always sets indices there (global ones, or ``0`` under ConstrainDevices), so that check
    would call every Slurm seat broken; confinement is what nvidia-smi's listing shows."""
    seen = parse_probe(text)
    if seen.visible or NO_NVIDIA_SMI not in text.splitlines():
        state, reason = judge(device_uuid, seen.visible)
        return state, reason, seen.visible
    indices = tuple(x.strip() for x in (seen.cuda_visible or "").split(",") if x.strip() not in ("", "NoDevFiles"))
    state, reason = judge(None, indices)
    return state, reason, indices


def current_session(course: SlurmCourse, now: datetime) -> Reservation | None:
    """The session reservation running at ``now``, else the next one (None: no session left)."""
    plan = plan_sessions(course) if course.users() else []
    running = [r for r in plan if r.start <= now < r.end]
    if running:
        return running[0]
    coming = [r for r in plan if r.start > now]
    return coming[0] if coming else None


def core_count(fields: dict[str, str]) -> int | None:
    """The cores a reservation holds (``CoreCnt`` of ``scontrol show``; None when not shown)."""
    got = fields.get("CoreCnt", "")
    return int(got) if got.isdigit() else None


def shown_time(fields: dict[str, str], key: str) -> datetime | None:
    """A reservation's ``StartTime`` or ``EndTime`` (the controller's local time; None when not shown)."""
    try:
        return datetime.fromisoformat(fields.get(key, ""))
    except ValueError:
        return None


def node_names(hostlist: str) -> tuple[str, ...]:
    """The nodes of a Slurm host list as ``scontrol show`` prints it (``gpu[01-02,05],cpu1``), sorted."""
    out: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", "" if hostlist == "(null)" else hostlist):
        out += _expand(part)
    return tuple(sorted(out))


def _expand(part: str) -> list[str]:
    m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
    if m is None:
        return [part]
    head, ranges, tail = m.groups()
    out = []
    for item in ranges.split(","):
        lo, _, hi = item.partition("-")
        numbers = [f"{i:0{len(lo)}d}" for i in range(int(lo), int(hi) + 1)] if hi.isdigit() and lo.isdigit() else [lo]
        out += [head + n + rest for n in numbers for rest in _expand(tail)]
    return out


def cores_of(shown: str) -> frozenset[int]:
    """The cores of a Slurm core list as ``scontrol show`` prints it (``CoreIDs=0-1,4``); ``(null)``: none."""
    out: set[int] = set()
    for item in [] if shown == "(null)" else shown.split(","):
        if (m := re.fullmatch(r"(\d+)(?:-(\d+))?", item)) is None:
            raise ValueError(f"not a Slurm core list: {shown!r}")
        out.update(range(int(m[1]), int(m[2] or m[1]) + 1))
    return frozenset(out)


def core_ranges(cores: frozenset[int] | set[int]) -> str:
    """Cores as Slurm writes them: ``0-3``, ``0,2-3,5`` (:func:`cores_of` reads it back)."""
    runs: list[list[int]] = []
    for c in sorted(cores):
        if runs and runs[-1][1] == c - 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def held_cores(fields: dict[str, str]) -> dict[str, frozenset[int]]:
    """The cores a reservation holds on each node: its ``NodeName=… CoreIDs=…`` pairs (``CoreIDs@NODE`` of
    :meth:`~gpuseat.engines.slurm.adapter.Slurm.reservations`). Empty while slurmctld shows none (a few seconds
    after it made one) or for a reservation of whole nodes: unknown, never a reason to make it again."""
    out: dict[str, frozenset[int]] = {}
    for key, shown in fields.items():
        if key.startswith("CoreIDs@"):
            try:
                cores = cores_of(shown)
            except ValueError:
                continue
            for node in node_names(key.removeprefix("CoreIDs@")):
                out[node] = cores
    return out


def overlaps(res: Reservation, fields: dict[str, str]) -> bool:
    """Whether a shown reservation's time overlaps the session ``res``."""
    a, b = shown_time(fields, "StartTime"), shown_time(fields, "EndTime")
    return a is not None and b is not None and a < res.end and res.start < b


def remade_for(
    fields: dict[str, str], res: Reservation, course: SlurmCourse, others: dict[str, dict[str, str]]
) -> tuple[list[str], str | None]:
    """Why an existing session reservation must be made again (Slurm 22.05 changes neither the cores nor the
    nodes of a core reservation): the cores or the nodes its seats are bound to differ, or it holds other cores
    than its seats' (``CoreIDs``: one made while a job ran, before ``IGNORE_JOBS``). Second: why it is not made
    again although its cores are wrong: another reservation (``others``) holds the seats' cores then, so a new
    one would get other cores again."""
    why = []
    held = core_count(fields)
    if held is not None and held != sum(res.cores):
        why.append(f"{sum(res.cores)} cores for its seats (cores_per_seat {course.cores_per_seat}), not {held}")
    nodes = node_names(fields.get("Nodes", ""))
    if nodes and nodes != tuple(sorted(res.nodes)):
        why.append(f"nodes {','.join(res.nodes)} for its seats, not {','.join(nodes)}")
    if why:
        return why, None
    seats: dict[str, set[int]] = {}
    for d in course.devices:
        seats.setdefault(d.node, set()).update(range(d.core, d.core + d.cores))
    shown = held_cores(fields)
    off = {n: want for n, want in sorted(seats.items()) if n in shown and not want <= shown[n]}
    for name, f in sorted(others.items()):
        taken = held_cores(f)
        if overlaps(res, f) and any(want & taken.get(n, frozenset()) for n, want in off.items()):
            return [], f"reservation {name} holds its seats' cores then"
    return [f"cores {core_ranges(w)} on {n} for its seats, not {core_ranges(shown[n])}" for n, w in off.items()], None


def binding_notes(engine: SlurmEngine, course: SlurmCourse) -> list[str]:
    """What still binds the course's seats otherwise than ``cores_per_seat`` asks, and what to run: the
    ``Cores=`` of their lines in gres.conf (slurm.conf's folder), and the node as slurmctld runs it (each
    seat's n cores one socket: ``CoresPerSocket`` a multiple of n)."""
    n, out = course.cores_per_seat, []
    folder = engine.conf_dir()
    gres = folder / "gres.conf" if folder is not None else None
    try:
        text = gres.read_text(errors="replace") if gres is not None else ""
    except OSError:
        text = ""
    bound: dict[tuple[str, str], str] = {}
    for line in text.splitlines():
        f = dict(re.findall(r"(\w+)=(\S+)", line.split("#", 1)[0]))
        if f.get("Name") == "gpu" and "Type" in f and "Cores" in f:
            bound[(f.get("NodeName", ""), f["Type"])] = f["Cores"]
    off = [
        f"{d.seat} to cores {have}, not {d.core_list}"
        for d in course.devices
        if (have := bound.get((d.node, d.slurm_type))) is not None and have != d.core_list
    ]
    nodes = {d.node for d in course.devices}
    split = sorted(  # one seat a core needs no socket check: no scontrol call on each pass for it
        f"{node} (CoresPerSocket={f.get('CoresPerSocket')})"
        for node, f in (engine.slurm.node_fields().items() if n > 1 else ())
        if node in nodes and f.get("CoresPerSocket", "").isdigit() and int(f["CoresPerSocket"]) % n
    )
    run = (
        f"run `gpuseat slurm config --course {course.key} --cpus CPUS --out DIR`, put its gres.conf and node "
        "line in place, then restart slurmctld and slurmd (docs/slurm.md, Several cores per seat)"
    )
    if off:
        out.append(f"{gres} binds {'; '.join(off)} (cores_per_seat is {n}): {run}")
    if split:
        out.append(
            f"slurmctld runs {', '.join(split)}: a seat's {n} cores are not one socket and Slurm refuses a "
            f"-c {n} job on its GPU: {run}"
        )
    return out


def holdings(engine: SlurmEngine, course: CourseState) -> list[Holding]:
    """What the course's people hold on the cluster: associations, seat limits, places in the session
    reservations, and live jobs of the course."""
    who = {login_name(p.key, p.unix_user): p for p in course.people.values()}
    out: list[Holding] = []

    def held(what: str, login: str, detail: str = "") -> None:
        p = who.get(login)
        out.append(Holding(engine.name, what, login, p.key if p else None, p.seat if p else None, engine.host, detail))

    if engine.accounting():
        for login, a in sorted(engine.slurm.associations(engine.partition).items()):
            held("association", login, f"account {engine.partition} GrpTRES={a['grptres']}")
    lua = engine._lua(required=False)
    if lua is not None and lua.exists():
        for lim in config.job_submit_limits(lua.read_text(errors="replace")):
            if lim.partition == engine.partition:
                held("limit", lim.user, f"job_submit.lua: gpu:{lim.seat_type}:{lim.count}")
    for name, f in sorted(engine.slurm.reservations().items()):
        if config.is_session(name, engine.partition):
            for login in sorted(config.reservation_users(f) - {config.PLACEHOLDER_USER}):
                held("reservation", login, name)
    sc = engine.wanted(course, [])
    known = set(who) | {h.login for h in out}
    for job in engine.slurm.jobs():
        if job.live and in_course(sc, job, known=known):
            held("job", job.user, f"job {job.job_id} {job.state} {job.gres}".strip())
    return out


def srun_probe(engine: SlurmEngine, seat: SeatView, participant: ParticipantView) -> Readiness:
    """Run ``srun`` as the participant in the course partition and session; judge what the job saw."""
    sc = engine._course()
    now = datetime.now()
    session = current_session(sc, now)
    login = login_name(participant.key, participant.unix_user)

    def result(state: Any, reason: str | None, evidence: str, visible: tuple[str, ...] = ()) -> Readiness:
        return Readiness(
            engine.course,
            seat.key,
            participant.key,
            state,
            reason,
            evidence[-4000:],
            visible,
            datetime.now(UTC),
            engine.name,
        )

    if session is None or session.start > now:
        return result("broken", f"no session of course {engine.course} is running now", "")
    wait = max(1, int(engine.settings.timeout) - 5)
    args = [
        f"--partition={sc.partition}",
        f"--reservation={session.name}",
        "--gres=gpu:1",
        f"--immediate={wait}",
        "--job-name=gpuseat-probe",
        "--",
        "sh",
        "-c",
        SRUN_PROBE_SCRIPT,
    ]
    try:
        proc = engine.slurm.run("srun", args, as_user=login, check=False, timeout=wait + 10)
    except EngineError as exc:
        return result("broken", f"srun as {login}: {exc.what}", "")
    evidence = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        return result("broken", f"srun failed: {explain(proc.stderr or proc.stdout)}", evidence)
    state, reason, visible = judge_srun_probe(proc.stdout, seat.device_uuid)
    return result(state, reason, evidence, visible)


def still_let_in(engine: SlurmEngine, participant: ParticipantView) -> str | None:
    """Exclusivity: None when ``participant`` (a previous or released holder) can no longer use the
    course's GPUs; else what still lets them."""
    login = login_name(participant.key, participant.unix_user)
    for name, f in engine.slurm.reservations().items():
        if config.is_session(name, engine.partition) and login in config.reservation_users(f):
            return f"{login} is still a user of reservation {name}"
    if engine.accounting() and login in engine.slurm.associations(engine.partition):
        return f"{login} still has an association in account {engine.partition}"
    lua = engine._lua(required=False)
    if lua is not None and lua.exists():
        text = lua.read_text(errors="replace")
        if any(x.user == login and x.partition == engine.partition for x in config.job_submit_limits(text)):
            return f"{login} still has a seat limit in {lua}"
    live = [j for j in engine.slurm.jobs([login]) if j.live and in_course(engine._course(), j, known={login})]
    if live:
        return f"{login} still has {len(live)} live job(s) in the course (e.g. {live[0].job_id})"
    return None
