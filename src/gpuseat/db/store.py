"""Moved: the monitor's samples, aggregates and alerts live in :mod:`gpuseat.store.monitor` (re-exported here)."""

from __future__ import annotations

from gpuseat.store.monitor import DEFAULT_COURSE, RAW_KEEP_S, Store

__all__ = ["DEFAULT_COURSE", "RAW_KEEP_S", "Store"]
