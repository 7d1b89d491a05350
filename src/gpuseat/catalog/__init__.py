"""The bundled catalog: GPU models, offers, partition profiles and reference benchmark results.

Everything here is data shipped as TOML/CSV inside the package (each row with ``source`` and
``as_of``); this module is the only reader of those files. Pure code elsewhere receives the loaded
objects as arguments.
"""

# No ``from __future__ import annotations`` here: Pydantic would compile and evaluate every field's
# annotation string when these models are built, at every start of gpuseat (issue 39).
import csv
import io
import tomllib
from datetime import date
from functools import cache
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gpuseat.errors import InputError, did_you_mean


class GpuModel(BaseModel):
    """A GPU board model: how many chips it carries and what each chip can do."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    id: str
    name: str
    aliases: tuple[str, ...] = ()
    architecture: str
    compute_capability: str
    chips_per_board: int = Field(ge=1)
    memory_gb: float = Field(gt=0, description="memory per chip, GB")
    mig: bool
    vgpu: bool
    source: str
    as_of: date


class ReferenceResult(BaseModel):
    """A published LeNet/MNIST benchmark time that seats are compared with."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    name: str
    gpu: str
    iterations: int = Field(gt=0)
    seconds: float = Field(gt=0)
    source: str
    as_of: date


def data_text(name: str) -> str:
    """Text of a bundled data file (``catalog/data/<name>``)."""
    return resources.files("gpuseat.catalog").joinpath("data", name).read_text(encoding="utf-8")


def data_toml(name: str) -> dict[str, Any]:
    """A bundled TOML data file, parsed."""
    return tomllib.loads(data_text(name))


@cache
def gpu_models() -> dict[str, GpuModel]:
    """All bundled GPU models by id."""
    return {g["id"]: GpuModel.model_validate(g) for g in data_toml("gpus.toml")["gpu"]}


def _norm(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


@cache
def _gpu_index() -> dict[str, str]:
    index: dict[str, str] = {}
    for model in gpu_models().values():
        for key in (model.id, model.name, *model.aliases):
            index[_norm(key)] = model.id
    return index


@cache
def find_gpu(name: str) -> GpuModel | None:
    """The model whose id, name or alias matches ``name`` (case, spaces, dashes ignored), or None."""
    model_id = _gpu_index().get(_norm(name))
    if model_id is None and _norm(name).startswith("nvidia"):
        model_id = _gpu_index().get(_norm(name)[len("nvidia") :])
    return gpu_models()[model_id] if model_id else None


def resolve_gpu(name: str, *, where: str = "GPU model") -> GpuModel:
    """Like :func:`find_gpu` but an unknown name is an input error with a suggestion."""
    model = find_gpu(name)
    if model is None:
        raise InputError(
            f"unknown GPU model '{name}'.{did_you_mean(name, gpu_models())}",
            where=where,
            fix=f"use one of: {', '.join(gpu_models())}",
        )
    return model


def parse_references(text: str) -> tuple[ReferenceResult, ...]:
    """Reference results from the text of a ``bench_reference.csv``."""
    return tuple(ReferenceResult.model_validate(row) for row in csv.DictReader(io.StringIO(text)))


@cache
def reference_results() -> tuple[ReferenceResult, ...]:
    """The shipped reference benchmark results (K520 and M60 from 2016)."""
    return parse_references(data_text("bench_reference.csv"))
