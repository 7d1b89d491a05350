"""Slurm configuration for a course's seats, as pure functions: values in, file text out.

* ``gres.conf``: whole GPUs as ``Name=gpu Type=<model> File=...``, MIG instances as typed GRES
  (``Type=1g.18gb``) with ``MultipleFiles=`` (the parent GPU plus its GI/CI capability files), as
  ``gres.conf(5)`` asks for MIG; each device is bound to its own core (``Cores=``) so that a core
  reservation also holds the GPU (Slurm 22.05 cannot reserve GPUs; ``shared/reference/slurm.md``).
* ``slurm.conf``: node lines (``Gres=gpu:m60:4``), one partition per course (``ReqResv=YES``: jobs in it
  must name a session reservation) and the cluster settings the scheme needs.
* ``cgroup.conf``: device confinement, so a job opens only the device files of its GRES.
* ``job_submit.lua``: the per-participant rule on submission *and* on change (``scontrol update``):
  a participant's GPU job asks for at most their seat, names one partition (their course's) for the
  course's sessions, and is rewritten to the seat's own GRES type (``m60.seat-01``), so Slurm itself
  can only give them their own GPU, whatever the partition, reservation or number of jobs; it asks for
  at most the seat's CPUs (the cores its GPU is bound to: ``cores_per_seat``). Every GPU job gets
  ``--gres-flags=enforce-binding`` (only root may disable it). See docs/slurm.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict, Field

from gpuseat.core import logins
from gpuseat.core.delivery import SeatDevice, device_files, shared_files
from gpuseat.engines.slurm import names
from gpuseat.errors import InputError

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
    core: int = Field(ge=0, lt=MAX_CORES)  # the first core bound (recorded: the seat's slot on its node)
    seat: str | None = None
    cores: int = Field(1, ge=1, le=256)  # cores bound from ``core`` on (:func:`seat_cores`)

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
        if self.seat is not None:
            seat_gres_type(self.gres_type, self.seat)

    @property
    def slurm_type(self) -> str:
        """The GRES type Slurm knows this device by: the seat's own (``m60.seat-01``), else the model's."""
        return seat_gres_type(self.gres_type, self.seat) if self.seat else self.gres_type

    @property
    def core_list(self) -> str:
        """``Cores=`` of gres.conf: ``3``, or ``6-7`` for two cores."""
        return str(self.core) if self.cores == 1 else f"{self.core}-{self.core + self.cores - 1}"


def gres_type_of(model: str) -> str:
    """A GPU model id as a GRES type: ``Tesla M60`` → ``tesla_m60``, ``H200-141GB`` → ``h200-141gb``."""
    return names.gres_type(re.sub(r"[^a-z0-9.+-]+", "_", model.lower()).strip("_") or "gpu")


def mig_files(
    dev_root: str, gpu_minor: int, minors: Mapping[tuple[int, int, int | None], int], gi: int, ci: int = 0
) -> tuple[str, ...]:
    """The device files of one MIG instance: ``nvidia<gpu>`` plus the GI and CI ``access`` capability files.

    ``minors`` is the host's ``/proc/driver/nvidia-caps/mig-minors``
    (:func:`gpuseat.core.delivery.parse_mig_minors`); the same files the host engine grants.
    """
    dev = SeatDevice(f"nvidia{gpu_minor}", gpu_minor, gi, ci)
    return (*shared_files(dev, dev_root), *device_files(dev, minors, dev_root))


def bind_cores(devices: Iterable[GresDevice]) -> list[GresDevice]:
    """Number each node's devices' cores 0, 1, 2 … in order: one core per seat (see module doc)."""
    seen: dict[str, int] = {}
    out = []
    for d in devices:
        core = seen.get(d.node, 0)
        seen[d.node] = core + 1
        out.append(d.model_copy(update={"core": core}))
    return out


def seat_cores(devices: Iterable[GresDevice], per_seat: int) -> list[GresDevice]:
    """Each seat bound to ``per_seat`` (``cores_per_seat``) cores: the one on slot i to cores i*n … i*n+n-1."""
    out = []
    for d in devices:
        if (d.core + 1) * per_seat > MAX_CORES:
            last = (d.core + 1) * per_seat - 1
            raise InputError(f"seat {d.seat} would be bound to cores up to {last}", where="cores_per_seat",
                             fix=f"a node has at most {MAX_CORES} cores: lower cores_per_seat")  # fmt: skip
        out.append(d.model_copy(update={"core": d.core * per_seat, "cores": per_seat}))
    return out


def _by_node(devices: Sequence[GresDevice]) -> dict[str, list[GresDevice]]:
    out: dict[str, list[GresDevice]] = {}
    for d in devices:
        out.setdefault(d.node, []).append(d)
    return out


def _check_unique(devices: Sequence[GresDevice]) -> None:
    cores: set[tuple[str, int]] = set()
    whole: set[tuple[str, str]] = set()
    types: dict[str, str] = {}
    for d in devices:
        if d.seat is not None:
            if d.slurm_type in types:
                raise InputError(
                    f"GRES type {d.slurm_type} would name two devices "
                    f"({types[d.slurm_type]} and {d.node}:{d.files[0]})",
                    where=f"seat {d.seat}",
                    fix="give every seat on the cluster its own key (the seat's GRES type is model + seat key)",
                )
            types[d.slurm_type] = f"{d.node}:{d.files[0]}"
        for core in range(d.core, d.core + d.cores):
            if (d.node, core) in cores:
                raise InputError(
                    f"core {core} on {d.node} is bound to two seats",
                    where=f"seat {d.seat}",
                    fix="bind one core per seat (bind_cores numbers them)",
                )
            cores.add((d.node, core))
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
        "# gpuseat: one line per seat, typed by seat (a job gets only the seat it names); each device is",
        "# bound to its own core (session reservations hold cores)",
        "AutoDetect=off",
    ]
    for node, devs in _by_node(devices).items():
        for d in devs:
            files = f"MultipleFiles={','.join(d.files)}" if d.mig else f"File={d.files[0]}"
            seat = f"  # seat {d.seat}" if d.seat else ""
            lines.append(f"NodeName={node} Name=gpu Type={d.slurm_type} {files} Cores={d.core_list}{seat}")
    return "\n".join(lines) + "\n"


def gres_counts(devices: Sequence[GresDevice]) -> dict[str, dict[str, int]]:
    """Per node, GRES type → count (what the node line and the limits need)."""
    out: dict[str, dict[str, int]] = {}
    for d in devices:
        per = out.setdefault(d.node, {})
        per[d.slurm_type] = per.get(d.slurm_type, 0) + 1
    return out


def node_lines(
    devices: Sequence[GresDevice],
    *,
    cpus: int | None = None,
    real_memory_mb: int | None = None,
    addresses: Mapping[str, str] | None = None,
) -> str:
    """``NodeName=`` lines: ``Gres=gpu:<type>:<n>,…``; ``CPUs`` at least the cores bound to its seats; with
    several cores per seat, sockets of that many cores (``Sockets=``, ``CoresPerSocket=``)."""
    lines = []
    for node, counts in gres_counts(devices).items():
        bound = [d for d in devices if d.node == node]
        need, per = max(d.core + d.cores for d in bound), max(d.cores for d in bound)
        if cpus is not None and (cpus < need or cpus % per):
            each = "each bound to its own core" if per == 1 else f"× {per} cores per seat = {need} cores"
            said = f"{node} has {cpus} CPUs but {need if per == 1 else len(bound)} seats, {each}"
            raise InputError(
                said if cpus < need else f"{node}: {cpus} CPUs are no whole number of {per}-core seats",
                where="--cpus",
                fix=f"give at least {need} CPUs (cores) per node"
                + ("" if per == 1 else f", a multiple of {per} (each seat's cores are one socket)"),
            )
        gres = ",".join(f"gpu:{t}:{n}" for t, n in counts.items())
        parts = [f"NodeName={node}"]
        if addresses and node in addresses:
            parts.append(f"NodeAddr={addresses[node]}")
        parts.append(f"CPUs={cpus if cpus is not None else need}")
        if per > 1:  # a seat's cores are a socket: 22.05 binds a GPU to its cores' sockets (`CPUs=N`: N of one core)
            parts.append(f"Sockets={(cpus or need) // per} CoresPerSocket={per} ThreadsPerCore=1")
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
        "# job_submit.lua must exist before this line is read: gpuseat slurm config --conf-dir /etc/slurm\n"
        "JobSubmitPlugins=lua\n"
        "ProctrackType=proctrack/cgroup\n"
        "TaskPlugin=task/cgroup,task/affinity\n"
        "# course partitions gpuseat creates at run time (survive `scontrol reconfigure`):\n"
        "# Include /etc/slurm/gpuseat-partitions.conf\n"
        "# a participant's job waiting for their own GPU holds up the main scheduler for the whole session\n"
        "# reservation; the backfill pass starts the others' jobs: run it often (merge into yours)\n"
        "SchedulerParameters=bf_interval=5,bf_continue\n"
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
    seat_type: str | None = None  # the seat's own GRES type (jobs are rewritten to it)
    cpus: int = 1  # the cores its GPU is bound to (a GPU job asks for at most these)

    def __post_init__(self) -> None:
        names.slurm_name(self.partition, where="partition")
        logins.unix_user(self.user)
        names.gres_type(self.gres_type)
        if self.seat_type is not None:
            names.gres_type(self.seat_type)
        if not 0 < self.count <= 64 or not 0 < self.cpus <= 256:
            what = f"GPU count {self.count}" if not 0 < self.count <= 64 else f"CPU count {self.cpus}"
            raise InputError(f"seat {what} out of range", where=f"participant {self.user}",
                             fix="a seat holds 1 to 64 GRES and 1 to 256 cores")  # fmt: skip


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
-- Every name below was checked by gpuseat before it was written (letters, digits, '_ . + -').

-- Split "a,b" into a list.
local function split(text)
  local out = {}
  if text ~= nil then
    for item in string.gmatch(text, "[^,]+") do out[#out + 1] = item end
  end
  return out
end

-- One GPU item of a TRES spec ("gres:gpu:2", "gres/gpu:m60:1", "gres:gpu"): count and type (or nil).
local function gpu_item(item)
  local rest = string.match(item, "^gres[:/]gpu(.*)$")
  if rest == nil then return nil end
  if rest == "" then return 1, nil end
  local kind, n = string.match(rest, "^[:=]([^:=]+)[:=](%d+)$")
  if kind == nil then
    n = string.match(rest, "^[:=](%d+)$")
    if n == nil then
      kind = string.match(rest, "^[:=]([^:=]+)$")
      n = 1
    end
  end
  return tonumber(n) or 1, kind
end

local GPU_FIELDS = {"tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket"}
local NO_VAL = 4294967294  -- Slurm's "not set" (a job that is no heterogeneous job's part has this offset)
local NO_VAL16 = 65534  -- the same for 16-bit fields (cpus_per_task, pn_min_cpus)
local SEAT_CPUS = 1  -- a seat's cores, its GPU bound to them (gres.conf Cores=N, --gres-flags=enforce-binding);
                     -- a seat entry's cpus = N when it has more (the Slurm engine's cores_per_seat)

-- The GPUs a request asks for: total count (per-task counts times the tasks) and the types named.
local function gpus_asked(job_desc)
  local total, kinds, any = 0, {}, false
  local per_task = 1
  if job_desc.num_tasks ~= nil and job_desc.num_tasks > 0 and job_desc.num_tasks < 4294967294 then
    per_task = job_desc.num_tasks
  end
  for _, field in ipairs(GPU_FIELDS) do
    for _, item in ipairs(split(job_desc[field])) do
      local n, kind = gpu_item(item)
      if n ~= nil then
        any = true
        if field == "tres_per_task" then n = n * per_task end
        total = total + n
        if kind ~= nil then kinds[kind] = true end
      end
    end
  end
  return total, kinds, any
end

-- Whether a request names any of the GPU fields (a change that names none keeps the job's).
local function names_tres(job_desc)
  for _, field in ipairs(GPU_FIELDS) do
    if job_desc[field] ~= nil then return true end
  end
  return false
end

-- The CPUs a job asks for (a change: what it has afterwards), at least: CPUs per task times tasks,
-- --mincpus, NumCPUs, and --cpus-per-gpu times its GPUs.
local function set(value, none) if value ~= nil and value < none then return value end end
local function cpus_asked(job_desc, job_rec, gpus)
  local tasks = set(job_desc.num_tasks, NO_VAL) or 1
  local cpus = (set(job_desc.cpus_per_task, NO_VAL16) or 1) * tasks
  local old = job_rec or {}
  cpus = math.max(cpus, set(job_desc.min_cpus, NO_VAL) or set(old.min_cpus, NO_VAL) or 1)
  cpus = math.max(cpus, set(job_desc.pn_min_cpus, NO_VAL16) or set(old.pn_min_cpus, NO_VAL16) or 1)
  for _, item in ipairs(split(job_desc.cpus_per_tres)) do
    local n = gpu_item(item)
    if n ~= nil then cpus = math.max(cpus, n * gpus) end
  end
  return cpus
end

-- Whether a change names the job's CPUs (or --exclusive).
local function names_cpus(job_desc)
  if job_desc.shared == 0 or job_desc.cpus_per_tres ~= nil then return true end
  return (set(job_desc.cpus_per_task, NO_VAL16) or set(job_desc.num_tasks, NO_VAL) or set(job_desc.min_cpus, NO_VAL)
          or set(job_desc.pn_min_cpus, NO_VAL16)) ~= nil
end

-- A TRES spec without its GPU items ("" when nothing else is left).
local function without_gpus(spec)
  local keep = {}
  for _, item in ipairs(split(spec)) do
    if gpu_item(item) == nil then keep[#keep + 1] = item end
  end
  return table.concat(keep, ",")
end

-- The job's user name: from the request, else from the uid table gpuseat wrote.
local function user_of(job_desc, job_rec)
  if job_desc.user_name ~= nil then return job_desc.user_name end
  local uid = job_desc.user_id
  if (uid == nil or uid >= 4294967294) and job_rec ~= nil then uid = job_rec.user_id end
  if uid ~= nil and uids[uid] ~= nil then return uids[uid] end
  return nil
end

-- The course partitions named in a partition list, and how many partitions it names.
local function course_parts(partition)
  local named, count = {}, 0
  for _, p in ipairs(split(partition)) do
    count = count + 1
    if courses[p] ~= nil then named[#named + 1] = p end
  end
  return named, count
end

-- The course partition whose session reservations start like this reservation's name (nil if none).
local function course_of_reservation(resv)
  if resv == nil then return nil end
  for part, _ in pairs(courses) do
    if string.sub(resv, 1, string.len(part) + 1) == part .. "-" then return part end
  end
  return nil
end

local function refuse(fmt, ...)
  slurm.log_user("gpuseat: " .. fmt, ...)
  return slurm.ERROR
end

-- The one rule, for a new job and for a change to one: a participant's GPU job asks for at most
-- their seat, in their course partition (one partition, not a list) for the course's sessions, and
-- is rewritten to their seat's own GRES type, so Slurm can only give them their own GPU.
local function seat_rule(job_desc, job_rec, user, partition, resv)
  local total, kinds, any = gpus_asked(job_desc)
  local named, count = course_parts(partition)
  local resv_course = course_of_reservation(resv)
  local enrolled = participants[user]
  if enrolled == nil then
    for _, part in ipairs(named) do
      return refuse("%s is not enrolled in partition %s; ask the organiser to add you to the roster",
                    user or "?", part)
    end
    return slurm.SUCCESS
  end
  if #named > 0 and count > 1 then
    return refuse("name only your course partition (-p %s), not a list", named[1])
  end
  local part = named[1]
  if part == nil and resv_course ~= nil then
    if partition ~= nil and partition ~= "" then
      return refuse("the sessions of %s run in partition %s only (-p %s)", resv_course, resv_course, resv_course)
    end
    part = resv_course
    if job_rec == nil then job_desc.partition = part end
  end
  if part == nil then part = enrolled end  -- any other partition: the participant's GPU is still their seat
  local seat = courses[part][user]
  if seat == nil then
    return refuse("%s is not enrolled in partition %s; ask the organiser to add you to the roster", user, part)
  end
  if resv_course ~= nil and resv_course ~= part then
    return refuse("reservation %s belongs to partition %s, not %s", resv, resv_course, part)
  end
  -- Each core of a session is a seat's, bound to its GPU: a job (or a heterogeneous job's component)
  -- without a GPU would run on another participant's core and keep their GPU from them.
  -- (a new job's part has its offset; a change's job_desc says 0 for any job, its job_rec the het job's id)
  local offset = job_desc.het_job_offset
  local het = (job_rec == nil and offset ~= nil and offset < NO_VAL)
  if job_rec ~= nil then het = (job_rec.het_job_id or 0) > 0 end
  if resv_course ~= nil and het then
    return refuse("a heterogeneous job cannot run on your seat in %s: one of its parts would hold another " ..
                  "participant's core; submit one job with your one GPU (--gres=gpu:1)", part)
  end
  local after = total  -- the GPUs the job has afterwards: a change that names no GRES keeps the job's
  if job_rec ~= nil and not names_tres(job_desc) then after = gpus_asked(job_rec) end
  if resv_course ~= nil and after < 1 then
    return refuse("in the sessions of %s a job without a GPU would take another participant's core; submit " ..
                  "one job with your one GPU (--gres=gpu:1), or run it outside the session", part)
  end
  -- The seat's GPU is bound to its cores: a GPU job asking for more CPUs can never start (and --exclusive
  -- in a session waits for the whole node); say how many it may ask for.
  local cpus, most = cpus_asked(job_desc, job_rec, after), seat.cpus or SEAT_CPUS
  local whole = (resv_course ~= nil and job_desc.shared == 0)
  if after >= 1 and (cpus > most or whole) then
    local s = (most == 1) and "" or "s"
    local why = whole and "--exclusive asks for the whole node" or string.format("this job asks for %d CPUs", cpus)
    return refuse("%s; your seat in %s has %d CPU%s (the core%s its GPU is bound to); ask for at most %d CPU%s (-c %d)",
                  why, part, most, s, s, most, s, most)
  end
  if not any then return slurm.SUCCESS end
  for kind, _ in pairs(kinds) do
    if kind ~= seat.type and kind ~= seat.seat then
      return refuse("your seat in %s is gpu:%s:%d; this job asks for gpu type %s", part, seat.type, seat.count, kind)
    end
  end
  if total > seat.count then
    return refuse("your seat in %s is gpu:%s:%d; this job asks for %d GPUs", part, seat.type, seat.count, total)
  end
  if total < 1 then return slurm.SUCCESS end
  for _, field in ipairs(GPU_FIELDS) do
    if job_desc[field] ~= nil then job_desc[field] = without_gpus(job_desc[field]) end
  end
  local rest = job_desc.tres_per_node
  local mine = "gres:gpu:" .. seat.seat .. ":" .. total
  if rest ~= nil and rest ~= "" then mine = rest .. "," .. mine end
  job_desc.tres_per_node = mine
  return slurm.SUCCESS
end

local ENFORCE = slurm.GRES_ENFORCE_BIND or 16
local DISABLE = slurm.GRES_DISABLE_BIND or 32

local function has_bit(value, bit) return math.floor(value / bit) % 2 == 1 end

-- Every GPU job binds its GPUs to its cores (--gres-flags=enforce-binding): outside a session's
-- reservation the reserved cores, and so the seats' GPUs, are out of reach. Only root may turn it off.
local function enforce_binding(job_desc, uid)
  local _, _, any = gpus_asked(job_desc)
  if not any or job_desc.bitflags == nil then return end
  if has_bit(job_desc.bitflags, DISABLE) and uid ~= 0 then job_desc.bitflags = job_desc.bitflags - DISABLE end
  if not has_bit(job_desc.bitflags, ENFORCE) and not has_bit(job_desc.bitflags, DISABLE) then
    job_desc.bitflags = job_desc.bitflags + ENFORCE
  end
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  local user = user_of(job_desc, nil)
  local rc = seat_rule(job_desc, nil, user, job_desc.partition, job_desc.reservation)
  if rc == slurm.SUCCESS then enforce_binding(job_desc, submit_uid) end
  return rc
end

-- A change to a job (scontrol update) passes the same rule: the partition, reservation and GPUs it
-- would have afterwards.
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  local user = user_of(job_desc, job_rec)
  local _, _, any = gpus_asked(job_desc)
  if job_desc.partition == nil and job_desc.reservation == nil and not any and not names_cpus(job_desc) then
    return slurm.SUCCESS
  end
  local partition = job_desc.partition or job_rec.partition
  local resv = job_desc.reservation or job_rec.resv_name
  local rc = seat_rule(job_desc, job_rec, user, partition, resv)
  if rc == slurm.SUCCESS then enforce_binding(job_desc, modify_uid) end
  return rc
end

return slurm.SUCCESS
"""


