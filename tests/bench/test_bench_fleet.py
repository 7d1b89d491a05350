"""Fleet mode: listing seats, outliers among same-profile seats, and failing seats as findings."""

from __future__ import annotations

import pytest

from gpuseat.bench.fleet import (
    BenchTarget,
    SeatOutcome,
    _outcome,
    flag_outliers,
    parse_gpu_list,
    run_fleet,
    select_visible,
)
from gpuseat.bench.run import BenchOptions

from .results_factory import make_result

# The layout `nvidia-smi -L` prints (one GPU split into MIG devices, one whole GPU); UUIDs shortened.
NVIDIA_SMI_L = """\
GPU 0: NVIDIA H200 (UUID: GPU-aaaa1111-2222-3333-4444-555566667777)
  MIG 3g.71gb     Device  0: (UUID: MIG-bbbb1111-2222-3333-4444-555566667777)
  MIG 1g.18gb     Device  1: (UUID: MIG-cccc1111-2222-3333-4444-555566667777)
  MIG 1g.18gb     Device  2: (UUID: MIG-dddd1111-2222-3333-4444-555566667777)
GPU 1: NVIDIA H200 (UUID: GPU-eeee1111-2222-3333-4444-555566667777)
"""


def test_seats_are_mig_devices_or_whole_gpus():
    seats = parse_gpu_list(NVIDIA_SMI_L)
    assert [s.select[:8] for s in seats] == ["MIG-bbbb", "MIG-cccc", "MIG-dddd", "GPU-eeee"]
    assert [s.profile for s in seats] == [
        "NVIDIA H200 MIG 3g.71gb",
        "NVIDIA H200 MIG 1g.18gb",
        "NVIDIA H200 MIG 1g.18gb",
        "NVIDIA H200",
    ]
    assert parse_gpu_list("No devices were found\n") == []


def test_cuda_visible_devices_restricts_the_seats():
    listed = parse_gpu_list(NVIDIA_SMI_L)
    gpus = [BenchTarget(select="GPU-aaaa1111-2222-3333-4444-555566667777", name="NVIDIA H200"), listed[-1]]
    assert select_visible(listed, gpus, None) == listed
    assert [s.select[:8] for s in select_visible(listed, gpus, "1")] == ["GPU-eeee"]
    only = select_visible(listed, gpus, "MIG-cccc1111-2222-3333-4444-555566667777, 0")
    assert [(s.select[:8], s.profile) for s in only] == [
        ("MIG-cccc", "NVIDIA H200 MIG 1g.18gb"),
        ("GPU-aaaa", "NVIDIA H200"),
    ]
    assert select_visible(listed, gpus, "") == []
    assert select_visible(listed, gpus, "1,-1,0")[0].select.startswith("GPU-eeee")
    assert len(select_visible(listed, gpus, "1,-1,0")) == 1
    # not an index: "²" passes str.isdigit() and int() refuses it (an internal error), "١" is not GPU 1
    assert [s.name for s in select_visible(listed, gpus, "²,١")] == ["unknown", "unknown"]


def _seat(n: int, profile: str = "1g.18gb") -> BenchTarget:
    return BenchTarget(select=f"MIG-{n}", name="NVIDIA H200", mig_profile=profile)


def test_outlier_is_over_15_percent_slower_than_its_profiles_median():
    outcomes = [
        SeatOutcome(seat=_seat(1), result=make_result(10.0)),
        SeatOutcome(seat=_seat(2), result=make_result(10.4)),
        SeatOutcome(seat=_seat(3), result=make_result(11.4)),  # 1.05× the median: fine
        SeatOutcome(seat=_seat(4), result=make_result(13.0)),  # 1.19× the median (10.9): outlier
        SeatOutcome(seat=_seat(5, "3g.71gb"), result=make_result(5.0)),  # alone in its profile
        SeatOutcome(seat=_seat(6), error="exit code 2: CUDA cannot use cuda:0"),
    ]
    flagged = flag_outliers(outcomes)
    assert [o.outlier for o in flagged] == [False, False, False, True, False, False]
    assert flagged[3].vs_median == pytest.approx(13.0 / 10.9)
    assert flagged[4].vs_median is None and flagged[4].judged_by is None  # alone, no reference: not judged
    findings = [o.finding for o in flagged if o.finding]
    assert findings[0] == "MIG-4: 1.19× the median time of NVIDIA H200 MIG 1g.18gb seats"
    assert "CUDA run failed" in findings[1]


def test_child_output_becomes_outcome():
    ok = _outcome(_seat(1), 0, make_result(3.0).model_dump_json(), "")
    assert ok.result is not None and ok.result.seconds == 3.0
    bad = _outcome(_seat(1), 2, "", "warning: x\nerror: --device: CUDA is not available\nTo fix: run with cpu\n")
    assert bad.error == "exit code 2: --device: CUDA is not available"
    garbled = _outcome(_seat(1), 0, "{not json", "")
    assert garbled.error is not None and garbled.error.startswith("unreadable result")


def test_a_seat_where_cuda_fails_is_a_finding_not_a_crash(bench_env):
    # A real child process: on a machine without this GPU, CUDA cannot use the seat.
    seat = BenchTarget(select="MIG-00000000-0000-0000-0000-000000000000", name="NVIDIA H200", mig_profile="1g.18gb")
    (outcome,) = run_fleet(BenchOptions(iterations=5), [seat])
    assert outcome.result is None
    assert outcome.error is not None and outcome.error.startswith("exit code 2:")
    assert outcome.finding is not None and "CUDA" in outcome.finding


def test_gpu_in_mig_mode_without_instances_is_no_target():
    """Issue 15 item 12: a MIG-mode GPU lists no MIG device yet; CUDA cannot use it, so no bogus whole-GPU seat."""
    text = "GPU 0: NVIDIA H200 (UUID: GPU-aaaa1111-2222-3333-4444-555566667777)\n"
    assert parse_gpu_list(text, {"GPU-aaaa1111-2222-3333-4444-555566667777": True}) == []
    assert len(parse_gpu_list(text, {"GPU-aaaa1111-2222-3333-4444-555566667777": False})) == 1


def test_a_seat_alone_in_its_profile_is_judged_against_the_reference():
    from gpuseat.bench.fleet import shipped_references

    m60 = BenchTarget(select="GPU-1", name="Tesla M60")
    alone = BenchTarget(select="GPU-2", name="NVIDIA L4")
    refs = shipped_references([m60, alone])
    assert refs == {"Tesla M60": 26.73}  # the 2016 M60 run; the L4 has no shipped reference
    slow = SeatOutcome(seat=m60, result=make_result(seconds=40.0, iterations=10_000))
    unknown = SeatOutcome(seat=alone, result=make_result(seconds=3.0, iterations=10_000))
    judged = flag_outliers([slow, unknown], references=refs)
    assert judged[0].outlier and judged[0].judged_by == "reference" and "reference" in judged[0].finding
    assert judged[1].vs_median is None and judged[1].judged_by is None and judged[1].finding is None
