"""The nvidia-smi sampler for `top`/`monitor` (here or `--ssh HOST`); parsing lives in :mod:`gpuseat.nvsmi`."""

from __future__ import annotations

from gpuseat import nvsmi
from gpuseat.readings import Snapshot


class SmiSampler:
    """Samples by running ``nvidia-smi -q -x`` (and ``-L`` for MIG), here or on ``host`` over SSH.

    The host is checked when the sampler is made, so a bad one is refused before anything runs.
    Users of remote processes come from the remote host's ``ps``, never from this machine's /proc.
    """

    def __init__(self, host: str | None = None, *, nvidia_smi: str = "nvidia-smi", timeout_s: float = 20.0) -> None:
        self.host = nvsmi.check_host(host) if host is not None else None
        self.nvidia_smi = nvidia_smi
        self.timeout_s = timeout_s

    def sample(self) -> Snapshot:
        """One snapshot of every GPU on the host."""
        return nvsmi.sample(self.host, timeout_s=self.timeout_s, executable=self.nvidia_smi)

    def close(self) -> None:
        """Nothing to release."""