def seat_gres_type(model_type: str, seat: str) -> str:
    """A seat's own GRES type (``m60.seat-01``): a job asking for it can only get that seat's device."""
    return names.gres_type(f"{model_type}.{seat}", where=f"seat {seat}: GRES type")


def job_submit_lua(limits: Iterable[SeatLimit], uids: Mapping[str, int] | None = None) -> str:
    """``job_submit.lua`` with one table entry per enrolled participant and course partition.

    ``uids`` maps unix users to their uid on the controller (a job change carries only the uid).
    """
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
        LUA_MARK + " seat limits per course partition (written by gpuseat apply; do not edit)",
        "courses = {",
    ]
    first: dict[str, str] = {}
    for part in sorted(table):
        rows.append(f"  [{_lua_str(part)}] = {{")
        for user in sorted(table[part]):
            lim = table[part][user]
            first.setdefault(user, part)
            rows.append(
                f"    [{_lua_str(user)}] = {{type = {_lua_str(lim.gres_type)}, "
                f"seat = {_lua_str(lim.seat_type or lim.gres_type)}, count = {lim.count}"
                + (f", cpus = {int(lim.cpus)}}}," if lim.cpus != 1 else "},")
            )
        rows.append("  },")
    rows.append("}")
    rows.append("-- each participant's first course partition (for GPU jobs in other partitions)")
    rows.append("participants = {")
    rows += [f"  [{_lua_str(u)}] = {_lua_str(p)}," for u, p in sorted(first.items())]
    rows.append("}")
    rows.append("uids = {")
    for user, uid in sorted((uids or {}).items()):
        if user in first and 0 <= int(uid) < 4294967294:
            rows.append(f"  [{int(uid)}] = {_lua_str(user)},")
    rows.append("}")
    return "\n".join(rows) + "\n" + _LUA_BODY


