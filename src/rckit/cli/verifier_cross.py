"""``rckit verifier --cross-encoder DIR``: issue 62's cross-encoder verifier, fine-tuned beside a span
reader (:mod:`rckit.training.cross_verifier`) and, with ``--into``, exported beside the files; kept
apart from :mod:`rckit.cli.verifier` (the feature verifier) until rckit's own reader supersedes it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rckit.cli.arguments import model_source

if TYPE_CHECKING:
    from rckit.answering.verifier import Verifier


def cross_encoder_flags(p: argparse.ArgumentParser) -> None:
    """The cross-encoder verifier's flags, in their own group of ``--help``: its fine-tuning run
    and, with ``--into``, its threshold."""
    cross = p.add_argument_group(
        "the cross-encoder verifier",
        "fine-tune all-MiniLM-L6-v2 to read the question, the reader's span and the passage together "
        "(rckit.training.cross_verifier), resumable and time-budgeted; --into then exports its graph beside the "
        "files and names it in them",
    )
    cross.add_argument("--cross-encoder", metavar="DIR", help="the fine-tuning run's folder")
    cross.add_argument("--v2-train", metavar="V2_TRAIN", help="SQuAD v2.0 train articles to train on besides")
    cross.add_argument("--minutes", type=float, help="train at most this long in this call (then --resume)")
    cross.add_argument("--max-steps", type=int, help="stop after this many steps in all (then --resume)")
    cross.add_argument("--resume", action="store_true", help="continue the run in --cross-encoder DIR")
    cross.add_argument("--epochs", type=float, default=2.0, help="epochs planned (the learning rate's schedule)")
    cross.add_argument("--lr", type=float, default=1e-4, help="AdamW's peak learning rate (default 1e-4)")
    cross.add_argument("--v11-sample", type=int, default=6000, help="answerable v1.1 train questions to train on")
    cross.add_argument("--max-pieces", type=int, default=192, help="the input's length in pieces (default 192)")
    cross.add_argument("--train-layers", type=int, default=0, help="fine-tune only the top N layers (0: all)")
    cross.add_argument(
        "--pool", choices=("first", "mean"), default="first", help="the head reads the first piece's state or the mean"
    )
    cross.add_argument(
        "--made-sample",
        type=int,
        default=0,
        help="with --made: made questions trained on besides, each beside its source (default 0)",
    )
    cross.add_argument("--reader-spans", type=int, default=2, help="the reader's best spans per question trained on")
    cross.add_argument(
        "--balance",
        choices=("none", "questions", "paragraphs"),
        default="none",
        help="weigh unanswerable and answerable questions' examples equally, in all or within each passage",
    )
    cross.add_argument("--eval-every", type=int, default=500, help="steps between tuning evaluations")
    cross.add_argument("--encoder", default="minilm", help="the encoder to start from (default minilm)")
    cross.add_argument(
        "--keep",
        type=float,
        default=0.95,
        help="with --into: the threshold that keeps this share of the answers' F1 on the tuning quarter "
        "(0.98, 0.95, 0.92 or 0.9; default 0.95)",
    )
    cross.add_argument("--threshold", type=float, help="with --into: abstain above this p(no answer) instead")


def found_file(data_dir: str | None, given: str | None, folder: str, pattern: str) -> Path:
    """``given``, or the first file of ``data_dir/folder`` (else ``data_dir``) matching ``pattern``."""
    if given:
        return Path(given)
    if not data_dir:
        raise ValueError(f"give --data-dir, or the file ({pattern}) itself")
    hits = sorted((Path(data_dir) / folder).glob(pattern)) or sorted(Path(data_dir).glob(pattern))
    if not hits:
        raise FileNotFoundError(f"{data_dir}: no {folder}/{pattern}")
    return hits[0]


def fine_tune(args: argparse.Namespace) -> int:
    from rckit.answering.reader import Reader, span_reader
    from rckit.contextual.encoders import find_encoder
    from rckit.models.cross_encoder import CrossEncoderConfig
    from rckit.training.cross_verifier import CrossTrainConfig
    from rckit.training.cross_verifier import fine_tune as run_fine_tune

    v2_dev = found_file(args.data_dir, args.v2_dev, "squad-v2.0", "dev-v2.0*.json*")
    v2_train = args.v2_train or (
        found_file(args.data_dir, None, "squad-v2.0", "train-v2.0*.json*") if args.data_dir else None
    )
    v11_train = (
        found_file(args.data_dir, args.train, "squad-v1.1", "train-v1.1*.json*")
        if (args.data_dir or args.train)
        else None
    )
    config = CrossTrainConfig(
        max_pieces=args.max_pieces,
        epochs=args.epochs,
        lr=args.lr,
        eval_every=args.eval_every,
        seed=args.seed,
        v11_sample=args.v11_sample,
        reader_spans=args.reader_spans,
        balance=args.balance,
        made=args.made_sample,
        model=CrossEncoderConfig(train_layers=args.train_layers, pool=args.pool),
    )
    reader = span_reader(Reader.load(model_source(args), args.device, always_answer=True), "rckit verifier")
    got = run_fine_tune(
        reader,
        find_encoder(args.encoder),
        v2_dev,
        args.cross_encoder,
        v2_train,
        v11_train,
        config,
        args.minutes,
        args.max_steps,
        args.resume,
        log=lambda m: print(m, file=sys.stderr),
        made=args.made,
    )
    best = got["best"] or {}
    print(
        json.dumps(
            {
                "step": got["step"],
                "planned": got["planned"],
                "done": got["done"],
                "best": {k: v for k, v in best.items() if k != "figures"},
            }
        )
    )
    return 0


def install_cross(args: argparse.Namespace) -> Verifier:
    """Export the run's best checkpoint beside the --into files; the files' verifier with it named
    in it, with its threshold (the feature verifier the files carry stays, for a collection's
    passages), for ``rckit verifier`` to put into them."""
    from rckit.answering.reader import Reader, span_reader
    from rckit.answering.verifier import Verifier
    from rckit.contextual.encoders import find_encoder
    from rckit.model_files.metadata import read_metadata
    from rckit.training.cross_verifier import install_cross_verifier

    files = [Path(f) for f in args.into]
    if len({f.parent.resolve() for f in files}) != 1:
        raise ValueError("--into: the files that share a cross-encoder verifier must be in one folder")
    meta = read_metadata(files[0])
    if not meta.get("verifier"):
        raise ValueError(f"{files[0]}: has no verifier to add the cross-encoder to (rckit verifier --into it first)")
    inner = {k: v for k, v in meta["verifier"].items() if k != "cross"}
    v2_dev = found_file(args.data_dir, args.v2_dev, "squad-v2.0", "dev-v2.0*.json*")
    reader = span_reader(Reader.load(model_source(args), args.device, always_answer=True), "rckit verifier")
    cross = install_cross_verifier(
        args.cross_encoder,
        reader,
        find_encoder(args.encoder),
        v2_dev,
        files[0],
        args.keep,
        args.threshold,
        log=lambda m: print(m, file=sys.stderr),
    )
    print(json.dumps({k: v for k, v in cross["tuning"].items() if k != "curve"}))
    return Verifier.from_json({**inner, "cross": cross}, str(files[0]))
