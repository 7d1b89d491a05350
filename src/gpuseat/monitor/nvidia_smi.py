"""The nvidia-smi sampler for `top`/`monitor` (here or `--ssh HOST`); parsing lives in :mod:`gpuseat.nvsmi`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuseat import nvsmi
from gpuseat.core.hosts import ssh_target
from gpuseat.readings import Snapshot

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog


class SmiSampler:
    """Samples by running ``nvidia-smi -q -x`` (and ``-L`` for MIG), here or on ``host`` over SSH.

    The host is checked when the sampler is made, so a bad one is refused before anything runs.
    Users of remote processes come from the remote host's ``ps``, never from this machine's /proc.
    """

    def __init__(self, host: str | None = None, *, nvidia_smi: str = "nvidia-smi", timeout_s: float = 20.0) -> None:
        self.host = ssh_target(host) if host is not None else None
        self.nvidia_smi = nvidia_smi
        self.timeout_s = timeout_s
        self._catalog: Catalog | None = None

    def sample(self) -> Snapshot:
        """One snapshot of every GPU on the host (MIG profiles the driver does not name are derived)."""
        snap = nvsmi.sample(self.host, timeout_s=self.timeout_s, executable=self.nvidia_smi)
        if any(m.profile is None for g in snap.gpus for m in g.mig):
            if self._catalog is None:
                from gpuseat.catalog.bundle import load_catalog

                self._catalog = load_catalog()
            snap = nvsmi.name_mig_profiles(snap, self._catalog)
        return snap

    def close(self) -> None:
        """Nothing to release."""
