"""The one seats CSV: ``gpuseat seats export --format csv`` and the portal's ``seats.csv`` write these
columns and these rows, so a spreadsheet made from either reads the other."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuseat.store import SeatView

#: every seat's columns, in this order (the portal's download and the CLI's export alike)
SEATS_CSV_COLUMNS: tuple[str, ...] = (
    "key",
    "kind",
    "host",
    "device_uuid",
    "profile",
    "memory_gb",
    "groups",
    "engine",
    "engine_ref",
    "state",
    "connect",
    "participant",
)


def seats_csv_rows(seats: Iterable[SeatView]) -> list[dict[str, Any]]:
    """One row per seat, keyed by :data:`SEATS_CSV_COLUMNS` (groups joined by spaces; cells not yet defused)."""
    rows = []
    for seat in seats:
        values = {**seat.to_dict(), "groups": " ".join(seat.groups)}
        rows.append({c: values[c] for c in SEATS_CSV_COLUMNS})
    return rows
