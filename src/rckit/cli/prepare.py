"""``rckit prepare``: tokenize, index and cache SQuAD; or write the no-answer, cloze and synthetic sets."""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rckit.cli.arguments import data_arguments, data_source
from rckit.contextual.encoders import DEFAULT_LAYERS
from rckit.data.no_answer import build_no_answer_data
from rckit.data.sources import prepare_data, squad_files
from rckit.data.unanswerable import RULES as UNANSWERABLE_RULES

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
        choices=["squad", "squad-no-answer", "squad-unanswerable", "squad-cloze", "cloze-synthetic"],
        help="squad: the SQuAD cache; squad-no-answer: SQuAD v2.0 training, tuning and evaluation files "
        "(v1.1 train with unanswerable pairs made from it, v2.0 dev split by article position; --train is "
        "v1.1 train, --dev v2.0 dev); squad-unanswerable: unanswerable questions made by rule from SQuAD "
        "v1.1 train's answerable ones (entity and number swaps, negation, the nearest other paragraph; "
        "docs/no-answer.md; pip install 'rckit[unanswerable]'); squad-cloze: an entity-anonymised cloze set "
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
    _no_answer_flags(p)
    p.add_argument(
        "--examples",
        type=int,
        nargs=2,
        default=(5000, 500),
        metavar=("TRAIN", "DEV"),
        help="cloze-synthetic: how many training and dev examples (default 5000 500)",
    )
    _contextual_flags(p)
    _unanswerable_flags(p)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a PrepareConfig field")
    p.add_argument("--rebuild", action="store_true", help="rebuild even if a cached copy exists")
    p.add_argument("--json", action="store_true", help="print the full summary as JSON")


def _no_answer_flags(p: argparse.ArgumentParser) -> None:
    """``squad-no-answer``'s flags: how the unanswerable pairs are made from v1.1 train."""
    p.add_argument(
        "--rate",
        type=float,
        default=0.5,
        help="squad-no-answer: share of v1.1 train questions "
        "paired with a paragraph of their article that lacks their answer (default 0.5)",
    )
    p.add_argument(
        "--pairing",
        choices=["random", "overlap"],
        default="random",
        help="squad-no-answer: pair a "
        "question with any paragraph of its article that lacks its answer, or with one sharing the most "
        "words with it (default random)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="K",
        help="squad-no-answer: write the v2.0 training "
        "quarter K times (its real unanswerable questions weigh more beside the made pairs; default 1)",
    )


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


def _unanswerable_flags(p: argparse.ArgumentParser) -> None:
    """``squad-unanswerable``'s flags: the rules, the articles, the adversarial filter's reader."""
    p.add_argument(
        "--rules",
        default=",".join(UNANSWERABLE_RULES),
        metavar="RULE,RULE",
        help=f"squad-unanswerable: the rules tried on each question (default {','.join(UNANSWERABLE_RULES)})",
    )
    p.add_argument(
        "--articles",
        type=int,
        metavar="N",
        help="squad-unanswerable: make questions from a seeded random N of the training articles (default all)",
    )
    p.add_argument(
        "--filter-with",
        metavar="MODEL",
        help="squad-unanswerable: keep only the made questions this reader (an installed name, a run or a file; "
        "read always answering) still answers with confidence -- adversarial filtering",
    )
    p.add_argument(
        "--min-confidence",
        type=float,
        default=0.3,
        metavar="P",
        help="squad-unanswerable --filter-with: the best span's probability a kept question needs (default 0.3)",
    )
    p.add_argument(
        "--features-cache",
        metavar="DIR",
        help="squad-unanswerable --filter-with: keep the reader's features of each question here "
        "(rckit verifier --cache DIR then does not read them again; a killed filter goes on)",
    )
    p.add_argument("--device", default="cpu", help="squad-unanswerable --filter-with: where the reader runs")
    p.add_argument("--no-progress", action="store_true", help="squad-unanswerable: no progress bar")


def run(args: argparse.Namespace) -> int:
    if args.dataset == "squad-cloze":
        return prepare_squad_cloze(args)
    if args.dataset == "squad-no-answer":
        return prepare_no_answer(args)
    if args.dataset == "cloze-synthetic":
        return prepare_cloze_synthetic(args)
    if args.dataset == "squad-unanswerable":
        return prepare_unanswerable(args)
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


