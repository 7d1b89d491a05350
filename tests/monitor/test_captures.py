"""Every shared capture parses to the GPUs, memory, MIG instances and processes it holds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuseat.errors import InputError
from gpuseat.nvsmi import (
    merge_list,
    parse_compute_apps_csv,
    parse_list,
    parse_number,
    parse_query_gpu_csv,
    parse_xml,
)

from .conftest import FIXTURES, H100, H100_MIG, RTX2080, section


def xml(name: str):
    return parse_xml((FIXTURES / name).read_text(encoding="utf-8"), host="t", where=name)


def test_a100_mig_xml():
    snap = xml("telegraf__a100-sxm4-v12.xml")
    assert len(snap.gpus) == 1  # the capture holds one <gpu> element (attached_gpus says 4)
    gpu = snap.gpus[0]
    assert gpu.name == "NVIDIA A100-SXM4-80GB"
    assert gpu.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert (gpu.memory_used_mib, gpu.memory_total_mib) == (50, 81920)
    assert gpu.utilization_gpu is None  # <gpu_util>N/A</gpu_util> under MIG, not 0
    assert gpu.mig_enabled is True
    assert gpu.power_w == 67.03 and gpu.temperature_c == 27
    assert [m.gpu_instance_id for m in gpu.mig] == [3, 4, 5, 6]
    assert all((m.memory_used_mib, m.memory_total_mib) == (12, 19968) for m in gpu.mig)
    assert all(m.uuid is None and m.profile is None for m in gpu.mig)  # the v12 XML has neither
    assert snap.processes == ()


def test_a10g_xml():
    snap = xml("telegraf__a10g.xml")
    (gpu,) = snap.gpus
    assert gpu.name == "NVIDIA A10G"
    assert (gpu.memory_used_mib, gpu.memory_total_mib, gpu.utilization_gpu) == (22, 23028, 0)
    assert gpu.mig_enabled is None and gpu.mig == ()
    (proc,) = snap.processes
    assert (proc.pid, proc.name, proc.used_memory_mib, proc.gpu_instance_id) == (
        725,
        "/usr/lib/xorg/Xorg",
        22,
        None,
    )
    assert proc.gpu_uuid == "GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94"


def test_t4_xml():
    snap = xml("telegraf__tesla-t4.xml")
    (gpu,) = snap.gpus
    assert gpu.name == "Tesla T4" and gpu.uuid == "GPU-d37e67a5-91dd-3774-a5cb-99096249601a"
    assert (gpu.memory_used_mib, gpu.memory_total_mib) == (1032, 15360)
    assert gpu.power_w == 26.78 and gpu.temperature_c == 40
    assert [(p.pid, p.name, p.used_memory_mib) for p in snap.processes] == [
        (675, "/usr/lib/xorg/Xorg", 22),
        (5762, "python", 1005),
    ]


def test_m60_server_xml():
    snap = xml("gpuseat__tesla-m60-x2.xml")
    assert [g.name for g in snap.gpus] == ["Tesla M60"] * 4
    assert [g.index for g in snap.gpus] == [0, 1, 2, 3]
    assert [g.memory_used_mib for g in snap.gpus] == [2062, 34, 7500, 34]
    assert {g.memory_total_mib for g in snap.gpus} == {7679}
    assert [g.utilization_gpu for g in snap.gpus] == [87, 0, 100, None]
    assert snap.gpus[0].power_w == 103.52 and snap.gpus[3].power_w is None  # <power_readings> (old DTD)
    assert [(p.pid, p.used_memory_mib) for p in snap.processes] == [(4312, 2028), (5120, 3700), (5188, 3760)]
    assert snap.processes[1].gpu_uuid == snap.gpus[2].uuid


@pytest.mark.parametrize("phase, used, procs", [("idle", 0, []), ("load", 11125, [2296, 1272, 7484])])
def test_h100_mig_csv_and_list(phase, used, procs):
    snap = parse_query_gpu_csv(section(H100_MIG, f"{phase} :: query-gpu (csv, what the exporter parses)"), host="t")
    snap = merge_list(snap, parse_list(section(H100_MIG, "capabilities :: list (-L)")))
    (gpu,) = snap.gpus
    assert gpu.name == "NVIDIA H100 80GB HBM3" and gpu.memory_total_mib == 81559
    assert gpu.utilization_gpu is None  # "[N/A]" with MIG on
    assert [m.profile for m in gpu.mig] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    assert gpu.mig[1].uuid == "MIG-00000001-0000-0000-0000-000000000001"
    assert all(m.memory_total_mib is None for m in gpu.mig)  # the CSV does not give MIG memory
    apps = parse_compute_apps_csv(section(H100_MIG, f"{phase} :: query-compute-apps (per-process)"))
    assert [p.used_memory_mib for p in apps] == procs
    if phase == "load":
        assert gpu.memory_used_mib == used
        assert [p.pid for p in apps] == [21180, 21181, 21198]


def test_h100_csv_without_mig():
    snap = parse_query_gpu_csv(section(H100, "load :: query-gpu (csv, what the exporter parses)"), host="t")
    (gpu,) = snap.gpus
    assert gpu.name == "NVIDIA H100 80GB HBM3" and gpu.mig == () and gpu.mig_enabled is False
    assert gpu.memory_total_mib == 81559
    assert isinstance(gpu.utilization_gpu, int) and isinstance(gpu.power_w, float)
    apps = parse_compute_apps_csv(section(H100, "load :: query-compute-apps (per-process)"))
    assert len(apps) == 3 and all(p.used_memory_mib for p in apps)


def test_windows_wddm_memory_is_unknown():
    snap = parse_query_gpu_csv(section(RTX2080, "idle :: query-gpu (csv, what the exporter parses)"), host="t")
    assert snap.gpus[0].name == "NVIDIA GeForce RTX 2080 SUPER"
    apps = parse_compute_apps_csv(section(RTX2080, "idle :: query-compute-apps (per-process)"))
    assert len(apps) == 19 and apps[0].pid == 2140
    assert all(p.used_memory_mib is None for p in apps)  # "[N/A]" → unknown, never 0


def test_csv_nounits_and_missing_columns():
    snap = parse_query_gpu_csv("index, uuid, memory.used [MiB]\n0, GPU-a, 12\n", host="t")
    assert snap.gpus[0].memory_used_mib == 12 and snap.gpus[0].memory_total_mib is None
    with pytest.raises(InputError, match="no column uuid"):
        parse_query_gpu_csv("index, name\n0, x\n", host="t", where="g.csv")
    with pytest.raises(InputError, match=r"g\.csv:2"):
        parse_query_gpu_csv("index, uuid\n0\n", host="t", where="g.csv")


def test_bad_xml_is_input_error():
    with pytest.raises(InputError, match="not nvidia-smi XML"):
        parse_xml("<nvidia_smi_log><gpu>", host="t")
    with pytest.raises(InputError, match="nvidia_smi_log"):
        parse_xml("<other/>", host="t")


@given(st.integers(min_value=0, max_value=10**9), st.sampled_from(["", " MiB", " %", " W", " C"]))
def test_parse_number_reads_integers_with_units(n, unit):
    assert parse_number(f"{n}{unit}") == n


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False).map(lambda f: round(f, 2)))
def test_parse_number_reads_decimals(value):
    assert parse_number(f"{value:.2f} W") == pytest.approx(value)


@given(st.sampled_from(["[N/A]", "N/A", "[Not Supported]", "", "[Requested functionality has been deprecated]"]))
def test_unknown_markers_are_none(text):
    assert parse_number(text) is None


@given(st.lists(st.tuples(st.integers(0, 99999), st.one_of(st.none(), st.integers(0, 80000))), max_size=20))
def test_compute_apps_round_trip(rows):
    text = "pid, gpu_uuid, used_gpu_memory [MiB]\n" + "".join(
        f"{pid}, GPU-x, {'[N/A]' if mem is None else f'{mem} MiB'}\n" for pid, mem in rows
    )
    assert [(p.pid, p.used_memory_mib) for p in parse_compute_apps_csv(text)] == rows
