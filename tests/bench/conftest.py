"""Fixtures for the bench tests: real MNIST converted once per test session into a temporary cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuseat.bench.data import Mnist, load_mnist


@pytest.fixture(scope="session")
def mnist_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A session-wide cache dir holding the converted MNIST (the conversion takes a few seconds)."""
    folder = tmp_path_factory.mktemp("mnist-cache")
    load_mnist(cache_dir=folder)
    return folder


@pytest.fixture(scope="session")
def mnist(mnist_cache: Path) -> Mnist:
    """Real, verified MNIST."""
    return load_mnist(cache_dir=mnist_cache)


@pytest.fixture
def bench_env(mnist_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the CLI at the session's MNIST cache and a fresh results store; returns the store's folder."""
    store = tmp_path / "data"
    monkeypatch.setenv("GPUSEAT_CACHE_DIR", str(mnist_cache))
    monkeypatch.setenv("GPUSEAT_DATA_DIR", str(store))
    return store


def has_cuda() -> bool:
    """Whether a CUDA device is usable here (imports torch; call only from GPU tests' skip marks)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "-1":
        return False
    import torch

    return torch.cuda.is_available()
