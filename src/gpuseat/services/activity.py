"""What the monitor saw, per seat: the queries live in :mod:`gpuseat.store.activity` (re-exported here)."""

from __future__ import annotations

from gpuseat.store.activity import LIVE_WINDOW_S, Activity, OpenAlert, SeatDay, SeatLive

__all__ = ["LIVE_WINDOW_S", "Activity", "OpenAlert", "SeatDay", "SeatLive"]
