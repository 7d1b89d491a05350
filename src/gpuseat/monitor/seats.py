"""The ``--seats FILE`` mapping (TOML or CSV): seat → device UUID → participant.

TOML: ``[[seat]]`` tables; CSV: a header with the same field names. Example in
``examples/seats.toml``. Fields: ``id`` (seat id), ``device`` (GPU-… or MIG-… UUID),
``participant`` (optional), ``user`` (Unix login, defaults to the participant), ``host``, ``profile``.
A MIG device the driver gives no UUID (older ``nvidia-smi -q -x``) is ``GPU-…/gi<N>`` (its GPU instance).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from gpuseat.errors import InputError
from gpuseat.files import read_csv, read_toml, validate
from gpuseat.monitor.attribution import SeatEntry


class SeatFileRow(BaseModel):
    """One seat line of a seats file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    device: str = Field(pattern=r"^(GPU-[0-9A-Za-z-]+(/gi\d{1,3}(/ci\d{1,3})?)?|MIG-[0-9A-Za-z-]+)$")
    participant: str | None = None
    user: str | None = None
    host: str | None = None
    profile: str | None = None


class SeatsFile(BaseModel):
    """A TOML seats file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seat: list[SeatFileRow] = Field(min_length=1)


def _entry(row: SeatFileRow) -> SeatEntry:
    return SeatEntry(row.id, row.device, row.participant, row.user, row.host, row.profile)


def read_seats(path: Path) -> list[SeatEntry]:
    """Read and check a seats file; duplicate seat ids or devices are input errors."""
    if path.suffix.lower() == ".csv":
        rows = [
            validate(SeatFileRow, {k: v for k, v in row.items() if v != ""}, where=f"{path}:{line}")
            for line, row in read_csv(path)
        ]
    else:
        rows = list(validate(SeatsFile, read_toml(path), where=str(path)).seat)
    for attr in ("id", "device"):
        seen: set[str] = set()
        for row in rows:
            value = getattr(row, attr)
            if value in seen:
                raise InputError(
                    f"{attr} {value!r} appears twice", where=str(path), fix=f"give each seat its own {attr}"
                )
            seen.add(value)
    return [_entry(r) for r in rows]
