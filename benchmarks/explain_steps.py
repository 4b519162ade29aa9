"""How many integrated-gradients steps an explanation needs: time and accuracy per installed model.

    python benchmarks/explain_steps.py [--steps 8,12,16,32] [--reference 256] [--questions 3]

For each installed model with a PyTorch file, and each of the first ``--questions`` questions of
load_serve.py's ~150-token paragraph, ``Reader.explain`` (the verifier off: the reader's own
answer is explained) with ``--reference`` steps gives reference attributions; then for each of
``--steps``:

- seconds: ``Reader.explain`` end to end, median of 3 after one;
- error: ``|ig - ig_ref| / |ig_ref|`` over the context's and the question's words together, the
  worst over the questions;
- gap: ``|sum(ig) - (score - baseline_score)| / |score - baseline_score|`` (integrated gradients'
  completeness), the worst over the questions.

Prints a Markdown table (one row per model and step count) and the reference's own gap.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from installed_models import time_explain  # noqa: E402
from load_serve import PARAGRAPH, QUESTIONS  # noqa: E402

from rckit.answering.reader import Reader  # noqa: E402
from rckit.model_files.source import installed_files, installed_models  # noqa: E402


def attributions(explanation) -> tuple[np.ndarray, float]:
    """All words' integrated gradients (context then question) and the completeness gap's share."""
    ig = explanation["saliency"]["integrated_gradients"]
    change = ig["score"] - ig["baseline_score"]
    return np.array(ig["context"] + ig["question"]), abs(ig["sum"] - change) / max(abs(change), 1e-9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", default="8,12,16,32")
    ap.add_argument("--reference", type=int, default=256)
    ap.add_argument("--questions", type=int, default=3)
    ap.add_argument("--models", default="all", help="names joined by commas (default: every installed model)")
    args = ap.parse_args()
    steps = [int(s) for s in args.steps.split(",")]
    names = installed_models() if args.models == "all" else args.models.split(",")
    questions = QUESTIONS[: args.questions]
    print(f"| model | steps | explain s | error vs {args.reference} steps (worst) | completeness gap (worst) |")
    print("| --- | --- | --- | --- | --- |")
    for name in names:
        path = installed_files(name).get("safetensors")
        if path is None:
            continue
        reader = Reader.load(path, always_answer=True)
        refs, ref_gaps = [], []
        for q in questions:
            ig, gap = attributions(reader.explain(PARAGRAPH, q, args.reference))
            refs.append(ig)
            ref_gaps.append(gap)
        print(f"| {name} | {args.reference} (reference) | - | - | {max(ref_gaps):.3f} |")
        for n in steps:
            errors, gaps = [], []
            for q, ref in zip(questions, refs):
                ig, gap = attributions(reader.explain(PARAGRAPH, q, n))
                errors.append(float(np.linalg.norm(ig - ref) / np.linalg.norm(ref)))
                gaps.append(gap)
            print(
                f"| {name} | {n} | {time_explain(reader, 3, questions[0], n):.3f} | "
                f"{max(errors):.3f} | {max(gaps):.3f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
