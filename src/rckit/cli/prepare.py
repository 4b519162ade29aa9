"""``rckit prepare``: tokenize, index and cache SQuAD; or write the no-answer, cloze and synthetic sets."""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING

from rckit.cli import prepare_no_answer as no_answer
from rckit.cli.arguments import data_arguments, data_source
from rckit.contextual.encoders import DEFAULT_LAYERS
from rckit.data.sources import prepare_data, squad_files

if TYPE_CHECKING:
    from rckit.data.prepare import Prepared


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Read SQuAD, tokenize with character offsets, build vocabularies from the training split, "
        "attach pretrained vectors and write indexed arrays to a cache directory keyed by every setting that "
        "shaped them (a changed setting rebuilds, an unchanged one loads in seconds). Without --train/--dev "
        "the official files are used: from --data-dir/$RCKIT_DATA if given, else downloaded and checksum-verified."
    )
    p.add_argument(
        "dataset",
        choices=["squad", "squad-no-answer", "squad-unanswerable", "squad-near-miss", "squad-cloze", "cloze-synthetic"],
        help="squad: the SQuAD cache; squad-no-answer: SQuAD v2.0 training, tuning and evaluation files "
        "(v1.1 train with unanswerable pairs made from it, v2.0 dev split by article position; --train is "
        "v1.1 train, --dev v2.0 dev); squad-unanswerable: unanswerable questions made by rule from SQuAD "
        "v1.1 train's answerable ones (entity and number swaps, negation, the nearest other paragraph; "
        "docs/no-answer.md; pip install 'rckit[unanswerable]'); squad-near-miss: a SQuAD v2.0 training file of "
        "v1.1 train (--train; --articles N: its first N) with near-miss unanswerable questions made from it "
        "(each question's answering sentence removed from its paragraph) and other-paragraph pairs, the written "
        "questions of v2.0 dev's training quarter (--dev) and v2.0 train (--v2-train), to an unanswerable share "
        "(--unanswerable-share); squad-cloze: an entity-anonymised cloze set "
        "from SQuAD v1.1; "
        "cloze-synthetic: a small generated cloze task (find the entity after the query's marker word)",
    )
    data_arguments(p)
    p.add_argument("--out", help="output directory (default: <cache-dir>/prepared; squad-cloze: required)")
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="squad-cloze: seed of the per-example entity numbering; cloze-synthetic: seed of the generator",
    )
    no_answer.no_answer_flags(p)
    p.add_argument(
        "--examples",
        type=int,
        nargs=2,
        default=(5000, 500),
        metavar=("TRAIN", "DEV"),
        help="cloze-synthetic: how many training and dev examples (default 5000 500)",
    )
    _contextual_flags(p)
    no_answer.unanswerable_flags(p)
    no_answer.near_miss_flags(p)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a PrepareConfig field")
    p.add_argument("--rebuild", action="store_true", help="rebuild even if a cached copy exists")
    p.add_argument("--json", action="store_true", help="print the full summary as JSON")


def _contextual_flags(p: argparse.ArgumentParser) -> None:
    """``squad``'s flags for a contextual encoder's states, computed beside the arrays."""
    p.add_argument(
        "--contextual",
        metavar="ENCODER",
        help="squad: also compute a contextual encoder's states of "
        "every context and question (e.g. minilm; cached beside the arrays, resumable), as a model with "
        "model.contextual=ENCODER reads them",
    )
    p.add_argument(
        "--contextual-layers",
        default=",".join(map(str, DEFAULT_LAYERS)),
        metavar="L,L",
        help="squad --contextual: the encoder's layers kept, as the model's contextual_layers (default "
        f"{','.join(map(str, DEFAULT_LAYERS))})",
    )


def run(args: argparse.Namespace) -> int:
    if args.dataset in no_answer.KINDS:
        return no_answer.run(args)
    if args.dataset == "squad-cloze":
        return prepare_squad_cloze(args)
    if args.dataset == "cloze-synthetic":
        return prepare_cloze_synthetic(args)
    t0 = time.perf_counter()
    prepared = prepare_data(data_source(args), args.set, args.out, rebuild=args.rebuild)
    if args.contextual:
        from rckit.contextual.spec import ContextualSpec
        from rckit.contextual.states import ContextualEncoder  # PyTorch runs the encoder

        try:
            layers = tuple(int(x) for x in args.contextual_layers.split(","))
        except ValueError:
            raise ValueError(f"--contextual-layers: layer numbers separated by commas, got {args.contextual_layers!r}")
        encoder = ContextualEncoder.load(ContextualSpec(args.contextual, layers))
        for name in prepared.meta["splits"]:
            prepared.split(name).with_encoder(prepared.states_root, encoder, name)
    seconds = time.perf_counter() - t0
    if args.json:
        print(
            json.dumps(
                {
                    **prepared.meta,
                    "path": str(prepared.root),
                    "from_cache": prepared.from_cache,
                    "wall_seconds": round(seconds, 2),
                }
            )
        )
    else:
        print_prepared(prepared, seconds)
    return 0


def print_prepared(prepared: Prepared, seconds: float) -> None:
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
            print(
                f"      {m['id']} answer {m['answer']}: start {m['answer_start']} holds {m['found']!r}, "
                f"not {m['text']!r}"
            )
        print(
            f"    coverage: {100 * cov['tokens_with_pretrained_vector']:.2f}% of tokens have a pretrained vector "
            f"({100 * cov['forms_with_pretrained_vector']:.2f}% of distinct forms)"
        )
        print(
            f"    context tokens mean {c['mean']} p95 {c['p95']} max {c['max']}; "
            f"question tokens mean {q['mean']} p95 {q['p95']} max {q['max']}"
        )
    print(f"  details: {prepared.root / 'meta.json'}")


def prepare_squad_cloze(args: argparse.Namespace) -> int:
    from rckit.data.cloze.from_squad import prepare_squad_cloze as build  # imports PyTorch

    if not args.out:
        raise ValueError("squad-cloze needs --out DIR")
    if args.version != "1.1":
        raise ValueError("squad-cloze is built from SQuAD v1.1")
    t0 = time.perf_counter()
    stats = build(*squad_files(data_source(args)), args.out, seed=args.seed)
    if args.json:
        print(json.dumps(stats))
        return 0
    print(f"squad-cloze written to {args.out} in {time.perf_counter() - t0:.1f}s")
    for name in ("train", "dev"):
        print(f"  {name}: {json.dumps(stats[name])}")
    for name, b in stats["baselines"].items():
        shown = (f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in b.items())
        print(f"  baselines on {name}: " + ", ".join(shown))
    return 0


def prepare_cloze_synthetic(args: argparse.Namespace) -> int:
    from rckit.data.cloze.synthetic import write_synthetic_cloze  # imports PyTorch

    if not args.out:
        raise ValueError("cloze-synthetic needs --out DIR")
    out = write_synthetic_cloze(args.out, *args.examples, seed=args.seed)
    print(f"cloze-synthetic written to {out}: {args.examples[0]} training and {args.examples[1]} dev examples")
    return 0
