"""The planner's core stays pure: no catalog loaders, no db/monitor/cli/doctor/services imports (issue 9)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "gpuseat"
FILES = sorted(
    [*(SRC / "core" / "plan").glob("*.py"), *(SRC / "core" / n for n in ("cost.py", "course.py", "needs.py"))]
)
LOADERS = {"find_gpu", "gpu_models", "resolve_gpu", "licences", "partition_catalog", "provider_rules",
           "load_catalog", "bundled_offers", "reference_results", "data_toml", "data_text", "recorded_results"}  # fmt: skip
FORBIDDEN = ("gpuseat.db", "gpuseat.monitor", "gpuseat.cli", "gpuseat.doctor", "gpuseat.services", "gpuseat.web",
             "gpuseat.bench", "gpuseat.files")  # fmt: skip


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


def test_the_solver_is_imported_only_for_a_milp():
    """`gpuseat plan` on a course without availability limits imports neither highspy nor scipy."""
    import subprocess
    import sys

    code = (
        "import sys; from pathlib import Path; from gpuseat.catalog.bundle import load_catalog; "
        "from gpuseat.services.planning import plan_course; "
        "plan_course(Path('examples/course-2016.toml'), load_catalog()); "
        "print(sorted(m for m in ('highspy', 'scipy', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=SRC.parents[1]).stdout  # fmt: skip
    assert out.strip() == "[]"
