"""The one nvidia-smi adapter: run it (locally or on a host over SSH) and parse what it prints.

Used by ``monitor``/``top`` (samplers), ``bench --all-seats`` (seat list), ``doctor`` (MIG mode) and
``carve --from-nvidia-smi`` (inventory). Public functions:

* :func:`run` — run ``nvidia-smi ARGS`` as an argument list (never a shell string), locally or as
  ``ssh -o BatchMode=yes -- HOST nvidia-smi ARGS`` after :func:`gpuseat.core.hosts.ssh_target` (the one
  host rule: nothing that could become an ssh option or carry shell syntax);
* :func:`parse_xml` — ``nvidia-smi -q -x`` (DTD v9–v13 and drivers 390–610) → :class:`Snapshot`;
* :func:`parse_query_gpu_csv`, :func:`parse_compute_apps_csv` — ``--query-gpu``/``--query-compute-apps``
  CSV read by header name (any field list, with or without ``nounits``);
* :func:`merge_list` — MIG names and UUIDs from ``nvidia-smi -L`` (read by :mod:`gpuseat.core.listing`);
* :func:`merge_list` — fill MIG UUIDs and profiles from ``-L`` into a snapshot;
* :func:`name_mig_profiles` — infer missing MIG profile names from memory, copy engines and the catalog's
  profile table (flagged ``profile_inferred``);
* :func:`remote_users` — the users of pids on a remote host (``ps`` in the same SSH way).

``[N/A]``, ``[Not Supported]``, ``N/A``, deprecation notes and missing fields become ``None``; a
reading out of its physical range (``1e999``, a 20-digit number) is dropped with a warning.
"""

from __future__ import annotations

import csv
import logging
import math
import re
import shutil
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from gpuseat.core.listing import Listed, parse_list
from gpuseat.errors import EngineError, InputError
from gpuseat.nvsmi_health import xml_health
from gpuseat.readings import Gpu, GpuProcess, MigInstance, Snapshot, mig_key

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog

log = logging.getLogger("gpuseat.nvsmi")

#: Caps for captures read from files (a 1,000-GPU ``-q -x`` is a few MB; exporter captures ~200 kB).
MAX_XML_BYTES = 64 * 1024 * 1024
MAX_CSV_BYTES = 16 * 1024 * 1024
MAX_LIST_BYTES = 1024 * 1024

#: re.ASCII: ``\d`` alone also matches ``١٢`` and ``１２``, which float() reads as 12
_NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?", re.ASCII)
_UNIT_SUFFIX = re.compile(r"\s*\[[^\]]*\]\s*$")

#: Physical ranges of the readings; anything outside is a corrupt or hostile value, not a reading.
RANGES: dict[str, tuple[float, float]] = {
    "memory": (0, 1 << 24),  # MiB: 16 TiB
    "utilization": (0, 100),
    "temperature": (-60, 250),
    "power": (0, 100_000),  # W
    "clock": (0, 100_000),  # MHz
    "pid": (0, 1 << 22),  # Linux pid_max limit 2^22
    "index": (0, 1 << 16),
    "count": (0, 1 << 16),
}


def parse_number(text: str | None) -> float | None:
    """``"19968 MiB"`` → 19968, ``"67.03 W"`` → 67.03, ``"[N/A]"``/``"N/A"``/``""``/None/``1e999`` → None."""
    if text is None:
        return None
    match = _NUMBER.match(text.strip())
    if not match or len(match.group(0)) > 40:
        return None
    value = float(match.group(0))
    if not math.isfinite(value):
        return None
    if value.is_integer() and "." not in match.group(0) and abs(value) < 1e18:
        return int(value)
    return value