_LUA_COURSE = re.compile(r'^  \["([A-Za-z0-9_.+-]{1,64})"\] = \{$')
_LUA_USER = re.compile(
    r'^    \["([A-Za-z0-9_.+-]{1,64})"\] = \{type = "([A-Za-z0-9_.+-]{1,64})", '
    r'seat = "([A-Za-z0-9_.+-]{1,64})", count = (\d{1,2})(?:, cpus = (\d{1,3}))?\},$'
)


def job_submit_limits(text: str) -> list[SeatLimit]:
    """The seat limits a ``job_submit.lua`` gpuseat wrote holds (the inverse of :func:`job_submit_lua`'s table)."""
    out: list[SeatLimit] = []
    part = None
    for line in text.split("participants = {", 1)[0].splitlines():
        if m := _LUA_COURSE.match(line):
            part = m.group(1)
        elif (m := _LUA_USER.match(line)) and part is not None:
            out.append(SeatLimit(part, m.group(1), m.group(2), int(m.group(4)), m.group(3), int(m.group(5) or 1)))
    return out


def partition_line(course_key: str, nodes: Sequence[str]) -> str:
    """The course partition's ``slurm.conf`` line (what the partitions include holds)."""
    return " ".join(partition_words(course_key, nodes))


def include_with(text: str, partition: str, line: str | None) -> str:
    """The partitions include with ``partition``'s line set to ``line`` (None: removed); other lines kept."""
    head = f"PartitionName={partition} "
    keep = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith(head)]
    if not keep or not keep[0].startswith("#"):
        keep.insert(0, INCLUDE_MARK)
    if line is not None:
        keep.append(line)
    return "\n".join(keep) + "\n"


