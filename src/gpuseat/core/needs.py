"""What one seat needs: the request that both the planner and the carver answer."""

# No ``from __future__ import annotations`` here: Pydantic would compile and evaluate every field's
# annotation string when these models are built, at every start of gpuseat (issue 39).
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat

GuestOS = Literal["linux", "windows"]
Isolation = Literal["dedicated", "partitioned", "shared"]

#: Upper bounds that keep every figure realistic (a typo such as 8e9 GB is an input error, not a plan).
MAX_GB = 100_000.0
MAX_VCPUS = 10_000.0


class SeatNeed(BaseModel):
    """Per-seat requirements.

    ``isolation``: ``dedicated`` = a whole GPU chip (passthrough); ``partitioned`` = a hardware or
    hypervisor partition with its own memory (MIG, vGPU) is enough; ``shared`` = time-slicing or MPS
    without memory isolation is acceptable. Types are strict: ``cuda = "no"`` or ``min_vcpus = true``
    are refused rather than coerced.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    min_gpu_memory_gb: StrictFloat = Field(0, ge=0, le=MAX_GB)
    cuda: StrictBool = True
    guest_os: GuestOS = "linux"
    min_vcpus: StrictFloat = Field(0, ge=0, le=MAX_VCPUS)
    min_ram_gb: StrictFloat = Field(0, ge=0, le=MAX_GB)
    isolation: Isolation = "partitioned"
