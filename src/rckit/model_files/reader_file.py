"""rckit's own reader as one file: ``NAME.safetensors`` in the format ``rckit-pointer-1``.

The file carries everything answering needs, so no weights package is read:

- the fine-tuned encoder and its head (:class:`rckit.models.encoder_reader.EncoderReader`'s state
  dict), each matrix in int8 with a float32 scale a row (``NAME`` and ``NAME_scale``: the largest
  magnitude of the row / 127), each vector in float32: a quarter of the float32 file;
- in its metadata (JSON under ``rckit``): the encoder's ``config.json`` (``bert_config``), its
  WordPiece ``tokenizer.json`` whole (``tokenizer``), the window (``max_pieces``, ``stride``), the
  margin's calibration (``calibration``: ``p(no answer) = sigmoid(a m + b)``), the default
  ``threshold`` on it, where the weights came from (``encoder``: the pretrained encoder's name and
  digest, ``step``, the training ``config``) and the figures recorded (``scores``).

:func:`read_reader_file` checks the file whole before reading it (:func:`rckit.model_files.metadata.read_metadata`)
and gives float32 arrays; this module imports no PyTorch.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from rckit.contextual.encoders import SCALE, float_tensors, int8_rows
from rckit.model_files.errors import CheckpointError
from rckit.model_files.metadata import as_created, read_metadata

FORMAT = "rckit-pointer-1"
REQUIRED = ("model", "bert_config", "tokenizer", "max_pieces", "stride", "calibration")


def write_reader_file(path: str | Path, state: dict[str, np.ndarray], meta: dict) -> Path:
    """``state`` (name -> float array) and ``meta`` written to ``path`` (module docstring), atomically."""
    from safetensors.numpy import save_file

    tensors: dict[str, np.ndarray] = {}
    for name, value in state.items():
        value = np.asarray(value, np.float32)
        if value.ndim == 2:
            tensors[name], tensors[name + SCALE] = int8_rows(value, 127)
        else:
            tensors[name] = value
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata={"rckit": json.dumps({**meta, "format": FORMAT})})
    as_created(tmp)
    os.replace(tmp, path)
    return path


def is_reader_file(path: str | Path) -> bool:
    """Whether ``path`` is a file of this format (its header read, nothing else)."""
    try:
        read_metadata(path, FORMAT, ())
    except (CheckpointError, OSError):
        return False
    return True


def reader_metadata(path: str | Path) -> dict:
    """The file's metadata, checked (a one-line :class:`CheckpointError` otherwise)."""
    return read_metadata(path, FORMAT, REQUIRED)


def read_reader_file(path: str | Path) -> tuple[dict[str, np.ndarray], dict]:
    """The state dict as float32 arrays (int8 matrices times their scales) and the metadata."""
    meta = reader_metadata(path)
    return float_tensors(path), meta
