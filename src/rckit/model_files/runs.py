"""A trained run's checkpoint, read for :func:`rckit.model_files.load.load_model`: which file
(:func:`checkpoint_of`: ``best.pt``, else ``last.pt``), checked (:func:`read_run`), and what it
says about its model in the shape an exported file's metadata has (:func:`run_metadata`).

A checkpoint is only used for the run it belongs to: when the run directory holds a
``config.json``, its model name and model settings must be the checkpoint's, so a file copied
into the wrong run is refused instead of answering as if nothing were wrong.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from rckit.config import differences
from rckit.contextual.spec import ContextualSpec
from rckit.data.cloze.examples import ClozeVocab
from rckit.data.embeddings import EmbeddingInfo
from rckit.data.vocab import Vocabularies
from rckit.model_files.checkpoint import CheckpointError, load_checkpoint


def checkpoint_of(run: str | Path) -> Path:
    """The checkpoint of a run directory (``best.pt``, else ``last.pt``); a checkpoint's own path
    (a file, or a ``.pt`` name that :func:`load_checkpoint` then says is missing) as it is."""
    run = Path(run)
    if run.is_file() or (run.suffix == ".pt" and not run.is_dir()):
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
        raise CheckpointError(
            f"{path}: holds a {ckpt['model_name']} model but {config_path} says the run "
            f"trained {config['model']}: this checkpoint does not belong to this run"
        )
    # JSON has no tuples: compare the checkpoint's settings as config.json would hold them.
    found = json.loads(json.dumps(ckpt["model_config"]))
    if config.get("model_config", found) != found:
        raise CheckpointError(
            f"{path}: its {ckpt['model_name']} settings differ from {config_path} "
            f"(config.json -> checkpoint: {differences(config['model_config'], found)}): "
            "this checkpoint does not belong to this run"
        )


def embedding_placeholder(e: dict) -> EmbeddingInfo:
    """An :class:`EmbeddingInfo` of the recorded shapes, zeros inside: the model's tables come
    from its saved state, so only their sizes are needed to build it."""
    return EmbeddingInfo(
        word_vectors=torch.zeros(e["words"], e["word_dim"]),
        n_trainable_words=e["n_trainable_words"],
        n_chars=e["n_chars"],
        char_vectors=None if e["char_vectors_dim"] is None else torch.zeros(e["n_chars"], e["char_vectors_dim"]),
        n_entities=e.get("n_entities", 0),
        contextual=ContextualSpec.from_json(e.get("contextual")),
    )


def read_run(source: str | Path) -> tuple[Path, dict]:
    """(the checkpoint file, its contents) of a run directory (its ``best.pt``, else ``last.pt``)
    or a checkpoint, checked: readable, and of the run it sits in."""
    path = checkpoint_of(source)
    ckpt = _load_or_point_elsewhere(path, source)
    check_belongs_to_run(ckpt, path)
    return path, ckpt


def run_metadata(ckpt: dict, file: Path) -> dict:
    """What a checkpoint says about its model, with an exported file's keys
    (:func:`rckit.model_files.load.load_model`): ``format`` ``"run"``, ``task``, ``model``,
    ``model_config``, ``decode`` (as saved: :func:`rckit.answering.decoding.decode_config_of` reads every layout),
    ``train_config``, ``vocab``, ``embedding``, ``dev_score``, ``step``, ``data`` (where the data
    came from) and ``file``."""
    return {
        "format": "run",
        "task": ckpt.get("task", "span"),
        "model": ckpt["model_name"],
        "model_config": ckpt["model_config"],
        "decode": ckpt.get("decode"),
        "train_config": ckpt.get("train_config") or {},
        "vocab": ckpt["vocab"],
        "embedding": ckpt["embedding"],
        "dev_score": dev_score_of(ckpt, file),
        "step": ckpt.get("step"),
        "data": ckpt.get("data") or {},
        "file": str(file),
    }


def run_weights(ckpt: dict, ema: bool) -> dict:
    """The checkpoint's state dict, its EMA weights in place of the raw ones where ``ema`` and it has them."""
    if ema and ckpt.get("ema"):
        return {**ckpt["model"], **ckpt["ema"]["shadow"]}
    return ckpt["model"]


def run_vocabularies(ckpt: dict) -> Vocabularies | ClozeVocab:
    """:class:`Vocabularies` for a SQuAD run, :class:`ClozeVocab` for a cloze run."""
    v = ckpt["vocab"]
    if ckpt.get("task", "span") == "cloze":
        return ClozeVocab(v["itos"], v["n_entities"], v.get("lowercase", True))
    return Vocabularies.from_json(v)


def dev_score_of(ckpt: dict, file: Path) -> dict | None:
    """``{score_key: best dev score, "questions": how many it was measured on}`` of a run's
    ``best.pt``, or None: a ``last.pt`` carries the best score of another file."""
    best = ckpt.get("best_score", -1.0)
    if file.name != "best.pt" or best is None or best < 0:
        return None
    train_cfg = ckpt.get("train_config") or {}
    return {ckpt.get("score_key", "f1"): best, "questions": train_cfg.get("eval_questions") or "all"}
