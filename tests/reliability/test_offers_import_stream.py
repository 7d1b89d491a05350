"""``offers import`` of a 1,000,000-row SkyPilot ``vms.csv`` streams the file: the peak memory of the real
``gpuseat`` (a child process; its ``ru_maxrss``) stays under 300 MB, and the offers are exactly those a
plain ``csv.reader`` pass computes (per instance type and region, the cheapest zone, the first of equal
prices). Speed is measured in benchmarks/bench_offers_import.py, side by side with that floor.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_offers_import import build  # noqa: E402  (the benchmark's own file: the same rows)

ROWS = 1_000_000
PEAK_MB = 300

CHILD = """
import json, resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({"rc": done.returncode, "out": done.stdout, "err": done.stderr, "peak_mb": peak_mb}))
"""


def _expected(path: Path) -> dict[str, float]:
    """Offer id → price, computed without gpuseat: the cheapest priced GPU row per (type, region)."""
    best: dict[tuple[str, str], float] = {}
    with path.open(newline="") as fh:
        reader = csv.reader(fh)  # by column index: a DictReader's dict per row is a third of this pass
        header = next(reader)
        i_type, i_price, i_acc, i_region = (
            header.index(c) for c in ("InstanceType", "Price", "AcceleratorName", "Region")
        )
        for row in reader:
            if not row[i_type] or not row[i_price] or not row[i_acc]:
                continue
            key, price = (row[i_type], row[i_region]), float(row[i_price])
            if key not in best or price < best[key]:
                best[key] = price
    return {f"aws:{t}@{r}": round(p, 6) for (t, r), p in best.items()}


def test_a_million_rows_in_bounded_memory_and_the_same_offers(tmp_path: Path) -> None:
    catalog = tmp_path / "vms.csv"
    build(catalog, ROWS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSEAT_") or k == "GPUSEAT_CACHE_DIR"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), *filter(None, [env.get("PYTHONPATH")])])
    cmd = [sys.executable, "-m", "gpuseat", "offers", "import", str(catalog), "--provider", "aws", "--format", "json"]
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as measured:
        expected = _expected(catalog)  # meanwhile, in this process: the import's memory is the child's own
        out, err = measured.communicate(timeout=600)
    assert measured.returncode == 0, err
    child = json.loads(out)
    assert child["rc"] == 0, child["err"][-2000:]
    assert "Traceback" not in child["err"]
    assert child["peak_mb"] <= PEAK_MB, f"peak RSS {child['peak_mb']:.0f} MB for {ROWS:,} rows"
    offers = {o["offer"]: o["usd_per_hour"] for o in json.loads(child["out"])}
    assert offers == expected
    assert len(offers) > 1000  # many offers: the file is a real catalog's shape, not one row repeated
    warnings = [line for line in child["err"].splitlines() if line.startswith("warning:")]
    assert len(warnings) <= 210, len(warnings)  # rows without a price: named up to 200, then counted
    assert "more rows skipped" in child["err"]
