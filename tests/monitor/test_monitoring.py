"""Replay-driven attribution, alerts (with a real local webhook), Prometheus output and NVML faults."""

from __future__ import annotations

import json
import os
import pwd
import threading
import typing
import urllib.request
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from gpuseat.errors import EngineError
from gpuseat.monitor.alerts import AlertTracker, post_webhook
from gpuseat.monitor.attribution import attribute, observe_seats, proc_user, seat_states
from gpuseat.monitor.nvml import NvmlSampler, _load_pynvml
from gpuseat.monitor.prometheus import METRICS, SeatCollector, render, serve
from gpuseat.monitor.replay import ReplaySampler, read_replay, synthetic_snapshot, write_replay
from gpuseat.monitor.runner import Monitor, observe
from gpuseat.readings import Attributed, Gpu, GpuProcess, Leaf, LeafReading, SeatEntry, SeatMap, leaves

T0 = 1_700_000_040.0
pynvml = _load_pynvml()  # the real binding (its errors and structs); only gpuseat.monitor.nvml imports it


def lab(t=T0, processes=2):
    return synthetic_snapshot(gpus=1, migs_per_gpu=4, processes=processes, taken_at=t)


def seat_map(snap):
    migs = [m.uuid for m in snap.gpus[0].mig]
    return SeatMap([SeatEntry(f"s{i}", u, f"p{i}", f"user{i}") for i, u in enumerate(migs)], allowed_users=["root"])


def test_proc_user_reads_status_under_a_root(tmp_path):
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "status").write_text("Name:\tpython\nUid:\t0\t0\t0\t0\n")
    assert proc_user(42, tmp_path) == "root"
    assert proc_user(43, tmp_path) is None
    assert proc_user(os.getpid()) == pwd.getpwuid(os.getuid()).pw_name  # the real /proc


def test_attribution_and_foreign_flag():
    snap = lab()
    seats = seat_map(snap)
    pids = [p.pid for p in snap.processes]
    attributed, states = observe(snap, seats, users={pids[0]: "user0", pids[1]: "user0"})
    assert [(a.seat, a.participant, a.user, a.foreign) for a in attributed] == [
        ("s0", "p0", "user0", False),
        ("s1", "p1", "user0", True),  # user0's job on p1's seat
    ]
    assert [s.active for s in states] == [True, True, False, False]
    attributed, _ = observe(snap, seats, users={pids[1]: "root"})
    assert not attributed[1].foreign and attributed[0].user is None  # allowed user; unknown user is not foreign


def test_replay_file_round_trip(tmp_path):
    snaps = [lab(T0 + 5 * i) for i in range(3)]
    write_replay(tmp_path / "r.jsonl", snaps)
    assert read_replay(tmp_path / "r.jsonl") == snaps
    sampler = ReplaySampler(snaps)
    times = [sampler.sample().taken_at for _ in range(7)]
    assert times == sorted(times) and len(set(times)) == 7  # looping keeps time moving forward


def test_idle_memory_foreign_and_lost_alerts_fire_once_until_cleared():
    base = lab()
    seats = seat_map(base)
    tracker = AlertTracker(idle_hours=2)
    hot = replace(base.gpus[0], mig=(replace(base.gpus[0].mig[0], memory_used_mib=9800.0), *base.gpus[0].mig[1:]))
    timeline = [replace(base, taken_at=T0 + 600 * i) for i in range(14)]  # 10-minute ticks, 2h10
    timeline[3] = replace(timeline[3], gpus=(hot,))
    timeline[4] = replace(timeline[4], gpus=(hot,))
    timeline[6] = replace(timeline[6], gpus=())  # GPU gone
    users = {base.processes[0].pid: "user0", base.processes[1].pid: "user9"}
    events = []
    for snap in timeline:
        _, states = observe(snap, seats, users=users)
        events.append([(a.kind, a.key, a.raised) for a in tracker.update(snap, states)])
    assert events[0] == [("foreign", f"s1:{base.processes[1].pid}", True)]
    assert events[3] == [("memory", "s0", True)] and events[4] == []
    assert events[5] == [("memory", "s0", False)]
    assert ("gpu_lost", base.gpus[0].uuid, True) in events[6] and (
        "gpu_lost",
        base.gpus[0].uuid,
        False,
    ) in events[7]
    idle = [(i, e) for i, evs in enumerate(events) for e in evs if e[0] == "idle"]
    # s2, s3 never active: idle since tick 0, but tick 6 lost the GPU (no states) and resumed at tick 7
    assert {e[1] for _, e in idle} == {"s2", "s3"} and all(i >= 12 for i, _ in idle)


