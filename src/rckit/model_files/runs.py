"""Loading a trained run (its best or last checkpoint) for evaluation, prediction and serving.

A checkpoint is only used for the run it belongs to: when the run directory holds a
``config.json``, its model name and model settings must be the checkpoint's, so a file copied
into the wrong run is refused instead of answering as if nothing were wrong.

What a saved model says about itself, read the same way from a checkpoint and from an exported
file's metadata: :func:`decode_config_of` (how to decode its answers) and :func:`dev_score_of`
(the dev score it was kept for).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from rckit.config import differences, from_dict
from rckit.data.cloze import ClozeVocab
from rckit.data.embeddings import EmbeddingInfo
from rckit.data.prepare import Vocabularies
from rckit.answering.decoding import DecodeConfig
from rckit.models import MODELS
from rckit.model_files.checkpoint import CheckpointError, load_checkpoint


def checkpoint_of(run: str | Path) -> Path:
    run = Path(run)
    if run.is_file():
        return run
    for name in ("best.pt", "last.pt"):
        if (run / name).exists():
            return run / name
    raise FileNotFoundError(f"{run}: no best.pt or last.pt (is this a run directory?)")


def _load_or_point_elsewhere(path: Path, run: str | Path) -> dict:
    """Load ``path``; if a run's best.pt is unreadable, the error says whether last.pt would do."""
    try:
        return load_checkpoint(path)
    except CheckpointError as err:
        last = path.with_name("last.pt")
        if Path(run).is_dir() and path.name == "best.pt" and last.exists() and _readable(last):
            raise CheckpointError(f"{err}; {last} reads fine: give it instead of the run directory to use it") from err
        raise


def _readable(path: Path) -> bool:
    try:
        load_checkpoint(path)
    except CheckpointError:
        return False
    return True


def check_belongs_to_run(ckpt: dict, path: str | Path) -> None:
    """Refuse a checkpoint whose model differs from the ``config.json`` of the run it sits in."""
    path = Path(path)
    config_path = path.parent / "config.json"
    if not config_path.exists():
        return  # a checkpoint on its own describes itself
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{config_path}: not valid JSON ({err}); it says which model the run trained") from None
    if not isinstance(config, dict) or "model" not in config:
        raise CheckpointError(f"{config_path}: not a run's config (no 'model' entry)")
    if config["model"] != ckpt["model_name"]:
        raise CheckpointError(f"{path}: holds a {ckpt['model_name']} model but {config_path} says the run "
                              f"trained {config['model']}: this checkpoint does not belong to this run")
    # JSON has no tuples: compare the checkpoint's settings as config.json would hold them.
    found = json.loads(json.dumps(ckpt["model_config"]))
    if config.get("model_config", found) != found:
        raise CheckpointError(f"{path}: its {ckpt['model_name']} settings differ from {config_path} "
                              f"(config.json -> checkpoint: {differences(config['model_config'], found)}): "
                              "this checkpoint does not belong to this run")


def embedding_placeholder(e: dict) -> EmbeddingInfo:
    """An :class:`EmbeddingInfo` of the recorded shapes, zeros inside: the model's tables come
    from its saved state, so only their sizes are needed to build it."""
    return EmbeddingInfo(
        word_vectors=torch.zeros(e["words"], e["word_dim"]),
        n_trainable_words=e["n_trainable_words"],
        n_chars=e["n_chars"],
        char_vectors=None if e["char_vectors_dim"] is None else torch.zeros(e["n_chars"], e["char_vectors_dim"]),
        n_entities=e.get("n_entities", 0),
    )


def load_model(run: str | Path, device: str | torch.device = "cpu", use_ema: bool = True):
    """(model in eval mode with EMA weights, vocabularies, checkpoint dict).

    Vocabularies: :class:`Vocabularies` for SQuAD runs, :class:`ClozeVocab` for cloze runs.
    """
    path = checkpoint_of(run)
    ckpt = _load_or_point_elsewhere(path, run)
    check_belongs_to_run(ckpt, path)
    name = ckpt["model_name"]
    if name not in MODELS:
        raise CheckpointError(f"{path}: unknown model {name!r} (known: {', '.join(MODELS)})")
    cfg_cls, model_cls = MODELS[name]
    cfg = from_dict(cfg_cls, ckpt["model_config"])
    info = embedding_placeholder(ckpt["embedding"])
    model = model_cls(cfg, info)
    try:
        model.load_state_dict(ckpt["model"])
        if use_ema and ckpt.get("ema"):
            with torch.no_grad():
                params = dict(model.named_parameters())
                for n, t in ckpt["ema"]["shadow"].items():
                    params[n].copy_(t)
    except (RuntimeError, KeyError) as err:
        detail = " ".join(ln.strip() for ln in str(err).splitlines() if ln.strip())
        raise CheckpointError(f"{path}: weights do not fit a {name} model: {detail[:300]}") from err
    model.to(device).eval()
    if ckpt.get("task", "span") == "cloze":
        v = ckpt["vocab"]
        return model, ClozeVocab(v["itos"], v["n_entities"], v.get("lowercase", True)), ckpt
    return model, Vocabularies.from_json(ckpt["vocab"]), ckpt


def decode_config_of(record: dict) -> DecodeConfig:
    """The decode settings a model was saved with, from its checkpoint, ``config.json`` or an
    exported file's metadata.

    Runs saved before decoding had its own ``decode`` section kept ``max_answer_len`` in
    ``train_config``; runs older still kept neither and decoded with the default.
    """
    if record.get("decode") is not None:
        return from_dict(DecodeConfig, record["decode"])
    old = (record.get("train_config") or {}).get("max_answer_len")
    return DecodeConfig() if old is None else DecodeConfig(max_answer_len=int(old))


def dev_score_of(ckpt: dict, file: Path) -> dict | None:
    """``{score_key: best dev score, "questions": how many it was measured on}`` of a run's
    ``best.pt``, or None: a ``last.pt`` carries the best score of another file."""
    best = ckpt.get("best_score", -1.0)
    if file.name != "best.pt" or best is None or best < 0:
        return None
    train_cfg = ckpt.get("train_config") or {}
    return {ckpt.get("score_key", "f1"): best, "questions": train_cfg.get("eval_questions") or "all"}
