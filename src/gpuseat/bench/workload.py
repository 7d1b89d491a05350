"""The workload's fixed facts (Caffe's LeNet solver, the MNIST checksums), read from ``caffe_lenet.toml``."""

from __future__ import annotations

import tomllib
from datetime import date
from functools import cache
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Solver(BaseModel):
    """Caffe's ``lenet_solver.prototxt`` plus the data-layer settings that shape training."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_lr: float = Field(gt=0)
    momentum: float = Field(ge=0, lt=1)
    weight_decay: float = Field(ge=0)
    lr_policy: str
    gamma: float = Field(ge=0)
    power: float = Field(ge=0)
    bias_lr_mult: float = Field(gt=0)
    batch_size: int = Field(gt=0)
    input_scale: float = Field(gt=0)
    max_iter: int = Field(gt=0)
    test_batch_size: int = Field(gt=0)
    test_iter: int = Field(gt=0)
    test_interval: int = Field(gt=0)
    source: str
    as_of: date

    def learning_rate(self, iteration: int) -> float:
        """Caffe's "inv" policy: ``base_lr * (1 + gamma * iter) ** -power``, ``iter`` counted from 0."""
        rate: float = self.base_lr * (1.0 + self.gamma * iteration) ** (-self.power)  # float ** float is Any
        return rate

    def test_points(self, iterations: int) -> list[int]:
        """Iterations at which Caffe's schedule tests: 0, every ``test_interval``, and the last one."""
        points = list(range(0, iterations, self.test_interval))
        return [*points, iterations]


class MnistFile(BaseModel):
    """One of the four original IDX files: its header and the MD5 of its exact bytes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    magic: int
    shape: tuple[int, ...]
    md5: str = Field(pattern=r"^[0-9a-f]{32}$")
    source: str
    as_of: date


@cache
def _data() -> dict[str, Any]:
    text = resources.files("gpuseat.bench").joinpath("caffe_lenet.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


@cache
def solver() -> Solver:
    """The Caffe LeNet solver gpuseat reproduces."""
    return Solver.model_validate(_data()["solver"])


@cache
def mnist_files() -> dict[str, MnistFile]:
    """The four MNIST IDX files by name (``train-images-idx3-ubyte`` …)."""
    return {f["name"]: MnistFile.model_validate(f) for f in _data()["mnist"]}
