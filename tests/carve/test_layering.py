"""Carve's core and renderers stay pure: no catalog loaders, no db/monitor/cli/doctor imports (issue 9)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "gpuseat"
FILES = sorted([*(SRC / "core").glob("carve*.py"), SRC / "core" / "mig.py", SRC / "core" / "mmio.py",
                SRC / "core" / "inventory.py", *(SRC / "render").glob("*.py")])  # fmt: skip
LOADERS = {"find_gpu", "gpu_models", "resolve_gpu", "licences", "partition_catalog", "doctor_catalog",
           "load_catalog", "bundled_offers", "reference_results", "data_toml", "data_text"}  # fmt: skip
FORBIDDEN = ("gpuseat.db", "gpuseat.monitor", "gpuseat.cli", "gpuseat.doctor", "gpuseat.services", "gpuseat.web")


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_loader_calls_and_no_upward_imports(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            assert not node.module.startswith(FORBIDDEN), (path.name, node.module)
            assert not (LOADERS & {a.name for a in node.names}), (path.name, node.module)
        if isinstance(node, ast.Import):
            assert not any(a.name.startswith(FORBIDDEN) for a in node.names), path.name
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in LOADERS, (path.name, node.func.id)
