"""The solver facts and Caffe's "inv" learning-rate policy."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuseat.bench.workload import mnist_files, solver


def test_solver_is_caffes_lenet_solver():
    s = solver()
    assert (s.base_lr, s.momentum, s.weight_decay) == (0.01, 0.9, 0.0005)
    assert (s.lr_policy, s.gamma, s.power) == ("inv", 0.0001, 0.75)
    assert (s.batch_size, s.bias_lr_mult, s.input_scale, s.max_iter) == (64, 2.0, 1 / 256, 10000)


@pytest.mark.parametrize(("iteration", "logged"), [(100, "0.00992565"), (9999, "0.0059463")])
def test_inv_rate_matches_caffe_logs(iteration, logged):
    # As printed in Caffe's log ("Iteration 100, lr = 0.00992565"): equal to the printed digits.
    half_last_digit = 0.5 * 10 ** -len(logged.split(".")[1])
    assert solver().learning_rate(iteration) == pytest.approx(float(logged), rel=0, abs=half_last_digit)


@given(st.integers(0, 10**6), st.integers(1, 10**6))
def test_inv_rate_starts_at_base_and_only_falls(iteration, later):
    s = solver()
    assert s.learning_rate(0) == s.base_lr
    assert 0 < s.learning_rate(iteration + later) < s.learning_rate(iteration) <= s.base_lr


def test_caffe_test_schedule_has_21_passes_for_10k():
    points = solver().test_points(10_000)
    assert len(points) == 21
    assert points[:3] == [0, 500, 1000] and points[-1] == 10_000


def test_four_mnist_files_with_md5s():
    files = mnist_files()
    assert sorted(files) == sorted(
        ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]
    )
    assert files["train-images-idx3-ubyte"].shape == (60000, 28, 28)
