"""Loading a trained run (its best or last checkpoint) for evaluation, prediction and serving."""

from __future__ import annotations

from pathlib import Path

import torch

from rckit.config import from_dict
from rckit.data.embeddings import EmbeddingInfo
from rckit.data.prepare import Vocabularies
from rckit.models import MODELS
from rckit.training.checkpoint import CheckpointError, load_checkpoint


def checkpoint_of(run: str | Path) -> Path:
    run = Path(run)
    if run.is_file():
        return run
    for name in ("best.pt", "last.pt"):
        if (run / name).exists():
            return run / name
    raise FileNotFoundError(f"{run}: no best.pt or last.pt (is this a run directory?)")


def load_model(run: str | Path, device: str | torch.device = "cpu", use_ema: bool = True):
    """(model in eval mode with EMA weights, vocabularies, checkpoint dict).

    Vocabularies: :class:`Vocabularies` for SQuAD runs, :class:`ClozeVocab` for cloze runs.
    """
    path = checkpoint_of(run)
    ckpt = load_checkpoint(path)
    name = ckpt["model_name"]
    if name not in MODELS:
        raise CheckpointError(f"{path}: unknown model {name!r} (known: {', '.join(MODELS)})")
    cfg_cls, model_cls = MODELS[name]
    cfg = from_dict(cfg_cls, ckpt["model_config"])
    e = ckpt["embedding"]
    info = EmbeddingInfo(
        word_vectors=torch.zeros(e["words"], e["word_dim"]),
        n_trainable_words=e["n_trainable_words"],
        n_chars=e["n_chars"],
        char_vectors=None if e["char_vectors_dim"] is None else torch.zeros(e["n_chars"], e["char_vectors_dim"]),
        n_entities=e.get("n_entities", 0),
    )
    model = model_cls(cfg, info)
    try:
        model.load_state_dict(ckpt["model"])
        if use_ema and ckpt.get("ema"):
            with torch.no_grad():
                params = dict(model.named_parameters())
                for n, t in ckpt["ema"]["shadow"].items():
                    params[n].copy_(t)
    except (RuntimeError, KeyError) as err:
        raise CheckpointError(f"{path}: weights do not fit a {name} model: {err}") from err
    model.to(device).eval()
    if ckpt.get("task", "span") == "cloze":
        from rckit.data.cloze import ClozeVocab

        v = ckpt["vocab"]
        return model, ClozeVocab(v["itos"], v["n_entities"], v.get("lowercase", True)), ckpt
    return model, Vocabularies.from_json(ckpt["vocab"]), ckpt
