"""docs/api.md's worked example runs with public names only, and its results equal the CLI's JSON."""

from __future__ import annotations

import ast
import json
import runpy
from pathlib import Path

import gpuseat
from pysource import parse_file

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "api_example.py"


def test_example_uses_only_public_names() -> None:
    tree = parse_file(EXAMPLE)
    used = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "gpuseat"
    }
    assert used, "the example should use gpuseat.<name>"
    assert used <= set(gpuseat.__all__), used - set(gpuseat.__all__)
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("gpuseat")]
    assert imports == [], "the example imports internals"


def test_every_public_name_resolves() -> None:
    for name in gpuseat.__all__:
        assert getattr(gpuseat, name) is not None, name


def test_example_runs_and_matches_the_cli(tmp_path: Path, cli) -> None:
    main = runpy.run_path(str(EXAMPLE))["main"]
    got = main(tmp_path / "out")
    assert got["plan"]["options"][0]["total_usd"] == 3744.0
    assert len(got["layout"]["slices"]) == 4
    assert "APPLY.md" in got["files"] and sum(f.endswith(".xml") for f in got["files"]) == 4

    plan_cli = cli("plan", ROOT / "examples" / "course-2016.toml", "--format", "json")
    assert plan_cli.code == 0, plan_cli.err
    assert json.loads(plan_cli.out) == got["plan"]
    carve_cli = cli("carve", ROOT / "examples" / "ibm-2xM60.toml", "--mode", "passthrough", "--format", "json")
    assert carve_cli.code == 0, carve_cli.err
    assert json.loads(carve_cli.out) == got["layout"]
