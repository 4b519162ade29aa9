"""``rckit explain``: why a span model gives its answer (:meth:`rckit.answering.reader.Reader.explain`)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from rckit.answering.answer import shown
from rckit.answering.explanation import DEFAULT_STEPS, Explanation
from rckit.answering.reader import Reader, span_reader
from rckit.answering.texts import check_text
from rckit.cli.arguments import model_option, model_source, span_options
from rckit.explain.write import write_explanation
from rckit.model_files.source import names_installed, pytorch_source

# What explains when no model is given: the installed default (rckit's own reader, docs/own-reader.md)
# has no explanations yet, so the installed QANet's answer is explained, and the explanation says so.
EXPLAINED_DEFAULT = "qanet"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Explain a span model's answer to a question about a context: the window read, the start and end "
        "probabilities of every token, the model's attention (QANet's context-query attention, DCN's coattention), "
        "DCN's decoder iterations, and each word's saliency (gradient x input, integrated gradients). Needs the "
        "PyTorch model (a run, a checkpoint or a .safetensors file); without RUN: $RCKIT_MODEL, else the installed "
        f"{EXPLAINED_DEFAULT} (the installed default, rckit's own reader, does not explain its answers yet)."
    )
    p.add_argument(
        "run",
        nargs="?",
        metavar="RUN|FILE",
        help=f"run directory, checkpoint or exported .safetensors file (default: the installed {EXPLAINED_DEFAULT})",
    )
    model_option(p)
    p.add_argument("--context", help="context text")
    p.add_argument("--question", help="question text")
    p.add_argument(
        "--example",
        metavar="N|ID",
        help="a cloze run (Attentive, Impatient, Deep LSTM Reader): explain "
        "example N (or the example with this id) of its data: the attention over the document, as Hermann "
        "et al.'s Figure 3, and the candidates' probabilities",
    )
    p.add_argument("--data", metavar="DIR", help="with --example: the cloze data (default: the run's)")
    p.add_argument("--split", help="with --example: the split (default: the one the run evaluated on)")
    p.add_argument("--json", action="store_true", help="print the explanation as JSON")
    p.add_argument(
        "--out",
        metavar="FILE",
        help="write the explanation to FILE: .png (a figure: the passage shaded by "
        "start/end probability, the attention as a heat map, DCN's iterations, the saliency), .html (the "
        "same, one self-contained page with the numbers on hover) or .json",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=DEFAULT_STEPS,
        metavar="N",
        help=f"integrated gradients' steps from the all-zero word vectors (default {DEFAULT_STEPS})",
    )
    span_options(p)
    p.add_argument("--device", default="auto")


def run(args: argparse.Namespace) -> int:
    if args.out is not None and Path(args.out).suffix.lower() not in (".png", ".html", ".json"):
        raise ValueError(f"--out {args.out}: the explanation is written as .png, .html or .json")
    if args.example is not None:
        return explain_example(args)
    if args.context is None or args.question is None:
        raise ValueError("give --context and --question (a span model), or --example N (a cloze run)")
    check_text("context", args.context)
    check_text("question", args.question)
    source = model_source(args)
    reader = span_reader(Reader.load(torch_source(source), args.device), "rckit explain")
    explanation = reader.explain(args.context, args.question, args.steps, args.max_answer_len, args.stride)
    if explains_instead(source):
        explanation["notes"].append(
            f"explained with the installed {EXPLAINED_DEFAULT}: the default reader (rckit's own) does not explain "
            "its answers yet, so this answer may differ from `rckit predict`'s"
        )
    if args.out is not None:
        write_explanation(explanation, Path(args.out))
    if args.json:
        print(json.dumps(explanation, ensure_ascii=False))
    elif args.out is None:
        print(summary(explanation))
    return 0


def explain_example(args: argparse.Namespace) -> int:
    """``--example``: a cloze run's attention over one document of its data."""
    from rckit.explain.cloze import explain_cloze, write_cloze

    source = model_source(args)
    if source is None:
        raise ValueError("--example explains a cloze run: name it (rckit explain RUN --example N)")
    if args.out is not None and Path(args.out).suffix.lower() not in (".png", ".json"):
        raise ValueError(f"--out {args.out}: a cloze explanation is written as .png or .json")
    e = explain_cloze(source, args.example, args.data, args.split, "cpu" if args.device == "auto" else args.device)
    if args.out is not None:
        write_cloze(e, args.out)
    if args.json:
        print(json.dumps(e, ensure_ascii=False))
    elif args.out is None:
        best = ", ".join(f"{c['entity']} {c['probability']:.3f}" for c in e["candidates"][:5])
        print(
            f"example {e['example']} ({e['id']}): answer {e['answer']}, gold {e['gold']}\ncandidates: {best}"
            + "".join(f"\nnote: {n}" for n in e["notes"])
        )
    return 0


def torch_source(source: str | None) -> str | Path:
    """``source`` as given, or for an installed model (by name) its PyTorch file: the name may
    answer with its ONNX file, which cannot explain. None is ``$RCKIT_MODEL`` where set, else the
    installed :data:`EXPLAINED_DEFAULT`. An ONNX file given by its path is refused by the reader in
    one line, naming the file beside it."""
    if explains_instead(source):
        source = EXPLAINED_DEFAULT
    return pytorch_source(source) if names_installed(source) else source


def explains_instead(source: str | None) -> bool:
    """Whether :data:`EXPLAINED_DEFAULT` explains in place of the default: no model given, no ``$RCKIT_MODEL``."""
    return source is None and not os.environ.get("RCKIT_MODEL")


def summary(e: Explanation, top: int = 5) -> str:
    """The explanation for a person: the answer, the likeliest starts and ends, the most salient words."""
    tokens = e["context_tokens"]

    def best(values: list[float], words: list[str]) -> str:
        order = sorted(range(len(values)), key=lambda i: -abs(values[i]))[:top]
        return ", ".join(
            f"{words[i]} {values[i]:+.3f}" if min(values) < 0 else f"{words[i]} {values[i]:.3f}" for i in order
        )

    ig = e["saliency"]["integrated_gradients"]
    lines = [
        f"answer: {shown(e['answer'])}",
        f"window: characters {e['window']['start']} to {e['window']['end']} ({len(tokens)} tokens)",
        f"start: {best(e['start_probs'], tokens)}",
        f"end: {best(e['end_probs'], tokens)}",
        f"salient context words (integrated gradients): {best(ig['context'], tokens)}",
        f"salient question words: {best(ig['question'], e['question_tokens'])}",
    ]
    if e["null_prob"] is not None:
        lines.insert(1, f"p(no answer): {e['null_prob']:.3f}")
    return "\n".join(lines + [f"note: {n}" for n in e["notes"]])
