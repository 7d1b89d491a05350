"""The NVML sampler: the only module in gpuseat that imports ``pynvml`` (package ``nvidia-ml-py``).

``pynvml`` is imported lazily in :class:`NvmlSampler`, so nothing else pays for it. Reads that the
driver does not support (``NVMLError_NotSupported``, ``NoPermission``, ``NotFound``) become ``None``;
any other NVML error on one GPU marks that GPU unhealthy and the other GPUs are still sampled.

Command-line equivalents, for checking a figure by hand::

    nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,memory.used,memory.total,utilization.gpu,\
temperature.gpu,power.draw,mig.mode.current --format=csv
    nvidia-smi -L                                   # MIG profiles and UUIDs
    nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv
    nvidia-smi --query-gpu=clocks.mem,fan.speed,enforced.power.limit,clocks_event_reasons.active,\
ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total,retired_pages.pending,\
remapped_rows.correctable,remapped_rows.uncorrectable --format=csv      # health (issue 26)

Xid errors come from NVML's event API (``nvmlEventTypeXidCriticalError``, registered on every GPU when
the sampler starts and drained without waiting on each sample): the last Xid and how many were seen.
Health reads never make a GPU unhealthy: any NVML error there is an unknown (None).
"""

from __future__ import annotations

import contextlib
import re
import socket
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from gpuseat.errors import EngineError
from gpuseat.readings import MIB, Gpu, GpuProcess, MigInstance, Snapshot

_MIG_PROFILE = re.compile(r"MIG (\d+g\.\d+gb(?:\+\w+)?)", re.IGNORECASE)
_UINT_MAX = 0xFFFFFFFF


def _load_pynvml() -> ModuleType:
    import pynvml

    module: ModuleType = pynvml  # pynvml has no type information (Any to mypy)
    return module


