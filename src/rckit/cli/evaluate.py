"""``rckit evaluate``: the official EM/F1 (or cloze accuracy) of a run, a checkpoint or an exported file."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from rckit.cli.arguments import abstain_options, model_option, model_source, ray_options, reader_options
from rckit.cluster.answers import EvaluateTask, run_blocks
from rckit.evaluation.evaluate import evaluate
from rckit.model_files.source import ModelFile, open_model

if TYPE_CHECKING:
    from collections.abc import Callable

    from rckit.answering.reader import Reader


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
    ray_options(p, "a SQuAD file (--data): its questions answered")


def run(args: argparse.Namespace) -> int:
    source = model_source(args)
    if source is None:
        raise ValueError("give the model to evaluate: RUN|FILE or --model NAME")
    found = open_model(source)  # told apart once, here
    if args.record and (not found.exported or not args.data or args.limit):
        raise ValueError(
            "--record keeps the figures of every question of --data in an exported file (.safetensors, "
            ".onnx); give the file and --data, without --limit"
        )
    result = evaluate(
        found,
        args.data,
        split=args.split,
        weights=args.weights,
        limit=args.limit,
        batch_size=args.batch_size,
        out=args.out,
        always_answer=args.always_answer,
        device=args.device,
        no_answer_threshold=args.no_answer_threshold,
        spans_of=None if args.ray is None else on_ray(args, found),
    )
    print(json.dumps(result))
    if args.record:
        from rckit.export.metadata_edit import record_score  # an ONNX file: the onnx package, no PyTorch

        record_score(found.path, args.data, result)
        print(f"recorded in {found.path}", file=sys.stderr)
    return 0


def on_ray(
    args: argparse.Namespace, found: ModelFile
) -> Callable[[Reader, list, Callable[[int], object]], tuple[dict, dict]]:
    """What reads the questions with ``--ray``: blocks of the Reader's chunk, as the local run reads
    them, answered by actors each holding the model (:mod:`rckit.cluster.answers`); the scores are
    the local Reader's."""
    if not args.data:
        raise ValueError("--ray evaluates on a SQuAD file: give it with --data")
    if args.weights != "ema":
        raise ValueError("--ray answers with a run's EMA weights, as the Reader loads it; --weights raw runs locally")
    task = EvaluateTask(str(found.path), {**reader_options(args, on_ray=True), "batch_size": args.batch_size})

    def spans_of(reader: Reader, questions: list, progress: Callable[[int], object]) -> tuple[dict, dict]:
        records = ({"id": ex.qid, "context": ex.context, "question": ex.question} for ex in questions)
        spans, margins = {}, {}
        for r in run_blocks(task, records, args.workers, args.cpus_per_worker, args.ray or None):
            spans[r["id"]] = r["span"]
            if r["margin"] is not None:
                margins[r["id"]] = r["margin"]
            progress(1)
        return spans, margins

    return spans_of
