"""rckit's own reader from its run to its file (:mod:`rckit.model_files.reader_file`).

``export_reader(source, encoder, out, step=...)`` takes the fine-tuning run's weights and writes one
file with the encoder's configuration and tokenizer, the window it was trained with, the margin's
calibration on the tuning quarter at that step and the default no-answer threshold. ``source`` is a
run folder, one of its ``.pt`` files, or its carry (:mod:`rckit.model_files.carry`, rebuilt on the
pretrained ``encoder``); ``step`` chooses which of the run's weights:

- ``"best"``: the step of the best tuning F1 (the folder's ``best.pt``; a ``.pt`` or a carry only
  where it holds that step);
- ``"last"``: the run's latest weights (the folder's ``last.pt``, a ``.pt``, a carry), judged where
  the run's log has a line for that step (a finished run's last step always has one).

Each step's figures and calibration are its line of the run's log (``log.jsonl``, or the carry's
copy of it): a step the run did not judge has no calibration and is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from rckit.contextual.encoders import EncoderFiles
from rckit.model_files.carry import load_carry
from rckit.model_files.reader_file import write_reader_file
from rckit.models.encoder_reader import pretrained_weights

STEPS = ("best", "last")


def is_reader_run(source: str | Path) -> bool:
    """Whether ``source`` is a fine-tuning run of rckit's own reader: a folder with ``log.jsonl``
    and ``best.pt`` or ``last.pt`` (and no ``config.json``, which a reading model's run has), one
    of its ``.pt`` files, or its carry."""
    path = Path(source)
    if path.is_dir():
        runs = (path / "best.pt").is_file() or (path / "last.pt").is_file()
        return runs and (path / "log.jsonl").is_file() and not (path / "config.json").is_file()
    if path.suffix == ".pt":
        return is_reader_run(path.parent)
    if path.suffix == ".safetensors" and path.is_file():
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="numpy") as f:
                return "rckit_carry" in (f.metadata() or {})
        except Exception:  # not a safetensors file at all: not a carry either
            return False
    return False


def run_weights(source: str | Path, encoder: EncoderFiles, step: str = "best") -> tuple[dict[str, torch.Tensor], dict]:
    """The reader's whole state dict at the run's ``step`` (module docstring) and what the run says
    of it: ``config``, ``step`` and ``line`` (that step's log line: figures and calibration)."""
    if step not in STEPS:
        raise ValueError(f"step must be one of {', '.join(STEPS)}, not {step!r}")
    path = Path(source)
    if path.is_dir() and not (path / f"{step}.pt").is_file():
        raise FileNotFoundError(
            f"{path}: no {step}.pt in this fine-tuning run (rckit finetune writes best.pt at its best "
            "evaluation and last.pt as it goes)"
        )
    path = path / f"{step}.pt" if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no fine-tuning run here (rckit finetune writes best.pt and last.pt)")
    if path.suffix == ".safetensors":  # a carry: the change from the pretrained encoder
        pretrained = pretrained_weights(encoder.root / "model.safetensors")
        trained, meta = load_carry(path, pretrained)
        weights, config, at = {**pretrained, **trained}, meta["config"], meta["step"]
        best, lines, digest = meta.get("best"), meta.get("log"), meta.get("encoder")
    else:
        state = torch.load(path, weights_only=True)
        best, digest = state.get("best") or {}, state.get("encoder")
        weights, config, at = state["model"], state["config"], state.get("step", best.get("step"))
        log = path.parent / "log.jsonl"
        lines = [json.loads(x) for x in log.read_text().splitlines() if x.strip()] if log.is_file() else None
    if "stride" not in config or "model" not in config:
        raise ValueError(f"{source}: not a run of rckit finetune (rckit distill's run writes its encoder folder)")
    if digest is not None and digest != encoder.digest:
        raise ValueError(f"{source}: the run fine-tuned another encoder than {encoder.name} (its weights differ)")
    best = best or {}
    if step == "best" and best.get("step") is not None and at != best["step"]:
        raise ValueError(
            f"{source} holds step {at}'s weights and the run's best was step {best['step']}: "
            "export its latest weights (step 'last', rckit export --step last) or the run folder's best.pt"
        )
    line = best if at == best.get("step") else next((x for x in lines or [] if x.get("step") == at), None)
    if not line or not line.get("calibration"):
        raise ValueError(
            f"{source}: step {at} was not judged on the tuning quarter, so its no-answer margin has no "
            "calibration: resume the run to its next evaluation, or export its best step"
        )
    return weights, {"config": config, "step": at, "line": line}


def export_reader(
    source: str | Path, encoder: EncoderFiles, out: str | Path, threshold: float = 0.5, step: str = "best"
) -> dict:
    """Write ``source``'s reader at ``step`` (module docstring) to ``out``. Returns the file's metadata."""
    weights, run = run_weights(source, encoder, step)
    line, config = run["line"], run["config"]
    meta = {
        "model": "encoder_reader",
        "bert_config": encoder.config,
        "tokenizer": json.loads((encoder.root / "tokenizer.json").read_text(encoding="utf-8")),
        "max_pieces": int(config["max_pieces"]),
        "stride": int(config["stride"]),
        "calibration": [float(c) for c in line["calibration"]],
        "threshold": float(threshold),
        "encoder": {"name": encoder.name, "digest": encoder.digest},
        "step": run["step"],
        "config": config,
        "tuning": {k: v for k, v in line.items() if k.startswith("tune_") or k.startswith("dev_")},
        "scores": [],
    }
    state = {k: v.detach().float().numpy() for k, v in weights.items()}
    meta["parameters"] = int(sum(v.size for v in state.values()))
    write_reader_file(out, state, meta)
    return meta
