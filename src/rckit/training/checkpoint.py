"""Checkpoints: one dict, written atomically, loaded without unpickling arbitrary objects.

Contents: ``format``, ``model_name``, ``model_config`` and ``train_config`` (plain dicts),
``model`` (state dict of the unwrapped module), ``optimizer``, ``scheduler``, ``ema``,
``step``, ``epoch``, ``batch_in_epoch``, ``elapsed``, ``best_score`` (of ``score_key``: dev F1
or accuracy), ``task`` (span or cloze), ``vocab`` (word/char lists, or the cloze vocabulary),
``embedding`` (table shapes), ``data`` (where the data came from), ``rng`` (torch CPU/CUDA
generator states).

Writing goes to a temporary file in the same directory, is flushed to disk, then renamed over
the target, so a crash (even ``kill -9``) leaves either the old file or the new one. Loading
uses ``torch.load(weights_only=True)`` and checks the format marker and the required keys
before anything is applied, so a corrupt or foreign file is refused whole.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

FORMAT = "rckit-checkpoint-1"
REQUIRED = ("format", "model_name", "model_config", "model", "step", "vocab")


class CheckpointError(RuntimeError):
    pass


def save_checkpoint(state: dict, path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {"format": FORMAT, **state}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def load_checkpoint(path: str | Path, map_location="cpu") -> dict:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # truncated zip, bad pickle, forbidden global ...
        raise CheckpointError(f"{path}: not a readable rckit checkpoint ({type(e).__name__}: {e})") from e
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"{path}: not an rckit checkpoint (format {found!r}, expected {FORMAT!r})")
    missing = [k for k in REQUIRED if k not in state]
    if missing:
        raise CheckpointError(f"{path}: checkpoint is missing {missing}")
    return state
