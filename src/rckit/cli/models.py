"""``rckit models``: the default model, and the exported models in a directory."""

from __future__ import annotations

import os
from pathlib import Path

from rckit.answering.onnx_backend import read_metadata as onnx_metadata
from rckit.cli import one_line
from rckit.model_files.errors import CheckpointError, MissingPackage
from rckit.model_files.metadata import read_metadata as safetensors_metadata
from rckit.model_files.source import BUNDLED, BUNDLED_ONNX, ModelFile, exported_files, open_model


def add_arguments(p) -> None:
    p.description = ("Say which model `rckit predict` and `rckit serve` use without RUN ($RCKIT_MODEL, else the "
                     "model installed with rckit), and list the exported .safetensors and .onnx files in DIR: name, "
                     "model, size, dev score.")
    p.add_argument("dir", nargs="?", help="a directory of exported models")


def run(args) -> int:
    try:
        found = open_model(None)
        where = "RCKIT_MODEL" if os.environ.get("RCKIT_MODEL") else "installed with rckit"
        print(f"default model: {found.path} ({where})")
        if found.exported:
            print("  " + model_line(found))
    except (FileNotFoundError, MissingPackage) as e:
        print(f"default model: none ({one_line(e)}); the installed model would be {BUNDLED_ONNX} or {BUNDLED}")
    if args.dir:
        files = exported_files(args.dir)
        print(f"{len(files)} exported models in {Path(args.dir)}")
        for f in files:
            print("  " + model_line(f))
    return 0


def model_line(found: ModelFile) -> str:
    """``name  model  size  dev score`` of an exported file, or why it cannot be read."""
    path = found.path
    size = f"{path.stat().st_size / 2**20:.1f} MiB"
    try:
        meta = onnx_metadata(path) if found.kind == "onnx" else safetensors_metadata(path)
    except (CheckpointError, MissingPackage) as e:
        return f"{path.name}  {size}  unreadable: {one_line(e)}"
    scores = [f"EM {e['exact_match']:.2f} F1 {e['f1']:.2f} on {e['data']} ({e['total']:,} questions"
              + (", always answering)" if e.get("always_answer") else ")") for e in meta.get("scores", [])]
    if not scores:  # what training watched: its best dev score, perhaps on a subset
        dev = meta.get("dev_score") or {}
        score = ", ".join(f"{k} {v:.2f}" for k, v in dev.items() if isinstance(v, (int, float)) and k != "questions")
        if score and dev.get("questions") not in (None, "all"):
            score += f" (on {dev['questions']} dev questions, during training)"
        scores = [score or "no dev score"]
    kind = meta.get("dtype") or ("onnx " + (meta.get("quantized") or "fp32") if found.kind == "onnx" else "?")
    return f"{path.name}  {meta['model']}  {size}  {kind}  {'; '.join(scores)}"
