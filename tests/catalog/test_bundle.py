"""The catalog value: bundled data, a user's overlay folder, and clear errors for a bad overlay row."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuseat.catalog.bundle import load_catalog
from gpuseat.errors import InputError, UnknownGpu

GPU_ROW = """
[[gpu]]
id = "X1-48GB"
name = "Test X1"
architecture = "Ada"
compute_capability = "8.9"
chips_per_board = 1
memory_gb = 48
mig = false
vgpu = false
source = "test"
as_of = 2026-01-01
"""

OFFER_ROW = """
[[offer]]
id = "lab:x1"
provider = "lab"
kind = "bare-metal"
instance_type = "x1"
gpu = "Test X1"
gpu_count = 2
vcpus = 16
ram_gb = 64
price_usd = 900
billing = "month-prorated"
source = "test"
as_of = 2026-01-01
"""


def test_bundled_catalog_resolves_names() -> None:
    catalog = load_catalog()
    assert catalog.find_gpu("NVIDIA Tesla M60").id == "M60"
    assert catalog.resolve_gpu("h200 141gb").id == "H200-141GB"
    with pytest.raises(UnknownGpu, match="unknown GPU model"):
        catalog.resolve_gpu("Voodoo 2")


def test_overlay_adds_a_gpu_and_an_offer_that_uses_it(tmp_path: Path) -> None:
    (tmp_path / "gpus.toml").write_text(GPU_ROW)
    (tmp_path / "offers.toml").write_text(OFFER_ROW)
    base, catalog = load_catalog(), load_catalog(tmp_path)
    assert len(catalog.gpus) == len(base.gpus) + 1
    assert catalog.find_gpu("test x1").memory_gb == 48
    assert [o.id for o in catalog.offers][-1] == "lab:x1"
    assert base.find_gpu("test x1") is None  # the bundled value is untouched


def test_overlay_replaces_a_row_with_the_same_key(tmp_path: Path) -> None:
    m60 = load_catalog().gpus["M60"]
    row = GPU_ROW.replace('"X1-48GB"', '"M60"').replace('"Test X1"', '"NVIDIA Tesla M60"')
    (tmp_path / "gpus.toml").write_text(row)
    catalog = load_catalog(tmp_path)
    assert catalog.gpus["M60"].memory_gb == 48 != m60.memory_gb
    assert len(catalog.gpus) == len(load_catalog().gpus)


def test_bad_overlay_row_names_the_file_and_field(tmp_path: Path) -> None:
    (tmp_path / "gpus.toml").write_text(GPU_ROW.replace("memory_gb = 48", "memory_gb = -1"))
    with pytest.raises(InputError) as err:
        load_catalog(tmp_path)
    assert "gpus.toml" in err.value.message and "memory_gb" in err.value.message


def test_offer_for_an_unknown_gpu_in_overlay_is_refused(tmp_path: Path) -> None:
    (tmp_path / "offers.toml").write_text(OFFER_ROW)
    with pytest.raises(InputError, match="unknown GPU model"):
        load_catalog(tmp_path)
