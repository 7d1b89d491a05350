"""What one seat needs: the request that both the planner and the carver answer."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

GuestOS = Literal["linux", "windows"]
Isolation = Literal["dedicated", "partitioned", "shared"]


class SeatNeed(BaseModel):
    """Per-seat requirements.

    ``isolation``: ``dedicated`` = a whole GPU chip (passthrough); ``partitioned`` = a hardware or
    hypervisor partition with its own memory (MIG, vGPU) is enough; ``shared`` = time-slicing or MPS
    without memory isolation is acceptable.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    min_gpu_memory_gb: float = Field(0, ge=0)
    cuda: bool = True
    guest_os: GuestOS = "linux"
    min_vcpus: float = Field(0, ge=0)
    min_ram_gb: float = Field(0, ge=0)
    isolation: Isolation = "partitioned"
