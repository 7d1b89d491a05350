"""Readers for the plain-text prints of nvidia-smi: ``nvidia-smi -q`` and the process table of ``nvidia-smi``.

``-q`` (without ``-x``) is what people paste into issues and what exporters capture; it holds the MIG
devices' GPU/compute instance ids, SM and copy-engine counts and memory (the facts a MIG profile is
inferred from when no ``-L`` is at hand) and the health fields. The default ``nvidia-smi`` table lists
each process with its GPU, GI and CI ids, which places processes of the CSV path on their MIG device.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, replace

from gpuseat.errors import InputError
from gpuseat.nvsmi_health import reasons_mask
from gpuseat.readings import Gpu, MigInstance, Snapshot, mig_key

_GPU_HEADER = re.compile(r"^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_LINE = re.compile(r"^(?P<indent> *)(?P<key>[^:]+?)\s*(?::\s?(?P<value>.*))?$")


@dataclass
class Node:
    """One line of ``-q``: its key, its value (None for a section) and the lines indented under it."""

    key: str
    value: str | None
    children: list[Node] = field(default_factory=list)

    def get(self, *path: str) -> Node | None:
        """The first descendant along ``path`` (keys compared without case)."""
        node: Node | None = self
        for part in path:
            if node is None:
                return None
            node = next((c for c in node.children if c.key.lower() == part.lower()), None)
        return node

    def find(self, key: str) -> Node | None:
        """The first descendant called ``key`` (depth first), at any depth."""
        for child in self.children:
            if child.key.lower() == key.lower():
                return child
            found = child.find(key)
            if found is not None:
                return found
        return None

    def all(self, key: str) -> list[Node]:
        """Every child called ``key``."""
        return [c for c in self.children if c.key.lower() == key.lower()]

    def text(self, *path: str) -> str | None:
        """The value at ``path``, None when missing or ``N/A``."""
        node = self.get(*path)
        if node is None or node.value is None:
            return None
        value = node.value.strip()
        return None if value in ("", "N/A", "[N/A]", "Not Supported", "[Not Supported]") else value

    def number(self, *path: str) -> float | None:
        """The leading number of the value at ``path`` (``71424 MiB`` → 71424)."""
        value = self.text(*path)
        match = re.match(r"^-?\d+(\.\d+)?", value, re.ASCII) if value else None
        return float(match.group(0)) if match else None


def parse_tree(text: str) -> Node:
    """``-q`` text as a tree of :class:`Node` by indentation."""
    root = Node("", None)
    stack: list[tuple[int, Node]] = [(-1, root)]
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith(("=", "#")):
            continue
        match = _LINE.match(raw.rstrip())
        if match is None:
            continue
        indent = len(match["indent"])
        header = _GPU_HEADER.match(raw.strip())  # "GPU 00000000:83:00.0": a section, not "key: value"
        node = Node(raw.strip(), None) if header else Node(match["key"].strip(), match["value"])
        while stack[-1][0] >= indent:
            stack.pop()
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    return root


def _int(value: float | None) -> int | None:
    return int(value) if value is not None else None


def _mig(node: Node) -> MigInstance:
    memory = node.get("Shared FB Memory Usage") or node.get("FB Memory Usage")
    return MigInstance(
        uuid=None,
        profile=None,
        gpu_instance_id=_int(node.number("GPU Instance ID")),
        compute_instance_id=_int(node.number("Compute Instance ID")),
        memory_used_mib=memory.number("Used") if memory else None,
        memory_total_mib=memory.number("Total") if memory else None,
        memory_free_mib=memory.number("Free") if memory else None,
        multiprocessors=_int(node.number("Device Attributes", "Shared", "Multiprocessor count")),
        device_index=_int(node.number("Index")),
        copy_engines=_int(node.number("Device Attributes", "Shared", "Copy Engine count")),
    )


_REASONS = {
    "idle": "gpu_idle",
    "applications clocks setting": "applications_clocks_setting",
    "sw power cap": "sw_power_cap",
    "hw slowdown": "hw_slowdown",
    "hw thermal slowdown": "hw_thermal_slowdown",
    "hw power brake slowdown": "hw_power_brake_slowdown",
    "sync boost": "sync_boost",
    "sw thermal slowdown": "sw_thermal_slowdown",
    "display clock setting": "display_clocks_setting",
}


def _reasons(gpu: Node) -> int | None:
    block = gpu.get("Clocks Event Reasons") or gpu.get("Clocks Throttle Reasons")
    if block is None:
        return None
    active: dict[str, bool] = {}
    stack = list(block.children)
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        key = _REASONS.get(node.key.lower())
        if key and node.value and node.value.strip() not in ("N/A", ""):
            active[key] = node.value.strip().lower() == "active"
    return reasons_mask(active)


def _ecc(gpu: Node, kind: str) -> tuple[int | None, int | None]:
    block = gpu.get("ECC Errors", kind)
    if block is None:
        return None, None
    corrected = [c.number() for c in block.children if "correctable" in c.key.lower() and "uncorr" not in c.key.lower()]
    uncorrected = [c.number() for c in block.children if "uncorrectable" in c.key.lower()]

    def total(values: list[float | None]) -> int | None:
        known = [v for v in values if v is not None]
        return int(sum(known)) if known else None

    return total(corrected), total(uncorrected)


def _limit(power: Node | None) -> float | None:
    """The enforced power limit: ``Current Power Limit`` (nested under ``GPU Ceiling Power Limit`` on 610+)."""
    if power is None:
        return None
    for key in ("Current Power Limit", "Power Limit"):
        node = power.find(key)
        if node is not None and (value := node.number()) is not None:
            return value
    return None


def _gpu(index: int, node: Node, driver: str | None, where: str) -> Gpu:
    uuid = node.text("GPU UUID")
    if uuid is None:
        raise InputError(f"GPU {index} has no 'GPU UUID'", where=where, fix="give the full 'nvidia-smi -q' output")
    memory = node.get("FB Memory Usage")
    power = node.get("GPU Power Readings") or node.get("Power Readings")
    sbe_vol, dbe_vol = _ecc(node, "Volatile")
    sbe_agg, dbe_agg = _ecc(node, "Aggregate")
    draw = None
    if power is not None:
        draw = (
            power.number("Average Power Draw") or power.number("Power Draw") or power.number("Instantaneous Power Draw")
        )
    mig_mode = node.text("MIG Mode", "Current")
    return Gpu(
        index=index,
        uuid=uuid,
        name=node.text("Product Name"),
        pci_bus_id=node.key.split(" ", 1)[1] if " " in node.key else None,
        memory_used_mib=memory.number("Used") if memory else None,
        memory_total_mib=memory.number("Total") if memory else None,
        memory_free_mib=memory.number("Free") if memory else None,
        utilization_gpu=node.number("Utilization", "GPU"),
        temperature_c=node.number("Temperature", "GPU Current Temp"),
        power_w=draw,
        mig_enabled=None if mig_mode is None else mig_mode.lower() == "enabled",
        mig=tuple(_mig(m) for m in node.all("MIG Device")),
        clock_sm_mhz=node.number("Clocks", "SM"),
        bar1_total_mib=node.number("BAR1 Memory Usage", "Total"),
        driver_version=driver,
        clock_mem_mhz=node.number("Clocks", "Memory"),
        fan_percent=node.number("Fan Speed"),
        power_limit_w=_limit(power),
        clocks_event_reasons=_reasons(node),
        ecc_sbe_volatile=sbe_vol,
        ecc_dbe_volatile=dbe_vol,
        ecc_sbe_aggregate=sbe_agg,
        ecc_dbe_aggregate=dbe_agg,
        retired_pages_sbe=_int(node.number("Retired Pages", "Single Bit ECC")),
        retired_pages_dbe=_int(node.number("Retired Pages", "Double Bit ECC")),
    )


def parse_q_text(text: str, *, host: str, taken_at: float | None = None, where: str = "nvidia-smi -q") -> Snapshot:
    """``nvidia-smi -q`` text → a snapshot (GPUs, their MIG devices without names, health; no processes)."""
    tree = parse_tree(text)
    gpus = [c for c in tree.children if re.match(r"^GPU [0-9A-Fa-f]{4,8}:", c.key)]
    if not gpus:
        raise InputError("no 'GPU 0000…' section", where=where, fix="give the output of 'nvidia-smi -q' (or use -q -x)")
    driver = tree.text("Driver Version")
    if driver is not None:  # driver 610 adds "[Deprecated; … Use KMD Version instead]"
        match = re.match(r"^[0-9][0-9.]*", driver)
        driver = match.group(0) if match else None
    return Snapshot(
        host,
        time.time() if taken_at is None else taken_at,
        tuple(_gpu(i, g, driver, where) for i, g in enumerate(gpus)),
    )


# -- the process table of plain `nvidia-smi` -------------------------------------------------------

_PROC = re.compile(
    r"^\|\s+(?P<gpu>\d+)\s+(?P<gi>\d+|N/A)\s+(?P<ci>\d+|N/A)\s+(?P<pid>\d+)\s+(?P<type>C\+G|C|G)\s+(?P<name>\S.*?)\s+"
    r"(?P<mem>\d+MiB|N/A)\s*\|$",
    re.ASCII,
)


@dataclass(frozen=True, slots=True)
class TableProcess:
    """One row of the ``Processes:`` table: GPU index, GPU/compute instance ids, pid, type."""

    gpu: int
    gi: int | None
    ci: int | None
    pid: int
    kind: str


def parse_process_table(text: str) -> list[TableProcess]:
    """The ``Processes:`` rows of plain ``nvidia-smi`` (MIG hosts give GI and CI ids per process)."""
    out = []
    for line in text.splitlines():
        match = _PROC.match(line.strip())
        if match:
            out.append(
                TableProcess(
                    gpu=int(match["gpu"]),
                    gi=None if match["gi"] == "N/A" else int(match["gi"]),
                    ci=None if match["ci"] == "N/A" else int(match["ci"]),
                    pid=int(match["pid"]),
                    kind=match["type"],
                )
            )
    return out


def place_processes(snapshot: Snapshot, table: list[TableProcess]) -> Snapshot:
    """Put the CSV path's processes on their MIG device, using the GI/CI ids of the process table."""
    by_pid = {(t.gpu, t.pid): t for t in table}
    index_of = {g.uuid: g.index for g in snapshot.gpus}
    procs = []
    for p in snapshot.processes:
        gpu = snapshot.gpu(p.gpu_uuid)
        row = by_pid.get((index_of.get(p.gpu_uuid, -1), p.pid))
        if gpu is None or row is None or row.gi is None or not gpu.mig:
            procs.append(p)
            continue
        owner = next(
            (m for m in gpu.mig if m.gpu_instance_id == row.gi and (row.ci is None or m.compute_instance_id == row.ci)),
            None,
        )
        procs.append(
            replace(p, gpu_instance_id=row.gi, mig_uuid=mig_key(gpu, owner) if owner else p.mig_uuid, kind=row.kind)
        )
    return replace(snapshot, processes=tuple(procs))


