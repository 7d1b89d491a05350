"""Fixtures for the doctor tests: a factory that writes fake hosts under tmp_path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from doctor_trees import HEALTHY_VFIO, Host, write_host


@pytest.fixture
def host_tree(tmp_path: Path) -> Callable[[Host], Path]:
    """Write a host under a fresh folder of tmp_path and return its root."""
    count = 0

    def make(host: Host = HEALTHY_VFIO) -> Path:
        nonlocal count
        count += 1
        return write_host(tmp_path / f"host{count}", host)

    return make
