"""Checkpoints: one dict, written atomically, loaded without unpickling arbitrary objects.

Contents: ``format``, ``model_name``, ``model_config``, ``train_config`` and ``decode``
(plain dicts; runs saved before ``decode`` existed kept ``max_answer_len`` in ``train_config``,
which :func:`rckit.answering.decoding.decode_config_of` reads), ``model`` (state dict of the
unwrapped module), ``optimizer``, ``scheduler``, ``ema``, ``step``, ``epoch``,
``batch_in_epoch``, ``elapsed``, ``best_score`` (of ``score_key``: dev F1 or accuracy),
``task`` (span or cloze), ``vocab`` (word/char lists, or the cloze vocabulary), ``embedding``
(table shapes), ``data`` (where the data came from), ``rng`` (torch CPU/CUDA generator states).

Writing goes to a temporary file in the same directory, is flushed to disk, then renamed over
the target, so a crash (even ``kill -9``) leaves either the old file or the new one, plus at
worst a stale ``.NAME.*.tmp`` that :func:`remove_stale_temp_files` clears when training starts
again. Loading uses ``torch.load(weights_only=True)`` and checks the format marker and the
required keys before anything is applied, so a corrupt or foreign file is refused whole, with
a one-line reason (truncated, empty, a pickle that would run code, another program's file).
"""

from __future__ import annotations

import os
import pickle
import re
import tempfile
import zipfile
from pathlib import Path

import torch

from rckit.model_files.errors import CheckpointError

__all__ = ["CheckpointError", "load_checkpoint", "remove_stale_temp_files", "save_checkpoint"]

FORMAT = "rckit-checkpoint-1"
REQUIRED = ("format", "model_name", "model_config", "model", "step", "vocab")


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


def remove_stale_temp_files(directory: str | Path) -> list[Path]:
    """Delete the temporary files that writes killed before their rename left in ``directory``.

    Only names :func:`save_checkpoint` makes (``.NAME.pt.*.tmp``) are touched; call it when no
    other process writes checkpoints there (at the start of training). Returns what was removed.
    """
    removed = []
    for tmp in Path(directory).glob(".*.pt.*.tmp"):
        try:
            tmp.unlink()
            removed.append(tmp)
        except FileNotFoundError:
            pass
    return removed


def _why_unreadable(path: Path, err: Exception) -> str:
    """One line saying why ``torch.load`` refused ``path`` (its messages span many lines)."""
    size = path.stat().st_size
    if size == 0:
        return "empty file (0 bytes)"
    if isinstance(err, pickle.UnpicklingError):
        found = re.search(r"GLOBAL (\S+)", str(err))
        what = f" ({found.group(1)})" if found else ""
        return (
            f"refused: loading it would import or run Python code{what}; rckit checkpoints hold only "
            "tensors and plain data, so nothing of it was loaded"
        )
    with path.open("rb") as fh:
        head = fh.read(4)
    if head == b"PK\x03\x04" and not zipfile.is_zipfile(path):
        return f"truncated or damaged ({size:,} bytes; the end of the archive is missing, as after a copy cut short)"
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"not a PyTorch file ({type(err).__name__}{': ' + first if first else ''})"


def load_checkpoint(path: str | Path, map_location="cpu") -> dict:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # truncated zip, bad pickle, forbidden global ...
        raise CheckpointError(f"{path}: not a readable rckit checkpoint: {_why_unreadable(path, e)}") from e
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: not an rckit checkpoint (it holds a {type(state).__name__}, not a dict)")
    if state.get("format") != FORMAT:
        if "format" in state:
            why = f"format {state['format']!r}, expected {FORMAT!r}"
        else:
            keys = ", ".join(sorted(map(str, state))[:5])
            why = f"a PyTorch file without rckit's 'format' entry; it holds {keys or 'nothing'}"
        raise CheckpointError(f"{path}: not an rckit checkpoint ({why})")
    missing = [k for k in REQUIRED if k not in state]
    if missing:
        raise CheckpointError(f"{path}: checkpoint is missing {missing}")
    return state
