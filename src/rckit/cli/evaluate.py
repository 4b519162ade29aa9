"""``rckit evaluate``: the official EM/F1 (or cloze accuracy) of a run, a checkpoint or an exported file."""

from __future__ import annotations

import argparse
import json
import sys

from rckit.cli.arguments import abstain_options, model_option, model_source
from rckit.evaluation.evaluate import evaluate
from rckit.model_files.source import open_model


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Predict every question of a SQuAD file with a trained run (or an exported .safetensors "
        "file and --data) and print the official EM/F1; for a cloze run, the accuracy over every "
        "example of its evaluation split."
    )
    p.add_argument(
        "run", nargs="?", metavar="RUN|FILE", help="run directory, or a file from `rckit export` (with --data)"
    )
    model_option(p)
    p.add_argument("--data", help="SQuAD file to evaluate on (default: the run's dev file); cloze: a cloze directory")
    p.add_argument("--split", default=None, help="cloze: which split of the directory (dev, test; default: the run's)")
    p.add_argument(
        "--weights",
        default="ema",
        choices=["ema", "raw"],
        help="the checkpoint's EMA weights (default, what training evaluated) or its raw weights",
    )
    p.add_argument("--limit", type=int, help="only the first N questions (scored over those N)")
    p.add_argument("--out", help="write predictions JSON here")
    abstain_options(p)
    p.add_argument(
        "--record",
        action="store_true",
        help="an exported file: keep the figures in it, so that "
        "`rckit models` and GET /v1/model show them (with --data, every question, no --limit)",
    )
    p.add_argument("--device", default="auto")
    p.add_argument("--batch-size", type=int, default=32)


def run(args: argparse.Namespace) -> int:
    args.run = model_source(args)
    if args.run is None:
        raise ValueError("give the model to evaluate: RUN|FILE or --model NAME")
    if args.record and (not open_model(args.run).exported or not args.data or args.limit):
        raise ValueError(
            "--record keeps the figures of every question of --data in an exported file (.safetensors, "
            ".onnx); give the file and --data, without --limit"
        )
    result = evaluate(
        args.run,
        args.data,
        split=args.split,
        weights=args.weights,
        limit=args.limit,
        batch_size=args.batch_size,
        out=args.out,
        always_answer=args.always_answer,
        device=args.device,
        no_answer_threshold=args.no_answer_threshold,
    )
    print(json.dumps(result))
    if args.record:
        from rckit.export.metadata_edit import record_score  # an ONNX file: the onnx package, no PyTorch

        record_score(open_model(args.run).path, args.data, result)
        print(f"recorded in {args.run}", file=sys.stderr)
    return 0
