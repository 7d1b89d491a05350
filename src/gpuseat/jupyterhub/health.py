"""Is a seat's GPU usable? The query lives in :mod:`gpuseat.store.health` (re-exported for the hub hooks)."""

from __future__ import annotations

from gpuseat.store.health import lost_gpus

__all__ = ["lost_gpus"]
