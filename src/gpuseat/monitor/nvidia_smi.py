"""Parsers for ``nvidia-smi`` output, and a sampler that runs it locally or over SSH.

Three formats, all mapped to the same :class:`~gpuseat.monitor.model.Snapshot`:

* ``nvidia-smi -q -x`` (XML, DTD v10–v13: ``power_readings`` or ``gpu_power_readings``);
* ``nvidia-smi --query-gpu=… --format=csv`` and ``--query-compute-apps=… --format=csv``, read by
  header name (any field list, with or without ``nounits``);
* ``nvidia-smi -L``, the only plain listing that names MIG profiles and MIG UUIDs.

``[N/A]``, ``[Not Supported]``, ``N/A``, deprecation notes and missing fields become ``None``.
"""

from __future__ import annotations

import csv
import re
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from gpuseat.errors import EngineError, InputError
from gpuseat.monitor.model import Gpu, GpuProcess, MigInstance, Snapshot

_NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")
_UNIT_SUFFIX = re.compile(r"\s*\[[^\]]*\]\s*$")


def parse_number(text: str | None) -> float | None:
    """``"19968 MiB"`` → 19968, ``"67.03 W"`` → 67.03, ``"[N/A]"``/``"N/A"``/``""``/None → None."""
    if text is None:
        return None
    match = _NUMBER.match(text.strip())
    if not match:
        return None
    value = float(match.group(0))
    return int(value) if value.is_integer() and "." not in match.group(0) else value


def _int(text: str | None) -> int | None:
    value = parse_number(text)
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


# -- XML ------------------------------------------------------------------------------------------


def _find(node: ET.Element, *paths: str) -> str | None:
    """Text of the first of ``paths`` present under ``node``."""
    for path in paths:
        child = node.find(path)
        if child is not None and child.text is not None:
            return child.text
    return None


def _xml_mig(node: ET.Element) -> MigInstance:
    return MigInstance(
        uuid=_text(_find(node, "uuid")),
        profile=_text(_find(node, "profile", "gpu_instance_profile")),
        gpu_instance_id=_int(_find(node, "gpu_instance_id")),
        compute_instance_id=_int(_find(node, "compute_instance_id")),
        memory_used_mib=parse_number(_find(node, "fb_memory_usage/used")),
        memory_total_mib=parse_number(_find(node, "fb_memory_usage/total")),
    )


def _xml_gpu(index: int, node: ET.Element) -> tuple[Gpu, list[GpuProcess]]:
    uuid = _text(_find(node, "uuid"))
    if uuid is None:
        raise ValueError(f"<gpu> number {index} has no <uuid>")
    mig = tuple(_xml_mig(m) for m in node.iterfind("mig_devices/mig_device"))
    gpu = Gpu(
        index=index,
        uuid=uuid,
        name=_text(_find(node, "product_name")),
        pci_bus_id=node.get("id") or _text(_find(node, "pci/pci_bus_id")),
        memory_used_mib=parse_number(_find(node, "fb_memory_usage/used")),
        memory_total_mib=parse_number(_find(node, "fb_memory_usage/total")),
        utilization_gpu=parse_number(_find(node, "utilization/gpu_util")),
        temperature_c=parse_number(_find(node, "temperature/gpu_temp")),
        power_w=parse_number(_find(node, "gpu_power_readings/power_draw", "power_readings/power_draw")),
        mig_enabled=_enabled(_find(node, "mig_mode/current_mig")),
        mig=mig,
    )
    by_gi = {m.gpu_instance_id: m for m in mig if m.gpu_instance_id is not None}
    procs = []
    for p in node.iterfind("processes/process_info"):
        pid = _int(_find(p, "pid"))
        if pid is None:
            continue
        gi = _int(_find(p, "gpu_instance_id"))
        owner = by_gi.get(gi)
        procs.append(
            GpuProcess(
                pid=pid,
                gpu_uuid=uuid,
                mig_uuid=owner.uuid if owner else None,
                gpu_instance_id=gi,
                used_memory_mib=parse_number(_find(p, "used_memory")),
                name=_text(_find(p, "process_name")),
            )
        )
    return gpu, procs


def parse_xml(text: str, *, host: str, taken_at: float | None = None, where: str = "XML") -> Snapshot:
    """Parse ``nvidia-smi -q -x`` output; a malformed document is an :class:`InputError`."""
    try:
        root = ET.fromstring(text.encode("utf-8") if text.lstrip().startswith("<?xml") else text)
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
    try:
        for i, node in enumerate(root.iterfind("gpu")):
            gpu, gpu_procs = _xml_gpu(i, node)
            gpus.append(gpu)
            procs.extend(gpu_procs)
    except ValueError as exc:
        raise InputError(str(exc), where=where, fix="give a complete 'nvidia-smi -q -x' capture") from None
    return Snapshot(host, time.time() if taken_at is None else taken_at, tuple(gpus), tuple(procs))


# -- CSV ------------------------------------------------------------------------------------------


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
        raise InputError(
            f"malformed CSV: {exc}", where=where, fix="give the unmodified nvidia-smi CSV"
        ) from None
    return rows


