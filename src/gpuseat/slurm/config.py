"""Slurm configuration for a course's seats, as pure functions: values in, file text out.

* ``gres.conf``: whole GPUs as ``Name=gpu Type=<model> File=...``, MIG instances as typed GRES
  (``Type=1g.18gb``) with ``MultipleFiles=`` (the parent GPU plus its GI/CI capability files), as
  ``gres.conf(5)`` asks for MIG; each device is bound to its own core (``Cores=``) so that a core
  reservation also holds the GPU (Slurm 22.05 cannot reserve GPUs; ``shared/reference/slurm.md``).
* ``slurm.conf``: node lines (``Gres=gpu:m60:4``), one partition per course (``ReqResv=YES``: jobs in it
  must name a session reservation) and the cluster settings the scheme needs.
* ``cgroup.conf``: device confinement, so a job opens only the device files of its GRES.
* ``job_submit.lua``: without accounting (no slurmdbd) the per-participant limit: a job in a course
  partition asking for more GPUs than the participant's seat, or for another type, is refused with a
  message, and every GPU job gets ``--gres-flags=enforce-binding`` (bit 0x10 of ``bitflags``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field

from gpuseat.errors import InputError
from gpuseat.slurm import names

LUA_MARK = "-- gpuseat:"  # first words of the job_submit.lua gpuseat writes (and may overwrite)
GRES_ENFORCE_BIND = 0x10  # job_desc.bitflags bit set by --gres-flags=enforce-binding (Slurm 22.05)
MAX_CORES = 4096


class GresDevice(BaseModel):
    """One seat's GPU or MIG instance on one node, as Slurm schedules it."""

    model_config = ConfigDict(frozen=True)

    node: str
    gres_type: str
    files: tuple[str, ...] = Field(min_length=1)
    mig: bool = False
    core: int = Field(ge=0, lt=MAX_CORES)
    seat: str | None = None

    def model_post_init(self, _context: object) -> None:
        """Every name reaches a config file: check them all."""
        names.node_name(self.node, where=f"seat {self.seat or '?'}: host")
        names.gres_type(self.gres_type, where=f"seat {self.seat or '?'}: type")
        for f in self.files:
            names.device_path(f, where=f"seat {self.seat or '?'}: device file")
        if not self.mig and len(self.files) != 1:
            raise InputError(
                "a whole GPU has exactly one device file",
                where=f"seat {self.seat}",
                fix="list MIG capability files only for MIG seats",
            )


def gres_type_of(model: str) -> str:
    """A GPU model id as a GRES type: ``Tesla M60`` → ``tesla_m60``, ``H200-141GB`` → ``h200-141gb``."""
    return names.gres_type(re.sub(r"[^a-z0-9.+-]+", "_", model.lower()).strip("_") or "gpu")


def mig_files(dev_root: str, gpu_minor: int, minors: Mapping[str, int], gi: int, ci: int = 0) -> tuple[str, ...]:
    """The device files of one MIG instance: ``nvidia<gpu>`` plus the GI and CI ``access`` capability files.

    ``minors`` is the host's ``/proc/driver/nvidia-caps/mig-minors`` (see :func:`parse_mig_minors`).
    """
    caps = []
    for name in (f"gpu{gpu_minor}/gi{gi}/access", f"gpu{gpu_minor}/gi{gi}/ci{ci}/access"):
        if name not in minors:
            raise InputError(
                f"no capability {name!r} in mig-minors",
                where="mig-minors",
                fix="give the host's /proc/driver/nvidia-caps/mig-minors and existing GI/CI ids",
            )
        caps.append(f"{dev_root}/nvidia-caps/nvidia-cap{minors[name]}")
    return (f"{dev_root}/nvidia{gpu_minor}", *caps)


_MINOR_LINE = re.compile(
    r"^(config|monitor|gpu\d{1,3}/gi\d{1,2}/access|gpu\d{1,3}/gi\d{1,2}/ci\d{1,2}/access) (\d{1,7})$"
)


def parse_mig_minors(text: str, *, where: str = "mig-minors") -> dict[str, int]:
    """Parse ``/proc/driver/nvidia-caps/mig-minors`` (``gpu0/gi7/access 66`` per line)."""
    out: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _MINOR_LINE.match(line.strip())
        if not m:
            raise InputError(
                f"line {number} is not 'NAME MINOR': {line[:60]!r}",
                where=where,
                fix="give the unmodified /proc/driver/nvidia-caps/mig-minors file",
            )
        out[m.group(1)] = int(m.group(2))
    return out


