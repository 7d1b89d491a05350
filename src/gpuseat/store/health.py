"""Is a seat's GPU usable? The monitor's open GPU-lost alerts, matched to a device or its parent GPU.

The monitor keys a GPU-lost alert by the physical GPU's UUID; a MIG seat's device is a MIG UUID whose
parent GPU the monitor recorded in ``devices.parent_uuid``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from sqlalchemy import select

from gpuseat.db.models import Device

if TYPE_CHECKING:
    from gpuseat.store.facade import Store

GPU_LOST = "gpu_lost"  # the kind the monitor gives a lost GPU (gpuseat.monitor.alerts.GPU_LOST)


def lost_gpus(store: Store, device_uuids: Iterable[str]) -> list[str]:
    """Messages of the open GPU-lost alerts that concern these devices (empty when all are fine)."""
    wanted = {u for u in device_uuids if u}
    if not wanted:
        return []
    alerts = [a for a in store.activity.open_alerts() if a.kind == GPU_LOST]
    if not alerts:
        return []
    with store.database.engine.connect() as conn:
        parents = {p for p in conn.scalars(select(Device.parent_uuid).where(Device.uuid.in_(sorted(wanted)))) if p}
    affected = wanted | parents
    return [a.message for a in alerts if a.key in affected]
