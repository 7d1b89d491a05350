"""Prometheus exposition of the seats, with dcgm-exporter's metric names and labels (or gpuseat's own).

``names="dcgm"`` (the default) uses dcgm-exporter's names and units where an equivalent exists, so
NVIDIA's Grafana dashboard for dcgm-exporter works unchanged: ``DCGM_FI_DEV_GPU_UTIL`` (%),
``DCGM_FI_DEV_FB_USED``/``_FREE`` (MiB), ``DCGM_FI_DEV_POWER_USAGE`` (W), ``DCGM_FI_DEV_GPU_TEMP`` (°C),
``DCGM_FI_DEV_SM_CLOCK`` (MHz), with labels ``gpu``, ``UUID``, ``pci_bus_id``, ``device``,
``modelName``, ``Hostname`` and ``hostname`` (dcgm-exporter renamed it in its newest release),
``GPU_I_ID``, ``GPU_I_PROFILE``, ``DCGM_FI_DRIVER_VERSION`` (dcgm-exporter's driver label) — plus
gpuseat's ``seat``, ``participant`` and ``mig_uuid`` (which keeps two MIG devices of the same profile
apart when the source gives no GPU-instance id). ``names="gpuseat"`` uses ``gpuseat_*`` names and lowercase
labels. The names and help texts are the table metrics.csv beside this module; docs/monitor.md explains them.

GPU health (issue 26): ``DCGM_FI_DEV_XID_ERRORS`` (last Xid), ``DCGM_FI_DEV_ECC_{SBE,DBE}_{VOL,AGG}_TOTAL``,
``DCGM_FI_DEV_RETIRED_{SBE,DBE,PENDING}``, remapped rows, ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`` (NVML bitmask),
``DCGM_FI_DEV_POWER_MGMT_LIMIT`` (W), ``DCGM_FI_DEV_MEM_CLOCK`` (MHz), ``DCGM_FI_DEV_FAN_SPEED`` (%).

Per-GPU readings (power, temperature, clocks, health, and the whole GPU's memory) carry the GPU's labels
with empty ``GPU_I_ID``; per-device readings carry the MIG device's. Unknown readings are left out,
never exported as 0.
"""

from __future__ import annotations

import csv
import errno
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuseat.errors import InputError
from gpuseat.readings import Gpu, LeafReading, Snapshot


@dataclass(frozen=True, slots=True)
class Metric:
    """One gauge of ``/metrics``: a row of ``metrics.csv`` (whose header says what each column means)."""

    key: str
    reading: str | None  # the Gpu field exported once per GPU; None = a count made per seat
    dcgm: str | None  # dcgm-exporter's name; None = no dcgm-exporter equivalent
    gpuseat: str
    source: str  # where ``dcgm`` stands in dcgm-exporter's default counters (default, opt-in, dcgm, gpuseat)
    help: str


def _read_metrics() -> tuple[Metric, ...]:
    """The rows of ``metrics.csv``: data (names, help texts) kept as a table beside the code that exports it."""
    text = resources.files("gpuseat.monitor").joinpath("metrics.csv").read_text(encoding="utf-8")
    rows = csv.DictReader((line for line in text.splitlines() if not line.startswith("#")), skipinitialspace=True)
    out = []
    for row in rows:
        c = {k.strip(): v.strip() for k, v in row.items()}
        out.append(Metric(c["key"], c["reading"] or None, c["dcgm"] or None, c["gpuseat"], c["source"], c["help"]))
    return tuple(out)


#: Every gauge, in output order.
METRICS = _read_metrics()
#: (metric key, Gpu field) of the readings exported once per GPU (booleans export as 0/1).
GPU_READINGS = tuple((m.key, m.reading) for m in METRICS if m.reading is not None)

#: Label key → (dcgm-exporter label, gpuseat label).
LABEL_NAMES: dict[str, tuple[str, str]] = {
    "gpu": ("gpu", "gpu"),
    "uuid": ("UUID", "gpu_uuid"),
    "pci": ("pci_bus_id", "pci_bus_id"),
    "device": ("device", "device"),
    "model": ("modelName", "model"),
    "host": ("Hostname", "host"),
    "host_new": ("hostname", ""),
    "gi": ("GPU_I_ID", "gpu_instance_id"),
    "profile": ("GPU_I_PROFILE", "profile"),
    "seat": ("seat", "seat"),
    "participant": ("participant", "participant"),
    "mig_uuid": ("mig_uuid", "mig_uuid"),
    "driver": ("DCGM_FI_DRIVER_VERSION", "driver_version"),
}
NAMINGS = ("dcgm", "gpuseat")


def _label_keys(names: str) -> list[str]:
    return [k for k, v in LABEL_NAMES.items() if v[0 if names == "dcgm" else 1]]


