"""The bundled catalog's cache: validated once, read back while its files are the same, never stale.

Every test works on its own copy of the bundled data folder and its own cache folder, with the real
loader, real TOML and real pickle files.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from gpuseat.catalog.bundle import BUNDLE_FILES, CACHE_NAME, Catalog, bundled_catalog, cache_key, load_catalog
from gpuseat.errors import InputError


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A copy of the bundled data files, to edit as a maintainer would."""
    folder = tmp_path / "data"
    folder.mkdir()
    bundled = resources.files("gpuseat.catalog").joinpath("data")
    for name in BUNDLE_FILES:
        (folder / name).write_bytes(bundled.joinpath(name).read_bytes())
    return folder


def _key(data: Path) -> str:
    return cache_key({name: (data / name).read_bytes() for name in BUNDLE_FILES})


def _store(cache: Path, key: str, catalog: Catalog) -> None:
    (cache / CACHE_NAME).write_bytes(f"{key}\n".encode() + pickle.dumps(catalog))


def test_first_run_validates_and_keeps_the_catalog_for_the_next(data: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = bundled_catalog(data, cache)
    stored = (cache / CACHE_NAME).read_bytes()
    assert stored.startswith(f"{_key(data)}\n".encode())
    assert (cache / CACHE_NAME).stat().st_mode & 0o777 == 0o600
    second = bundled_catalog(data, cache)
    assert second == first
    assert second.find_gpu("Tesla M60") == first.find_gpu("m60") is not None
    assert isinstance(second.gpus, type(first.gpus))  # read-only again, as validated
    assert (cache / CACHE_NAME).read_bytes() == stored


def test_the_package_s_own_bundle_validates_and_equals_its_cached_copy() -> None:
    """The cache skips validation, so the bundled rows are proven valid here: a fresh build from the
    package's files (conftest gives each test an empty cache folder), then the copy read back."""
    fresh = load_catalog()
    assert len(fresh.offers) > 10 and len(fresh.gpus) > 10
    assert load_catalog() == fresh


def test_a_stored_catalog_under_the_same_key_is_what_the_next_run_gets(data: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    marked = replace(bundled_catalog(data, cache), overlay="from the cache")
    _store(cache, _key(data), marked)
    assert bundled_catalog(data, cache).overlay == "from the cache"


def test_an_edited_bundle_file_is_never_answered_from_the_old_cache(data: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert bundled_catalog(data, cache).gpus["M60"].name == "NVIDIA Tesla M60"
    gpus = data / "gpus.toml"
    gpus.write_text(gpus.read_text().replace('name = "NVIDIA Tesla M60"', 'name = "NVIDIA Tesla M60 (edited)"'))
    edited = bundled_catalog(data, cache)
    assert edited.gpus["M60"].name == "NVIDIA Tesla M60 (edited)"
    assert (cache / CACHE_NAME).read_bytes().startswith(f"{_key(data)}\n".encode())
    assert bundled_catalog(data, cache) == edited


def test_an_edited_bundle_file_with_a_bad_row_is_refused_like_an_overlay(data: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    bundled_catalog(data, cache)
    gpus = data / "gpus.toml"
    text = gpus.read_text()
    gpus.write_text(text.replace("memory_gb = 8", "memory_gb = -8", 1))
    with pytest.raises(InputError) as err:
        bundled_catalog(data, cache)
    assert err.value.where == "bundled gpus.toml"
    assert "memory_gb" in str(err.value)


def test_a_damaged_cache_is_rebuilt(data: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    good = bundled_catalog(data, cache)
    stored = (cache / CACHE_NAME).read_bytes()
    (cache / CACHE_NAME).write_bytes(stored[: len(stored) // 2])
    assert bundled_catalog(data, cache) == good
    assert (cache / CACHE_NAME).read_bytes() == stored


def test_a_cache_file_others_can_write_is_not_trusted(data: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _ = bundled_catalog(data, cache)
    _store(cache, _key(data), replace(bundled_catalog(data, cache), overlay="planted"))
    (cache / CACHE_NAME).chmod(0o666)
    assert bundled_catalog(data, cache).overlay is None


def test_a_cache_folder_that_cannot_be_written_is_no_error(data: Path, tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder would be")
    catalog = bundled_catalog(data, blocked / "cache")
    assert catalog.gpus["M60"].name == "NVIDIA Tesla M60"
    assert blocked.read_text() == "a file where the cache folder would be"


def test_plan_fills_the_cache_folder_and_prints_the_same_twice(cli: Callable[..., Any]) -> None:
    first = cli("plan", "examples/course-2016.toml", "-f", "json")
    assert first.code == 0, first.err
    assert (Path(os.environ["GPUSEAT_CACHE_DIR"]) / CACHE_NAME).is_file()
    second = cli("plan", "examples/course-2016.toml", "-f", "json")
    assert (second.code, second.out) == (0, first.out)
