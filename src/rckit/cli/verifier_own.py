"""``rckit verifier SOURCE --own READER --into FILE``: rckit's own reader put beside a span reader as
its verifier, alone or joined with the feature network (:mod:`rckit.answering.own_verifier`,
:mod:`rckit.training.own_verifier`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rckit.cli.arguments import found_file, model_source

if TYPE_CHECKING:
    from rckit.answering.verifier import Verifier


def own_reader_flags(p: argparse.ArgumentParser) -> None:
    """The own reader's flags, in their own group of ``--help``."""
    own = p.add_argument_group(
        "rckit's own reader as the verifier",
        "with --into: copy a file of rckit's own reader (rckit finetune, exported) beside the files and let its "
        "p(no answer) decide, joined with the feature network's (fitted on the tuning quarter) or alone",
    )
    own.add_argument("--own", metavar="READER", help="the own reader's file (rckit-pointer-1)")
    own.add_argument("--alone", action="store_true", help="its p(no answer) alone, not joined with the features'")
    own.add_argument(
        "--keep",
        type=float,
        default=0.98,
        help="the threshold that keeps this share of the answers' F1 on the tuning quarter (default 0.98)",
    )
    own.add_argument("--threshold", type=float, help="abstain above this p(no answer) instead")


def install_own(args: argparse.Namespace) -> Verifier:
    """The --into files' verifier with the own reader named in it, its file copied beside them
    (the feature network they carry stays, for a collection's passages and for the join)."""
    from rckit.answering.reader import Reader, span_reader
    from rckit.answering.verifier import Verifier
    from rckit.model_files.metadata import read_metadata
    from rckit.training.own_verifier import install_own_verifier

    if not args.into:
        raise ValueError("--own puts rckit's own reader into the --into files; name them")
    files = [Path(f) for f in args.into]
    if len({f.parent.resolve() for f in files}) != 1:
        raise ValueError("--into: the files that share an own-reader verifier must be in one folder")
    meta = read_metadata(files[0])
    if not meta.get("verifier"):
        raise ValueError(f"{files[0]}: has no verifier to add the own reader to (rckit verifier --into it first)")
    inner = {k: v for k, v in meta["verifier"].items() if k not in ("own", "cross")}
    v2_dev = found_file(args.data_dir, args.v2_dev, "squad-v2.0", "dev-v2.0*.json*")
    source = model_source(args) or str(files[0])
    reader = span_reader(Reader.load(source, args.device, always_answer=True), "rckit verifier")
    own = install_own_verifier(
        args.own,
        reader,
        Verifier.from_json(inner, str(files[0])),
        v2_dev,
        files[0],
        join=not args.alone,
        keep=args.keep,
        threshold=args.threshold,
        log=lambda m: print(m, file=sys.stderr),
    )
    print(json.dumps({k: v for k, v in own["tuning"].items() if k != "curve"}))
    return Verifier.from_json({**inner, "own": own}, str(files[0]))
