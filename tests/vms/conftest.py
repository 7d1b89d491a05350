"""Shared helpers for the VM tests: example paths and the outside tools they need."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def require_tool(name: str) -> str:
    """The tool's path; missing, it fails on CI and skips elsewhere."""
    path = shutil.which(name) or (f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists() else None)
    if path is None:
        message = f"{name} is not installed (scripts/setup.sh installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path
