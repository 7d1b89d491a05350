"""The planner imports a solver only when a MILP is solved (start-up, issue 9); purity is tests/test_layering.py."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "gpuseat"


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
