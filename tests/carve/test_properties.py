"""Hypothesis: the placement search is exact, and every layout the engine emits obeys the MIG rules."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuseat.catalog.partitions import MigGpu, MigProfile
from gpuseat.core.carve import CarveRequest, carve
from gpuseat.core.inventory import normalise_pci, server_from_gpu_flag
from gpuseat.core.mig import place
from gpuseat.core.mig import rule_break as mig_rule_break
from gpuseat.errors import InputError

from .conftest import CATALOG

CAT = CATALOG.partitions
MIG_GPUS = sorted(CAT.mig_gpus)


def valid(gpu: MigGpu, profiles: list[MigProfile], starts: tuple[int, ...]) -> bool:
    """The rules of partitioning.md §1.2, checked independently of the search."""
    slots: set[int] = set()
    for prof, start in zip(profiles, starts, strict=True):
        own = set(range(start, start + prof.memory_slices))
        if start not in prof.starts or max(own) >= gpu.memory_slices or own & slots:
            return False
        slots |= own
    return mig_rule_break(gpu, profiles) is None


@st.composite
def gpu_and_profiles(draw):
    gpu_id = draw(st.sampled_from(MIG_GPUS))
    profiles = draw(st.lists(st.sampled_from(CAT.mig_profiles[gpu_id]), min_size=1, max_size=5))
    return CAT.mig_gpus[gpu_id], profiles


@settings(max_examples=150, deadline=None)
@given(gpu_and_profiles())
def test_place_is_valid_and_finds_a_placement_whenever_one_exists(case):
    gpu, profiles = case
    starts = place(gpu, profiles)
    if starts is not None:
        assert valid(gpu, profiles, starts)
    else:
        every = itertools.product(*(p.starts for p in profiles))
        assert not any(valid(gpu, profiles, combo) for combo in every)


@settings(max_examples=60, deadline=None)
@given(
    gpu_id=st.sampled_from(MIG_GPUS),
    boards=st.integers(1, 3),
    seats=st.one_of(st.none(), st.integers(1, 24)),
    min_mem=st.sampled_from([0, 5, 10, 16, 20, 40, 70]),
)
def test_no_two_seats_share_a_memory_slice(gpu_id, boards, seats, min_mem):
    server = server_from_gpu_flag(f"{gpu_id}:{boards}", CATALOG)
    try:
        layout = carve(server, CarveRequest(seats=seats, mode="mig", need={"min_gpu_memory_gb": min_mem}), CATALOG)
    except InputError:
        return
    assert seats is None or len(layout.slices) == seats
    assert all(s.memory_gb >= min_mem for s in layout.slices)
    profiles = {p.name: p for p in CAT.mig_profiles[gpu_id]}
    for index in {s.gpu_index for s in layout.slices}:
        mine = [s for s in layout.slices if s.gpu_index == index]
        assert valid(CAT.mig_gpus[gpu_id], [profiles[s.profile] for s in mine], tuple(s.placement.start for s in mine))


@given(
    domain=st.integers(0, 0xFFFF),
    bus=st.integers(0, 255),
    slot=st.integers(0, 31),
    func=st.integers(0, 7),
    wide=st.booleans(),
)
def test_pci_addresses_normalise_to_four_digit_domains(domain, bus, slot, func, wide):
    text = f"{domain:08X}:{bus:02X}:{slot:02X}.{func}" if wide else f"{domain:04x}:{bus:02x}:{slot:02x}.{func}"
    assert normalise_pci(text) == f"{domain:04x}:{bus:02x}:{slot:02x}.{func}"