def prepare_no_answer(args: argparse.Namespace) -> int:
    if not args.out:
        raise ValueError("squad-no-answer needs --out DIR")
    train, dev = squad_files(data_source(args), versions=("1.1", "2.0"))  # --train is v1.1 train, --dev v2.0 dev
    t0 = time.perf_counter()
    report = build_no_answer_data(
        train, dev, args.out, rate=args.rate, seed=args.seed, repeat=args.repeat, pairing=args.pairing
    )
    if args.json:
        print(json.dumps(report))
        return 0
    pairs = report["pairs"]
    print(f"squad-no-answer written to {args.out} in {time.perf_counter() - t0:.1f}s")
    print(
        f"  unanswerable pairs from v1.1 train: {pairs['made']} made of {pairs['drawn']} drawn "
        f"({pairs['no_paragraph_without_answer']} questions had no other paragraph without their answer)"
    )
    for name in ("train", "tune", "eval"):
        r = report[name]
        print(
            f"  {name}: {r['file']}: {r['articles']} articles, {r['questions']} questions, "
            f"{r['unanswerable']} unanswerable"
        )
    print(f"  details: {Path(args.out) / 'report.json'}")
    return 0


def prepare_unanswerable(args: argparse.Namespace) -> int:
    """``rckit prepare squad-unanswerable``: ``OUT/made.json`` (SQuAD v2.0) and ``OUT/report.json``."""
    from tqdm import tqdm

    from rckit.data.squad import load_json, read_squad
    from rckit.data.unanswerable import make_unanswerable

    if not args.out:
        raise ValueError("squad-unanswerable needs --out DIR")
    rules = [r.strip() for r in args.rules.split(",") if r.strip()]
    unknown = sorted(set(rules) - set(UNANSWERABLE_RULES))
    if unknown:
        raise ValueError(f"--rules: unknown {', '.join(unknown)} (known: {', '.join(UNANSWERABLE_RULES)})")
    if args.train:
        train = Path(args.train)
    else:  # only train is read: its file alone is looked for
        from rckit.data.download import resolve_squad_files

        train = resolve_squad_files("1.1", data_dir=args.data_dir, cache_dir=args.cache_dir, splits=("train",))["train"]
    if args.min_confidence is not None and not 0.0 <= args.min_confidence <= 1.0:
        raise ValueError(f"--min-confidence {args.min_confidence}: a probability, 0 to 1")
    reader = None
    if args.filter_with:  # loaded first: a wrong name fails before the making
        from rckit.answering.reader import Reader

        reader = Reader.load(args.filter_with, args.device, always_answer=True)
    read_squad(train)  # a broken file is named here, before any work
    articles = load_json(train)["data"]
    if args.articles is not None:
        if args.articles < 1:
            raise ValueError(f"--articles {args.articles}: at least 1")
        chosen = sorted(random.Random(args.seed).sample(range(len(articles)), min(args.articles, len(articles))))
        articles = [articles[i] for i in chosen]
    t0 = time.perf_counter()
    total = sum(len(a["paragraphs"]) for a in articles)
    with tqdm(total=total, unit="paragraph", disable=args.no_progress, desc="making questions") as bar:
        made = make_unanswerable(articles, seed=args.seed, rules=rules, progress=bar.update)
    counts = made.counts()
    filtered = None
    if reader is not None:
        from rckit.training.made_filter import adversarial_filter, reader_confidences

        with tqdm(total=len(made.made), unit="question", disable=args.no_progress, desc="reading them") as bar:
            confidence = reader_confidences(reader, made, args.features_cache, progress=bar.update)
        filtered = adversarial_filter(made, confidence, args.min_confidence, Path(reader.info["source"]).name)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "made.json.tmp"
    tmp.write_text(json.dumps(made.squad(), ensure_ascii=False), encoding="utf-8")
    tmp.replace(out / "made.json")
    report = {
        "source": str(train),
        "seed": args.seed,
        "articles": len(articles),
        "made": counts,
        "kept": made.counts(),
        "filtered": filtered,
        "tried": made.tried,
        "notes": made.notes,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    (out / "report.json").write_text(json.dumps(report, indent=1))
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"squad-unanswerable written to {out / 'made.json'} in {report['seconds']}s")
    for rule, n in counts.items():
        if rule in made.tried:
            kept = f", {report['kept'][rule]} kept by {filtered['reader']}" if filtered else ""
            print(f"  {rule}: {n} made of {made.tried[rule]} questions tried{kept}")
    if filtered:
        print(f"  kept: the reader's best span at probability >= {args.min_confidence} (adversarial filter)")
    for note in made.notes:
        print(f"  {note}")
    return 0


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
