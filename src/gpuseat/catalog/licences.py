"""Licences (NVIDIA vGPU editions) that the planner prices per seat or per GPU."""

# No ``from __future__ import annotations`` here: Pydantic would compile and evaluate every field's
# annotation string when these models are built, at every start of gpuseat (issue 39).
from datetime import date
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpuseat.catalog import data_toml


class Licence(BaseModel):
    """A licence sold per seat or per GPU for a minimum term."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    id: str
    name: str
    per: Literal["seat", "gpu"]
    usd: float = Field(ge=0)
    term_days: int = Field(gt=0)
    verified: bool
    source: str
    as_of: date


@cache
def licences() -> dict[str, Licence]:
    """Bundled licences by id."""
    return build_licences(data_toml("licences.toml"))


def build_licences(raw: dict[str, Any]) -> dict[str, Licence]:
    """Licences by id from the parsed ``licences.toml``."""
    return {row["id"]: Licence.model_validate(row) for row in raw.get("licence", [])}
