"""The ``--seats FILE`` mapping (TOML or CSV): seat → device UUID → participant.

TOML: ``[[seat]]`` tables; CSV: a header with the same field names. Example in
``examples/seats.toml``. Fields: ``id`` (seat id), ``device`` (GPU-… or MIG-… UUID),
``participant`` (optional), ``user`` (Unix login, defaults to the participant), ``host``, ``profile``.
A device is a UUID by the one rule of :mod:`gpuseat.core.devices` (``GPU-…``, ``MIG-…``, and drivers
R450–R460's ``MIG-GPU-…/<gi>/<ci>``, which ``seats export --format toml`` writes for such a seat), or a MIG
device the driver gives no UUID and no listing names (older ``nvidia-smi -q -x``): ``GPU-…/gi<N>`` (its GPU
instance), as :func:`gpuseat.readings.mig_key` names it. The one seats CSV (``seats export --format csv``, the
portal's seats.csv) is a seats file too: its ``key`` and ``device_uuid`` are ``id`` and ``device``, its seats
without a device (cloud seats not launched) are left out.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpuseat.core.devices import DEVICE_UUID
from gpuseat.errors import InputError
from gpuseat.files import read_csv, read_toml, validate
from gpuseat.readings import SeatEntry

#: a MIG device by its GPU instance, where the driver gives it no UUID (see :func:`gpuseat.readings.mig_key`)
_BY_INSTANCE = re.compile(r"GPU-[0-9A-Za-z-]{1,90}/gi[0-9]{1,3}(?:/ci[0-9]{1,3})?", re.ASCII)


class SeatFileRow(BaseModel):
    """One seat line of a seats file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    device: str
    participant: str | None = None
    user: str | None = None
    host: str | None = None
    profile: str | None = None

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if not (DEVICE_UUID.fullmatch(value) or _BY_INSTANCE.fullmatch(value)):
            raise ValueError(
                "must be a device UUID as nvidia-smi -L prints it (GPU-…, MIG-…, MIG-GPU-…/<gi>/<ci>) "
                "or GPU-…/gi<N> for a MIG device without one"
            )
        return value


class SeatsFile(BaseModel):
    """A TOML seats file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seat: list[SeatFileRow] = Field(min_length=1)


def _entry(row: SeatFileRow) -> SeatEntry:
    return SeatEntry(row.id, row.device, row.participant, row.user, row.host, row.profile)


def _exported(row: dict[str, str]) -> bool:
    """A row of the one seats CSV (``seats export --format csv``, the portal's seats.csv): key, device_uuid, …"""
    return "key" in row and "device_uuid" in row and "id" not in row


def _seat_fields(row: dict[str, str]) -> dict[str, str]:
    """A CSV row as a seats file's fields: the seats CSV's ``key``/``device_uuid`` as ``id``/``device``, its
    other columns (kind, engine, state, …) left out; empty cells are no value."""
    if _exported(row):
        row = {"id": row["key"], "device": row["device_uuid"], **{k: row.get(k, "") for k in _EXPORTED}}
    return {k: v for k, v in row.items() if v != ""}


#: the seats CSV's columns that a seats file has too
_EXPORTED = ("participant", "host", "profile")


def read_seats(path: Path) -> list[SeatEntry]:
    """Read and check a seats file; duplicate seat ids or devices are input errors."""
    if path.suffix.lower() == ".csv":
        table = list(read_csv(path))
        rows = [
            validate(SeatFileRow, _seat_fields(row), where=f"{path}:{line}")
            for line, row in table
            if not _exported(row) or row.get("device_uuid")  # a seat without a device has nothing to watch
        ]
        if table and not rows:
            raise InputError("no seat with a device UUID", where=str(path), fix="add the seats' device UUIDs first")
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
