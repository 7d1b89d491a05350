"""The partition data files: sourced rows, inferred marks, and a lattice consistent with its maxima."""

from __future__ import annotations

import pytest

from gpuseat.catalog import data_toml, gpu_models
from gpuseat.core.mig import max_uniform

from .conftest import CATALOG

CAT = CATALOG.partitions


@pytest.mark.parametrize("name", ["mig_profiles.toml", "vgpu_profiles.toml", "sharing.toml"])
def test_every_row_has_source_and_date(name):
    data = data_toml(name)
    rows = [row for key, value in data.items() if isinstance(value, list) for row in value]
    assert rows and all(row.get("source") and row.get("as_of") for row in rows)


def test_every_mig_capable_catalog_gpu_has_profiles():
    mig_models = {m.id for m in gpu_models().values() if m.mig}
    assert mig_models == set(CAT.mig_gpus) == set(CAT.mig_profiles)


def test_reference_inferred_placements_stay_marked():
    for gpu_id in ("H200-141GB", "B200", "GH200"):
        assert CAT.mig_gpus[gpu_id].inferred and all(p.inferred for p in CAT.mig_profiles[gpu_id])
    a30 = {p.name: p.inferred for p in CAT.mig_profiles["A30"]}
    assert a30["2g.12gb+me"] and not a30["1g.6gb"]


def test_published_maxima_are_reachable_by_placement():
    for gpu_id, profiles in CAT.mig_profiles.items():
        for prof in profiles:
            assert max_uniform(CAT.mig_gpus[gpu_id], prof) == prof.max_count, (gpu_id, prof.name)


def test_only_m60_8q_has_cuda_among_m60_types():
    cuda = [p.name for p in CAT.vgpu_profiles["M60"] if p.cuda]
    assert cuda == ["M60-8Q"]
    assert {p.series for p in CAT.vgpu_profiles["A16"]} == {"C", "Q"}
    # every Q type after Maxwell has CUDA (vGPU 17 user guide §1.3.2)
    assert all(p.cuda for gpu in ("T4", "A10", "A16", "L4", "L40S") for p in CAT.vgpu_profiles[gpu])