INCLUDE_MARK = "# gpuseat: course partitions (written by gpuseat apply; slurm.conf includes this file)"


def own_include(path: Path) -> Path:
    """``path`` when it is gpuseat's partitions include to rewrite: missing, empty, or starting with
    :data:`INCLUDE_MARK`. The agent rewrites it as root (mode 0644), so a site's file, or any other
    file a setting names, is refused instead of being replaced."""
    from gpuseat.files import check_target

    if not path.is_symlink():
        check_target(path, where=str(path))  # a FIFO or device: refused before it is read (never blocks)
    try:
        text = "" if not path.exists() or path.is_symlink() else path.read_text(errors="replace")
    except OSError:
        text = ""
    if path.is_symlink() or (text.strip() and not text.startswith(INCLUDE_MARK)):
        raise InputError(
            f"the partitions include {path} exists and gpuseat did not write it",
            where=str(path),
            fix="move it away (or empty it) so that gpuseat can keep its course partitions there, or set "
            "slurm.partitions_conf to another file such as /etc/slurm/gpuseat-partitions.conf",
        )
    return path


def includes(conf_text: str, path: str, conf_dir: str) -> bool:
    """Whether a slurm.conf text has an ``Include`` line naming ``path`` (absolute, or relative to its folder)."""
    for line in conf_text.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) == 2 and words[0].lower() == "include":
            named = words[1] if words[1].startswith("/") else f"{conf_dir.rstrip('/')}/{words[1]}"
            if PurePosixPath(named) == PurePosixPath(path):
                return True
    return False


