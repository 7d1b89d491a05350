"""gpuseat from Python: price a course, carve a server, render libvirt configs.

Uses only names from ``gpuseat.__all__``. Run it as ``python examples/api_example.py OUT_DIR``; the
test suite runs it too (tests/test_api_example.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import gpuseat

HERE = Path(__file__).resolve().parent


def main(out: Path) -> dict[str, object]:
    """The three steps of docs/api.md; returns what the test checks."""
    catalog = gpuseat.load_catalog()  # the bundled catalog; load_catalog("my-catalog/") overlays yours

    # 1. Price the 2016 course: the cheapest mix first, every figure itemised.
    plan = gpuseat.plan_course(HERE / "course-2016.toml", catalog)
    best = plan.options[0]
    print(f"cheapest: {best.total_usd:,.2f} USD for {best.seats} seats")
    for line in best.lines:
        print("  ", line.formula)

    # 2. Carve the 2016 server (2 x Tesla M60 boards = 4 chips) into passthrough seats.
    layout = gpuseat.carve_inventory(HERE / "ibm-2xM60.toml", catalog, mode="passthrough")
    print(f"carved: {len(layout.slices)} {layout.mode} seats")

    # 3. Render libvirt domains (plus the APPLY.md runbook) into a folder gpuseat owns.
    files = gpuseat.render_layout(layout, "libvirt", catalog)
    written = gpuseat.write_artifacts(out, files)
    print(f"wrote {len(written.paths)} files; read {written.runbook} first")

    # Errors are GpuseatError subclasses with where / what / fix.
    try:
        gpuseat.carve_inventory(HERE / "no-such-server.toml", catalog)
    except gpuseat.InputError as err:
        print(f"as expected: {err.where}: {err.what}")

    return {"plan": plan.to_dict(), "layout": layout.to_dict(), "files": [p.name for p in written.paths]}


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "api-example-out"))
