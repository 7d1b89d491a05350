"""Issue 26: GPU health and MIG names from what the driver reports.

Every value is compared with the capture it comes from (tests/fixtures, SOURCES.md): the health fields
of every ``-q -x`` file, the ``-q`` text of the nvidia_gpu_exporter captures, MIG names inferred from
``-q`` against the same capture's ``-L``, the H100 NVL ``MIG devices`` table against the walkthrough's own
``-cgi 9,15,19``, Xid lines of two real kernel logs, and the alerts and metrics built from them.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from gpuseat import nvsmi, nvsmi_health, nvsmi_mig, nvsmi_text
from gpuseat.catalog.bundle import load_catalog
from gpuseat.core.mig import MigDeviceFacts, infer_names
from gpuseat.monitor.alerts import ECC, POWER, THERMAL, XID, AlertTracker
from gpuseat.monitor.prometheus import render
from gpuseat.monitor.runner import observe
from gpuseat.readings import SeatMap

from .conftest import FIXTURES, section

CAT = load_catalog()

# file → (driver, mem clock MHz, fan %, power limit W, clocks-event mask, ECC corrected/uncorrected volatile,
#         corrected/uncorrected aggregate, retired SBE/DBE/pending, remapped corr/unc/pending/failure),
# read off each file by hand (N/A → None; an "Active" idle reason → bit 0x1).
HEALTH = {
    "datakit__gtx-1050-1.xml": ("515.65.01", 2504, None, None, 1, None, None, None, None, None, None, None, None, None, None, None),
    "datakit__gtx-1card.xml": ("460.39", 877, None, 250.0, 0, 0, 0, 0, 0, 0, 0, False, None, None, None, None),
    "datakit__gtx-8card.xml": ("460.73.01", 1107, None, 250.0, 0, 0, 0, 0, 0, 0, 0, False, None, None, None, None),
    "gpuseat__tesla-m60-x2.xml": ("352.79", None, None, 150.0, None, None, None, None, None, None, None, None, None, None, None, None),
    "telegraf__a100-sxm4-v12.xml": ("535.54.03", 1593, None, 500.0, 0, 0, 0, 0, 0, None, None, None, None, None, None, None),
    "telegraf__a10g.xml": ("515.105.01", 405, 0, 300.0, 1, 0, 0, 0, 0, None, None, None, 0, 0, False, False),
    "telegraf__gtx-1070-ti.xml": (None, 405, 100, None, None, None, None, None, None, None, None, None, None, None, None, None),
    "telegraf__gtx-1660-ti.xml": ("418.43", 405, 0, 130.0, 1, None, None, None, None, None, None, None, None, None, None, None),
    "telegraf__quadro-p2000-v12.xml": ("525.125.06", 405, 46, 75.0, 1, None, None, None, None, None, None, None, None, None, None, None),
    "telegraf__quadro-p400.xml": ("418.43", 405, 34, None, 1, None, None, None, None, None, None, None, None, None, None, None),
    "telegraf__rtx-3060-v12.xml": ("570.124.04", 405, 0, 170.0, 1, None, None, None, None, None, None, None, None, None, None, None),
    "telegraf__rtx-3080-v12.xml": ("536.40", 405, 0, 336.0, 1, None, None, None, None, None, None, None, None, None, None, None),
    "telegraf__rtx-3080-v13.xml": ("595.58.03", 9251, 0, 320.0, 0, None, None, None, None, None, None, None, None, None, None, None),
    "telegraf__rtx-3090-v12.xml": ("525.147.05", 405, 0, 200.0, 1, None, None, None, None, None, None, None, None, None, None, None),
    "telegraf__rtx-4000-sff-ada-v13.xml": ("595.84", 405, 30, 70.0, 1, None, None, None, None, None, None, None, 0, 0, False, False),
    "telegraf__tesla-t4.xml": ("515.105.01", 5000, None, 70.0, 0, 0, 0, 0, 0, 0, 0, False, None, None, None, None),
    "telegraf__pro-6000-maxq-blackwell-v13-excerpt.xml": ("590.44.01", 405, 30, 300.0, 0, None, None, None, None, None, None, None, 0, 0, False, False),
}  # fmt: skip
FIELDS = (
    "driver_version", "clock_mem_mhz", "fan_percent", "power_limit_w", "clocks_event_reasons",
    "ecc_sbe_volatile", "ecc_dbe_volatile", "ecc_sbe_aggregate", "ecc_dbe_aggregate",
    "retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending",
    "remapped_rows_correctable", "remapped_rows_uncorrectable", "remapped_rows_pending", "remapped_rows_failure",
)  # fmt: skip
MIG_CAPTURES = {
    "nvidia_gpu_exporter__linux-x86_64__nvidia-h100-mig__590.48.01.txt": "H100",
    "nvidia_gpu_exporter__linux-x86_64__nvidia-h200-mig__590.48.01.txt": "H200",
}


def xml(name: str):
    return nvsmi.parse_xml((FIXTURES / name).read_text(encoding="utf-8"), host="t", where=name)


@pytest.mark.parametrize("name", sorted(HEALTH))
def test_every_xml_capture_health_field(name):
    gpu = xml(name).gpus[0]
    assert tuple(getattr(gpu, f) for f in FIELDS) == HEALTH[name]


def test_clock_event_bits_are_nvmls():
    """A 'HW Thermal Slowdown: Active' line sets NVML's 0x40 (an edit of a real capture, marked here)."""
    text = (FIXTURES / "telegraf__rtx-3080-v13.xml").read_text(encoding="utf-8")
    hot = text.replace(
        "<clocks_event_reason_hw_thermal_slowdown>Not Active", "<clocks_event_reason_hw_thermal_slowdown>Active"
    ).replace("<clocks_event_reason_sw_power_cap>Not Active", "<clocks_event_reason_sw_power_cap>Active")
    assert nvsmi.parse_xml(hot, host="t").gpus[0].clocks_event_reasons == 0x40 | 0x4