def test_unhealthy_gpu_raises_gpu_lost():
    snap = lab()
    sick = replace(snap, gpus=(replace(snap.gpus[0], healthy=False, error="GPU is lost"),))
    tracker = AlertTracker()
    tracker.update(snap, observe(snap, SeatMap(), users={})[1])
    (alert,) = tracker.update(sick, observe(sick, SeatMap(), users={})[1])
    assert alert.kind == "gpu_lost" and "GPU is lost" in alert.message


class _Hook(BaseHTTPRequestHandler):
    received: typing.ClassVar[list] = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Hook.received.append((self.headers["Content-Type"], json.loads(body)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_webhook_posts_to_a_real_local_server():
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        snap = lab()
        sent = []
        mon = Monitor(
            ReplaySampler([snap]),
            seat_map(snap),
            alerts=AlertTracker(),
            on_alert=lambda a: sent.append(post_webhook(f"http://127.0.0.1:{server.server_port}/hook", a)),
        )
        mon.proc_root = mon.proc_root / "nonexistent"
        mon.tick()
    finally:
        server.shutdown()
    assert sent == [] and _Hook.received == []  # no users known → nothing foreign → no alert
    snap2 = replace(snap, gpus=())
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        tracker = AlertTracker()
        tracker.update(snap, [])
        (alert,) = tracker.update(snap2, [])
        assert post_webhook(f"http://127.0.0.1:{server.server_port}/hook", alert)
    finally:
        server.shutdown()
    ctype, payload = _Hook.received[-1]
    assert ctype == "application/json" and payload["kind"] == "gpu_lost" and payload["state"] == "firing"
    assert not post_webhook("http://127.0.0.1:9/closed", alert)  # a dead endpoint is logged, not raised


def test_prometheus_text_parses_back_with_dcgm_names_and_seat_labels():
    snap = lab()
    seats = seat_map(snap)
    _, states = observe(snap, seats, users={})
    families = {f.name: f for f in text_string_to_metric_families(render(snap, states))}
    used = families["DCGM_FI_DEV_FB_USED"].samples
    assert len(used) == 5  # 4 MIG devices and the whole GPU (GPU_I_ID empty)
    (whole,) = [s for s in used if s.labels["GPU_I_ID"] == ""]
    assert whole.value == 1024.0 and whole.labels["device"] == "nvidia0" and whole.labels["hostname"] == "lab"
    first = next(s for s in used if s.labels["seat"] == "s0")
    assert first.value == 512.0 and first.labels["participant"] == "p0"
    assert first.labels["GPU_I_PROFILE"] == "1g.10gb" and first.labels["GPU_I_ID"] == "7"
    assert first.labels["UUID"] == snap.gpus[0].uuid and first.labels["Hostname"] == "lab"
    free = next(s for s in families["DCGM_FI_DEV_FB_FREE"].samples if s.labels["seat"] == "s0")
    assert free.value == 9856 - 512
    assert families["DCGM_FI_DEV_GPU_UTIL"].samples == []  # MIG without GPM: unknown, not 0


def test_the_metrics_table_names_real_readings_once_each():
    """metrics.csv is data read at import: a typo in a reading or a repeated name fails here, not at a scrape."""
    assert all(m.reading in Gpu.__dataclass_fields__ for m in METRICS if m.reading is not None)
    for names in ([m.key for m in METRICS], [m.gpuseat for m in METRICS], [m.dcgm for m in METRICS if m.dcgm]):
        assert len(names) == len(set(names))
    assert {m.source for m in METRICS} == {"default", "opt-in", "dcgm", "gpuseat"}
    assert all((m.dcgm is None) == (m.source == "gpuseat") for m in METRICS)


def test_metrics_endpoint_serves_over_http():
    snap = synthetic_snapshot(gpus=1, migs_per_gpu=0, processes=1, taken_at=T0)
    snap = replace(snap, gpus=(replace(snap.gpus[0], utilization_gpu=37.0, power_w=123.4, temperature_c=55),))
    collector = SeatCollector()
    server = serve(collector, "127.0.0.1", 0)
    try:
        collector.update(snap, observe(snap, SeatMap(), users={})[1])
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5) as resp:
            body = resp.read().decode()
    finally:
        server.shutdown()
    families = {f.name: f for f in text_string_to_metric_families(body)}
    assert families["DCGM_FI_DEV_GPU_UTIL"].samples[0].value == 37.0
    assert families["DCGM_FI_DEV_POWER_USAGE"].samples[0].value == 123.4
    assert families["DCGM_FI_DEV_GPU_TEMP"].samples[0].value == 55


def test_nvml_without_driver_is_a_clear_error():
    with pytest.raises(EngineError, match="NVML could not start") as info:
        NvmlSampler()
    assert "--from-xml" in info.value.fix


class SimulatedNvml:
    """Two GPUs through pynvml's own error classes and structs; GPU 1 fails with GPU_IS_LOST."""

    def __getattr__(self, name):
        return getattr(pynvml, name)  # constants, error classes, structs

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h}"

    def nvmlDeviceGetMemoryInfo(self, h):
        if h == 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        mem = pynvml.c_nvmlMemory_t()
        mem.total, mem.used, mem.free = 16 * 2**30, 2**30, 15 * 2**30
        return mem

    def nvmlDeviceGetMigMode(self, h):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetUtilizationRates(self, h):
        u = pynvml.c_nvmlUtilization_t()
        u.gpu, u.memory = 40, 10
        return u

    def nvmlDeviceGetPowerUsage(self, h):
        return 70_500  # mW

    def nvmlDeviceGetPciInfo(self, h):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)

    def nvmlDeviceGetName(self, h):
        return "Tesla M60"

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 50

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        p = pynvml.c_nvmlProcessInfo_v2_t()
        p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId = 77, 512 * 2**20, 0xFFFFFFFF, 0xFFFFFFFF
        return [p]