def bind_cores(devices: Iterable[GresDevice]) -> list[GresDevice]:
    """Number each node's devices' cores 0, 1, 2 … in order: one core per seat (see module doc)."""
    seen: dict[str, int] = {}
    out = []
    for d in devices:
        core = seen.get(d.node, 0)
        seen[d.node] = core + 1
        out.append(d.model_copy(update={"core": core}))
    return out


def _by_node(devices: Sequence[GresDevice]) -> dict[str, list[GresDevice]]:
    out: dict[str, list[GresDevice]] = {}
    for d in devices:
        out.setdefault(d.node, []).append(d)
    return out


def _check_unique(devices: Sequence[GresDevice]) -> None:
    cores: set[tuple[str, int]] = set()
    whole: set[tuple[str, str]] = set()
    for d in devices:
        if (d.node, d.core) in cores:
            raise InputError(
                f"core {d.core} on {d.node} is bound to two seats",
                where=f"seat {d.seat}",
                fix="bind one core per seat (bind_cores numbers them)",
            )
        cores.add((d.node, d.core))
        key = (d.node, ",".join(d.files))
        if key in whole:
            raise InputError(
                f"device {d.files[0]} on {d.node} backs two seats",
                where=f"seat {d.seat}",
                fix="one seat per GPU or MIG instance",
            )
        whole.add(key)


def gres_conf(devices: Sequence[GresDevice]) -> str:
    """``gres.conf`` for all nodes: one line per seat with ``NodeName=``, type, device file(s), core."""
    _check_unique(devices)
    lines = [
        "# gpuseat: one line per seat; each device is bound to its own core (reservations hold cores)",
        "AutoDetect=off",
    ]
    for node, devs in _by_node(devices).items():
        for d in devs:
            files = f"MultipleFiles={','.join(d.files)}" if d.mig else f"File={d.files[0]}"
            seat = f"  # seat {d.seat}" if d.seat else ""
            lines.append(f"NodeName={node} Name=gpu Type={d.gres_type} {files} Cores={d.core}{seat}")
    return "\n".join(lines) + "\n"


def gres_counts(devices: Sequence[GresDevice]) -> dict[str, dict[str, int]]:
    """Per node, GRES type → count (what the node line and the limits need)."""
    out: dict[str, dict[str, int]] = {}
    for d in devices:
        per = out.setdefault(d.node, {})
        per[d.gres_type] = per.get(d.gres_type, 0) + 1
    return out


def node_lines(
    devices: Sequence[GresDevice],
    *,
    cpus: int | None = None,
    real_memory_mb: int | None = None,
    addresses: Mapping[str, str] | None = None,
) -> str:
    """``NodeName=`` lines: ``Gres=gpu:<type>:<n>,…``; ``CPUs`` at least one core per seat."""
    lines = []
    for node, counts in gres_counts(devices).items():
        need = max(d.core for d in devices if d.node == node) + 1
        if cpus is not None and cpus < need:
            raise InputError(
                f"{node} has {cpus} CPUs but {need} seats, each bound to its own core",
                where="--cpus",
                fix=f"give at least {need} CPUs (cores) per node",
            )
        gres = ",".join(f"gpu:{t}:{n}" for t, n in counts.items())
        parts = [f"NodeName={node}"]
        if addresses and node in addresses:
            parts.append(f"NodeAddr={addresses[node]}")
        parts.append(f"CPUs={cpus if cpus is not None else need}")
        if real_memory_mb is not None:
            parts.append(f"RealMemory={real_memory_mb}")
        parts += [f"Gres={gres}", "State=UNKNOWN"]
        lines.append(" ".join(parts))
    return "\n".join(lines) + "\n"


def partition_words(course_key: str, nodes: Sequence[str]) -> list[str]:
    """The words of a course partition: for ``slurm.conf`` and for ``scontrol create``."""
    for n in nodes:
        names.node_name(n)
    return [
        f"PartitionName={names.course_partition(course_key)}",
        f"Nodes={','.join(nodes)}",
        "ReqResv=YES",
        "MaxTime=INFINITE",
        "State=UP",
    ]


def cluster_settings() -> str:
    """The ``slurm.conf`` settings the seat scheme relies on (merge them into the site's file)."""
    return (
        "# gpuseat: settings its seats rely on\n"
        "GresTypes=gpu\n"
        "SelectType=select/cons_tres\n"
        "SelectTypeParameters=CR_Core\n"
        "JobSubmitPlugins=lua\n"
        "ProctrackType=proctrack/cgroup\n"
        "TaskPlugin=task/cgroup,task/affinity\n"
    )


