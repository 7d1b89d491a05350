"""Which device a benchmark runs on, and the facts recorded about it.

:func:`parse_device` is pure. The fact-gathering helpers read ``/proc/cpuinfo``, torch and
``nvidia-smi``; each fact that cannot be read is ``None`` rather than an error, because a missing
driver version must not stop a benchmark.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from gpuseat.core.devices import DEVICE_UUID
from gpuseat.errors import InputError

DeviceKind = Literal["cpu", "cuda"]
_MIG_IN_NAME = re.compile(r"\s+MIG\s+(\S+)$")
DEVICE_FIX = "use auto, cpu, cuda, cuda:N (N = a visible GPU index) or a GPU-/MIG- UUID from `nvidia-smi -L`"


class DeviceChoice(BaseModel):
    """A parsed ``--device``: the kind, and either an index among visible CUDA devices or a UUID."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["cpu", "cuda", "auto"]
    index: int = 0
    uuid: str | None = None


class DeviceFacts(BaseModel):
    """What a result was measured on (recorded with every result)."""

    model_config = ConfigDict(frozen=True)

    kind: DeviceKind
    name: str  # the GPU name as CUDA reports it, or the CPU model
    index: int | None = None
    uuid: str | None = None
    memory_gb: float | None = None
    compute_capability: str | None = None
    mig_profile: str | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str
    cpu_model: str
    threads: int


def parse_device(spec: str) -> DeviceChoice:
    """``auto``, ``cpu``, ``cuda``, ``cuda:N`` or a device UUID as ``nvidia-smi -L`` prints it (``GPU-<uuid>``,
    ``MIG-<uuid>``, R450–R460's ``MIG-GPU-<uuid>/<gi>/<ci>``); else an input error."""
    text = spec.strip()
    if text.lower() in ("auto", "cpu", "cuda"):
        return DeviceChoice(kind=text.lower())
    match = re.fullmatch(r"cuda:([0-9]+)", text, flags=re.IGNORECASE | re.ASCII)  # not \d: cuda:١ was cuda:1
    if match:
        return DeviceChoice(kind="cuda", index=int(match.group(1)))
    if DEVICE_UUID.fullmatch(text):  # the one device rule: what CUDA_VISIBLE_DEVICES takes
        return DeviceChoice(kind="cuda", uuid=text)
    raise InputError(f"unknown device '{spec}'", where="--device", fix=DEVICE_FIX)


def split_mig_name(name: str) -> tuple[str, str | None]:
    """``"NVIDIA H200 MIG 1g.18gb"`` → ``("NVIDIA H200", "1g.18gb")``; a whole GPU has no profile."""
    match = _MIG_IN_NAME.search(name)
    if match is None:
        return name, None
    return name[: match.start()], match.group(1)


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name (``grep -m1 'model name' /proc/cpuinfo``), or the platform's processor."""
    try:
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def usable_cpus() -> int:
    """CPUs this process may run on (honours taskset/cgroup affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def nvidia_smi_driver_version() -> str | None:
    """The NVIDIA driver version (``nvidia-smi --query-gpu=driver_version --format=csv,noheader``)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    from gpuseat.engines.runner import default_runner
    from gpuseat.errors import EngineError

    try:
        out = (
            default_runner()
            .run([exe, "--query-gpu=driver_version", "--format=csv,noheader"], timeout=30, mutates=False)
            .stdout
        )
    except (OSError, EngineError):
        return None
    first = out.strip().splitlines()
    return first[0].strip() if first else None
