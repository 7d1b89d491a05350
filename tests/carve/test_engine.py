"""The carve engine against the issue's required results and the MIG placement rules."""

from __future__ import annotations

import pytest

from gpuseat.catalog import resolve_gpu
from gpuseat.core.carve import CarveRequest, carve, server_capacity
from gpuseat.core.inventory import server_from_gpu_flag
from gpuseat.core.mig import place
from gpuseat.core.needs import SeatNeed
from gpuseat.errors import InputError

from .conftest import CATALOG, carve_example, carve_gpu

CUDA_LINUX_4GB = SeatNeed(min_gpu_memory_gb=4, cuda=True, guest_os="linux", isolation="partitioned")


def test_m60_two_boards_cuda_gives_four_passthrough_seats_and_lists_8q():
    cap = server_capacity(resolve_gpu("M60"), 2, CUDA_LINUX_4GB, CATALOG)
    assert (cap.seats, cap.mode, cap.profile, cap.licence) == (4, "passthrough", None, None)
    reasons = {(m, p): r for m, p, r in cap.rejected}
    assert reasons[("vgpu", "M60-8Q")].startswith("4 seats")
    for small in ("M60-4Q", "M60-2Q", "M60-1Q", "M60-0Q"):
        assert "no CUDA in Linux guests on Maxwell" in reasons[("vgpu", small)]
    assert "no MIG" in reasons[("mig", None)]


def test_h200_two_boards_partitioned_16gb_gives_14_mig_seats():
    cap = server_capacity(
        resolve_gpu("H200-141GB"), 2, SeatNeed(min_gpu_memory_gb=16, isolation="partitioned"), CATALOG
    )
    assert (cap.seats, cap.mode, cap.profile, cap.licence) == (14, "mig", "1g.18gb", None)
    assert cap.memory_gb >= 16


def test_k2_two_boards_cuda_gives_four_passthrough_seats():
    cap = server_capacity(resolve_gpu("K2"), 2, SeatNeed(min_gpu_memory_gb=4, isolation="partitioned"), CATALOG)
    assert (cap.seats, cap.mode) == (4, "passthrough")


def test_dedicated_allows_passthrough_only():
    cap = server_capacity(resolve_gpu("H200-141GB"), 1, SeatNeed(isolation="dedicated"), CATALOG)
    assert (cap.seats, cap.mode) == (1, "passthrough")
    assert any(m == "mig" and "isolation 'dedicated'" in r for m, _, r in cap.rejected)


def test_windows_desktop_seats_on_m60_use_many_vgpus_per_chip():
    need = SeatNeed(min_gpu_memory_gb=2, cuda=False, guest_os="windows", isolation="partitioned")
    cap = server_capacity(resolve_gpu("M60"), 2, need, CATALOG)
    assert cap.mode == "vgpu" and cap.seats == 16 and cap.licence is not None
    layout = carve_gpu(
        "M60:2", seats=16, mode="vgpu", profiles=("M60-2B",), need={"cuda": False, "guest_os": "windows"}
    )
    assert {s.profile for s in layout.slices} == {"M60-2B"} and len(layout.slices) == 16


def test_no_seats_when_memory_is_too_large():
    cap = server_capacity(resolve_gpu("M60"), 2, SeatNeed(min_gpu_memory_gb=9, isolation="shared"), CATALOG)
    assert cap.seats == 0 and cap.mode is None and cap.rejected


@pytest.mark.parametrize(
    ("gpu", "min_mem", "profile"),
    [("H200-141GB", 16, "1g.18gb"), ("A100-40GB", 4, "1g.5gb")],
)
def test_mig_min_mem_gives_seven_small_instances(gpu, min_mem, profile):
    layout = carve_gpu(gpu, mode="mig", need={"min_gpu_memory_gb": min_mem})
    assert [s.profile for s in layout.slices] == [profile] * 7
    assert sorted(s.placement.start for s in layout.slices) == list(range(7))


