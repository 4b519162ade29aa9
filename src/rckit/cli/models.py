"""``rckit models``: the models installed with rckit, the default model, and the exported models in a directory."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from rckit.answering.onnx_backend import read_metadata as onnx_metadata
from rckit.cli.errors import one_line
from rckit.model_files.errors import CheckpointError, MissingPackage
from rckit.model_files.metadata import contextual_of
from rckit.model_files.metadata import read_metadata as safetensors_metadata
from rckit.model_files.reader_file import is_reader_file, reader_metadata
from rckit.model_files.source import (
    BUNDLED,
    INSTALLED,
    OWN_READERS,
    ModelFile,
    exported_files,
    installed,
    installed_files,
    installed_models,
    installed_path,
    open_model,
    reader_backend,
)

SPEED = INSTALLED / "speed.json"  # one question's milliseconds per installed model (benchmarks/installed_models.py)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "List the models installed with rckit (use one with --model NAME: predict, evaluate, serve, ask, "
        "explain, export, train --init-from) with their dev EM/F1, size and speed; say which model "
        "`rckit predict` and `rckit serve` use without one ($RCKIT_MODEL, else the installed minilm_reader); and "
        "list the exported .safetensors and .onnx files in DIR: name, model, size, dev score."
    )
    p.add_argument("dir", nargs="?", help="a directory of exported models")


def run(args: argparse.Namespace) -> int:
    try:
        found = open_model(None)
        where = "RCKIT_MODEL" if os.environ.get("RCKIT_MODEL") else "installed with rckit"
        print(f"default model: {found.path} ({where})")
        if found.exported:
            print("  " + model_line(found))
    except (FileNotFoundError, MissingPackage) as e:
        print(f"default model: none ({one_line(e)}); the installed model would be {BUNDLED}")
    print(installed_table())
    if args.dir:
        files = exported_files(args.dir)
        print(f"{len(files)} exported models in {Path(args.dir)}")
        for f in files:
            print("  " + model_line(f))
    return 0


def installed_table() -> str:
    """One row per installed model: its name, architecture, files and their sizes, its full-dev
    EM/F1 as recorded in its file, one question's milliseconds (``speed.json``) and what answers
    with it here."""
    speed = json.loads(SPEED.read_text()) if SPEED.is_file() else {}
    rows = [("name", "model", "files", "SQuAD v1.1 dev EM / F1", "ms a question", "answers here with")]
    for name in installed_models():
        files = installed_files(name)
        meta = _metadata(files)
        dev = full_dev(meta)
        figure = f"{dev['exact_match']:.2f} / {dev['f1']:.2f}" if dev else "not recorded"
        missing = missing_inputs(meta)
        if "safetensors" in files and "onnx" in files and not missing:  # the ONNX file's own figures, where they differ
            graph = full_dev(onnx_metadata(files["onnx"]))
            if graph and dev and (graph["exact_match"], graph["f1"]) != (dev["exact_match"], dev["f1"]):
                figure += f" (.onnx {graph['exact_match']:.2f} / {graph['f1']:.2f})"
        sizes = ", ".join(f"{path.suffix} {path.stat().st_size / 2**20:.1f} MiB" for path in files.values())
        ms = speed.get("models", {}).get(name, {})
        try:
            found = open_model(installed_path(name))
            own = name in OWN_READERS  # one file for both backends
            onnx = reader_backend() == "onnx" if own else found.backend == "onnxruntime"
            backend = "onnxruntime" if onnx else "PyTorch"
        except MissingPackage as e:
            backend = f"nothing: {one_line(e)}"
        if missing and not backend.startswith("nothing"):
            backend = f"nothing: it reads {' and '.join(missing)}, not installed: pip install 'rckit[models]'"
        reads = contextual_of(meta)  # the encoder whose states it reads, if any
        if "encoder" in meta:  # rckit's own reader: the encoder itself, fine-tuned
            model = f"{meta['model']} ({meta['encoder']['name']}, fine-tuned)"
        else:
            model = meta["model"] + (f" + {reads.name}" if reads else "")
        rows.append(
            (
                name,
                model,
                sizes,
                figure,
                ", ".join(f"{v:.1f} {k}" for k, v in ms.items()) or "-",
                backend,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)) + "  " + r[-1] for r in rows]
    note = f"  (speed: {speed['machine']}, {speed['date']})" if speed else ""
    return f"installed models (--model NAME; the first is the default):{note}\n" + "\n".join("  " + x for x in lines)


def _metadata(files: dict[str, Path]) -> dict:
    """An installed model's metadata: its ``.safetensors`` file's (a span model's or rckit's own
    reader's), else its ONNX file's."""
    if "safetensors" not in files:
        return onnx_metadata(files["onnx"])
    path = files["safetensors"]
    return reader_metadata(path) if is_reader_file(path) else safetensors_metadata(path)


def missing_inputs(meta: dict) -> list[str]:
    """The packages a span model's file reads that are not installed here: the GloVe rows' (where
    they are rebuilt from their package) and its contextual encoder's weights'. rckit's own reader
    carries all it reads."""
    from rckit.contextual.encoders import find_encoder
    from rckit.model_files.glove_rows import PACKAGE

    out = []
    rebuilt = [r for r in (meta.get("frozen_rows") or {}).values() if r.get("source") == PACKAGE]
    if rebuilt and not installed(PACKAGE.replace("-", "_")):  # what reading the rows imports
        out.append(PACKAGE)
    reads = contextual_of(meta)
    if reads is not None:
        try:
            find_encoder(reads.name)
        except ModuleNotFoundError:
            out.append(f"the {reads.name} encoder's weights package")
    return out


def full_dev(meta: dict) -> dict | None:
    """A file's recorded figures on every SQuAD v1.1 dev question, or None: always answering where
    recorded (every v1.1 question has an answer, so this is what the reader reads; the same figure
    for every model), else as recorded (files from before the verifier answered every question)."""
    full = [s for s in meta.get("scores", []) if s.get("total") == 10570]
    return next((s for s in full if s.get("always_answer")), None) or next(iter(full), None)


def model_line(found: ModelFile) -> str:
    """``name  model  size  dev score`` of an exported file, or why it cannot be read."""
    path = found.path
    size = f"{path.stat().st_size / 2**20:.1f} MiB"
    own = found.kind == "safetensors" and is_reader_file(path)  # rckit's own reader
    try:
        meta = (
            onnx_metadata(path)
            if found.kind == "onnx"
            else reader_metadata(path)
            if own
            else safetensors_metadata(path)
        )
    except (CheckpointError, MissingPackage) as e:
        return f"{path.name}  {size}  unreadable: {one_line(e)}"
    scores = [
        f"EM {e['exact_match']:.2f} F1 {e['f1']:.2f} on {e['data']} ({e['total']:,} questions"
        + (", always answering)" if e.get("always_answer") else ")")
        for e in meta.get("scores", [])
    ]
    if not scores:  # what training watched: its best dev score, perhaps on a subset
        dev = meta.get("dev_score") or _tuning(meta.get("tuning") or {})
        score = ", ".join(f"{k} {v:.2f}" for k, v in dev.items() if isinstance(v, (int, float)) and k != "questions")
        if score and dev.get("questions") not in (None, "all"):
            score += f" (on {dev['questions']} dev questions, during training)"
        scores = [score or "no dev score"]
    kind = (
        "int8 a row"
        if own
        else meta.get("dtype") or ("onnx " + (meta.get("quantized") or "fp32") if found.kind == "onnx" else "?")
    )
    contextual = contextual_of(meta)
    if contextual is not None and contextual.int8:
        kind += ", encoder int8"
    return f"{path.name}  {meta['model']}  {size}  {kind}  {'; '.join(scores)}"


def _tuning(tuning: dict) -> dict:
    """A reader file's figures at its best step (:mod:`rckit.training.encoder_reader`), as a dev score."""
    if "dev_f1" not in tuning:
        return {}
    return {"f1": tuning["dev_f1"], "no-answer AUC": tuning.get("tune_auc"), "questions": "a subset of"}