def cgroup_conf() -> str:
    """``cgroup.conf``: a job sees only its own GPU device files and cores."""
    return (
        "# gpuseat: confine each job to the device files of its GRES (and its cores)\n"
        "ConstrainDevices=yes\n"
        "ConstrainCores=yes\n"
    )


@dataclass(frozen=True)
class SeatLimit:
    """What one participant may ask for in one course partition."""

    partition: str
    user: str
    gres_type: str
    count: int

    def __post_init__(self) -> None:
        names.slurm_name(self.partition, where="partition")
        names.unix_user(self.user)
        names.gres_type(self.gres_type)
        if not 0 < self.count <= 64:
            raise InputError(
                f"seat GPU count {self.count} out of range",
                where=f"participant {self.user}",
                fix="a seat holds 1 to 64 GRES",
            )


def _lua_str(value: str) -> str:
    """A Lua string literal; only strictly checked names arrive here, the check is repeated."""
    if not re.fullmatch(r"[A-Za-z0-9_.+-]{1,64}", value):
        raise InputError(
            f"{value!r} cannot be written into job_submit.lua",
            where="job_submit.lua",
            fix="names must be letters, digits and '_ . + -'",
        )
    return f'"{value}"'


_LUA_BODY = """
-- The GPUs a request asks for: {count, type or nil, types seen}; reads tres_per_node/job/task/socket
-- ("gres:gpu:2", "gres:gpu:m60:1", comma lists).
local function gpus_asked(job_desc)
  local total, kinds = 0, {}
  local per_task = 1
  if job_desc.num_tasks ~= nil and job_desc.num_tasks > 0 and job_desc.num_tasks < 4294967294 then
    per_task = job_desc.num_tasks
  end
  for _, field in ipairs({"tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket"}) do
    local spec = job_desc[field]
    if spec ~= nil then
      for item in string.gmatch(spec, "[^,]+") do
        local rest = string.match(item, "^gres[:/]gpu(.*)$")
        if rest ~= nil then
          local kind, n = string.match(rest, "^[:=]([^:=]+)[:=](%d+)$")
          if kind == nil then
            n = string.match(rest, "^[:=](%d+)$")
            if n == nil then
              kind = string.match(rest, "^[:=]([^:=]+)$")
              n = 1
            end
          end
          n = tonumber(n) or 1
          if field == "tres_per_task" then n = n * per_task end
          total = total + n
          if kind ~= nil then kinds[kind] = true end
        end
      end
    end
  end
  return total, kinds
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  local total, kinds = gpus_asked(job_desc)
  if total > 0 and math.floor(job_desc.bitflags / 16) % 2 == 0 then
    job_desc.bitflags = job_desc.bitflags + 16  -- --gres-flags=enforce-binding on every GPU job
  end
  local part = job_desc.partition
  if part == nil or courses[part] == nil then
    return slurm.SUCCESS
  end
  local user = job_desc.user_name or tostring(job_desc.user_id)
  local seat = courses[part][user]
  if seat == nil then
    slurm.log_user("gpuseat: %s is not enrolled in partition %s; ask the organiser to add you to the roster",
                   user, part)
    return slurm.ERROR
  end
  for kind, _ in pairs(kinds) do
    if kind ~= seat.type then
      slurm.log_user("gpuseat: your seat in %s is gpu:%s:%d; this job asks for gpu type %s", part, seat.type,
                     seat.count, kind)
      return slurm.ERROR
    end
  end
  if total > seat.count then
    slurm.log_user("gpuseat: your seat in %s is gpu:%s:%d; this job asks for %d GPUs", part, seat.type,
                   seat.count, total)
    return slurm.ERROR
  end
  return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end

return slurm.SUCCESS
"""


def job_submit_lua(limits: Iterable[SeatLimit]) -> str:
    """``job_submit.lua`` with one table entry per enrolled participant and course partition."""
    table: dict[str, dict[str, SeatLimit]] = {}
    for lim in limits:
        per = table.setdefault(lim.partition, {})
        if lim.user in per:
            raise InputError(
                f"unix user {lim.user} holds two seats in {lim.partition}",
                where="roster",
                fix="give each participant their own unix user",
            )
        per[lim.user] = lim
    rows = [
        LUA_MARK + " seat limits per course partition (written by `gpuseat slurm enroll`; do not edit)",
        "courses = {",
    ]
    for part in sorted(table):
        rows.append(f"  [{_lua_str(part)}] = {{")
        for user in sorted(table[part]):
            lim = table[part][user]
            rows.append(f"    [{_lua_str(user)}] = {{type = {_lua_str(lim.gres_type)}, count = {lim.count}}},")
        rows.append("  },")
    rows.append("}")
    return "\n".join(rows) + "\n" + _LUA_BODY


