"""SkyPilot catalog import on the real AWS/Lambda excerpts and a GCP-shaped file written here."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"

GCP_HEADER = (
    "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice"
)


def imported(cli, path, provider):
    r = cli("offers", "import", path, "--provider", provider, "--format", "json")
    assert r.code == 0, r.err
    return json.loads(r.out), r.err


def test_aws_excerpt_prices_g4dn(cli):
    rows, err = imported(cli, FIXTURES / "aws_v8_vms_excerpt.csv", "aws")
    g4dn = next(r for r in rows if r["instance_type"] == "g4dn.xlarge" and r["region"] == "us-east-1")
    assert g4dn == {
        "offer": "aws:g4dn.xlarge@us-east-1",
        "instance_type": "g4dn.xlarge",
        "region": "us-east-1",
        "gpu": "T4",
        "gpu_count": 1.0,
        "gpu_memory_gb": 16.0,
        "usd_per_hour": 0.526,
    }
    # one row per instance type and region (the excerpt has 5 us-east-1 zones for g4dn.xlarge)
    assert len([r for r in rows if r["offer"] == "aws:g4dn.xlarge@us-east-1"]) == 1
    # fractional L4 and MiB memory
    g6f = next(r for r in rows if r["offer"] == "aws:g6f.2xlarge@us-east-1")
    assert g6f["gpu_count"] == 0.25 and g6f["gpu_memory_gb"] == round(5722 / 1024, 2)
    # p5e.48xlarge has no on-demand price: skipped with a warning, not priced at $0
    assert not any(r["instance_type"] == "p5e.48xlarge" for r in rows)
    assert "p5e.48xlarge in us-east-2 has no price" in err


def test_gcp_gpu_rows_add_to_host_rows(cli, tmp_path):
    csv = tmp_path / "vms.csv"
    csv.write_text(
        GCP_HEADER
        + "\n"
        + textwrap.dedent(
            """\
            n1-standard-4,4.0,15.0,,,,us-central1,us-central1-a,0.189999,0.04
            n1-standard-4,4.0,15.0,,,,us-central1,us-central1-b,0.19,0.04
            ,,,T4,1,"{'Gpus': [{'Name': 'T4', 'Manufacturer': 'NVIDIA', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 16384}}], 'TotalGpuMemoryInMiB': 16384}",us-central1,us-central1-a,0.350001,0.175
            ,,,T4,1,"{'Gpus': [{'Name': 'T4', 'Manufacturer': 'NVIDIA', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 16384}}], 'TotalGpuMemoryInMiB': 16384}",us-central1,us-central1-b,0.35,0.175
            a2-highgpu-1g,12.0,85.0,A100,1,"{'Gpus': [{'Name': 'A100', 'Manufacturer': 'NVIDIA', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 40960}}], 'TotalGpuMemoryInMiB': 40960}",us-central1,us-central1-a,0.73948,0.2
            ,,,A100,1,"{'Gpus': [{'Name': 'A100', 'Manufacturer': 'NVIDIA', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 40960}}], 'TotalGpuMemoryInMiB': 40960}",us-central1,us-central1-a,2.93391,1.1
            e2-standard-4,4.0,16.0,,,,us-central1,us-central1-a,0.134,0.04
            """
        )
    )
    rows, _ = imported(cli, csv, "gcp")
    by_type = {r["instance_type"]: r for r in rows}
    assert by_type["n1-standard-4+1xT4"]["usd_per_hour"] == 0.54
    assert by_type["n1-standard-4+1xT4"]["gpu"] == "T4"
    assert by_type["a2-highgpu-1g"]["usd_per_hour"] == round(0.73948 + 2.93391, 6)
    assert "e2-standard-4" not in " ".join(by_type)  # no GPU can attach to e2


def test_import_round_trips_through_an_offers_file(cli, tmp_path):
    out = tmp_path / "lambda.toml"
    r = cli(
        "offers",
        "import",
        FIXTURES / "lambda_v8_vms_excerpt.csv",
        "--provider",
        "lambda",
        "--out",
        out,
        "--format",
        "json",
    )
    assert r.code == 0, r.err
    from gpuseat.catalog.offers import load_offers_file

    offers = {o.id: o for o in load_offers_file(out)}
    assert offers["lambda:gpu_1x_a10@us-east-1"].price_usd == 1.29
    assert offers["lambda:gpu_1x_a10@us-east-1"].billing == "per-minute"


def test_imported_offers_feed_the_planner(cli, tmp_path):
    course = tmp_path / "c.toml"
    course.write_text(
        'participants = 3\noffers = ["aws:g4dn.xlarge@*"]\n[needs]\nmin_gpu_memory_gb = 8\n'
        "[schedule]\nstart = 2026-01-05\ndays = 2\n"
    )
    r = cli("plan", course, "--skypilot", f"aws={FIXTURES / 'aws_v8_vms_excerpt.csv'}", "--format", "json")
    assert r.code == 0, r.err
    best = json.loads(r.out)["options"][0]
    assert best["total_usd"] == round(0.526 * 48 * 3, 2)