@pytest.mark.parametrize("name", sorted(MIG_CAPTURES))
@pytest.mark.parametrize("phase", ["idle", "load"])
def test_q_text_gives_the_names_minus_l_gives(name, phase):
    """Only -q (no -L): every MIG device of the real H100/H200 captures is named as -L names it, flagged inferred."""
    path = FIXTURES / name
    snap = nvsmi_text.parse_q_text(section(path, f"{phase} :: query (-q)"), host="t")
    named = nvsmi.name_mig_profiles(snap, CAT)
    listed = nvsmi.parse_list(section(path, "capabilities :: list (-L)"))
    assert [m.profile for m in named.gpus[0].mig] == [m.profile for m in listed[0].mig]
    assert all(m.profile_inferred for m in named.gpus[0].mig)
    csv = nvsmi.parse_query_gpu_csv(section(path, f"{phase} :: query-gpu (csv, what the exporter parses)"), host="t")
    gpu, row = named.gpus[0], csv.gpus[0]
    assert (gpu.name, gpu.uuid, gpu.memory_total_mib, gpu.driver_version) == (
        row.name,
        row.uuid,
        row.memory_total_mib,
        "590.48.01",
    )
    assert gpu.power_limit_w == 700.0 and gpu.ecc_dbe_volatile == 0 and gpu.clocks_event_reasons is not None


def test_q_text_mig_facts_are_the_capture_values():
    path = FIXTURES / "nvidia_gpu_exporter__linux-x86_64__nvidia-h200-mig__590.48.01.txt"
    mig = nvsmi_text.parse_q_text(section(path, "idle :: query (-q)"), host="t").gpus[0].mig
    assert [
        (m.gpu_instance_id, m.compute_instance_id, m.multiprocessors, m.copy_engines, m.memory_total_mib) for m in mig
    ] == [
        (2, 0, 16, 3, 71424),
        (2, 1, 32, 3, 71424),
        (3, 0, 32, 2, 33280),
        (9, 0, 16, 1, 16384),
        (10, 0, 16, 1, 16384),
    ]


