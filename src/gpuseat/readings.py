"""What GPUs report and who sits on them: the plain types shared by the samplers, the monitor and the database.

A neutral module (no imports from :mod:`gpuseat.monitor` or :mod:`gpuseat.db`), so that the database
layer stores monitor readings without importing the monitor, and the nvidia-smi adapter
(:mod:`gpuseat.nvsmi`), ``carve`` and ``doctor`` share one snapshot shape.

Values a source cannot give (``[N/A]``, ``[Not Supported]``, a missing field, utilisation of a
MIG instance without GPM) are ``None`` — never ``0`` — so an unknown reading is never mistaken for
an idle or empty device.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

#: Version of the JSON documents gpuseat prints for snapshots, usage and seat states.
SCHEMA_VERSION = 1

#: bytes in a MiB, the unit of every memory reading (and of a GPU's BAR sizes)
MIB = 1 << 20

#: nvidia-smi's process types: ``C`` compute, ``G`` graphics, ``C+G`` both. Graphics-only
#: processes (Xorg, a browser) are listed on a seat but do not make it "in use".
GRAPHICS_ONLY = "G"


def frozen_factory(cls: type[T]) -> Callable[..., T]:
    """A positional constructor (every field, in order) of the frozen, slotted dataclass ``cls``.

    About twice as fast as the generated ``__init__``, which sets each field through
    ``object.__setattr__``: this sets the slots through their descriptors and runs no
    ``__post_init__``. For the monitor's tick, which makes thousands of these; the result is an
    ordinary, equal, still-frozen instance. Like :mod:`dataclasses`, it compiles the constructor
    from source, so the loop over fields is unrolled; the source holds only the field names.
    """
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    if not all(n.isidentifier() and not n.startswith("_") for n in names):
        raise TypeError(f"{cls.__name__}: field names must be plain identifiers")
    scope: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    scope.update({f"_set_{n}": getattr(cls, n).__set__ for n in names})
    lines = [f"def make({', '.join(names)}):", "    obj = _new(_cls)"]
    lines += [f"    _set_{n}(obj, {n})" for n in names]
    lines.append("    return obj")
    exec("\n".join(lines), scope)  # the source holds only the identifiers checked above
    make: Callable[..., T] = scope["make"]
    make.__qualname__ = f"frozen_factory({cls.__name__})"
    return make


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One MIG device (GPU instance + compute instance) of a GPU."""

    uuid: str | None
    profile: str | None
    gpu_instance_id: int | None
    compute_instance_id: int | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    utilization_gpu: float | None = None  # GPM only (Hopper+); None elsewhere
    memory_free_mib: float | None = None
    multiprocessors: int | None = None  # SM count, when the source gives it
    device_index: int | None = None  # "Device N" of nvidia-smi -L
    copy_engines: int | None = None  # copy engines of its GPU instance (-q), which tell compute slices apart
    profile_inferred: bool = False  # True when the profile was inferred (memory + profile table), not read


