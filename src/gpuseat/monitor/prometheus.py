"""Prometheus exposition with dcgm-exporter's metric names, units and labels, plus seat labels.

Names and units as in dcgm-exporter's default counters: ``DCGM_FI_DEV_GPU_UTIL`` (%),
``DCGM_FI_DEV_FB_USED``/``_FREE`` (MiB), ``DCGM_FI_DEV_POWER_USAGE`` (W), ``DCGM_FI_DEV_GPU_TEMP``
(°C); labels ``gpu``, ``UUID``, ``modelName``, ``Hostname``, ``GPU_I_ID``, ``GPU_I_PROFILE`` (empty
for a whole GPU) and gpuseat's ``seat`` and ``participant``, so existing Grafana dashboards work.
Unknown readings are left out, never exported as 0.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuseat.monitor.attribution import SeatState
from gpuseat.monitor.model import Snapshot

LABELS = ("gpu", "UUID", "modelName", "Hostname", "GPU_I_ID", "GPU_I_PROFILE", "seat", "participant")


class SeatCollector(Collector):
    """Exports the latest tick; :meth:`update` is called by the monitor loop (thread-safe)."""

    def __init__(self) -> None:
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
        fams = {
            "util": GaugeMetricFamily("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", labels=LABELS),
            "used": GaugeMetricFamily(
                "DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", labels=LABELS
            ),
            "free": GaugeMetricFamily(
                "DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", labels=LABELS
            ),
            "power": GaugeMetricFamily("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", labels=LABELS),
            "temp": GaugeMetricFamily("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", labels=LABELS),
            "procs": GaugeMetricFamily(
                "gpuseat_seat_processes", "Processes on the seat's device.", labels=LABELS
            ),
            "foreign": GaugeMetricFamily(
                "gpuseat_seat_foreign_processes", "Processes of other users on the seat.", labels=LABELS
            ),
            "healthy": GaugeMetricFamily(
                "gpuseat_gpu_healthy", "1 if NVML answered for the GPU.", labels=LABELS
            ),
        }
        if latest is not None:
            _fill(fams, *latest)
        yield from fams.values()


def _add(fam: GaugeMetricFamily, labels: list[str], value: float | None) -> None:
    if value is not None:
        fam.add_metric(labels, float(value))


def _fill(fams: dict[str, GaugeMetricFamily], snapshot: Snapshot, states: Sequence[SeatState]) -> None:
    host = snapshot.host
    done_gpus: set[str] = set()
    for s in states:
        gpu, mig = s.leaf.gpu, s.leaf.mig
        labels = [
            str(gpu.index),
            gpu.uuid,
            gpu.name or "",
            host,
            str(mig.gpu_instance_id) if mig and mig.gpu_instance_id is not None else "",
            (mig.profile or "") if mig else "",
            s.entry.seat if s.entry else "",
            (s.entry.participant or "") if s.entry else "",
        ]
        used, total = s.leaf.memory_used_mib, s.leaf.memory_total_mib
        _add(fams["used"], labels, used)
        _add(fams["free"], labels, total - used if used is not None and total is not None else None)
        _add(fams["util"], labels, s.leaf.utilization_gpu)
        _add(fams["procs"], labels, len(s.processes))
        _add(fams["foreign"], labels, sum(1 for a in s.processes if a.foreign))
        if gpu.uuid not in done_gpus:  # per-GPU readings once, on the GPU's first leaf labels
            done_gpus.add(gpu.uuid)
            gpu_labels = [*labels[:4], "", "", *(labels[6:] if mig is None else ["", ""])]
            _add(fams["power"], gpu_labels, gpu.power_w)
            _add(fams["temp"], gpu_labels, gpu.temperature_c)
    for gpu in snapshot.gpus:
        _add(
            fams["healthy"],
            [str(gpu.index), gpu.uuid, gpu.name or "", host, "", "", "", ""],
            1 if gpu.healthy else 0,
        )


def make_registry(collector: SeatCollector) -> CollectorRegistry:
    """A registry holding only the seat collector (no process or platform metrics)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def render(snapshot: Snapshot, states: Sequence[SeatState]) -> str:
    """The Prometheus text exposition of one tick."""
    collector = SeatCollector()
    collector.update(snapshot, states)
    return generate_latest(make_registry(collector)).decode()


def serve(collector: SeatCollector, host: str, port: int) -> Any:
    """Serve ``/metrics`` on ``host:port`` in a daemon thread; returns the server (``shutdown()``)."""
    server, _thread = start_http_server(port, addr=host, registry=make_registry(collector))
    return server