def test_h100_nvl_table_is_named_as_the_walkthrough_created_it():
    """The walkthrough ran `mig -cgi 9,15,19` (3g.47gb, 1g.24gb, 1g.12gb by its own -lgip); the table's
    devices (memory, SMs, CEs) are named the same from the catalog's H100-94GB table."""
    rows = nvsmi_mig.parse_mig_table((FIXTURES / "mig-and-mps__h100-nvl-smi.txt").read_text())
    facts = [
        MigDeviceFacts(
            gpu_instance_id=r.gpu_instance_id,
            memory_mib=r.total_mib,
            multiprocessors=r.multiprocessors,
            copy_engines=r.copy_engines,
        )
        for r in rows
    ]
    assert infer_names(facts, CAT.partitions.mig_profiles["H100-94GB"]) == ["3g.47gb", "1g.24gb", "1g.12gb"]
    lgip = {r.profile_id: r for r in nvsmi_mig.parse_lgip((FIXTURES / "mig-and-mps__h100-nvl-lgip.txt").read_text())}
    assert [lgip[i].name for i in (9, 15, 19)] == ["3g.47gb", "1g.24gb", "1g.12gb"]
    catalog = {p.name: p for p in CAT.partitions.mig_profiles["H100-94GB"]}
    for row in lgip.values():  # the catalog's table equals the driver's print
        assert (catalog[row.name].gi_id, catalog[row.name].usable_gb, catalog[row.name].copy_engines) == (
            row.profile_id,
            row.memory_gib,
            row.copy_engines,
        )


@pytest.mark.parametrize(
    "gpu_id", ["H100-80GB", "H100-94GB", "H200-141GB", "B200", "GH200", "GH200-144GB", "RTX-PRO-6000"]
)
def test_devices_derived_from_lgip_figures_get_their_profile(gpu_id):
    """Derived, not captured: a device with each profile's -lgip memory and copy engines (catalog figures)."""
    profiles = CAT.partitions.mig_profiles[gpu_id]
    plain = [p for p in profiles if "+" not in p.name and "-" not in p.name]
    facts = [
        MigDeviceFacts(gpu_instance_id=i, memory_mib=p.seat_gb * 1024, copy_engines=p.copy_engines)
        for i, p in enumerate(plain)
    ]
    assert infer_names(facts, profiles) == [p.name for p in plain]


def test_a_real_b200_device_row_is_a_1g_23gb():
    """20,992 MiB (the B200 device row the issue cites) with 2 copy engines is a 1g.23gb, not a 2g.45gb."""
    fact = MigDeviceFacts(gpu_instance_id=7, memory_mib=20992, multiprocessors=18, copy_engines=2)
    assert infer_names([fact], CAT.partitions.mig_profiles["B200"]) == ["1g.23gb"]


def test_no_sm_constant_is_left():
    assert not hasattr(nvsmi, "SM_PER_SLICE")


def test_lgi_and_lci_name_devices_before_any_inference():
    """Names from -lgi/-lci win: the RTX PRO 6000 walkthrough's four 1g.24gb instances (GI 3–6)."""
    from gpuseat.readings import Gpu, MigInstance, Snapshot

    migs = tuple(MigInstance(None, None, gi, 0, memory_total_mib=24192) for gi in (3, 4, 5, 6))
    snap = Snapshot("t", 0.0, (Gpu(0, "GPU-x", "NVIDIA RTX PRO 6000 Blackwell Server Edition", mig=migs),))
    gis = nvsmi_mig.parse_lgi((FIXTURES / "rtxpro6000__lgi.txt").read_text())
    cis = nvsmi_mig.parse_lci((FIXTURES / "rtxpro6000__lci.txt").read_text())
    named = nvsmi_mig.name_from_instances(snap, gis, cis)
    assert [(m.profile, m.profile_inferred) for m in named.gpus[0].mig] == [("1g.24gb", False)] * 4
    assert [(g.start, g.size) for g in gis] == [(0, 3), (3, 3), (6, 3), (9, 3)]