class NvmlSampler:
    """Samples every GPU (and its MIG instances and processes) through NVML.

    ``nvml`` is the ``pynvml`` module itself; a simulated machine with the same functions can be
    passed for tests, as go-nvml's ``dgxa100`` mock is used in NVIDIA's own tools.
    """

    def __init__(self, *, host: str | None = None, nvml: ModuleType | Any | None = None) -> None:
        self.nvml = nvml if nvml is not None else _load_pynvml()
        self.host = host or socket.gethostname()
        self._gpm_prev: dict[tuple[str, int], Any] = {}
        self._events: Any = None  # the NVML event set for Xid errors (None: not supported here)
        self._xid: dict[str, tuple[int, int]] = {}  # GPU uuid → (last Xid, count)
        self._driver: str | None = None
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as exc:
            raise EngineError(
                f"NVML could not start: {exc}",
                fix=(
                    "install the NVIDIA driver (it provides libnvidia-ml.so.1); on a host without one use "
                    "--from-xml, --from-csv, --ssh HOST or --replay"
                ),
            ) from None

    # The one gate for optional reads: unsupported → None, real failures propagate.
    def _query(self, fn: Callable[..., Any], *args: Any) -> Any:
        nvml = self.nvml
        try:
            return fn(*args)
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_NoPermission, nvml.NVMLError_NotFound):
            return None
        except nvml.NVMLError_FunctionNotFound:
            return None

    def _optional(self, fn: Callable[..., Any] | None, *args: Any) -> Any:
        """A health read: any NVML error (or a function this binding lacks) is None, never a failure."""
        if fn is None:
            return None
        try:
            return fn(*args)
        except self.nvml.NVMLError:
            return None

    def _start_events(self) -> None:
        """Register Xid events on every GPU (once); drivers or bindings without the event API are skipped."""
        nvml = self.nvml
        create = getattr(nvml, "nvmlEventSetCreate", None)
        kind = getattr(nvml, "nvmlEventTypeXidCriticalError", None)
        events = self._optional(create) if kind is not None else None
        if events is None:
            self._events = False
            return
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = self._optional(nvml.nvmlDeviceGetHandleByIndex, index)
            if handle is not None:
                self._optional(getattr(nvml, "nvmlDeviceRegisterEvents", None), handle, kind, events)
        self._events = events

    def _drain_events(self) -> None:
        """Read every pending Xid event without waiting (timeout 0)."""
        nvml = self.nvml
        if self._events is None:
            self._start_events()
        if not self._events:
            return
        wait = getattr(nvml, "nvmlEventSetWait_v2", None) or getattr(nvml, "nvmlEventSetWait", None)
        for _ in range(10_000):
            data = self._optional(wait, self._events, 0)
            if data is None:
                return
            uuid = self._optional(nvml.nvmlDeviceGetUUID, data.device)
            if uuid is not None:
                _last, count = self._xid.get(uuid, (0, 0))
                self._xid[uuid] = (int(data.eventData), count + 1)

    def _health(self, uuid: str, handle: Any) -> dict[str, Any]:
        """Health fields of one GPU (memory clock, fan, power limit, throttle reasons, ECC, pages, rows, Xid)."""
        nvml, q = self.nvml, self._optional
        if self._driver is None:
            driver = q(getattr(nvml, "nvmlSystemGetDriverVersion", None))
            self._driver = driver.decode() if isinstance(driver, bytes) else (driver or "")
        limit = q(getattr(nvml, "nvmlDeviceGetEnforcedPowerLimit", None), handle)
        reasons = q(
            getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None),
            handle,
        )
        ecc = getattr(nvml, "nvmlDeviceGetTotalEccErrors", None)
        corrected = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)
        uncorrected = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
        volatile = getattr(nvml, "NVML_VOLATILE_ECC", 0)
        aggregate = getattr(nvml, "NVML_AGGREGATE_ECC", 1)
        pages = getattr(nvml, "nvmlDeviceGetRetiredPages", None)
        sbe = q(pages, handle, getattr(nvml, "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0))
        dbe = q(pages, handle, getattr(nvml, "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1))
        pending = q(getattr(nvml, "nvmlDeviceGetRetiredPagesPendingStatus", None), handle)
        rows = q(getattr(nvml, "nvmlDeviceGetRemappedRows", None), handle)  # (corr, unc, pending, failure)
        fan = q(getattr(nvml, "nvmlDeviceGetFanSpeed", None), handle)
        mem_clock = q(getattr(nvml, "nvmlDeviceGetClockInfo", None), handle, getattr(nvml, "NVML_CLOCK_MEM", 2))
        last, count = self._xid.get(uuid, (None, None))
        return {
            "driver_version": self._driver or None,
            "clock_mem_mhz": float(mem_clock) if mem_clock is not None else None,
            "fan_percent": float(fan) if fan is not None else None,
            "power_limit_w": limit / 1000.0 if limit is not None else None,
            "clocks_event_reasons": int(reasons) if reasons is not None else None,
            "ecc_sbe_volatile": q(ecc, handle, corrected, volatile),
            "ecc_dbe_volatile": q(ecc, handle, uncorrected, volatile),
            "ecc_sbe_aggregate": q(ecc, handle, corrected, aggregate),
            "ecc_dbe_aggregate": q(ecc, handle, uncorrected, aggregate),
            "retired_pages_sbe": len(sbe) if sbe is not None else None,
            "retired_pages_dbe": len(dbe) if dbe is not None else None,
            "retired_pages_pending": bool(pending) if pending is not None else None,
            "remapped_rows_correctable": int(rows[0]) if rows else None,
            "remapped_rows_uncorrectable": int(rows[1]) if rows else None,
            "remapped_rows_pending": bool(rows[2]) if rows else None,
            "remapped_rows_failure": bool(rows[3]) if rows else None,
            "xid_last": last,
            "xid_count": count,
        }

    def sample(self) -> Snapshot:
        """One snapshot of all GPUs; a GPU whose queries fail is reported unhealthy, not dropped."""
        nvml = self.nvml
        self._drain_events()
        gpus: list[Gpu] = []
        procs: list[GpuProcess] = []
        for index in range(nvml.nvmlDeviceGetCount()):
            uuid = f"unknown-gpu-{index}"
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = nvml.nvmlDeviceGetUUID(handle)
                gpu, gpu_procs = self._gpu(index, uuid, handle)
            except nvml.NVMLError as exc:
                gpus.append(Gpu(index=index, uuid=uuid, name=None, healthy=False, error=str(exc)))
                continue
            gpus.append(gpu)
            procs.extend(gpu_procs)
        return Snapshot(self.host, time.time(), tuple(gpus), tuple(procs), local=True)

    def _gpu(self, index: int, uuid: str, handle: Any) -> tuple[Gpu, list[GpuProcess]]:
        nvml = self.nvml
        mem = nvml.nvmlDeviceGetMemoryInfo(handle)
        mig_mode = self._query(nvml.nvmlDeviceGetMigMode, handle)
        mig_enabled = None if mig_mode is None else mig_mode[0] == nvml.NVML_DEVICE_MIG_ENABLE
        migs: list[tuple[MigInstance, Any]] = self._migs(uuid, handle) if mig_enabled else []
        util = None if mig_enabled else self._query(nvml.nvmlDeviceGetUtilizationRates, handle)
        power_mw = self._query(nvml.nvmlDeviceGetPowerUsage, handle)
        pci = self._query(nvml.nvmlDeviceGetPciInfo, handle)
        gpu = Gpu(
            index=index,
            uuid=uuid,
            name=self._query(nvml.nvmlDeviceGetName, handle),
            pci_bus_id=_str(pci.busId) if pci is not None else None,
            memory_used_mib=mem.used / MIB,
            memory_total_mib=mem.total / MIB,
            memory_free_mib=mem.free / MIB,
            utilization_gpu=float(util.gpu) if util is not None else None,
            temperature_c=self._query(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU),
            power_w=power_mw / 1000.0 if power_mw is not None else None,
            mig_enabled=mig_enabled,
            mig=tuple(m for m, _ in migs),
            **self._health(uuid, handle),
        )
        targets = [(mh, m) for m, mh in migs] if migs else [(handle, None)]
        seen: set[int] = set()
        procs = []
        for target, mig in targets:
            for p in self._query(nvml.nvmlDeviceGetComputeRunningProcesses, target) or ():
                if p.pid in seen:
                    continue
                seen.add(p.pid)
                gi = getattr(p, "gpuInstanceId", _UINT_MAX)
                used = getattr(p, "usedGpuMemory", None)
                procs.append(
                    GpuProcess(
                        pid=int(p.pid),
                        gpu_uuid=uuid,
                        mig_uuid=mig.uuid if mig else None,
                        gpu_instance_id=None if gi in (None, _UINT_MAX) else int(gi),
                        used_memory_mib=used / MIB if isinstance(used, int) else None,
                    )
                )
        return gpu, procs

    def _migs(self, parent_uuid: str, handle: Any) -> list[tuple[MigInstance, Any]]:
        nvml = self.nvml
        out = []
        for i in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            mh = self._query(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, i)
            if mh is None:
                continue  # empty slot
            mem = self._query(nvml.nvmlDeviceGetMemoryInfo, mh)
            name = self._query(nvml.nvmlDeviceGetName, mh) or ""
            profile = _MIG_PROFILE.search(name)
            gi = self._query(nvml.nvmlDeviceGetGpuInstanceId, mh)
            ci = self._query(nvml.nvmlDeviceGetComputeInstanceId, mh)
            mig = MigInstance(
                uuid=nvml.nvmlDeviceGetUUID(mh),
                profile=profile.group(1) if profile else None,
                gpu_instance_id=gi,
                compute_instance_id=None if ci == _UINT_MAX else ci,
                memory_used_mib=mem.used / MIB if mem is not None else None,
                memory_total_mib=mem.total / MIB if mem is not None else None,
                memory_free_mib=mem.free / MIB if mem is not None else None,
                utilization_gpu=self._gpm_util(parent_uuid, handle, gi),
            )
            out.append((mig, mh))
        return out

    def _gpm_util(self, parent_uuid: str, handle: Any, gi: int | None) -> float | None:
        """Graphics utilisation of one GPU instance from two GPM samples (Hopper+); None elsewhere."""
        nvml = self.nvml
        if gi is None or not hasattr(nvml, "nvmlGpmQueryDeviceSupport"):
            return None
        support = self._query(nvml.nvmlGpmQueryDeviceSupport, handle)
        if support is None or not support.isSupportedDevice:
            return None
        sample = nvml.nvmlGpmSampleAlloc()
        nvml.nvmlGpmMigSampleGet(handle, gi, sample)
        prev = self._gpm_prev.get((parent_uuid, gi))
        self._gpm_prev[(parent_uuid, gi)] = sample
        if prev is None:
            return None
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 1
        request.sample1, request.sample2 = prev, sample
        request.metrics[0].metricId = nvml.NVML_GPM_METRIC_GRAPHICS_UTIL
        nvml.nvmlGpmMetricsGet(request)
        nvml.nvmlGpmSampleFree(prev)
        metric = request.metrics[0]
        return float(metric.value) if metric.nvmlReturn == nvml.NVML_SUCCESS else None

    def close(self) -> None:
        """Release NVML (reference-counted by the library) and the Xid event set."""
        if self._events:
            self._optional(getattr(self.nvml, "nvmlEventSetFree", None), self._events)
            self._events = None
        for sample in self._gpm_prev.values():
            self._query(self.nvml.nvmlGpmSampleFree, sample)
        self._gpm_prev.clear()
        with contextlib.suppress(self.nvml.NVMLError):
            self.nvml.nvmlShutdown()


def _str(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
