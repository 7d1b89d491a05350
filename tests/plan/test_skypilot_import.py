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
    # imported offers take the provider's rules: 48 h × 3 seats at $0.526 plus a public IPv4 at $0.005/h
    assert best["total_usd"] == round(0.526 * 48 * 3 + 0.005 * 48 * 3, 2) == 76.46
    assert [r["id"] for r in best["prices"][0]["rules"]] == ["aws-ec2-per-second", "aws-public-ipv4", "aws-free-egress"]


GPU_INFO = "\"{{'Gpus': [{{'Name': '{name}', 'Manufacturer': 'NVIDIA', 'Count': {n}, 'MemoryInfo': {{'SizeInMiB': {mib}}}}}], 'TotalGpuMemoryInMiB': {mib}}}\""


def gpu_row(name: str, n: int, mib: int, price: float) -> str:
    """A GCP v8 GPU row: no instance type, the GPU's own price (skypilot-catalog issue #31)."""
    return f",,,{name},{n},{GPU_INFO.format(name=name, n=n, mib=mib)},us-central1,us-central1-a,{price},{price / 3:.4f}"


def test_gcp_machine_families_in_the_v8_layout(cli, tmp_path):
    """Host rows carry no accelerator and GPU rows no instance type (SkyPilot v8 GCP layout). A100 goes only on
    a2-highgpu (host 0.73948 + GPU 2.93391 = 3.67339 $/h), L4 only on g2 (g2-standard-24 takes 2: 1.0 + 1.12008),
    T4 and P4 on N1 within the vCPU limits (1 T4: up to 48 vCPUs, so n1-standard-96 takes 4, not 1)."""
    csv = tmp_path / "vms.csv"
    rows = [
        "a2-highgpu-1g,12.0,85.0,,,,us-central1,us-central1-a,0.73948,0.2",
        "n1-standard-4,4.0,15.0,,,,us-central1,us-central1-a,0.19,0.04",
        "n1-standard-96,96.0,360.0,,,,us-central1,us-central1-a,4.56,1.0",
        "g2-standard-24,24.0,96.0,,,,us-central1,us-central1-a,1.0,0.3",
        gpu_row("A100", 1, 40960, 2.93391),
        gpu_row("T4", 1, 16384, 0.35),
        gpu_row("T4", 4, 16384, 1.40),
        gpu_row("L4", 2, 23034, 1.12008),
        gpu_row("P4", 1, 8192, 0.60),
    ]
    csv.write_text(GCP_HEADER + "\n" + "\n".join(rows) + "\n")
    rows_out, _ = imported(cli, csv, "gcp")
    by_type = {r["instance_type"]: r for r in rows_out}
    assert by_type["a2-highgpu-1g"]["usd_per_hour"] == round(0.73948 + 2.93391, 6) == 3.67339
    assert by_type["a2-highgpu-1g"]["gpu"] == "A100-40GB" and by_type["a2-highgpu-1g"]["gpu_count"] == 1
    assert not [t for t in by_type if t.startswith("n1-") and "A100" in t]  # no A100 on an N1 host
    assert not [t for t in by_type if t.startswith("n1-") and "L4" in t]
    assert by_type["n1-standard-4+1xT4"]["usd_per_hour"] == 0.54
    assert "n1-standard-96+1xT4" not in by_type
    assert by_type["n1-standard-96+4xT4"]["usd_per_hour"] == round(4.56 + 1.40, 6)
    assert by_type["n1-standard-4+1xP4"]["gpu"] == "P4"
    g2 = by_type["g2-standard-24"]
    assert g2["gpu"] == "L4" and g2["gpu_count"] == 2 and g2["usd_per_hour"] == round(1.0 + 1.12008, 6)
    assert g2["gpu_memory_gb"] == 24  # 23,034 MiB is the rounded 24 GB of the GPU catalog


def test_imported_copy_replaces_the_bundled_offer(cli, tmp_path):
    """The AWS excerpt's g5.xlarge in us-east-1 is the bundled aws:g5.xlarge: ranked once, with 24 GB (the
    catalog's A10G memory; the CSV's 22,888 MiB is 22.35 GB)."""
    rows, _ = imported(cli, FIXTURES / "aws_v8_vms_excerpt.csv", "aws")
    g5 = next(r for r in rows if r["offer"] == "aws:g5.xlarge@us-east-1")
    assert g5["gpu_memory_gb"] == 24
    course = tmp_path / "c.toml"
    course.write_text(
        'participants = 2\noffers = ["aws:g5.xlarge*"]\n[needs]\nmin_gpu_memory_gb = 20\n'
        "[schedule]\nstart = 2026-01-05\ndays = 1\n"
    )
    r = cli("plan", course, "--skypilot", f"aws={FIXTURES / 'aws_v8_vms_excerpt.csv'}", "--format", "json")
    assert r.code == 0, r.err
    result = json.loads(r.out)
    used = [x["offer"] for o in result["options"] for x in o["offers"]]
    assert "aws:g5.xlarge" not in used and "aws:g5.xlarge@us-east-1" in used
    assert len(used) == len(set(used))


def test_bad_rows_on_import(cli, tmp_path):
    header = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region\n"
    zero = tmp_path / "zero.csv"
    zero.write_text(header + "g4dn.xlarge,T4,0,4,16,0.526,us-east-1\ng4dn.2xlarge,T4,1,8,32,0.752,us-east-1\n")
    r = cli("offers", "import", zero, "--provider", "aws", "--format", "json")
    assert r.code == 0 and "Traceback" not in r.err
    assert f"{zero}:2: g4dn.xlarge lists T4 × 0; skipped" in r.err
    assert [o["instance_type"] for o in json.loads(r.out)] == ["g4dn.2xlarge"]
    spaced = tmp_path / "spaced.csv"
    spaced.write_text(header + "g4dn x large,T4,1,4,16,0.526,us-east-1\n")
    r = cli("offers", "import", spaced, "--provider", "aws")
    assert r.code == 2 and "Traceback" not in r.err
    assert f"{spaced}:2: column InstanceType" in r.err and "'g4dn x large'" in r.err


def test_a_file_without_rows_is_not_a_catalog(cli, tmp_path):
    for body in ("\x00\x01binary", "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region\n"):
        path = tmp_path / "vms.csv"
        path.write_text(body)
        r = cli("offers", "import", path, "--provider", "aws")
        assert r.code == 2 and "not a SkyPilot vms.csv: no rows" in r.err and "Traceback" not in r.err


def test_providers_without_a_skypilot_catalog_are_not_importable(cli):
    """IBM classic bare metal has billing rules and regions in providers.toml but no SkyPilot catalog."""
    r = cli("offers", "import", FIXTURES / "aws_v8_vms_excerpt.csv", "--provider", "ibm")
    assert r.code == 2 and "unknown provider 'ibm'" in r.err and "aws" in r.err
