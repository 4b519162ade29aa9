"""rckit's own reader from its run to its file (:mod:`rckit.model_files.reader_file`).

``export_reader(source, encoder, out)`` takes the fine-tuning run's weights (a run folder's
``best.pt``, else ``last.pt``; a ``.pt`` file; or a run's carry, :mod:`rckit.model_files.carry`,
rebuilt on the pretrained ``encoder``) and writes one file with the encoder's configuration and
tokenizer, the window it was trained with, the margin's calibration on the tuning quarter and the
default no-answer threshold.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from rckit.contextual.encoders import EncoderFiles
from rckit.model_files.carry import load_carry
from rckit.model_files.reader_file import write_reader_file
from rckit.models.encoder_reader import pretrained_weights


def run_weights(source: str | Path, encoder: EncoderFiles) -> tuple[dict[str, torch.Tensor], dict]:
    """The reader's whole state dict and what the run says of it (``config``, ``step``, ``best``)."""
    path = Path(source)
    if path.is_dir():
        path = next((path / f for f in ("best.pt", "last.pt") if (path / f).is_file()), path / "best.pt")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no fine-tuning run here (rckit finetune writes best.pt and last.pt)")
    if path.suffix == ".safetensors":  # a carry: the change from the pretrained encoder
        pretrained = pretrained_weights(encoder.root / "model.safetensors")
        trained, meta = load_carry(path, pretrained)
        return {**pretrained, **trained}, {"config": meta["config"], "step": meta["step"], "best": meta.get("best")}
    state = torch.load(path, weights_only=True)
    best = state.get("best") or {}
    return state["model"], {"config": state["config"], "step": state.get("step", best.get("step")), "best": best}


def export_reader(
    source: str | Path,
    encoder: EncoderFiles,
    out: str | Path,
    threshold: float = 0.5,
    calibration: tuple[float, float] | None = None,
) -> dict:
    """Write ``source``'s reader to ``out`` (module docstring); ``calibration`` defaults to the one
    the run fitted on the tuning quarter at its best step. Returns the file's metadata."""
    weights, run = run_weights(source, encoder)
    best = run.get("best") or {}
    if calibration is None:
        if not best.get("calibration"):
            raise ValueError(f"{source}: the run records no calibration of its margin (judged on no tuning questions)")
        calibration = tuple(best["calibration"])
    config = run["config"]
    meta = {
        "model": "encoder_reader",
        "bert_config": encoder.config,
        "tokenizer": json.loads((encoder.root / "tokenizer.json").read_text(encoding="utf-8")),
        "max_pieces": int(config["max_pieces"]),
        "stride": int(config["stride"]),
        "calibration": [float(calibration[0]), float(calibration[1])],
        "threshold": float(threshold),
        "encoder": {"name": encoder.name, "digest": encoder.digest},
        "step": run.get("step"),
        "config": config,
        "tuning": {k: v for k, v in best.items() if k.startswith("tune_") or k.startswith("dev_")},
        "scores": [],
    }
    state = {k: v.detach().float().numpy() for k, v in weights.items()}
    meta["parameters"] = int(sum(v.size for v in state.values()))
    write_reader_file(out, state, meta)
    return meta