def test_csv_path_places_processes_on_their_mig_device(cli, tmp_path):
    """CSV + -L + the plain table: the three H200 processes land on 2c.3g.71gb (GI 2, CI 1), not on the GPU."""
    path = FIXTURES / "nvidia_gpu_exporter__linux-x86_64__nvidia-h200-mig__590.48.01.txt"
    files = {}
    for key, title in (
        ("csv", "load :: query-gpu (csv, what the exporter parses)"),
        ("apps", "load :: query-compute-apps (per-process)"),
        ("list", "capabilities :: list (-L)"),
        ("table", "load :: nvidia-smi (default table)"),
    ):
        files[key] = tmp_path / f"{key}.txt"
        files[key].write_text(section(path, title))
    got = cli(
        "top", "--from-csv", files["csv"], "--apps", files["apps"], "--list", files["list"],
        "--table", files["table"], "--once", "--format", "json",
    )  # fmt: skip
    assert got.code == 0, got.err
    doc = json.loads(got.out)
    assert {p["pid"]: p["mig_uuid"] for p in doc["processes"]} == dict.fromkeys(
        (12249, 12250, 12267), "MIG-00000001-0000-0000-0000-000000000001"
    )
    mig = doc["gpus"][0]["mig"]
    assert [(m["profile"], m["gpu_instance_id"], m["compute_instance_id"]) for m in mig] == [
        ("1c.3g.71gb", 2, 0), ("2c.3g.71gb", 2, 1), ("2g.35gb", 3, 0), ("1g.18gb", 9, 0), ("1g.18gb", 10, 0),
    ]  # fmt: skip


def test_xid_lines_of_real_kernel_logs():
    dmesg = nvsmi_health.parse_xid_log((FIXTURES / "bumblebee-677__xid-dmesg.txt").read_text())
    assert [(e.pci, e.xid, e.uptime_s) for e in dmesg] == [
        ("0000:01:00", 32, 24128.828315),
        ("0000:01:00", 32, 24128.828608),
        ("0000:01:00", 31, 24128.834365),
    ]
    journal = nvsmi_health.parse_xid_log((FIXTURES / "open-gpu-kernel-modules-1150__xid-journal.txt").read_text())
    assert len(journal) == 7 and {e.xid for e in journal} == {45} and journal[0].text.startswith("pid=1818990")
    assert nvsmi_health.bus_key("00000000:01:00.0") == nvsmi_health.bus_key("0000:01:00")
    assert nvsmi_health.bus_key("00000000:DC:00.0") == nvsmi_health.bus_key(journal[0].pci)


def test_xid_from_a_kernel_log_raises_an_alert_and_a_metric():
    from gpuseat.services.monitoring import nvsmi_health_apply

    snap = nvsmi_health_apply(
        xml("telegraf__a100-sxm4-v12.xml"), (FIXTURES / "bumblebee-677__xid-dmesg.txt").read_text()
    )
    gpu = snap.gpus[0]
    assert (gpu.xid_last, gpu.xid_count) == (31, 3)
    _, states = observe(snap, SeatMap(), users={})
    alerts = AlertTracker().update(snap, states)
    assert [(a.kind, a.key) for a in alerts if a.kind == XID] == [(XID, gpu.uuid)]
    assert "Xid 31, 3 so far" in next(a.message for a in alerts if a.kind == XID)
    fams = {f.name: f for f in text_string_to_metric_families(render(snap, states))}
    (xid,) = fams["DCGM_FI_DEV_XID_ERRORS"].samples
    assert xid.value == 31 and xid.labels["DCGM_FI_DRIVER_VERSION"] == "535.54.03"
    other = nvsmi_health_apply(xml("telegraf__a10g.xml"), (FIXTURES / "bumblebee-677__xid-dmesg.txt").read_text())
    assert other.gpus[0].xid_last is None  # another bus: no Xid for this GPU


