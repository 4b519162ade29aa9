"""``rckit verifier``: train the verifier that lets a span reader say "no answer", and put it into
exported model files (:mod:`rckit.answering.verifier`, :mod:`rckit.training.verifier`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rckit.cli.arguments import model_option, model_source
from rckit.model_files.source import export_format

if TYPE_CHECKING:
    from rckit.answering.reader import Reader
    from rckit.answering.verifier import Verifier


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Train a verifier beside a frozen span reader (SOURCE or --model NAME): it reads the reader's evidence and "
        "the question's words against the text, and says whether the text holds the answer. Trained on SQuAD v1.1 "
        "train, pairs made from it (and, with --made, questions made by rule), the training quarter of SQuAD "
        "v2.0 dev; its threshold is chosen on the tuning quarter; the evaluation half (odd articles) is never read. "
        "--into puts it into exported model files (.safetensors, .onnx), which then abstain by default. --from puts "
        "a saved verifier into files; --remove takes it out."
    )
    p.add_argument("run", nargs="?", metavar="SOURCE", help="the reader: a run, an exported file, or an installed name")
    model_option(p, "an installed model by name (rckit models), a run or a file; the same as SOURCE")
    _data_flags(p)
    _training_flags(p)
    _file_flags(p)
    p.add_argument("--device", default="cpu")
    _cross_encoder_flags(p)


def _data_flags(p: argparse.ArgumentParser) -> None:
    """Where the SQuAD files it trains and tunes on are: a folder, or each file."""
    p.add_argument(
        "--data-dir",
        help="a directory holding squad-v1.1/train-v1.1*.json[.gz] and "
        "squad-v2.0/dev-v2.0*.json[.gz] (or give --train and --v2-dev)",
    )
    p.add_argument("--train", metavar="V11_TRAIN", help="SQuAD v1.1 training file")
    p.add_argument("--v2-dev", metavar="V2_DEV", help="SQuAD v2.0 dev file (split by article position)")


def _training_flags(p: argparse.ArgumentParser) -> None:
    """How the verifier is trained: its examples, its threshold, the seed, the features' cache,
    the collection's verifier."""
    p.add_argument(
        "--per-kind",
        type=int,
        default=10_000,
        metavar="N",
        help="answerable questions, and pairs of each made kind, drawn from v1.1 train (default 10000)",
    )
    p.add_argument(
        "--made",
        metavar="MADE.json",
        help="unanswerable questions made by rule (rckit prepare squad-unanswerable) to train on besides, "
        "up to --per-kind of each rule (with --cross-encoder: --made-sample of them, each beside its source)",
    )
    p.add_argument(
        "--default-threshold",
        choices=["keep", "best-f1"],
        default="keep",
        help="the threshold the verifier carries: the lowest that keeps 98%% of the answers' F1 on the tuning "
        "quarter (default), or the quarter's best F1 (half its questions are unanswerable: it turns away most "
        "answers of ordinary questions; docs/no-answer.md)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache", metavar="DIR", help="keep the reader's features here, for another training")
    p.add_argument(
        "--collection",
        metavar="DIR",
        help="also train the collection's verifier (rckit ask: whether the "
        "passages retrieved hold the answer), on an index of v1.1 train articles built in DIR",
    )


def _file_flags(p: argparse.ArgumentParser) -> None:
    """Where the verifier goes: a file of its own, exported model files; or out of them."""
    p.add_argument("--out", metavar="VERIFIER.json", help="write the trained verifier (and its report) here")
    p.add_argument("--from", dest="source", metavar="VERIFIER.json", help="a verifier written by --out, not trained")
    p.add_argument("--into", nargs="+", metavar="FILE", default=[], help="exported model files to put it into")
    p.add_argument("--remove", action="store_true", help="take the verifier out of the --into files")


def _cross_encoder_flags(p: argparse.ArgumentParser) -> None:
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


def _found(data_dir: str | None, given: str | None, folder: str, pattern: str) -> Path:
    if given:
        return Path(given)
    if not data_dir:
        raise ValueError(f"give --data-dir, or the file ({pattern}) itself")
    hits = sorted((Path(data_dir) / folder).glob(pattern)) or sorted(Path(data_dir).glob(pattern))
    if not hits:
        raise FileNotFoundError(f"{data_dir}: no {folder}/{pattern}")
    return hits[0]