def merge_table(snapshot: Snapshot, text: str) -> Snapshot:
    """Fill MIG devices' GI/CI ids, memory, SMs and CEs from plain ``nvidia-smi`` and place the processes.

    The CSV path knows MIG devices only from ``-L`` (name, UUID, device index); the table adds the GI/CI
    ids per device index and per process, so processes land on their MIG device, not the whole GPU.
    """
    from gpuseat.nvsmi_mig import parse_mig_table

    rows = {(r.gpu, r.device): r for r in parse_mig_table(text)}
    gpus = []
    for gpu in snapshot.gpus:
        mig = []
        for m in gpu.mig:
            row = rows.get((gpu.index, m.device_index)) if m.device_index is not None else None
            if row is None:
                mig.append(m)
                continue
            mig.append(
                replace(
                    m,
                    gpu_instance_id=m.gpu_instance_id if m.gpu_instance_id is not None else row.gpu_instance_id,
                    compute_instance_id=(
                        m.compute_instance_id if m.compute_instance_id is not None else row.compute_instance_id
                    ),
                    memory_total_mib=m.memory_total_mib if m.memory_total_mib is not None else float(row.total_mib),
                    memory_used_mib=m.memory_used_mib if m.memory_used_mib is not None else float(row.used_mib),
                    multiprocessors=m.multiprocessors or row.multiprocessors,
                    copy_engines=m.copy_engines if m.copy_engines is not None else row.copy_engines,
                )
            )
        gpus.append(replace(gpu, mig=tuple(mig)))
    return place_processes(replace(snapshot, gpus=tuple(gpus)), parse_process_table(text))