@dataclass(frozen=True, slots=True)
class Gpu:
    """One physical GPU; ``healthy`` is False when its driver queries failed this tick."""

    index: int
    uuid: str
    name: str | None
    pci_bus_id: str | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    utilization_gpu: float | None = None  # percent
    temperature_c: float | None = None
    power_w: float | None = None
    mig_enabled: bool | None = None
    mig: tuple[MigInstance, ...] = ()
    healthy: bool = True
    error: str | None = None
    memory_free_mib: float | None = None  # as reported: total − used − reserved
    clock_sm_mhz: float | None = None
    bar1_total_mib: float | None = None  # PCI BAR1 size (-q -x), for passthrough MMIO sizing
    # Health (issue 26): None = not reported by this source/GPU, never 0.
    driver_version: str | None = None
    clock_mem_mhz: float | None = None
    fan_percent: float | None = None
    power_limit_w: float | None = None
    clocks_event_reasons: int | None = None  # NVML bitmask (0x1 idle, 0x4 SW power cap, 0x40 HW thermal, …)
    ecc_sbe_volatile: int | None = None  # corrected (single-bit) ECC errors since the driver loaded
    ecc_dbe_volatile: int | None = None  # uncorrected (double-bit) ECC errors since the driver loaded
    ecc_sbe_aggregate: int | None = None  # corrected, lifetime
    ecc_dbe_aggregate: int | None = None  # uncorrected, lifetime
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    xid_last: int | None = None  # the latest Xid error seen for this GPU (NVML event or kernel log)
    xid_count: int | None = None  # Xid errors seen since the monitor (or the log) started


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process holding a context on a GPU (host pid, as the driver reports it)."""

    pid: int
    gpu_uuid: str
    mig_uuid: str | None = None
    gpu_instance_id: int | None = None
    used_memory_mib: float | None = None
    name: str | None = None
    kind: str | None = None  # "C", "G", "C+G"; None = a compute list (NVML, --query-compute-apps)
    user: str | None = None  # when the source knows it (a remote ps); else looked up locally

    @property
    def compute(self) -> bool:
        """False only for graphics-only processes (type ``G``)."""
        return self.kind != GRAPHICS_ONLY


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one sampler saw at ``taken_at`` (Unix seconds) on ``host``.

    ``local`` is True when the pids are this machine's (NVML, nvidia-smi run here), so their users
    may be read from this machine's ``/proc``; False for remote hosts and replayed captures.
    """

    host: str
    taken_at: float
    gpus: tuple[Gpu, ...]
    processes: tuple[GpuProcess, ...] = ()
    local: bool = False

    def gpu(self, uuid: str) -> Gpu | None:
        """The GPU with this UUID, or None."""
        return next((g for g in self.gpus if g.uuid == uuid), None)

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-ready (the replay file format, one per line)."""
        return snapshot_to_dict(self)


@dataclass(frozen=True, slots=True)
class Leaf:
    """A device a seat can own: a MIG instance, or a whole GPU when MIG is off."""

    uuid: str | None
    gpu: Gpu
    mig: MigInstance | None = None
    label: str = field(default="")

    @property
    def memory_used_mib(self) -> float | None:
        """Used memory of this leaf (MiB)."""
        return self.mig.memory_used_mib if self.mig else self.gpu.memory_used_mib

    @property
    def memory_total_mib(self) -> float | None:
        """Total memory of this leaf (MiB)."""
        return self.mig.memory_total_mib if self.mig else self.gpu.memory_total_mib

    @property
    def memory_free_mib(self) -> float | None:
        """Free memory as the driver reports it (reserved memory is neither used nor free)."""
        return self.mig.memory_free_mib if self.mig else self.gpu.memory_free_mib

    @property
    def utilization_gpu(self) -> float | None:
        """Utilisation of this leaf; unknown (None) for MIG without GPM."""
        return self.mig.utilization_gpu if self.mig else self.gpu.utilization_gpu


def mig_key(gpu: Gpu, mig: MigInstance) -> str:
    """A stable id for a MIG device: its UUID, else ``<GPU UUID>/gi<N>`` (older XML has no MIG UUID)."""
    if mig.uuid:
        return mig.uuid
    if mig.gpu_instance_id is not None:
        ci = f"/ci{mig.compute_instance_id}" if mig.compute_instance_id not in (None, 0) else ""
        return f"{gpu.uuid}/gi{mig.gpu_instance_id}{ci}"
    return f"{gpu.uuid}/dev{mig.device_index if mig.device_index is not None else '?'}"


def leaves(snapshot: Snapshot) -> list[Leaf]:
    """The seat-sized devices: every MIG instance, and every GPU that has none."""
    out: list[Leaf] = []
    append, make = out.append, _new_leaf
    for gpu in snapshot.gpus:
        if gpu.mig:
            for m in gpu.mig:
                where = m.gpu_instance_id if m.gpu_instance_id is not None else f"dev{m.device_index}"
                append(make(m.uuid or mig_key(gpu, m), gpu, m, f"{gpu.index}/{where}"))
        else:
            append(make(gpu.uuid, gpu, None, str(gpu.index)))
    return out


_new_leaf: Callable[[str | None, Gpu, MigInstance | None, str], Leaf] = frozen_factory(Leaf)


def snapshot_to_dict(snapshot: Snapshot) -> dict[str, Any]:
    """A JSON-ready dict with every field (the replay file format, one per line)."""
    return asdict(snapshot)


def _fields(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = cls.__dataclass_fields__  # type: ignore[attr-defined]
    unknown = set(data) - set(names)
    if unknown:
        raise TypeError(f"unknown field(s) {', '.join(sorted(unknown))} in {cls.__name__}")
    return data


def snapshot_from_dict(data: dict[str, Any]) -> Snapshot:
    """Inverse of :func:`snapshot_to_dict`; raises KeyError/TypeError/ValueError on a malformed record."""
    gpus = tuple(
        Gpu(**_fields(Gpu, {**g, "mig": tuple(MigInstance(**_fields(MigInstance, m)) for m in g.get("mig", ()))}))
        for g in data["gpus"]
    )
    procs = tuple(GpuProcess(**_fields(GpuProcess, p)) for p in data.get("processes", ()))
    return Snapshot(
        host=str(data["host"]),
        taken_at=float(data["taken_at"]),
        gpus=gpus,
        processes=procs,
        local=bool(data.get("local", False)),
    )


# -- seats ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SeatEntry:
    """One seat: the device it owns and the participant (and Unix login) it is assigned to."""

    seat: str
    device_uuid: str
    participant: str | None = None
    user: str | None = None  # the roster's Unix login, if it names one
    host: str | None = None
    profile: str | None = None
    seat_id: int | None = None  # the store's row ids, when the map came from the course store
    participant_id: int | None = None
    course: str | None = None  # the course's key, when the map came from the course store

    @property
    def login(self) -> str | None:
        """The Unix user expected on this seat: the participant's one login name
        (:func:`gpuseat.core.delivery.login_name`, the account every engine makes), else the given user."""
        from gpuseat.core.delivery import login_name

        return login_name(self.participant, self.user) if self.participant else self.user


class SeatMap:
    """Seats by device UUID; ``allowed_users`` (e.g. ``root`` for Xorg) are never foreign."""

    def __init__(self, entries: Iterable[SeatEntry] = (), *, allowed_users: Iterable[str] = ()) -> None:
        self.entries = tuple(entries)
        self.by_device = {e.device_uuid: e for e in self.entries}
        self.allowed_users = frozenset(allowed_users)
        #: device UUID → (seat, participant, expected login): what attribution needs per process,
        #: computed once per seat map rather than once per process and tick.
        self.owners: dict[str, tuple[str, str | None, str | None]] = {
            uuid: (e.seat, e.participant, e.login) for uuid, e in self.by_device.items()
        }

    def lookup(self, gpu_uuid: str, mig_uuid: str | None) -> SeatEntry | None:
        """The seat of a device: the MIG instance's seat first, else the whole GPU's."""
        if mig_uuid is not None and (entry := self.by_device.get(mig_uuid)) is not None:
            return entry
        return self.by_device.get(gpu_uuid)


@dataclass(frozen=True, slots=True)
class Attributed:
    """A process with who runs it and whose seat it sits on; ``foreign`` = not the seat's owner."""

    process: GpuProcess
    user: str | None
    seat: str | None
    participant: str | None
    foreign: bool = False


