"""Prometheus exposition of the seats, with dcgm-exporter's metric names and labels (or gpuseat's own).

``names="dcgm"`` (the default) uses dcgm-exporter's names and units where an equivalent exists, so
NVIDIA's Grafana dashboard for dcgm-exporter works unchanged: ``DCGM_FI_DEV_GPU_UTIL`` (%),
``DCGM_FI_DEV_FB_USED``/``_FREE`` (MiB), ``DCGM_FI_DEV_POWER_USAGE`` (W), ``DCGM_FI_DEV_GPU_TEMP`` (°C),
``DCGM_FI_DEV_SM_CLOCK`` (MHz), with labels ``gpu``, ``UUID``, ``pci_bus_id``, ``device``,
``modelName``, ``Hostname`` and ``hostname`` (dcgm-exporter renamed it in its newest release),
``GPU_I_ID``, ``GPU_I_PROFILE``, ``DCGM_FI_DRIVER_VERSION`` (dcgm-exporter's driver label) — plus
gpuseat's ``seat``, ``participant`` and ``mig_uuid`` (which keeps two MIG devices of the same profile
apart when the source gives no GPU-instance id). ``names="gpuseat"`` uses ``gpuseat_*`` names and lowercase
labels. The full mapping is a table in docs/monitor.md.

GPU health (issue 26): ``DCGM_FI_DEV_XID_ERRORS`` (last Xid), ``DCGM_FI_DEV_ECC_{SBE,DBE}_{VOL,AGG}_TOTAL``,
``DCGM_FI_DEV_RETIRED_{SBE,DBE,PENDING}``, remapped rows, ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`` (NVML bitmask),
``DCGM_FI_DEV_POWER_MGMT_LIMIT`` (W), ``DCGM_FI_DEV_MEM_CLOCK`` (MHz), ``DCGM_FI_DEV_FAN_SPEED`` (%).

Per-GPU readings (power, temperature, clocks, health, and the whole GPU's memory) carry the GPU's labels
with empty ``GPU_I_ID``; per-device readings carry the MIG device's. Unknown readings are left out,
never exported as 0.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuseat.errors import InputError
from gpuseat.readings import Gpu, SeatState, Snapshot

#: Metric key → (dcgm-exporter name, gpuseat name, help). ``None`` = no dcgm-exporter equivalent.
METRICS: dict[str, tuple[str | None, str, str]] = {
    "util": ("DCGM_FI_DEV_GPU_UTIL", "gpuseat_gpu_utilization_percent", "GPU utilization (in %)."),
    "used": ("DCGM_FI_DEV_FB_USED", "gpuseat_memory_used_mib", "Framebuffer memory used (in MiB)."),
    "free": ("DCGM_FI_DEV_FB_FREE", "gpuseat_memory_free_mib", "Framebuffer memory free (in MiB)."),
    "power": ("DCGM_FI_DEV_POWER_USAGE", "gpuseat_power_watts", "Power draw (in W)."),
    "temp": ("DCGM_FI_DEV_GPU_TEMP", "gpuseat_temperature_celsius", "GPU temperature (in C)."),
    "sm_clock": ("DCGM_FI_DEV_SM_CLOCK", "gpuseat_sm_clock_mhz", "SM clock frequency (in MHz)."),
    "procs": (None, "gpuseat_seat_processes", "Processes on the seat's device."),
    "foreign": (None, "gpuseat_seat_foreign_processes", "Processes of other users on the seat."),
    "active": (None, "gpuseat_seat_active", "1 if a compute process holds the device or it is busy."),
    "healthy": (None, "gpuseat_gpu_healthy", "1 if the driver answered for the GPU."),
    # GPU health (issue 26): dcgm-exporter's field names and units where it has one.
    "mem_clock": ("DCGM_FI_DEV_MEM_CLOCK", "gpuseat_memory_clock_mhz", "Memory clock frequency (in MHz)."),
    "fan": ("DCGM_FI_DEV_FAN_SPEED", "gpuseat_fan_speed_percent", "Fan speed (in %)."),
    "power_limit": ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "gpuseat_power_limit_watts", "Power management limit (in W)."),
    "throttle": (
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "gpuseat_clocks_event_reasons",
        "Current clock throttle (clocks-event) reasons, NVML bitmask.",
    ),
    "xid": ("DCGM_FI_DEV_XID_ERRORS", "gpuseat_xid_last", "Value of the last XID error encountered."),
    "xid_count": (None, "gpuseat_xid_errors", "XID errors seen since the monitor (or the kernel log) started."),
    "ecc_sbe_vol": (
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "gpuseat_ecc_corrected_volatile",
        "Total single-bit volatile ECC errors.",
    ),
    "ecc_dbe_vol": (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "gpuseat_ecc_uncorrected_volatile",
        "Total double-bit volatile ECC errors.",
    ),
    "ecc_sbe_agg": (
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "gpuseat_ecc_corrected_aggregate",
        "Total single-bit persistent ECC errors.",
    ),
    "ecc_dbe_agg": (
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "gpuseat_ecc_uncorrected_aggregate",
        "Total double-bit persistent ECC errors.",
    ),
    "retired_sbe": ("DCGM_FI_DEV_RETIRED_SBE", "gpuseat_retired_pages_sbe", "Total retired pages (single-bit errors)."),
    "retired_dbe": ("DCGM_FI_DEV_RETIRED_DBE", "gpuseat_retired_pages_dbe", "Total retired pages (double-bit errors)."),
    "retired_pending": (
        "DCGM_FI_DEV_RETIRED_PENDING",
        "gpuseat_retired_pages_pending",
        "1 if a page retirement is pending.",
    ),
    "remap_corr": (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "gpuseat_remapped_rows_correctable",
        "Number of remapped rows for correctable errors.",
    ),
    "remap_unc": (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "gpuseat_remapped_rows_uncorrectable",
        "Number of remapped rows for uncorrectable errors.",
    ),
    "remap_pending": ("DCGM_FI_DEV_ROW_REMAP_PENDING", "gpuseat_row_remap_pending", "1 if a row remap is pending."),
    "remap_fail": ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gpuseat_row_remap_failure", "1 if a row remapping failed."),
}

#: Gpu field → metric key, for the per-GPU health readings (booleans export as 0/1).
HEALTH_FIELDS = {
    "clock_mem_mhz": "mem_clock",
    "fan_percent": "fan",
    "power_limit_w": "power_limit",
    "clocks_event_reasons": "throttle",
    "xid_last": "xid",
    "xid_count": "xid_count",
    "ecc_sbe_volatile": "ecc_sbe_vol",
    "ecc_dbe_volatile": "ecc_dbe_vol",
    "ecc_sbe_aggregate": "ecc_sbe_agg",
    "ecc_dbe_aggregate": "ecc_dbe_agg",
    "retired_pages_sbe": "retired_sbe",
    "retired_pages_dbe": "retired_dbe",
    "retired_pages_pending": "retired_pending",
    "remapped_rows_correctable": "remap_corr",
    "remapped_rows_uncorrectable": "remap_unc",
    "remapped_rows_pending": "remap_pending",
    "remapped_rows_failure": "remap_fail",
}

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
LABELS = tuple(v[0] for v in LABEL_NAMES.values())  # the dcgm label set, in order


def _label_keys(names: str) -> list[str]:
    return [k for k, v in LABEL_NAMES.items() if v[0 if names == "dcgm" else 1]]


class SeatCollector(Collector):
    """Exports the latest tick; :meth:`update` is called by the monitor loop (thread-safe)."""

    def __init__(self, names: str = "dcgm") -> None:
        if names not in NAMINGS:
            raise InputError(f"unknown metric naming {names!r}", where="--metrics-names", fix="use dcgm or gpuseat")
        self.names = names
        self._lock = threading.Lock()
        self._latest: tuple[Snapshot, Sequence[SeatState]] | None = None

    def update(self, snapshot: Snapshot, states: Sequence[SeatState]) -> None:
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
        for key, (dcgm, own, text) in METRICS.items():
            fams[key] = GaugeMetricFamily(dcgm if col == 0 and dcgm else own, text, labels=labels)
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


def _fill(fams: dict[str, GaugeMetricFamily], keys: list[str], snapshot: Snapshot, states: Sequence[SeatState]) -> None:
    host = snapshot.host
    whole: dict[str, SeatState] = {}  # GPU uuid → its whole-GPU seat state (MIG off)
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
        _add(fams["used"], values, gpu.memory_used_mib)
        _add(fams["free"], values, gpu.memory_free_mib)
        _add(fams["util"], values, gpu.utilization_gpu)
        _add(fams["power"], values, gpu.power_w)
        _add(fams["temp"], values, gpu.temperature_c)
        _add(fams["sm_clock"], values, gpu.clock_sm_mhz)
        _add(fams["healthy"], values, 1 if gpu.healthy else 0)
        for attr, key in HEALTH_FIELDS.items():
            value = getattr(gpu, attr)
            _add(fams[key], values, int(value) if isinstance(value, bool) else value)


def make_registry(collector: SeatCollector) -> CollectorRegistry:
    """A registry holding only the seat collector (no process or platform metrics)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def render(snapshot: Snapshot, states: Sequence[SeatState], *, names: str = "dcgm") -> str:
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
