"""Loading a model into PyTorch, from whichever file holds it: :func:`load_model`.

One function for a run directory, a checkpoint and an exported ``.safetensors`` file (told apart
by :func:`rckit.model_files.source.open_model`), giving the module in eval mode, its vocabularies
and one metadata dict of the same shape for every kind: an exported file's keys
(:mod:`rckit.export.safetensors`), which a run's checkpoint gives too
(:func:`rckit.model_files.runs.run_metadata`), plus

- ``task``: ``span`` or ``cloze`` (an exported file is always a span model);
- ``decode`` and ``train_config`` as saved: :func:`rckit.answering.decoding.decode_config_of`
  reads the decode settings from them, whichever layout the model was saved with;
- ``data``: where the run's data came from (``dev_file``; cloze: ``cloze_dir``, ``eval_split``),
  empty for an exported file, which keeps no data paths;
- ``file``: the file read (a run's ``best.pt`` or ``last.pt``, or the exported file);
- ``format``: ``run`` for a run or checkpoint, else the exported file's format.

Evaluation, answering (:class:`rckit.answering.reader.Reader`), export and ``--init-from``
all load through it. An ONNX file is answered on onnxruntime instead
(:mod:`rckit.answering.onnx_backend`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from rckit.data.cloze.examples import ClozeVocab
from rckit.data.vocab import Vocabularies
from rckit.model_files.checkpoint import CheckpointError
from rckit.model_files.metadata import read_metadata
from rckit.model_files.runs import embedding_placeholder, read_run, run_metadata, run_vocabularies, run_weights
from rckit.model_files.safetensors import exported_weights
from rckit.model_files.source import ModelFile, open_model
from rckit.models import MODELS, model_config


def load_model(
    source: str | Path | ModelFile, device: str | torch.device = "cpu", ema: bool = True
) -> tuple[torch.nn.Module, Vocabularies | ClozeVocab, dict]:
    """(model in eval mode on ``device``, vocabularies, metadata) of a run directory, a checkpoint
    or an exported ``.safetensors`` file (see the module docstring for the metadata).

    Vocabularies: :class:`Vocabularies`, or :class:`ClozeVocab` for a cloze run. ``ema``: a
    run's or checkpoint's EMA weights (what training evaluated) rather than its raw ones; an
    exported file holds one set (the run's EMA weights at export). A file that cannot be used
    is refused with one line naming it (:class:`CheckpointError`).
    """
    found = open_model(source)
    if found.kind == "onnx":
        raise ValueError(
            f"{found.path}: an ONNX file is answered on onnxruntime (rckit.Reader.load), not loaded into PyTorch"
        )
    if found.kind == "safetensors":
        file = found.path
        saved = read_metadata(file)
        meta = {**saved, "task": "span", "data": {}, "file": str(file)}
    else:
        file, ckpt = read_run(found.path)
        meta = run_metadata(ckpt, file)
    name = meta["model"]
    if name not in MODELS:
        raise CheckpointError(f"{file}: unknown model {name!r} (known: {', '.join(MODELS)})")
    if found.kind == "safetensors":
        vocabs = Vocabularies.from_json(meta["vocab"])
        state = exported_weights(file, meta, vocabs.words.itos)
    else:
        vocabs, state = run_vocabularies(ckpt), run_weights(ckpt, ema)
    info = embedding_placeholder(meta["embedding"])
    try:
        model = MODELS[name][1](model_config(name, meta["model_config"]), info)
        model.load_state_dict(state)
    except (RuntimeError, KeyError, ValueError) as err:
        detail = " ".join(ln.strip() for ln in str(err).splitlines() if ln.strip())
        raise CheckpointError(f"{file}: weights do not fit a {name} model: {detail[:300]}") from err
    return model.to(device).eval(), vocabs, meta


def load_span_model(source: str | Path | ModelFile, device: str | torch.device = "cpu"):
    """:func:`load_model` for answering questions about text: a cloze model is refused, as it
    answers no span of a context."""
    found = open_model(source)
    model, vocabs, meta = load_model(found, device)
    if meta["task"] == "cloze":
        raise ValueError(
            f"{found.path} is a cloze model: it picks an @entity marker, not a span of a context; "
            "score it with `rckit evaluate`"
        )
    return model, vocabs, meta