@dataclass(frozen=True)
class Reservation:
    """One lab session's reservation: the course's users on the cores bound to its seats."""

    name: str
    users: tuple[str, ...]
    start: datetime
    end: datetime
    nodes: tuple[str, ...]
    cores: tuple[int, ...]  # per node, in node order
    partition: str

    def words(self) -> list[str]:
        """``scontrol create reservation`` arguments (one list item per word, never a shell string)."""
        minutes = max(1, round((self.end - self.start).total_seconds() / 60))
        return [
            f"ReservationName={self.name}",
            f"Users={','.join(self.users)}",
            f"StartTime={self.start.strftime('%Y-%m-%dT%H:%M:%S')}",
            f"Duration={minutes}",
            f"Nodes={','.join(self.nodes)}",
            f"CoreCnt={','.join(str(c) for c in self.cores)}",
            f"PartitionName={self.partition}",
        ]


def reservation_name(course_key: str, start: datetime) -> str:
    """``gpuseat-<course>-<YYYYmmddTHHMM>``: the session's start makes it unique and sortable."""
    return names.slurm_name(f"gpuseat-{course_key}-{start.strftime('%Y%m%dT%H%M')}", where="course key")


def session_reservations(
    course_key: str, intervals: Sequence[tuple[datetime, datetime]], users: Sequence[str], devices: Sequence[GresDevice]
) -> list[Reservation]:
    """One reservation per lab session (interval), holding on each node as many cores as it has seats."""
    if not users:
        raise InputError(
            "no participant has a unix user",
            where="roster",
            fix="give each participant a unix_user column in the roster",
        )
    for u in users:
        names.unix_user(u)
    per_node = {node: max(d.core for d in devs) + 1 for node, devs in _by_node(devices).items()}
    if not per_node:
        raise InputError("the course has no Slurm seats", where="seats", fix="add seats first (gpuseat seats add)")
    nodes = tuple(sorted(per_node))
    return [
        Reservation(
            name=reservation_name(course_key, start),
            users=tuple(sorted(set(users))),
            start=start,
            end=end,
            nodes=nodes,
            cores=tuple(per_node[n] for n in nodes),
            partition=names.course_partition(course_key),
        )
        for start, end in intervals
    ]


def devices_from_layout(
    layout: object,
    node: str,
    *,
    dev_root: str = "/dev",
    mig_minors: Mapping[str, int] | None = None,
    mig_instances: Mapping[str, tuple[int, int]] | None = None,
) -> list[GresDevice]:
    """GresDevices for the seats of a carve :class:`~gpuseat.core.carve.Layout` on one node.

    Whole GPUs use ``<dev_root>/nvidia<index>``. MIG seats need the host's mig-minors table and each
    seat's (GPU instance, compute instance) ids, which only exist once the instances are created
    (``nvidia-smi mig -lgi``); without them the MIG seat is refused with how to get them.
    """
    from gpuseat.core.carve import Layout

    assert isinstance(layout, Layout)
    root = str(PurePosixPath(names.device_path(dev_root, where="--dev-root")))
    model_type = gres_type_of(layout.server.gpu.id)
    out = []
    for seat in layout.slices:
        if seat.mode == "passthrough":
            out.append(
                GresDevice(
                    node=node, gres_type=model_type, files=(f"{root}/nvidia{seat.gpu_index}",), core=0, seat=seat.name
                )
            )
        elif seat.mode == "mig":
            if mig_minors is None or mig_instances is None or seat.name not in mig_instances:
                raise InputError(
                    f"MIG seat {seat.name} needs its device files: the GPU instance id is known only once created",
                    where="--mig-minors / --mig-instances",
                    fix="create the instances (gpuseat carve --render mig-parted), then pass the host's "
                    "/proc/driver/nvidia-caps/mig-minors and a SEAT=GI[:CI] list",
                )
            gi, ci = mig_instances[seat.name]
            files = mig_files(root, seat.gpu_index, mig_minors, gi, ci)
            out.append(
                GresDevice(
                    node=node,
                    gres_type=names.gres_type(seat.profile or ""),
                    files=files,
                    mig=True,
                    core=0,
                    seat=seat.name,
                )
            )
        else:
            raise InputError(
                f"Slurm schedules whole GPUs and MIG instances, not {seat.mode} seats",
                where="--mode",
                fix="carve with --mode passthrough or --mode mig",
            )
    return bind_cores(out)