@dataclass(frozen=True, slots=True)
class LeafReading:
    """One reading of a seat-sized device (a leaf: a MIG instance, or a GPU without MIG): its seat (if any),
    its processes and whether it is in use (not a seat's state in the store: that is core.seating.SeatState).

    ``active``: a compute process holds it, or its utilisation is known and above zero. Graphics-only
    processes (type ``G``: Xorg, a browser) are listed but do not count, as NVML's compute-process
    list (the other sampler) does not hold them either. Computed once, when the state is made.
    """

    leaf: Leaf
    entry: SeatEntry | None
    processes: tuple[Attributed, ...]
    active: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "active", _busy(self.leaf, self.processes))


def _busy(leaf: Leaf, processes: tuple[Attributed, ...]) -> bool:
    """:attr:`LeafReading.active`: a compute process holds the leaf, or its known utilisation is above zero."""
    for a in processes:
        if a.process.kind != GRAPHICS_ONLY:
            return True
    util = leaf.mig.utilization_gpu if leaf.mig else leaf.gpu.utilization_gpu
    return util is not None and util > 0


def new_leaf_reading(leaf: Leaf, entry: SeatEntry | None, processes: tuple[Attributed, ...]) -> LeafReading:
    """``LeafReading(leaf, entry, processes)``, made by :func:`frozen_factory` (one per leaf and tick)."""
    return _new_leaf_reading(leaf, entry, processes, _busy(leaf, processes))


_new_leaf_reading: Callable[[Leaf, SeatEntry | None, tuple[Attributed, ...], bool], LeafReading] = frozen_factory(
    LeafReading
)


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert event; ``raised`` False means the condition has cleared."""

    kind: str
    key: str
    message: str
    at: float
    raised: bool = True
    seat: str | None = None
    participant: str | None = None


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One device-minute from ``minute_aggregates`` with the names it was attributed to."""

    minute: int  # Unix seconds // 60
    device_uuid: str
    seat: str | None
    participant: str | None
    samples: int
    active_samples: int
    memory_max_mib: int | None


class SampleStore(Protocol):
    """Where the monitor writes (the course database implements it); the monitor knows only this."""

    def write(self, host: str, taken_at: float, states: Iterable[LeafReading]) -> None:
        """Store one sample per seat-sized device."""
        ...

    def record_alert(self, alert: Alert) -> None:
        """Store a raised or cleared alert."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...
