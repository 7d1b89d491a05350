"""The one interface every sampler implements (NVML, nvidia-smi XML/CSV, SSH, replay)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Protocol

from gpuseat.readings import Snapshot


class Sampler(Protocol):
    """Yields one :class:`Snapshot` per call; ``close`` releases the driver or files."""

    def sample(self) -> Snapshot:
        """Take one snapshot now."""
        ...

    def close(self) -> None:
        """Release what the sampler holds."""
        ...


class StaticSampler:
    """Returns one parsed capture (``--from-xml``, ``--from-csv``) stamped with the current time."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def sample(self) -> Snapshot:
        """The capture, as if taken now."""
        return replace(self.snapshot, taken_at=time.time())

    def close(self) -> None:
        """Nothing to release."""