def test_nvml_error_on_one_gpu_marks_it_unhealthy_and_others_go_on():
    sampler = NvmlSampler(nvml=SimulatedNvml(), host="m60")
    snap = sampler.sample()
    good, bad = snap.gpus
    assert good.healthy and good.power_w == 70.5 and good.utilization_gpu == 40.0 and good.memory_used_mib == 1024
    assert good.pci_bus_id is None and good.mig_enabled is None  # unsupported → unknown
    assert not bad.healthy and bad.uuid == "GPU-1" and "GPU is lost" in bad.error
    (proc,) = snap.processes
    assert (proc.pid, proc.gpu_uuid, proc.used_memory_mib, proc.gpu_instance_id) == (77, "GPU-0", 512, None)
    sampler.close()


@given(
    st.lists(
        st.tuples(
            st.integers(0, 9),
            st.sampled_from(["mig", "gpu", "none", "other"]),
            st.sampled_from([None, "user0", "user1", "root", "x"]),
            st.sampled_from([None, "C", "G", "C+G"]),
        ),
        max_size=40,
    ),
    st.integers(0, 6),
    st.sampled_from([None, 0.0, 7.0]),
)
@settings(max_examples=200, deadline=None)
def test_the_one_pass_tick_attributes_like_attribute_then_seat_states(procs, seats_taken, util):
    """observe_seats (the monitor's one pass, fast constructors) gives what attribute + seat_states give,
    and every object equals the one its class's own constructor makes (``active`` included)."""
    base = synthetic_snapshot(gpus=2, migs_per_gpu=2, processes=0, taken_at=T0)
    whole = synthetic_snapshot(gpus=1, migs_per_gpu=0, processes=0, taken_at=T0).gpus[0]
    first = replace(base.gpus[0], mig=(replace(base.gpus[0].mig[0], utilization_gpu=util), *base.gpus[0].mig[1:]))
    gpus = (first, base.gpus[1], replace(whole, index=2, uuid="GPU-whole", utilization_gpu=util))
    migs = [(g.uuid, m.uuid) for g in base.gpus for m in g.mig]
    processes = []
    for pid, (k, where, user, kind) in enumerate(procs):
        gpu_uuid, mig_uuid = migs[k % len(migs)]
        if where == "gpu":  # a CSV process on a MIG-mode GPU: no MIG device given
            mig_uuid = None
        elif where == "none":
            gpu_uuid, mig_uuid = "GPU-whole", None
        elif where == "other":  # a device no snapshot GPU has
            gpu_uuid, mig_uuid = "GPU-gone", None
        processes.append(
            GpuProcess(pid=pid, gpu_uuid=gpu_uuid, mig_uuid=mig_uuid, kind=kind, user=user if pid % 2 else None)
        )
    snap = replace(base, gpus=gpus, processes=tuple(processes))
    devices = [m for _, m in migs] + ["GPU-whole", base.gpus[0].uuid]
    seats = SeatMap(
        [SeatEntry(f"s{i}", d, f"p{i}", f"user{i}" if i % 2 else None) for i, d in enumerate(devices[:seats_taken])],
        allowed_users=["root"],
    )
    users = {pid: "user1" for pid in range(0, len(procs), 3)}
    attributed = attribute(snap, seats, users)
    fused, states = observe_seats(snap, seats, users)
    assert (fused, states) == (attributed, seat_states(snap, seats, attributed))
    assert fused == [Attributed(a.process, a.user, a.seat, a.participant, a.foreign) for a in fused]
    assert states == [LeafReading(s.leaf, s.entry, s.processes) for s in states]
    assert [s.leaf for s in states[: len(leaves(snap))]] == [Leaf(x.uuid, x.gpu, x.mig, x.label) for x in leaves(snap)]
