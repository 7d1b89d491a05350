"""What callers hand the course store to add or change a seat: checked pydantic values."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpuseat.core.seating import KEY_PATTERN, EngineName, SeatKind, SeatState
from gpuseat.safe_text import has_ascii_control

_EngineRef = Annotated[str | None, Field(max_length=512)]
_Connect = Annotated[str | None, Field(max_length=1024)]


#: a seat's MIG profile or vGPU type as a name (``3g.40gb``, ``A100D-10C``): what the store and an export hold
PROFILE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+:@/-]*$"


def _one_line(value: str | None) -> str | None:
    if value is not None and has_ascii_control(value):
        raise ValueError("must be one line without control characters")
    return value


def _host(value: str | None) -> str | None:
    """A seat's host by the one host rule (:mod:`gpuseat.core.hosts`): the name its way in and its
    engine use, so a name refused there (``a..b``, ``node-``) is refused here too."""
    from gpuseat.core.hosts import HOST_EXAMPLES, host_problem, normal_host

    if value is None:
        return None
    problem = host_problem(value)
    if problem is not None:
        raise ValueError(f"not a host name: {problem}; give {HOST_EXAMPLES}")
    return normal_host(value)


def _device(value: str | None) -> str | None:
    """A seat's device UUID by the one device rule (:mod:`gpuseat.core.devices`): both forms
    ``nvidia-smi -L`` prints, ``MIG-GPU-<gpu uuid>/<gi>/<ci>`` of drivers before R470 too."""
    from gpuseat.core.devices import UUID_EXAMPLES, device_problem

    problem = None if value is None else device_problem(value)
    if problem is not None:
        raise ValueError(f"not a GPU or MIG device UUID: {problem}; {UUID_EXAMPLES}")
    return value


def _known_engine(value: str | None) -> str | None:
    """An engine name the registry knows (the registry is the one list of engines)."""
    from gpuseat.engines.registry import names, unusable

    if value is not None and value not in names():
        raise ValueError(unusable().get(value) or f"unknown engine {value!r}: one of {', '.join(names())}")
    return value


class SeatSpec(BaseModel):
    """A seat to add: what a carve layout, a plan's cloud option, nvidia-smi or a person describes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str = Field(pattern=KEY_PATTERN.pattern)
    kind: SeatKind
    host: str | None = None
    device_uuid: str | None = None
    profile: str | None = Field(None, max_length=96, pattern=PROFILE_PATTERN)
    memory_gb: float | None = Field(None, gt=0, le=4096, allow_inf_nan=False)
    groups: tuple[str, ...] = ()
    engine: EngineName = "manual"
    engine_ref: _EngineRef = None
    connect: _Connect = None
    state: SeatState = "planned"

    _lines = field_validator("engine_ref", "connect")(_one_line)
    _engine = field_validator("engine")(lambda v: _known_engine(v))
    _hosts = field_validator("host")(_host)
    _devices = field_validator("device_uuid")(_device)


class _SeatUpdate(BaseModel):
    """What an engine may change with a state: checked with the same rules as :class:`SeatSpec`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: EngineName | None = None
    engine_ref: _EngineRef = None
    connect: _Connect = None
    device_uuid: str | None = None
    host: str | None = None

    _lines = field_validator("engine_ref", "connect")(_one_line)
    _engine = field_validator("engine")(lambda v: _known_engine(v))
    _hosts = field_validator("host")(_host)
    _devices = field_validator("device_uuid")(_device)