def parse_query_gpu_csv(
    text: str, *, host: str, taken_at: float | None = None, where: str = "CSV"
) -> Snapshot:
    """Parse ``nvidia-smi --query-gpu=…,uuid,… --format=csv`` (with or without ``nounits``)."""
    gpus = []
    for n, row in _csv_rows(text, where=where, required=("uuid",)):
        uuid = _text(row["uuid"])
        if uuid is None:
            raise InputError("empty uuid", where=f"{where}:{n}", fix="query the uuid field")
        index = _int(row.get("index"))
        gpus.append(
            Gpu(
                index=index if index is not None else n - 2,
                uuid=uuid,
                name=_text(row.get("name")),
                pci_bus_id=_text(row.get("pci.bus_id")),
                memory_used_mib=parse_number(row.get("memory.used")),
                memory_total_mib=parse_number(row.get("memory.total")),
                utilization_gpu=parse_number(row.get("utilization.gpu")),
                temperature_c=parse_number(row.get("temperature.gpu")),
                power_w=parse_number(row.get("power.draw")),
                mig_enabled=_enabled(row.get("mig.mode.current")),
            )
        )
    return Snapshot(host, time.time() if taken_at is None else taken_at, tuple(gpus))


def parse_compute_apps_csv(text: str, *, where: str = "CSV") -> tuple[GpuProcess, ...]:
    """Parse ``nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory,… --format=csv``."""
    procs = []
    for n, row in _csv_rows(text, where=where, required=("gpu_uuid", "pid")):
        pid = _int(row["pid"])
        if pid is None:
            raise InputError(
                f"pid {row['pid']!r} is not a number", where=f"{where}:{n}", fix="query the pid field"
            )
        procs.append(
            GpuProcess(
                pid=pid,
                gpu_uuid=row["gpu_uuid"],
                used_memory_mib=parse_number(row.get("used_gpu_memory", row.get("used_memory"))),
                name=_text(row.get("process_name", row.get("name"))),
            )
        )
    return tuple(procs)


# -- nvidia-smi -L --------------------------------------------------------------------------------

_LIST_GPU = re.compile(r"^GPU (\d+): (.*?) \(UUID: (GPU-[^)]+)\)\s*$")
_LIST_MIG = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)]+)\)\s*$")


@dataclass(frozen=True, slots=True)
class Listed:
    """One GPU of ``nvidia-smi -L``, with its MIG devices as ``(profile, uuid)`` in device order."""

    index: int
    name: str
    uuid: str
    mig: tuple[tuple[str, str], ...] = ()


def parse_list(text: str) -> list[Listed]:
    """Parse ``nvidia-smi -L``; lines that are neither a GPU nor a MIG device are ignored."""
    out: list[Listed] = []
    for line in text.splitlines():
        if m := _LIST_GPU.match(line):
            out.append(Listed(int(m.group(1)), m.group(2), m.group(3)))
        elif (m := _LIST_MIG.match(line)) and out:
            out[-1] = replace(out[-1], mig=(*out[-1].mig, (m.group(1), m.group(3))))
    return out


def merge_list(snapshot: Snapshot, listing: Iterable[Listed]) -> Snapshot:
    """Fill MIG UUIDs and profiles from ``-L`` (the XML and CSV lack them), matching GPUs by UUID."""
    by_uuid = {item.uuid: item for item in listing}
    gpus = []
    for gpu in snapshot.gpus:
        item = by_uuid.get(gpu.uuid)
        if item is None or not item.mig:
            gpus.append(gpu)
            continue
        known = list(gpu.mig) or [MigInstance(None, None, None) for _ in item.mig]
        merged = tuple(
            replace(m, uuid=m.uuid or uuid, profile=m.profile or profile)
            for m, (profile, uuid) in zip(known, item.mig, strict=False)
        )
        gpus.append(replace(gpu, mig=merged + tuple(known[len(merged) :]), mig_enabled=True))
    gi_to_mig = {
        (g.uuid, m.gpu_instance_id): m.uuid for g in gpus for m in g.mig if m.gpu_instance_id is not None
    }
    procs = tuple(
        replace(p, mig_uuid=p.mig_uuid or gi_to_mig.get((p.gpu_uuid, p.gpu_instance_id)))
        for p in snapshot.processes
    )
    return replace(snapshot, gpus=tuple(gpus), processes=procs)


# -- sampler --------------------------------------------------------------------------------------


class SmiSampler:
    """Samples by running ``nvidia-smi -q -x`` and ``-L``, locally or on ``host`` over SSH."""

    def __init__(
        self, host: str | None = None, *, nvidia_smi: str = "nvidia-smi", timeout_s: float = 20.0
    ) -> None:
        self.host = host
        self.nvidia_smi = nvidia_smi
        self.timeout_s = timeout_s
        self.prefix: list[str] = ["ssh", "-o", "BatchMode=yes", host, "--"] if host else []

    def _run(self, *args: str) -> str:
        cmd = [*self.prefix, self.nvidia_smi, *args]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout_s, check=False)
        except FileNotFoundError:
            raise EngineError(
                f"'{cmd[0]}' not found", fix="install the NVIDIA driver (nvidia-smi) or OpenSSH client"
            ) from None
        except subprocess.TimeoutExpired:
            raise EngineError(f"'{' '.join(cmd)}' did not answer in {self.timeout_s:g} s") from None
        if proc.returncode != 0:
            raise EngineError(
                f"'{' '.join(cmd)}' failed (exit {proc.returncode}): {proc.stderr.strip()[:300]}",
                fix="check that the host is reachable and its NVIDIA driver is loaded",
            )
        return proc.stdout

    def sample(self) -> Snapshot:
        """One snapshot from the XML report, with MIG UUIDs/profiles from ``-L``."""
        where = f"{self.host or 'localhost'}: nvidia-smi -q -x"
        snap = parse_xml(self._run("-q", "-x"), host=self.host or _hostname(), where=where)
        if any(g.mig for g in snap.gpus):
            snap = merge_list(snap, parse_list(self._run("-L")))
        return snap

    def close(self) -> None:
        """Nothing to release."""


def _hostname() -> str:
    import socket

    return socket.gethostname()