def run(args: argparse.Namespace) -> int:
    from rckit.answering.verifier import Verifier

    if args.cross_encoder:
        return fine_tune(args) if not args.into else install_cross(args)
    if args.remove:
        if not args.into:
            raise ValueError("--remove takes the verifier out of the --into files; name them")
        put_into(args.into, None)
        return 0
    if args.source:
        verifier = Verifier.from_json(json.loads(Path(args.source).read_text()), args.source)
    else:
        source = model_source(args)
        if source is None:
            raise ValueError(
                "give the reader to train a verifier for (SOURCE or --model NAME), or --from VERIFIER.json"
            )
        from rckit.answering.reader import Reader, span_reader
        from rckit.training.verifier import train_verifier

        train = _found(args.data_dir, args.train, "squad-v1.1", "train-v1.1*.json*")
        v2_dev = _found(args.data_dir, args.v2_dev, "squad-v2.0", "dev-v2.0*.json*")
        reader = span_reader(Reader.load(source, args.device, always_answer=True), "rckit verifier")
        verifier, report = train_verifier(
            reader,
            train,
            v2_dev,
            args.per_kind,
            args.seed,
            args.cache,
            log=lambda m: print(m, file=sys.stderr),
            made=args.made,
            default=args.default_threshold.replace("-", "_"),
        )
        print(json.dumps({k: report[k] for k in ("form", "trained_on", "tuning", "ablations")}))
        if args.collection:
            from rckit.training.collection_verifier import train_collection_verifier

            verifier.collection, collection = train_collection_verifier(
                _with_verifier(reader, verifier),  # reads as `rckit ask` will, with the verifier
                train,
                args.collection,
                seed=args.seed,
                log=lambda m: print(m, file=sys.stderr),
            )
            print(json.dumps({"collection": collection}))
        if args.out:
            Path(args.out).write_text(json.dumps(verifier.to_json()) + "\n")
            print(f"wrote {args.out}", file=sys.stderr)
    put_into(args.into, verifier)
    return 0


def _with_verifier(reader: Reader, verifier: Verifier) -> Reader:
    """``reader`` (its model, vocabularies, decoding, window, info, batch size and encoder) made
    anew with ``verifier`` and its threshold, abstaining as ``rckit ask`` reads (not always answering)."""
    from rckit.answering.reader import Reader

    return Reader(
        reader.model,
        reader.vocabs,
        reader.decode,
        reader.window,
        reader.info,
        reader.batch_size,
        verifier=verifier,
        encoder=reader.encoder,
    )


def fine_tune(args: argparse.Namespace) -> int:
    from rckit.answering.reader import Reader, span_reader
    from rckit.contextual.encoders import find_encoder
    from rckit.models.cross_encoder import CrossEncoderConfig
    from rckit.training.cross_verifier import CrossTrainConfig
    from rckit.training.cross_verifier import fine_tune as run_fine_tune

    v2_dev = _found(args.data_dir, args.v2_dev, "squad-v2.0", "dev-v2.0*.json*")
    v2_train = args.v2_train or (
        _found(args.data_dir, None, "squad-v2.0", "train-v2.0*.json*") if args.data_dir else None
    )
    v11_train = (
        _found(args.data_dir, args.train, "squad-v1.1", "train-v1.1*.json*") if (args.data_dir or args.train) else None
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


def install_cross(args: argparse.Namespace) -> int:
    """Export the run's best checkpoint beside the --into files and name it in each, with its
    threshold; the feature verifier the files carry stays in them, for a collection's passages."""
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
    v2_dev = _found(args.data_dir, args.v2_dev, "squad-v2.0", "dev-v2.0*.json*")
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
    verifier = Verifier.from_json({**inner, "cross": cross}, str(files[0]))
    put_into([str(f) for f in files], verifier)
    return 0


def put_into(files: list[str], verifier: Verifier | None) -> None:
    """``verifier`` (None: none) into each file, the .safetensors files first, so that an ONNX file
    exported from one of them still names its digest."""
    from rckit.data.prepare import file_digest
    from rckit.export.metadata_edit import set_verifier

    rewritten: dict[str, str] = {}
    is_onnx = {f: export_format(f) == "onnx" for f in files}
    for f in sorted(files, key=is_onnx.get):
        set_verifier(f, verifier, rewritten)
        if not is_onnx[f]:
            rewritten[Path(f).name] = file_digest(Path(f))
        said = "removed" if verifier is None else f"put in (threshold {verifier.answer_threshold:.3f})"
        print(f"{f}: verifier {said}", file=sys.stderr)