class SeatCollector(Collector):
    """Exports the latest tick; :meth:`update` is called by the monitor loop (thread-safe)."""

    def __init__(self, names: str = "dcgm") -> None:
        if names not in NAMINGS:
            raise InputError(f"unknown metric naming {names!r}", where="--metrics-names", fix="use dcgm or gpuseat")
        self.names = names
        self._lock = threading.Lock()
        self._latest: tuple[Snapshot, Sequence[LeafReading]] | None = None

    def update(self, snapshot: Snapshot, states: Sequence[LeafReading]) -> None:
        """Replace what the next scrape sees."""
        with self._lock:
            self._latest = (snapshot, states)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The metric families of the latest tick."""
        with self._lock:
            latest = self._latest
        keys = _label_keys(self.names)
        col = 0 if self.names == "dcgm" else 1
        labels = [LABEL_NAMES[k][col] for k in keys]
        fams = {}
        for m in METRICS:
            fams[m.key] = GaugeMetricFamily(m.dcgm if col == 0 and m.dcgm else m.gpuseat, m.help, labels=labels)
        if latest is not None:
            _fill(fams, keys, *latest)
        yield from fams.values()


def _add(fam: GaugeMetricFamily, labels: list[str], value: float | None) -> None:
    if value is not None:
        fam.add_metric(labels, float(value))


def _gpu_labels(gpu: Gpu, host: str) -> dict[str, str]:
    return {
        "gpu": str(gpu.index),
        "uuid": gpu.uuid,
        "pci": gpu.pci_bus_id or "",
        "device": f"nvidia{gpu.index}",
        "model": gpu.name or "",
        "host": host,
        "host_new": host,
        "gi": "",
        "profile": "",
        "seat": "",
        "participant": "",
        "mig_uuid": "",
        "driver": gpu.driver_version or "",
    }


def _fill(
    fams: dict[str, GaugeMetricFamily], keys: list[str], snapshot: Snapshot, states: Sequence[LeafReading]
) -> None:
    host = snapshot.host
    whole: dict[str, LeafReading] = {}  # GPU uuid → its whole-GPU seat state (MIG off)
    for s in states:
        gpu, mig = s.leaf.gpu, s.leaf.mig
        lab = _gpu_labels(gpu, host)
        if s.entry is not None:
            lab["seat"], lab["participant"] = s.entry.seat, s.entry.participant or ""
        if mig is not None:
            lab["gi"] = str(mig.gpu_instance_id) if mig.gpu_instance_id is not None else ""
            lab["profile"] = mig.profile or ""
            lab["mig_uuid"] = s.leaf.uuid or ""
        elif not gpu.mig:
            whole[gpu.uuid] = s
        values = [lab[k] for k in keys]
        if mig is not None:
            _add(fams["used"], values, s.leaf.memory_used_mib)
            _add(fams["free"], values, s.leaf.memory_free_mib)
            _add(fams["util"], values, s.leaf.utilization_gpu)
        _add(fams["procs"], values, len(s.processes))
        _add(fams["foreign"], values, sum(1 for a in s.processes if a.foreign))
        _add(fams["active"], values, 1 if s.active else 0)
    for gpu in snapshot.gpus:
        lab = _gpu_labels(gpu, host)
        seated = whole.get(gpu.uuid)
        if seated is not None and seated.entry is not None:
            lab["seat"], lab["participant"] = seated.entry.seat, seated.entry.participant or ""
        values = [lab[k] for k in keys]
        for key, attr in GPU_READINGS:
            value = getattr(gpu, attr)
            _add(fams[key], values, int(value) if isinstance(value, bool) else value)


def make_registry(collector: SeatCollector) -> CollectorRegistry:
    """A registry holding only the seat collector (no process or platform metrics)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def render(snapshot: Snapshot, states: Sequence[LeafReading], *, names: str = "dcgm") -> str:
    """The Prometheus text exposition of one tick."""
    collector = SeatCollector(names)
    collector.update(snapshot, states)
    return generate_latest(make_registry(collector)).decode()


def serve(collector: SeatCollector, host: str, port: int) -> Any:
    """Serve ``/metrics`` on ``host:port`` in a daemon thread; returns the server (``shutdown()``).

    A port in use or an address this machine does not have is an :class:`InputError` naming ``--listen``.
    """
    try:
        server, _thread = start_http_server(port, addr=host, registry=make_registry(collector))
    except OSError as exc:
        why = "is already in use" if exc.errno == errno.EADDRINUSE else f"cannot be used: {exc.strerror or exc}"
        raise InputError(
            f"{host}:{port} {why}", where="--listen", fix="choose a free port, e.g. --listen 127.0.0.1:9400"
        ) from None
    return server