def defines_partition(conf_text: str, partition: str) -> bool:
    """Whether a slurm.conf text defines ``partition`` itself (then gpuseat's include must not)."""
    return any(ln.split() and ln.split()[0] == f"PartitionName={partition}" for ln in conf_text.splitlines())


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
        """``scontrol create reservation`` arguments, one item per word. ``start`` and ``end`` are the controller's
        wall times; ``Duration`` is the time that really passes between them (00:00-06:00 across a DST change: 5 or
        7 hours). ``IGNORE_JOBS``: else Slurm 22.05 gives it the lowest cores free of jobs with no time limit (not
        its seats') and refuses any update of a session still to come while one runs on the node (nodes busy)."""
        minutes = max(1, round((self.end.astimezone() - self.start.astimezone()).total_seconds() / 60))
        return [
            f"ReservationName={self.name}",
            f"Users={','.join(self.users)}",
            f"StartTime={self.start.strftime('%Y-%m-%dT%H:%M:%S')}",
            f"Duration={minutes}",
            f"Nodes={','.join(self.nodes)}",
            f"CoreCnt={','.join(str(c) for c in self.cores)}",
            f"PartitionName={self.partition}",
            "Flags=IGNORE_JOBS",
        ]


def is_session(name: str, partition: str) -> bool:
    """Whether a reservation is one of ``partition``'s sessions (:func:`reservation_name`): exactly
    ``<partition>-<YYYYmmddTHHMM>``, so that course ``c1`` never takes course ``c1-x``'s for its own."""
    return re.fullmatch(re.escape(partition) + r"-\d{8}T\d{4}", name) is not None


