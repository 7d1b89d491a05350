"""Issue 15: every real capture in tests/fixtures parses to the GPUs, memory, power, temperature, MIG
devices and processes it holds (values read off each file by hand and written here), and the fixes
for drivers 570+ (power), graphics-only processes, MIG from CSV + ``-L``, MIG without UUIDs and free memory.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuseat import nvsmi
from gpuseat.catalog.bundle import load_catalog
from gpuseat.core.listing import parse_list
from gpuseat.errors import InputError
from gpuseat.monitor.prometheus import render
from gpuseat.monitor.runner import observe
from gpuseat.readings import SeatEntry, SeatMap, leaves

from .conftest import FIXTURES, section

# (file, GPUs, first GPU's name, (used, total, free) MiB, util %, temp °C, power W, MIG profiles,
#  number of processes, first processes as (pid, type, MiB))
XML = [
    (
        "datakit__gtx-1050-1.xml",
        1,
        "NVIDIA GeForce GTX 1050",
        (65, 4096, 3974),
        7,
        44,
        None,
        [],
        2,
        [(1200, "G", 61), (30091, "G", 1)],
    ),
    (
        "datakit__gtx-1card.xml",
        1,
        "Tesla V100-PCIE-32GB",
        (12311, 32510, 20199),
        91,
        66,
        170.16,
        [],
        4,
        [(4027538, "C", 3214), (4027590, "C", 3288), (4157880, "C", 2912), (4165319, "C", 2890)],
    ),
    (
        "datakit__gtx-8card.xml",
        8,
        "Tesla V100S-PCIE-32GB",
        (31689, 32510, 821),
        97,
        66,
        232.8,
        [],
        8,
        [(37305, "C", 31683), (37305, "C", 29539), (37305, "C", 29533), (37305, "C", 32093)],
    ),
    (
        "gpuseat__tesla-m60-x2.xml",
        4,
        "Tesla M60",
        (2062, 7679, 5617),
        87,
        61,
        103.52,
        [],
        3,
        [(4312, "C", 2028), (5120, "C", 3700), (5188, "C", 3760)],
    ),
    (
        "telegraf__a100-sxm4-v12.xml",
        1,
        "NVIDIA A100-SXM4-80GB",
        (50, 81920, 80999),
        None,
        27,
        67.03,
        [None, None, None, None],
        0,
        [],
    ),
    ("telegraf__a10g.xml", 1, "NVIDIA A10G", (22, 23028, 22569), 0, 17, 25.58, [], 1, [(725, "G", 22)]),
    ("telegraf__gtx-1070-ti.xml", 1, "GeForce GTX 1070 Ti", (42, 4096, 4054), 0, 39, None, [], 0, []),
    ("telegraf__gtx-1660-ti.xml", 1, "Graphics Device", (0, 5912, 5912), 0, 40, 8.93, [], 0, []),
    ("telegraf__quadro-p2000-v12.xml", 1, "Quadro P2000", (1, 5120, 5051), 0, 34, 4.61, [], 0, []),
    ("telegraf__quadro-p400.xml", 1, "Quadro P400", (0, 1998, 1998), 0, 33, None, [], 0, []),
    ("telegraf__rtx-3060-v12.xml", 1, "NVIDIA GeForce RTX 3060", (116, 12288, 11806), 0, 42, 11.6, [], 0, []),
    (
        "telegraf__rtx-3080-v12.xml",
        1,
        "NVIDIA GeForce RTX 3080",
        (1128, 10240, 8938),
        0,
        31,
        22.78,
        [],
        5,
        [(835, "G", 550), (1481, "G", 18), (2214, "G", 79), (4044, "G", 541)],
    ),
    ("telegraf__rtx-3080-v13.xml", 1, "NVIDIA GeForce RTX 3080", (9184, 10240, 660), 65, 27, 139.62, [], 0, []),
    ("telegraf__rtx-3090-v12.xml", 1, "NVIDIA GeForce RTX 3090", (1, 24576, 24258), 0, 37, 27.23, [], 0, []),
    (
        "telegraf__rtx-4000-sff-ada-v13.xml",
        1,
        "NVIDIA RTX 4000 SFF Ada Generation",
        (3534, 20475, 16482),
        0,
        38,
        8.81,
        [],
        4,
        [(1842, "G", 410), (3190, "G", 451), (4937, "C", 160), (34626, "C+G", 183)],
    ),
    (
        "telegraf__tesla-t4.xml",
        1,
        "Tesla T4",
        (1032, 15360, 13939),
        0,
        40,
        26.78,
        [],
        2,
        [(675, "G", 22), (5762, "C", 1005)],
    ),
]

EXPORTER = [
    (
        "nvidia_gpu_exporter__linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.txt|idle",
        1,
        "NVIDIA GeForce RTX 4080 SUPER",
        (596, 16376, 15348),
        0,
        43,
        26.2,
        [],
        1,
        [(2165, None, 25)],
    ),
    (
        "nvidia_gpu_exporter__linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.txt|load",
        1,
        "NVIDIA GeForce RTX 4080 SUPER",
        (1474, 16376, 14470),
        7,
        46,
        84.24,
        [],
        3,
        [(2165, None, 25), (5022, None, 503), (5021, None, 360)],
    ),
    (
        "nvidia_gpu_exporter__linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt|idle",
        1,
        "NVIDIA H100 80GB HBM3",
        (0, 81559, 81081),
        0,
        41,
        69.85,
        [],
        0,
        [],
    ),
    (
        "nvidia_gpu_exporter__linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt|load",
        1,
        "NVIDIA H100 80GB HBM3",
        (19818, 81559, 61263),
        100,
        59,
        631.95,
        [],
        3,
        [(11327, None, 2566), (11328, None, 1542), (11345, None, 15690)],
    ),
    (
        "nvidia_gpu_exporter__linux-x86_64__nvidia-h100-mig__590.48.01.txt|idle",
        1,
        "NVIDIA H100 80GB HBM3",
        (59, 81559, 81022),
        None,
        42,
        71.15,
        ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"],
        0,
        [],
    ),
    (
        "nvidia_gpu_exporter__linux-x86_64__nvidia-h100-mig__590.48.01.txt|load",
        1,
        "NVIDIA H100 80GB HBM3",
        (11125, 81559, 69956),
        None,
        53,
        433.78,
        ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"],
        3,
        [(21180, None, 2296), (21181, None, 1272), (21198, None, 7484)],
    ),
    (
        "nvidia_gpu_exporter__linux-x86_64__nvidia-h200-mig__590.48.01.txt|idle",
        1,
        "NVIDIA H200",
        (55, 143771, 143103),
        None,
        28,
        78.28,
        ["1c.3g.71gb", "2c.3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"],
        0,
        [],
    ),
    (
        "nvidia_gpu_exporter__linux-x86_64__nvidia-h200-mig__590.48.01.txt|load",
        1,
        "NVIDIA H200",
        (16959, 143771, 126199),
        None,
        36,
        295.01,
        ["1c.3g.71gb", "2c.3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"],
        3,
        [(12249, None, 2194), (12250, None, 1170), (12267, None, 13526)],
    ),
    (
        "nvidia_gpu_exporter__linux-x86_64__nvidia-h200__590.48.01.txt|idle",
        1,
        "NVIDIA H200",
        (0, 143771, 143158),
        0,
        28,
        77.71,
        [],
        0,
        [],
    ),
    (
        "nvidia_gpu_exporter__linux-x86_64__nvidia-h200__590.48.01.txt|load",
        1,
        "NVIDIA H200",
        (32362, 143771, 110796),
        100,
        52,
        627.4,
        [],
        3,
        [(10291, None, 2566), (10293, None, 1542), (10309, None, 28234)],
    ),
    (
        "nvidia_gpu_exporter__linux-x86_64__nvidia-l40s__595.80.txt|idle",
        1,
        "NVIDIA L40S",
        (0, 46068, 45460),
        100,
        63,
        144.97,
        [],
        0,
        [],
    ),
    (
        "nvidia_gpu_exporter__linux-x86_64__nvidia-l40s__595.80.txt|load",
        1,
        "NVIDIA L40S",
        (1235, 46068, 44225),
        9,
        54,
        110.23,
        [],
        2,
        [(20037, None, 538), (20038, None, 681)],
    ),
    (
        "nvidia_gpu_exporter__windows-x86_64__nvidia-geforce-rtx-2080-super__610.62.txt|idle",
        1,
        "NVIDIA GeForce RTX 2080 SUPER",
        (797, 8192, 7191),
        0,
        40,
        39.25,
        [],
        19,
        [(2140, None, None), (13264, None, None), (13504, None, None), (13160, None, None)],
    ),
    (
        "nvidia_gpu_exporter__windows-x86_64__nvidia-geforce-rtx-2080-super__610.62.txt|load",
        1,
        "NVIDIA GeForce RTX 2080 SUPER",
        (1366, 8192, 6622),
        7,
        44,
        97.99,
        [],
        21,
        [(2140, None, None), (13264, None, None), (13504, None, None), (13160, None, None)],
    ),
]


def _check(snap, n_gpus, name, memory, util, temp, power, migs, n_procs, first_procs):
    gpu = snap.gpus[0]
    assert len(snap.gpus) == n_gpus
    assert gpu.name == name
    assert (gpu.memory_used_mib, gpu.memory_total_mib, gpu.memory_free_mib) == memory
    assert (gpu.utilization_gpu, gpu.temperature_c, gpu.power_w) == (util, temp, power)
    assert [m.profile for m in gpu.mig] == migs
    assert len(snap.processes) == n_procs
    assert [(p.pid, p.kind, p.used_memory_mib) for p in snap.processes[:4]] == first_procs


@pytest.mark.parametrize("row", XML, ids=[r[0] for r in XML])
def test_every_xml_capture(row):
    name, *expected = row
    _check(nvsmi.parse_xml((FIXTURES / name).read_text(encoding="utf-8"), host="t", where=name), *expected)


def exporter_snapshot(name: str, phase: str):
    """What ``top --from-csv G --apps A --list L`` reads from one nvidia_gpu_exporter capture."""
    path = FIXTURES / name
    snap = nvsmi.parse_query_gpu_csv(section(path, f"{phase} :: query-gpu (csv, what the exporter parses)"), host="t")
    apps = nvsmi.parse_compute_apps_csv(section(path, f"{phase} :: query-compute-apps (per-process)"))
    return nvsmi.merge_list(replace(snap, processes=apps), parse_list(section(path, "capabilities :: list (-L)")))


@pytest.mark.parametrize("row", EXPORTER, ids=[r[0] for r in EXPORTER])
def test_every_exporter_capture(row):
    key, *expected = row
    name, phase = key.split("|")
    _check(exporter_snapshot(name, phase), *expected)


def test_every_capture_file_is_covered():
    from .test_health import HEALTH

    others = {  # issue 26 captures, each read in tests/monitor/test_health.py or tests/carve
        "telegraf__pro-6000-maxq-blackwell-v13-excerpt.xml",
        "harvester-pcidevices__l40s-creatable_vgpu_types.txt",
        "mig-and-mps__h100-nvl-lgip.txt",
        "mig-and-mps__h100-nvl-lgipp.txt",
        "mig-and-mps__h100-nvl-smi.txt",
        "rtxpro6000__lgip.txt",
        "rtxpro6000__lgipp.txt",
        "rtxpro6000__lgi.txt",
        "rtxpro6000__lci.txt",
        "rtxpro6000__L.txt",
        "bumblebee-677__xid-dmesg.txt",
        "open-gpu-kernel-modules-1150__xid-journal.txt",
        # issue 38 captures, read in tests/carve/test_issue38.py
        "ansible-slurm-appliance__h100-80gb-lgip.txt",
        "vgpu-guest__grid-v100d-8c-q.txt",
        "vgpu-guest__grid-a100-4c-q-excerpt.txt",
    }
    assert {n for n in HEALTH if n.endswith(".xml")} >= {r[0] for r in XML if r[0] != "datakit__ixsmi-q-x.xml"}
    names = {r[0] for r in XML} | {r[0].split("|")[0] for r in EXPORTER} | {"datakit__ixsmi-q-x.xml"} | others
    on_disk = {p.name for p in FIXTURES.iterdir() if p.suffix in (".xml", ".txt")}
    assert on_disk == names


def test_iluvatar_ixsmi_text_is_refused_not_crashed():
    with pytest.raises(InputError, match="not nvidia-smi XML"):
        nvsmi.parse_xml((FIXTURES / "datakit__ixsmi-q-x.xml").read_text(encoding="utf-8"), host="t")


def test_power_on_drivers_570_and_later_is_the_average():
    """Item 4: v13 XML has only average_power_draw / instant_power_draw (139.62 W average, 142.33 W instant)."""
    snap = nvsmi.parse_xml((FIXTURES / "telegraf__rtx-3080-v13.xml").read_text(encoding="utf-8"), host="t")
    assert snap.gpus[0].power_w == 139.62
    text = (FIXTURES / "telegraf__rtx-3080-v13.xml").read_text(encoding="utf-8")
    instant_only = text.replace("<average_power_draw>139.62 W</average_power_draw>", "")
    assert nvsmi.parse_xml(instant_only, host="t").gpus[0].power_w == 142.33


def test_graphics_only_processes_do_not_make_a_seat_active():
    """Item 5: Xorg/browsers (type G) are listed but the seat stays idle; a C process makes it active."""
    a10g = nvsmi.parse_xml((FIXTURES / "telegraf__a10g.xml").read_text(encoding="utf-8"), host="t")
    (state,) = observe(a10g, SeatMap([SeatEntry("s", a10g.gpus[0].uuid, "ann")]), users={})[1]
    assert [a.process.name for a in state.processes] == ["/usr/lib/xorg/Xorg"] and not state.active
    t4 = nvsmi.parse_xml((FIXTURES / "telegraf__tesla-t4.xml").read_text(encoding="utf-8"), host="t")
    (state,) = observe(t4, SeatMap(), users={})[1]
    assert len(state.processes) == 2 and state.active
    ada = nvsmi.parse_xml((FIXTURES / "telegraf__rtx-4000-sff-ada-v13.xml").read_text(encoding="utf-8"), host="t")
    assert [p.compute for p in ada.processes] == [False, False, True, True]  # G, G, C, C+G


H200_MIG = "nvidia_gpu_exporter__linux-x86_64__nvidia-h200-mig__590.48.01.txt"


def test_h200_mig_from_csv_keeps_processes_and_exports_distinct_devices():
    """Item 6: 3 processes (16.9 GB) stay visible; GPU memory is exported; the two 1g.18gb differ."""
    snap = exporter_snapshot(H200_MIG, "load")
    seats = SeatMap([SeatEntry("gpu", snap.gpus[0].uuid, "eve")])
    attributed, states = observe(snap, seats, users={})
    assert len(states) == 6  # 5 MIG devices + the whole GPU holding the processes the CSV does not place
    (whole,) = [s for s in states if s.leaf.mig is None]
    assert [a.process.pid for a in whole.processes] == [12249, 12250, 12267] and whole.active
    assert sum(a.process.used_memory_mib for a in whole.processes) == 16890
    assert {a.seat for a in attributed} == {"gpu"}
    families = {f.name: f for f in text_string_to_metric_families(render(snap, states))}
    used = families["DCGM_FI_DEV_FB_USED"].samples
    assert [s.value for s in used if s.labels["GPU_I_ID"] == "" and s.labels["mig_uuid"] == ""] == [16959]
    procs = families["gpuseat_seat_processes"].samples
    label_sets = [tuple(sorted(s.labels.items())) for s in procs]
    assert len(label_sets) == len(set(label_sets)) == 6  # Prometheus would drop duplicates
    small = [s for s in procs if s.labels["GPU_I_PROFILE"] == "1g.18gb"]
    assert {s.labels["mig_uuid"] for s in small} == {
        "MIG-00000003-0000-0000-0000-000000000003",
        "MIG-00000004-0000-0000-0000-000000000004",
    }
    assert [s.value for s in procs if s.labels["seat"] == "gpu"] == [3]


A100 = "telegraf__a100-sxm4-v12.xml"


def test_mig_without_uuid_is_named_by_gpu_instance_and_profile_derived():
    """Item 6: the v12 XML has no MIG UUID or profile: GI ids name the devices, memory + SMs the profile."""
    snap = nvsmi.parse_xml((FIXTURES / A100).read_text(encoding="utf-8"), host="t")
    named = nvsmi.name_mig_profiles(snap, load_catalog())
    gpu = named.gpus[0]
    assert [m.profile for m in gpu.mig] == ["1g.20gb"] * 4  # 14 SMs, 19968 MiB on an A100-80GB
    assert [leaf.uuid for leaf in leaves(named)] == [f"{gpu.uuid}/gi{n}" for n in (3, 4, 5, 6)]
    # The same device on an A100-40GB with 42 SMs is a 3g.20gb (edited copy of the real capture).
    forty = (
        (FIXTURES / A100)
        .read_text(encoding="utf-8")
        .replace("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB")
        .replace("<multiprocessor_count>14</multiprocessor_count>", "<multiprocessor_count>42</multiprocessor_count>")
    )
    snap40 = nvsmi.name_mig_profiles(nvsmi.parse_xml(forty, host="t"), load_catalog())
    assert {m.profile for m in snap40.gpus[0].mig} == {"3g.20gb"}


def test_mig_processes_in_xml_land_on_their_gpu_instance():
    text = (FIXTURES / A100).read_text(encoding="utf-8")
    proc = (
        "<processes><process_info><gpu_instance_id>5</gpu_instance_id><compute_instance_id>0</compute_instance_id>"
        "<pid>4242</pid><type>C</type><process_name>python</process_name><used_memory>900 MiB</used_memory>"
        "</process_info></processes>"
    )
    snap = nvsmi.parse_xml(text.replace("<processes />", proc), host="t")  # the capture has none
    (p,) = snap.processes
    assert p.mig_uuid == f"{snap.gpus[0].uuid}/gi5"
    states = observe(snap, SeatMap(), users={})[1]
    assert [len(s.processes) for s in states] == [0, 0, 1, 0]


def test_free_memory_is_read_not_computed():
    """Item 7: T4 reserves 388 MiB: free is 13939, not 15360 - 1032 = 14328."""
    t4 = nvsmi.parse_xml((FIXTURES / "telegraf__tesla-t4.xml").read_text(encoding="utf-8"), host="t")
    families = {f.name: f for f in text_string_to_metric_families(render(t4, observe(t4, SeatMap(), users={})[1]))}
    assert [s.value for s in families["DCGM_FI_DEV_FB_FREE"].samples] == [13939]


@pytest.mark.parametrize("value", ["1e999", "99999999999999999999999999 MiB", "-5 MiB", "nan"])
def test_values_out_of_range_are_dropped_not_stored(value, caplog):
    """Item 1/9: infinity, huge integers and negative memory become unknown, with a warning."""
    text = (FIXTURES / "telegraf__tesla-t4.xml").read_text(encoding="utf-8")
    snap = nvsmi.parse_xml(text.replace("<used>1032 MiB</used>", f"<used>{value}</used>", 1), host="t")
    assert snap.gpus[0].memory_used_mib is None and snap.gpus[0].memory_total_mib == 15360


def test_a_seats_file_can_name_a_mig_device_without_uuid(cli, tmp_path, data_dir):
    gpu = "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    (tmp_path / "seats.csv").write_text(f"id,device,participant\nm5,{gpu}/gi5,ann\n")
    r = cli("top", "--from-xml", FIXTURES / A100, "--seats", tmp_path / "seats.csv", "--once", "--format", "json")
    assert r.code == 0, r.err
    seats = {s["device"]: s for s in json.loads(r.out)["seats"]}
    assert seats[f"{gpu}/gi5"]["seat"] == "m5" and seats[f"{gpu}/gi5"]["profile"] == "1g.20gb"
    (tmp_path / "bad.csv").write_text(f"id,device\nx,{gpu}/gi5;rm\n")
    assert cli("top", "--from-xml", FIXTURES / A100, "--seats", tmp_path / "bad.csv", "--once").code == 2