def test_new_ecc_errors_and_long_throttling_alert_once_then_clear():
    base = xml("telegraf__tesla-t4.xml")
    gpu = base.gpus[0]
    tracker = AlertTracker(throttle_minutes=5)

    def tick(at: float, **changes):
        snap = replace(base, taken_at=at, gpus=(replace(gpu, **changes),))
        return {(a.kind, a.raised) for a in tracker.update(snap, observe(snap, SeatMap(), users={})[1])}

    assert tick(0.0, clocks_event_reasons=0x40) == set()  # throttled, not yet for minutes
    assert tick(120.0, clocks_event_reasons=0x40, ecc_dbe_volatile=0) == set()  # 0 = the baseline
    assert tick(301.0, clocks_event_reasons=0x40 | 0x4, ecc_dbe_volatile=2) == {(THERMAL, True), (ECC, True)}
    assert tick(400.0, clocks_event_reasons=0x4, ecc_dbe_volatile=2) == {(THERMAL, False)}
    assert tick(720.0, clocks_event_reasons=0x4, ecc_dbe_volatile=2) == {(POWER, True)}
    assert tick(800.0, clocks_event_reasons=0x1, ecc_dbe_volatile=2, remapped_rows_failure=True) == {(POWER, False)}
    assert (ECC, gpu.uuid) in tracker.open  # still open: the errors did not go away
    fresh = AlertTracker()
    snap = replace(base, gpus=(replace(gpu, remapped_rows_failure=True),))
    (alert,) = fresh.update(snap, observe(snap, SeatMap(), users={})[1])
    assert alert.kind == ECC and "row remapping failed" in alert.message


def test_health_metrics_carry_dcgm_names_and_the_driver_label():
    snap = xml("telegraf__pro-6000-maxq-blackwell-v13-excerpt.xml")
    _, states = observe(snap, SeatMap(), users={})
    fams = {f.name: f for f in text_string_to_metric_families(render(snap, states))}
    value = {
        name: fams[name].samples[0].value for name in fams if fams[name].samples and name.startswith("DCGM_FI_DEV")
    }
    assert value["DCGM_FI_DEV_FAN_SPEED"] == 30 and value["DCGM_FI_DEV_POWER_MGMT_LIMIT"] == 300
    assert value["DCGM_FI_DEV_MEM_CLOCK"] == 405 and value["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] == 0
    assert value["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"] == 0 and value["DCGM_FI_DEV_ROW_REMAP_FAILURE"] == 0
    assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" not in value  # ECC off on this card: N/A is left out, never 0
    assert {s.labels["DCGM_FI_DRIVER_VERSION"] for f in fams.values() for s in f.samples} == {"590.44.01"}
    own = {f.name for f in text_string_to_metric_families(render(snap, states, names="gpuseat"))}
    assert {"gpuseat_fan_speed_percent", "gpuseat_power_limit_watts", "gpuseat_clocks_event_reasons"} <= own


def test_nvml_xid_events_and_health_reads():
    """NVML's event API through pynvml's own structs and errors: two Xid 79 events, then a timeout."""
    import ctypes

    from gpuseat.monitor.nvml import NvmlSampler

    from .test_monitoring import SimulatedNvml, pynvml

    class Machine(SimulatedNvml):
        def __init__(self):
            self.pending = [79, 79]
            self.handles = {}

        def nvmlDeviceGetHandleByIndex(self, i):  # a real handle type (events carry one)
            if i not in self.handles:
                self.handles[i] = (pynvml.struct_c_nvmlDevice_t(),)
                self.handles[i] += (pynvml.c_nvmlDevice_t(self.handles[i][0]),)
            return self.handles[i][1]

        def nvmlDeviceGetUUID(self, h):
            where = ctypes.cast(h, ctypes.c_void_p).value
            return next(
                f"GPU-{i}" for i, (_, p) in self.handles.items() if ctypes.cast(p, ctypes.c_void_p).value == where
            )

        def nvmlDeviceGetMemoryInfo(self, h):
            return super().nvmlDeviceGetMemoryInfo(0 if self.nvmlDeviceGetUUID(h) == "GPU-0" else 1)

        def nvmlSystemGetDriverVersion(self):
            return "580.159.01"

        def nvmlEventSetCreate(self):
            return "events"

        def nvmlDeviceRegisterEvents(self, handle, kind, events):
            assert kind == pynvml.nvmlEventTypeXidCriticalError and events == "events"

        def nvmlEventSetWait_v2(self, events, timeout_ms):
            assert timeout_ms == 0  # never blocks the sampler
            if not self.pending:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
            data = pynvml.c_nvmlEventData_t()
            data.device = self.handles[0][1]
            data.eventType, data.eventData = pynvml.nvmlEventTypeXidCriticalError, self.pending.pop()
            return data

        def nvmlEventSetFree(self, events):
            self.freed = events

        def nvmlDeviceGetEnforcedPowerLimit(self, h):
            return 300_000  # mW

        def nvmlDeviceGetCurrentClocksEventReasons(self, h):
            return 0x40

        def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):
            return {(0, 0): 5, (1, 0): 1, (0, 1): 9, (1, 1): 2}[(kind, counter)]

        def nvmlDeviceGetRemappedRows(self, h):
            return (3, 1, 0, 0)

        def nvmlDeviceGetFanSpeed(self, h):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

        def nvmlDeviceGetClockInfo(self, h, kind):
            return 1593

    machine = Machine()
    sampler = NvmlSampler(nvml=machine, host="h")
    gpu = sampler.sample().gpus[0]
    assert (gpu.xid_last, gpu.xid_count, gpu.driver_version) == (79, 2, "580.159.01")
    assert (gpu.power_limit_w, gpu.clocks_event_reasons, gpu.clock_mem_mhz, gpu.fan_percent) == (
        300.0,
        0x40,
        1593.0,
        None,
    )
    assert (gpu.ecc_sbe_volatile, gpu.ecc_dbe_volatile, gpu.ecc_sbe_aggregate, gpu.ecc_dbe_aggregate) == (5, 1, 9, 2)
    assert (gpu.remapped_rows_correctable, gpu.remapped_rows_uncorrectable, gpu.remapped_rows_failure) == (3, 1, False)
    assert sampler.sample().gpus[0].xid_count == 2  # no new events: the count stays
    sampler.close()
    assert machine.freed == "events"


