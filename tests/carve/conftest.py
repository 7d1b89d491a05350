"""Shared helpers for the carve tests: servers and requests built from the real catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuseat.catalog.bundle import load_catalog
from gpuseat.core.carve import CarveRequest, Layout, carve
from gpuseat.core.inventory import server_from_gpu_flag, server_from_toml
from gpuseat.core.needs import SeatNeed
from gpuseat.files import read_toml

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SHARED = Path("/work/shared/fixtures")
CATALOG = load_catalog()


def carve_gpu(spec: str, **request) -> Layout:
    """Carve ``--gpu spec`` with a shared-isolation need and the given request fields."""
    need = request.pop("need", {})
    req = CarveRequest(need=SeatNeed(isolation="shared", **need), **request)
    return carve(server_from_gpu_flag(spec, CATALOG), req, CATALOG)


def carve_toml(data: dict, **request) -> Layout:
    """Carve a parsed TOML inventory."""
    need = request.pop("need", {})
    req = CarveRequest(need=SeatNeed(isolation="shared", **need), **request)
    return carve(server_from_toml(data, CATALOG, where="inventory"), req, CATALOG)


def carve_example(name: str, **request) -> Layout:
    """Carve one of the shipped example inventories."""
    return carve_toml(read_toml(EXAMPLES / name), **request)


@pytest.fixture
def m60_example() -> Path:
    return EXAMPLES / "ibm-2xM60.toml"
