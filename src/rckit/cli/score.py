"""``rckit score``: the official EM/F1 of a predictions file."""

from __future__ import annotations

import argparse
import json

from rckit.evaluation.squad_metrics import score_files


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Score PREDICTIONS ({question id: answer text}) against DATASET with the official SQuAD rules. "
        "Every question of the dataset counts; a missing prediction scores 0. Prints one JSON line."
    )
    p.add_argument("dataset", help="SQuAD JSON file, plain or .gz")
    p.add_argument("predictions", help="predictions JSON file")
    p.add_argument("--version", choices=["1.1", "2.0"], help="scoring rules (default: the dataset's version field)")


def run(args: argparse.Namespace) -> int:
    print(json.dumps(score_files(args.dataset, args.predictions, args.version)))
    return 0
