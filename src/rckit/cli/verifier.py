"""``rckit verifier``: train the verifier that lets a span reader say "no answer", and put it into
exported model files (:mod:`rckit.answering.verifier`, :mod:`rckit.training.verifier`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rckit.cli.arguments import found_file, model_option, model_source
from rckit.cli.verifier_own import install_own, own_reader_flags
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
        "a saved verifier into files; --remove takes it out. --own READER puts rckit's own reader beside it, to decide "
        "in the network's place or joined with it."
    )
    p.add_argument("run", nargs="?", metavar="SOURCE", help="the reader: a run, an exported file, or an installed name")
    model_option(p, "an installed model by name (rckit models), a run or a file; the same as SOURCE")
    _data_flags(p)
    _training_flags(p)
    _file_flags(p)
    p.add_argument("--device", default="cpu")
    own_reader_flags(p)


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
        "up to --per-kind of each rule",
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


def run(args: argparse.Namespace) -> int:
    from rckit.answering.verifier import Verifier

    if args.own:
        put_into(args.into, install_own(args))
        return 0
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

        train = found_file(args.data_dir, args.train, "squad-v1.1", "train-v1.1*.json*")
        v2_dev = found_file(args.data_dir, args.v2_dev, "squad-v2.0", "dev-v2.0*.json*")
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