def in_range(value: float | None, kind: str, *, where: str = "") -> float | None:
    """``value`` when it lies in :data:`RANGES` ``[kind]``, else None with a warning (never an exception)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        log.warning("%s: %r is not a number; dropped", where or kind, value)
        return None
    lo, hi = RANGES[kind]
    if not lo <= value <= hi:
        log.warning("%s: %s %g is outside %g…%g; dropped", where or kind, kind, value, lo, hi)
        return None
    return value


def _num(text: str | None, kind: str, where: str) -> float | None:
    return in_range(parse_number(text), kind, where=where)


def _int(text: str | None, kind: str, where: str) -> int | None:
    value = _num(text, kind, where)
    return int(value) if value is not None else None


def _text(text: str | None) -> str | None:
    """A plain string field; unknown markers become None."""
    if text is None:
        return None
    text = text.strip()
    if not text or text.startswith("[") or text in ("N/A", "Not Supported"):
        return None
    return text


def _enabled(text: str | None) -> bool | None:
    value = _text(text)
    return None if value is None else value.lower() == "enabled"


# -- XML (-q -x) ----------------------------------------------------------------------------------


def _find(node: ET.Element, *paths: str) -> str | None:
    """Text of the first of ``paths`` present (and not N/A) under ``node``."""
    for path in paths:
        child = node.find(path)
        if child is not None and child.text is not None and _text(child.text) is not None:
            return child.text
    return None


#: Power: DTD ≤ v11 ``power_readings/power_draw``, v12 ``gpu_power_readings/power_draw``, drivers
#: 570+ ``average_power_draw``/``instant_power_draw`` (average first, as nvidia-smi's table shows).
POWER_PATHS = (
    "gpu_power_readings/power_draw",
    "power_readings/power_draw",
    "gpu_power_readings/average_power_draw",
    "power_readings/average_power_draw",
    "gpu_power_readings/instant_power_draw",
    "power_readings/instant_power_draw",
)


def _xml_mig(node: ET.Element, where: str) -> MigInstance:
    return MigInstance(
        uuid=_text(_find(node, "uuid")),
        profile=_text(_find(node, "profile", "gpu_instance_profile")),
        gpu_instance_id=_int(_find(node, "gpu_instance_id"), "index", where),
        compute_instance_id=_int(_find(node, "compute_instance_id"), "index", where),
        memory_used_mib=_num(_find(node, "fb_memory_usage/used"), "memory", where),
        memory_total_mib=_num(_find(node, "fb_memory_usage/total"), "memory", where),
        memory_free_mib=_num(_find(node, "fb_memory_usage/free"), "memory", where),
        multiprocessors=_int(_find(node, "device_attributes/shared/multiprocessor_count"), "count", where),
        device_index=_int(_find(node, "index"), "index", where),
        copy_engines=_int(_find(node, "device_attributes/shared/copy_engine_count"), "count", where),
    )


def _xml_gpu(index: int, node: ET.Element, where: str, driver: str | None = None) -> tuple[Gpu, list[GpuProcess]]:
    uuid = _text(_find(node, "uuid"))
    if uuid is None:
        raise ValueError(f"<gpu> number {index} has no <uuid>")
    here = f"{where}: GPU {index}"
    mig = tuple(_xml_mig(m, here) for m in node.iterfind("mig_devices/mig_device"))
    gpu = Gpu(
        index=index,
        uuid=uuid,
        name=_text(_find(node, "product_name")),
        pci_bus_id=node.get("id") or _text(_find(node, "pci/pci_bus_id")),
        memory_used_mib=_num(_find(node, "fb_memory_usage/used"), "memory", here),
        memory_total_mib=_num(_find(node, "fb_memory_usage/total"), "memory", here),
        memory_free_mib=_num(_find(node, "fb_memory_usage/free"), "memory", here),
        utilization_gpu=_num(_find(node, "utilization/gpu_util"), "utilization", here),
        temperature_c=_num(_find(node, "temperature/gpu_temp"), "temperature", here),
        power_w=_num(_find(node, *POWER_PATHS), "power", here),
        clock_sm_mhz=_num(_find(node, "clocks/sm_clock"), "clock", here),
        bar1_total_mib=_num(_find(node, "bar1_memory_usage/total"), "memory", here),
        mig_enabled=_enabled(_find(node, "mig_mode/current_mig")),
        mig=mig,
        driver_version=driver,
        **xml_health(node),
    )
    by_gi: dict[tuple[int | None, int | None], MigInstance] = {}
    for m in mig:
        by_gi.setdefault((m.gpu_instance_id, m.compute_instance_id), m)
        by_gi.setdefault((m.gpu_instance_id, None), m)
    procs = []
    for p in node.iterfind("processes/process_info"):
        pid = _int(_find(p, "pid"), "pid", here)
        if pid is None:
            continue
        gi = _int(_find(p, "gpu_instance_id"), "index", here)
        ci = _int(_find(p, "compute_instance_id"), "index", here)
        owner = by_gi.get((gi, ci)) or by_gi.get((gi, None)) if gi is not None else None
        procs.append(
            GpuProcess(
                pid=pid,
                gpu_uuid=uuid,
                mig_uuid=mig_key(gpu, owner) if owner else None,
                gpu_instance_id=gi,
                used_memory_mib=_num(_find(p, "used_memory"), "memory", here),
                name=_text(_find(p, "process_name")),
                kind=_text(_find(p, "type")),
            )
        )
    return gpu, procs


def parse_xml(
    text: str, *, host: str, taken_at: float | None = None, where: str = "XML", local: bool = False
) -> Snapshot:
    """Parse ``nvidia-smi -q -x`` output; a malformed document is an :class:`InputError`.

    The DTD is refused by the parser (no entity expansion): XML from another host is data.
    """
    if "<!ENTITY" in text:
        raise InputError(
            "XML entity declarations are not allowed", where=where, fix="give the output of 'nvidia-smi -q -x'"
        )
    try:
        root = ET.fromstring(text.encode("utf-8"))
    except ET.ParseError as exc:
        raise InputError(
            f"not nvidia-smi XML: {exc}", where=where, fix="give the output of 'nvidia-smi -q -x'"
        ) from None
    if root.tag != "nvidia_smi_log":
        raise InputError(
            f"root element is <{root.tag}>, not <nvidia_smi_log>",
            where=where,
            fix="give the output of 'nvidia-smi -q -x'",
        )
    gpus: list[Gpu] = []
    procs: list[GpuProcess] = []
    found = re.match(r"^[0-9][0-9.]*", _text(_find(root, "driver_version")) or "")
    driver = found.group(0) if found else None  # 610+ may append a deprecation note
    try:
        for i, node in enumerate(root.iterfind("gpu")):
            gpu, gpu_procs = _xml_gpu(i, node, where, driver)
            gpus.append(gpu)
            procs.extend(gpu_procs)
    except ValueError as exc:
        raise InputError(str(exc), where=where, fix="give a complete 'nvidia-smi -q -x' capture") from None
    return Snapshot(host, time.time() if taken_at is None else taken_at, tuple(gpus), tuple(procs), local)


# -- CSV (--query-gpu, --query-compute-apps) -------------------------------------------------------


def _csv_rows(text: str, *, where: str, required: Sequence[str]) -> list[tuple[int, dict[str, str]]]:
    """Rows keyed by field name (``"memory.used [MiB]"`` → ``"memory.used"``)."""
    lines = [line for line in text.splitlines() if line.strip()]
    reader = csv.reader(lines, skipinitialspace=True)
    try:
        header = [_UNIT_SUFFIX.sub("", h).strip() for h in next(reader, [])]
        missing = [name for name in required if name not in header]
        if missing:
            raise InputError(
                f"no column {', '.join(missing)} in the header ({', '.join(header[:6])}…)",
                where=where,
                fix=f"query at least {', '.join(required)} and keep the header (no 'noheader')",
            )
        rows = []
        for n, values in enumerate(reader, start=2):
            if len(values) != len(header):
                raise InputError(
                    f"{len(values)} fields, header has {len(header)}",
                    where=f"{where}:{n}",
                    fix="give the unmodified nvidia-smi CSV output",
                )
            rows.append((n, dict(zip(header, (v.strip() for v in values), strict=True))))
    except csv.Error as exc:
        raise InputError(f"malformed CSV: {exc}", where=where, fix="give the unmodified nvidia-smi CSV") from None
    return rows


def _first(row: dict[str, str], *names: str) -> str | None:
    """The first of ``names`` that holds a value (``power.draw`` is ``[N/A]`` on 570+ MIG hosts)."""
    for name in names:
        if _text(row.get(name)) is not None:
            return row[name]
    return None


def parse_query_gpu_csv(
    text: str, *, host: str, taken_at: float | None = None, where: str = "CSV", local: bool = False
) -> Snapshot:
    """Parse ``nvidia-smi --query-gpu=…,uuid,… --format=csv`` (with or without ``nounits``)."""
    gpus = []
    for n, row in _csv_rows(text, where=where, required=("uuid",)):
        here = f"{where}:{n}"
        uuid = _text(row["uuid"])
        if uuid is None:
            raise InputError("empty uuid", where=here, fix="query the uuid field")
        index = _int(row.get("index"), "index", here)
        gpus.append(
            Gpu(
                index=index if index is not None else n - 2,
                uuid=uuid,
                name=_text(row.get("name")),
                pci_bus_id=_text(row.get("pci.bus_id")),
                memory_used_mib=_num(row.get("memory.used"), "memory", here),
                memory_total_mib=_num(row.get("memory.total"), "memory", here),
                memory_free_mib=_num(row.get("memory.free"), "memory", here),
                utilization_gpu=_num(row.get("utilization.gpu"), "utilization", here),
                temperature_c=_num(row.get("temperature.gpu"), "temperature", here),
                power_w=_num(_first(row, "power.draw", "power.draw.average", "power.draw.instant"), "power", here),
                clock_sm_mhz=_num(row.get("clocks.current.sm", row.get("clocks.sm")), "clock", here),
                mig_enabled=_enabled(row.get("mig.mode.current")),
            )
        )
    return Snapshot(host, time.time() if taken_at is None else taken_at, tuple(gpus), (), local)


def parse_compute_apps_csv(text: str, *, where: str = "CSV") -> tuple[GpuProcess, ...]:
    """Parse ``nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory,… --format=csv`` (compute only)."""
    procs = []
    for n, row in _csv_rows(text, where=where, required=("gpu_uuid", "pid")):
        here = f"{where}:{n}"
        pid = _int(row["pid"], "pid", here)
        if pid is None:
            raise InputError(f"pid {row['pid']!r} is not a process id", where=here, fix="query the pid field")
        procs.append(
            GpuProcess(
                pid=pid,
                gpu_uuid=row["gpu_uuid"],
                used_memory_mib=_num(row.get("used_gpu_memory", row.get("used_memory")), "memory", here),
                name=_text(row.get("process_name", row.get("name"))),
            )
        )
    return tuple(procs)


# -- nvidia-smi -L --------------------------------------------------------------------------------


def merge_list(snapshot: Snapshot, listing: Iterable[Listed]) -> Snapshot:
    """Fill MIG UUIDs and profiles from ``-L`` (older XML and the CSV lack them), matching GPUs by UUID.

    MIG devices pair up by device index (``<mig_device><index>`` = ``Device N``), else in order.
    """
    by_uuid = {item.uuid: item for item in listing}
    gpus = []
    for gpu in snapshot.gpus:
        item = by_uuid.get(gpu.uuid)
        if item is None or not item.mig:
            gpus.append(gpu)
            continue
        known = list(gpu.mig) or [MigInstance(None, None, None, device_index=lm.device) for lm in item.mig]
        by_dev = {lm.device: lm for lm in item.mig}
        merged = []
        for pos, m in enumerate(known):
            lm = by_dev.get(m.device_index) if m.device_index is not None else None
            if lm is None and pos < len(item.mig) and m.device_index is None:
                lm = item.mig[pos]
            if lm is None:
                merged.append(m)
                continue
            merged.append(replace(m, uuid=m.uuid or lm.uuid, profile=m.profile or lm.profile, device_index=lm.device))
        gpus.append(replace(gpu, mig=tuple(merged), mig_enabled=True))
    keys = {(g.uuid, m.gpu_instance_id): mig_key(g, m) for g in gpus for m in g.mig if m.gpu_instance_id is not None}
    old = {mig_key(g, m): None for g in snapshot.gpus for m in g.mig}
    procs = tuple(
        replace(p, mig_uuid=keys.get((p.gpu_uuid, p.gpu_instance_id), p.mig_uuid))
        if p.gpu_instance_id is not None and (p.mig_uuid is None or p.mig_uuid in old)
        else p
        for p in snapshot.processes
    )
    return replace(snapshot, gpus=tuple(gpus), processes=procs)


# -- MIG profile names inferred from -q facts and the GPU's profile table --------------------------


def name_mig_profiles(snapshot: Snapshot, catalog: Catalog) -> Snapshot:
    """Give MIG devices without a profile (``-q`` of older drivers, no ``-L``) the profile they match.

    Inferred by :func:`gpuseat.core.mig.infer_names` from memory, copy engines and the SM shares of a
    GPU instance's compute instances against the GPU model's profile table; such devices carry
    ``profile_inferred=True`` (names read from ``-L``/``-lgi``/NVML keep False).
    """
    from gpuseat.core.mig import MigDeviceFacts, infer_names

    gpus = []
    for gpu in snapshot.gpus:
        model = catalog.find_gpu(gpu.name) if gpu.name else None
        profiles = catalog.partitions.mig_profiles.get(model.id, ()) if model else ()
        if not profiles or all(m.profile for m in gpu.mig):
            gpus.append(gpu)
            continue
        facts = [
            MigDeviceFacts(
                gpu_instance_id=m.gpu_instance_id,
                compute_instance_id=m.compute_instance_id,
                memory_mib=m.memory_total_mib,
                multiprocessors=m.multiprocessors,
                copy_engines=m.copy_engines,
            )
            for m in gpu.mig
        ]
        names = infer_names(facts, profiles)
        named = tuple(
            m if m.profile or name is None else replace(m, profile=name, profile_inferred=True)
            for m, name in zip(gpu.mig, names, strict=True)
        )
        gpus.append(replace(gpu, mig=named))
    return replace(snapshot, gpus=tuple(gpus))


# -- running nvidia-smi ---------------------------------------------------------------------------


def ssh_prefix(host: str | None, *, where: str = "--ssh") -> list[str]:
    """``ssh -o BatchMode=yes -- HOST`` (host checked, after ``--``), or nothing for the local machine."""
    if host is None:
        return []
    from gpuseat.core.hosts import ssh_target

    return ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "--", ssh_target(host, field=where)]


def nvidia_smi(
    args: Sequence[str], *, host: str | None = None, timeout_s: float = 20.0, executable: str = "nvidia-smi"
) -> str:
    """stdout of ``nvidia-smi ARGS`` here or on ``host``; a missing tool, timeout or failure is an EngineError."""
    if host is None:
        exe = shutil.which(executable)
        if exe is None:
            raise EngineError(f"'{executable}' not found", fix="install the NVIDIA driver (it provides nvidia-smi)")
        cmd = [exe, *args]
    else:
        cmd = [*ssh_prefix(host), executable, *args]
    return _spawn(cmd, timeout_s)


def _spawn(cmd: list[str], timeout_s: float) -> str:
    from gpuseat.engines.runner import default_runner

    shown = " ".join(cmd)
    try:
        proc = default_runner().run(cmd, timeout=timeout_s, check=False, mutates=False, where="nvidia-smi")
    except EngineError as exc:
        if "not found" in exc.what:
            raise EngineError(
                f"'{cmd[0]}' not found", fix="install the NVIDIA driver (nvidia-smi) or the OpenSSH client"
            ) from None
        raise EngineError(f"'{shown}' did not answer in {timeout_s:g} s") from None
    except OSError as exc:
        raise EngineError(f"cannot run '{shown}': {exc.strerror}") from None
    if proc.returncode != 0:
        raise EngineError(
            f"'{shown}' failed (exit {proc.returncode}): {proc.stderr.strip()[:300]}",
            fix="check that the host is reachable and its NVIDIA driver is loaded",
        )
    return proc.stdout


def remote_users(host: str, pids: Iterable[int], *, timeout_s: float = 20.0) -> dict[int, str | None]:
    """Users of ``pids`` on ``host`` from its own process table (``ps -o pid=,user= -p …``)."""
    wanted = sorted({int(p) for p in pids if 0 < int(p) < (1 << 22)})
    if not wanted:
        return {}
    cmd = [*ssh_prefix(host), "ps", "-o", "pid=,user=", "-p", ",".join(map(str, wanted))]
    from gpuseat.engines.runner import default_runner

    try:
        proc = default_runner().run(cmd, timeout=timeout_s, check=False, mutates=False, where="ps")
    except (OSError, EngineError) as exc:
        log.warning("%s: ps failed: %s", host, exc)
        return {}
    out: dict[int, str | None] = dict.fromkeys(wanted)
    for line in proc.stdout.splitlines():  # ps exits 1 when some pid is gone; the rest are still listed
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and int(parts[0]) in out:
            out[int(parts[0])] = parts[1]
    return out


def sample(host: str | None = None, *, timeout_s: float = 20.0, executable: str = "nvidia-smi") -> Snapshot:
    """One snapshot from ``-q -x`` (plus ``-L`` for MIG UUIDs), with process users from that host."""
    where = f"{host or 'localhost'}: nvidia-smi -q -x"
    name = host or _hostname()
    snap = parse_xml(
        nvidia_smi(["-q", "-x"], host=host, timeout_s=timeout_s, executable=executable),
        host=name,
        where=where,
        local=host is None,
    )
    if any(g.mig and any(m.uuid is None for m in g.mig) for g in snap.gpus):
        snap = merge_list(snap, parse_list(nvidia_smi(["-L"], host=host, timeout_s=timeout_s, executable=executable)))
    if host is not None and snap.processes:
        users = remote_users(host, (p.pid for p in snap.processes), timeout_s=timeout_s)
        snap = replace(snap, processes=tuple(replace(p, user=users.get(p.pid)) for p in snap.processes))
    return snap


def _hostname() -> str:
    import socket

    return socket.gethostname()
