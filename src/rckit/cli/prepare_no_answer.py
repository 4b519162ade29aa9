"""``rckit prepare``'s no-answer datasets: ``squad-no-answer``, ``squad-unanswerable`` and
``squad-near-miss``, their flags and their runs (:mod:`rckit.cli.prepare` adds the flags and calls :func:`run`)."""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from rckit.cli.arguments import data_source
from rckit.data.near_miss import NearMissConfig, build_near_miss
from rckit.data.no_answer import build_no_answer_data
from rckit.data.sources import squad_files
from rckit.data.unanswerable import RULES as UNANSWERABLE_RULES

KINDS = ("squad-no-answer", "squad-unanswerable", "squad-near-miss")


def no_answer_flags(p: argparse.ArgumentParser) -> None:
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


def unanswerable_flags(p: argparse.ArgumentParser) -> None:
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
    train = v11_train(args)
    if args.min_confidence is not None and not 0.0 <= args.min_confidence <= 1.0:
        raise ValueError(f"--min-confidence {args.min_confidence}: a probability, 0 to 1")
    reader = None
    if args.filter_with:  # loaded first: a wrong name fails before the making
        from rckit.answering.reader import Reader, span_reader

        reader = span_reader(Reader.load(args.filter_with, args.device, always_answer=True), "--filter-with")
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


def near_miss_flags(p: argparse.ArgumentParser) -> None:
    """``squad-near-miss``'s own flags (it also reads --train, --dev, --data-dir, --seed and --articles)."""
    p.add_argument(
        "--v2-train",
        metavar="PATH",
        help="squad-near-miss: SQuAD v2.0 train articles (e.g. its first 10) whose written questions join the file",
    )
    share = NearMissConfig().unanswerable_share
    p.add_argument(
        "--unanswerable-share",
        type=float,
        default=share,
        metavar="F",
        help=f"squad-near-miss: the share of unanswerable questions the file is filled to "
        f"(default {share:.2f}, as in SQuAD v2.0 train)",
    )


def run(args: argparse.Namespace) -> int:
    """One of :data:`KINDS`."""
    if args.dataset == "squad-no-answer":
        return prepare_no_answer(args)
    if args.dataset == "squad-unanswerable":
        return prepare_unanswerable(args)
    return prepare_near_miss(args)


def v11_train(args: argparse.Namespace) -> Path:
    """``--train``, else SQuAD v1.1 train from --data-dir or the cache (downloaded if needed)."""
    if args.train:
        return Path(args.train)
    from rckit.data.download import resolve_squad_files  # only train is read: its file alone is looked for

    return resolve_squad_files("1.1", data_dir=args.data_dir, cache_dir=args.cache_dir, splits=("train",))["train"]


def prepare_near_miss(args: argparse.Namespace) -> int:
    """``rckit prepare squad-near-miss``: ``OUT/train-near-miss.json.gz`` (SQuAD v2.0) and ``OUT/report.json``."""
    if not args.out:
        raise ValueError("squad-near-miss needs --out DIR")
    config = NearMissConfig(seed=args.seed, unanswerable_share=args.unanswerable_share, articles=args.articles)
    report = build_near_miss(v11_train(args), args.out, args.dev, args.v2_train, config)
    if args.json:
        print(json.dumps(report))
        return 0
    kinds, totals, check = report["kinds"], report["totals"], report["check"]
    print(f"squad-near-miss written to {Path(args.out) / report['file']} in {report['seconds']}s")
    for kind, c in kinds.items():
        made = f", {c['made']} made" if "made" in c else ""
        tried = (
            f" of {c['tried']} tried" if "tried" in c else f" of {c['eligible']} eligible" if "eligible" in c else ""
        )
        skipped = c.get("skipped")
        why = f" (skipped: {', '.join(f'{k} {v}' for k, v in skipped.items())})" if skipped else ""
        print(f"  {kind}: {c['in_file']} in the file{made}{tried}{why}")
    print(
        f"  total: {totals['questions']} questions, {totals['answerable']} answerable, {totals['unanswerable']} "
        f"unanswerable (share {totals['unanswerable_share']:.3f}, target {totals['target_share']:.3f})"
    )
    print(
        f"  check: {check['made_unanswerable_holding_answer']} of {check['made_unanswerable_checked']} made "
        f"unanswerable passages hold their source's answer, {check['answerable_offsets_wrong']} of "
        f"{check['answerable_checked']} answerable offsets wrong"
    )
    print(f"  details: {Path(args.out) / 'report.json'}")
    return 0