def test_m60_example_vgpu_and_passthrough():
    vgpu = carve_example("ibm-2xM60.toml", mode="vgpu")
    assert [s.profile for s in vgpu.slices] == ["M60-8Q"] * 4
    assert sorted(s.gpu_index for s in vgpu.slices) == [0, 1, 2, 3]
    rejected = {r.profile: r.reason for r in vgpu.not_chosen}
    assert "no CUDA in Linux guests on Maxwell" in rejected["M60-4Q"]
    passthrough = carve_example("ibm-2xM60.toml", mode="passthrough")
    assert len(passthrough.slices) == 4 and {s.pci for s in passthrough.slices} == {
        "0000:86:00.0",
        "0000:87:00.0",
        "0000:88:00.0",
        "0000:89:00.0",
    }


def test_auto_picks_the_most_isolated_mode_that_seats_n():
    assert carve_gpu("M60:2", seats=4, need={"min_gpu_memory_gb": 4}).mode == "passthrough"
    assert carve_gpu("H200-141GB:2", seats=6, need={"min_gpu_memory_gb": 16}).mode == "mig"
    eight = carve_gpu("M60:2", seats=8, need={"min_gpu_memory_gb": 4})
    assert eight.mode == "mps" and all(s.memory_gb == 4 for s in eight.slices)


def test_n_seats_get_the_largest_profile_that_seats_n():
    layout = carve_gpu("H200-141GB", seats=2, mode="mig")
    assert [s.profile for s in layout.slices] == ["3g.71gb", "3g.71gb"]


def test_mixed_mig_layout_puts_3g_at_slot_4():
    layout = carve_gpu("H200-141GB", profiles=("3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"))
    where = {(s.profile, s.placement.start) for s in layout.slices}
    assert ("3g.71gb", 4) in where
    assert sorted(s.placement.start for s in layout.slices if s.profile != "3g.71gb") == [0, 2, 3]


def test_fragmenting_order_is_rejected_by_placement_rules():
    cat = CATALOG.partitions
    gpu = cat.mig_gpus["A100-40GB"]
    prof = {p.name: p for p in cat.mig_profiles["A100-40GB"]}
    # 3g@0, 2g@4, 1g@6 leaves slot 7, where no 1g may start: the search must move the 3g to slot 4.
    starts = place(gpu, [prof["3g.20gb"], prof["2g.10gb"], prof["1g.5gb"], prof["1g.5gb"]])
    assert starts is not None and starts[0] == 4
    assert place(gpu, [prof["4g.20gb"], prof["3g.20gb"], prof["1g.5gb"]]) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"spec": "H200-141GB", "seats": 8, "mode": "mig", "need": {"min_gpu_memory_gb": 16}},
            "H200-141GB MIG fits at most 7 seats of ≥ 16 GB",
        ),
        ({"spec": "M60:2", "mode": "mig"}, "no MIG"),
        ({"spec": "H200-141GB", "profiles": ("7g.141gb", "1g.18gb")}, "do not fit"),
        ({"spec": "H200-141GB", "profiles": ("1g.17gb",)}, "Did you mean 1g.18gb"),
        ({"spec": "M60:2", "profiles": ("M60-4Q",)}, "no CUDA in Linux guests on Maxwell"),
        (
            {"spec": "M60", "profiles": ("M60-8Q", "M60-8Q", "M60-4Q"), "need": {"cuda": False}},
            "one vGPU type per physical GPU",
        ),
    ],
)
def test_bad_requests_raise_one_input_error(kwargs, message):
    spec = kwargs.pop("spec")
    with pytest.raises(InputError) as err:
        carve_gpu(spec, **kwargs)
    assert message in err.value.message and err.value.fix


def test_mixed_size_vgpu_on_l40s_respects_the_mixed_maximum():
    ok = carve_gpu("L40S", profiles=("L40S-24C", "L40S-12C", "L40S-8C"))
    assert sorted(s.profile for s in ok.slices) == ["L40S-12C", "L40S-24C", "L40S-8C"]
    with pytest.raises(InputError):
        carve_gpu("L40S", profiles=("L40S-16C", "L40S-16C", "L40S-16C", "L40S-4C"))


def test_timeslice_replicas_split_the_memory_evenly():
    layout = carve(server_from_gpu_flag("T4", CATALOG), CarveRequest(seats=4, mode="timeslice"), CATALOG)
    assert [s.memory_gb for s in layout.slices] == [4.0] * 4 and {s.replicas for s in layout.slices} == {4}
