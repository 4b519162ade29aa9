"""A fine-tuning run's state small enough to keep in the repository between sessions.

A run's ``last.pt`` (:mod:`rckit.training.steps`) holds the model and AdamW's moments in float32:
for the encoder reader about 260 MB, which lives in the run's folder and nowhere else. Where that
folder does not outlive the machine, the run goes on from its **carry**: a ``.safetensors`` file of

- every trained tensor's change from the pretrained encoder, ``W - W_0``: int8 with a scale per row
  for a matrix (a fine-tuning change is small, so the int8 step of ``max |W - W_0|`` / 127 a row is
  about one optimiser step's size), float32 for a vector (biases, norms) and for the head, which
  starts from no pretrained value;
- the torch RNG state;
- in its metadata (JSON): the step, the training seconds, the best figures, the run's config and
  every log line so far, so the learning curve is whole wherever the run goes on.

Resuming from a carry (:func:`rckit.training.encoder_reader.fine_tune`) rebuilds the weights as
``W_0 + change`` and starts AdamW's moments afresh, the learning rate ramped back up on the run's own
schedule; each epoch's order is drawn from ``seed + epoch``, so the batches are those the run would
have taken. ``rckit export``'s reader file can be written from a carry too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch

from rckit.contextual.encoders import SCALE, int8_rows
from rckit.model_files.metadata import as_created

RNG = "__rng__"


def save_carry(
    path: str | Path,
    trained: dict[str, torch.Tensor],
    start: dict[str, torch.Tensor],
    meta: dict,
) -> None:
    """Write ``trained`` (name -> tensor) as its change from ``start`` (names missing there start
    from zero) with ``meta`` (JSON-able), atomically."""
    from safetensors.numpy import save_file

    tensors: dict[str, np.ndarray] = {}
    for name, value in trained.items():
        w = value.detach().float().cpu().numpy()
        change = w - (start[name].detach().float().cpu().numpy() if name in start else 0.0)
        if change.ndim == 2 and name in start:
            tensors[name], tensors[name + SCALE] = int8_rows(change, 127)
        else:
            tensors[name] = change.astype(np.float32)
    tensors[RNG] = torch.get_rng_state().numpy()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata={"rckit_carry": json.dumps(meta)})
    as_created(tmp)
    os.replace(tmp, path)


def load_carry(path: str | Path, start: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict]:
    """The trained tensors ``start + change`` and the metadata of a carry; the torch RNG state is
    restored. A file that is not a carry is refused, naming it."""
    from safetensors import safe_open

    path = Path(path)
    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = json.loads((f.metadata() or {})["rckit_carry"])
            raw = {name: f.get_tensor(name) for name in f.keys()}
    except Exception as e:  # a missing key, bad JSON, or safetensors' own SafetensorError
        raise ValueError(f"{path}: not a fine-tuning run's carry file ({e})") from None
    torch.set_rng_state(torch.from_numpy(raw.pop(RNG)))
    out = {}
    for name, value in raw.items():
        if name.endswith(SCALE):
            continue
        change = value.astype(np.float32)
        if value.dtype == np.int8:
            change = change * raw[name + SCALE][:, None]
        base = start[name].detach().float().numpy() if name in start else 0.0
        out[name] = torch.from_numpy(np.asarray(base + change, np.float32))
    return out, meta
