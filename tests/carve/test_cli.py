"""``gpuseat carve`` end to end: the issue's "Done when" commands, the JSON contract, bad input."""

from __future__ import annotations

import json

import pytest

from .conftest import EXAMPLES, FIXTURES

M60 = str(EXAMPLES / "ibm-2xM60.toml")


def seats(result) -> list[dict]:
    assert result.code == 0, result.err
    return json.loads(result.out)["slices"]


@pytest.mark.parametrize(("gpu", "min_mem", "profile"), [("H200-141GB", "16", "1g.18gb"), ("A100-40GB", "4", "1g.5gb")])
def test_mig_min_mem(cli, gpu, min_mem, profile):
    got = seats(cli("carve", "--gpu", gpu, "--mode", "mig", "--min-mem", min_mem, "--format", "json"))
    assert [s["profile"] for s in got] == [profile] * 7


def test_json_contract(cli):
    result = cli("carve", M60, "--mode", "vgpu", "--seats", "4", "--format", "json")
    doc = json.loads(result.out)
    assert set(doc) == {
        "schema_version",
        "server",
        "gpu",
        "chips",
        "mode",
        "notes",
        "slices",
        "alternatives",
        "rejected",
    }
    assert doc["schema_version"] == 1 and doc["gpu"] == "M60" and len(doc["chips"]) == 4
    assert set(doc["slices"][0]) >= {"name", "gpu_index", "pci", "mode", "profile", "placement", "memory_gb"}
    assert [s["profile"] for s in doc["slices"]] == ["M60-8Q"] * 4
    reasons = {r["profile"]: r["reason"] for r in doc["rejected"]}
    assert "no CUDA in Linux guests on Maxwell" in reasons["M60-4Q"]


def test_m60_passthrough_table_and_renders(cli, tmp_path):
    table = cli("carve", M60, "--mode", "passthrough")
    assert table.code == 0 and "4 seats on ibm-2xM60 (passthrough)" in table.out
    vmx = cli("carve", M60, "--mode", "passthrough", "--render", "vsphere")
    assert vmx.out.count('pciPassthru.use64bitMMIO = "TRUE"') == 4 and "64bitMMIOSizeGB" in vmx.out
    xen = cli("carve", M60, "--mode", "passthrough", "--render", "xen", "--out", tmp_path)
    assert xen.code == 0 and "other-config:pci=0/0000:86:00.0" in (tmp_path / "xen.sh").read_text()


def test_windows_streaming_seats(cli):
    got = seats(
        cli(
            "carve",
            "--gpu",
            "M60:1",
            "--guest",
            "windows",
            "--seats",
            "8",
            "--min-mem",
            "2",
            "--mode",
            "vgpu",
            "--format",
            "json",
        )
    )
    assert len(got) == 8 and all(s["memory_gb"] >= 2 for s in got)


def test_mixed_profiles_and_nvidia_smi_capture(cli):
    mixed = seats(
        cli(
            "carve",
            "--gpu",
            "H100-80GB",
            "--profile",
            "3g.40gb,2g.20gb",
            "--profile",
            "1g.10gb",
            "--profile",
            "1g.10gb",
            "--format",
            "json",
        )
    )
    assert {(s["profile"], s["placement"]["start"]) for s in mixed} >= {("3g.40gb", 4)}
    got = seats(
        cli(
            "carve",
            "--from-nvidia-smi",
            FIXTURES / "telegraf__a100-sxm4-v12.xml",
            "--mode",
            "mig",
            "--min-mem",
            "9",  # a 1g.10gb gives 9.7 GiB (NVIDIA's -lgip figure), not 10
            "--format",
            "json",
        )
    )
    assert len(got) == 7 and got[0]["pci"] == "0000:01:00.0" and got[0]["uuid"].startswith("GPU-")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--gpu", "H200-141GB", "--mode", "mig", "--min-mem", "16", "--seats", "8"],
            "fits at most 7 seats of ≥ 16 GB",
        ),
        (["--gpu", "M61"], "Did you mean M60"),
        (["--gpu", "M60:2", "--mode", "mig"], "no MIG"),
        (["--gpu", "A30", "--profile", "4g.24gb,1g.6gb"], "impossible"),
        ([], "no server given"),
        ([M60, "--gpu", "M60"], "more than one server description"),
        ([M60, "--render", "k9s"], "unknown renderer"),
        ([str(EXAMPLES / "missing.toml")], "file not found"),
    ],
)
def test_bad_input_exits_2_with_one_message(cli, args, message):
    result = cli("carve", *args)
    assert result.code == 2
    assert message in result.err and "To fix:" in result.err and "Traceback" not in result.err