EXPORTER_Q = sorted(p.name for p in FIXTURES.glob("nvidia_gpu_exporter__*.txt"))


@pytest.mark.parametrize("name", EXPORTER_Q)
@pytest.mark.parametrize("phase", ["idle", "load"])
def test_every_exporter_q_text_agrees_with_its_csv(name, phase):
    """The `-q` text of every exporter capture gives the GPU the same phase's CSV gives (stable fields)."""
    path = FIXTURES / name
    q = nvsmi_text.parse_q_text(section(path, f"{phase} :: query (-q)"), host="t").gpus
    csv = nvsmi.parse_query_gpu_csv(
        section(path, f"{phase} :: query-gpu (csv, what the exporter parses)"), host="t"
    ).gpus
    assert [(g.uuid, g.name, g.memory_total_mib) for g in q] == [(g.uuid, g.name, g.memory_total_mib) for g in csv]
    driver = name.rsplit("__", 1)[1].removesuffix(".txt")
    assert {g.driver_version for g in q} == {driver}
    assert all(g.power_limit_w and g.power_limit_w > 0 for g in q)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_the_new_readers_never_crash_on_garbage(text):
    """Any text: a clear InputError at most (the -q reader), empty results for the table readers."""
    from gpuseat.errors import InputError

    for reader in (nvsmi_mig.parse_lgip, nvsmi_mig.parse_lgipp, nvsmi_mig.parse_lgi, nvsmi_mig.parse_lci):
        reader(text)
    nvsmi_mig.parse_mig_table(text)
    nvsmi_text.parse_process_table(text)
    nvsmi_health.parse_xid_log(text)
    nvsmi_health.bus_key(text)
    with contextlib.suppress(InputError):
        nvsmi_text.parse_q_text("GPU 00000000:01:00.0\n" + text, host="t")