#: a reservation's only user while its last holder is replaced (``Users=`` cannot be empty)
PLACEHOLDER_USER = "root"


def reservation_users(fields: Mapping[str, str]) -> set[str]:
    """The users of a reservation (its ``scontrol show`` fields)."""
    return {u for u in fields.get("Users", "").split(",") if u and u != "(null)"}


def reservation_name(course_key: str, start: datetime) -> str:
    """``gpuseat-<course>-<YYYYmmddTHHMM>``: the session's start makes it unique and sortable."""
    return names.slurm_name(f"gpuseat-{course_key}-{start.strftime('%Y%m%dT%H%M')}", where="course key")


def session_reservations(
    course_key: str, intervals: Sequence[tuple[datetime, datetime]], users: Sequence[str], devices: Sequence[GresDevice]
) -> list[Reservation]:
    """One reservation per lab session (interval), holding on each node the cores bound to its seats."""
    if not users:
        raise InputError(
            "no participant has a unix user",
            where="roster",
            fix="give each participant a unix_user column in the roster",
        )
    for u in users:
        logins.unix_user(u)
    per_node = {node: max(d.core + d.cores for d in devs) for node, devs in _by_node(devices).items()}
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
    mig_minors: Mapping[tuple[int, int, int | None], int] | None = None,
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
