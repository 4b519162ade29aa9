"""``rckit adapt``: fine-tune a trained reader on a few hundred questions about one's own documents.

The recipe is :func:`rckit.training.adapt.adapt` (docs/adapt.md); the command reads its flags,
finds SQuAD's train file to mix in, and prints the report (the dev F1 before and after).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rckit.cli.arguments import model_option
from rckit.training import memory
from rckit.training.adapt import AdaptSettings, adapt, to_stderr

DEFAULTS = AdaptSettings()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Fine-tune a trained reader (default: the installed default) on your own labelled questions "
        "(a SQuAD-layout file, e.g. from `rckit serve --labels`): split by document into train and dev, "
        "SQuAD questions mixed in so it does not forget, a few epochs at a low learning rate, the best "
        "epoch on your dev written to OUT/model.safetensors with its dev F1 before and after."
    )
    p.add_argument(
        "run", nargs="?", metavar="NAME|RUN|FILE", help="the model to start from (default: the installed default)"
    )
    model_option(p)
    p.add_argument("--labels", required=True, help="your questions: a SQuAD-layout JSON file (any version field)")
    p.add_argument("--dev", help="your own dev file (default: about --dev-share of the labels' documents are held out)")
    p.add_argument("--out", required=True, help="folder for the data, the run, model.safetensors and adapt.json")
    p.add_argument(
        "--dev-share",
        type=float,
        default=DEFAULTS.dev_share,
        help=f"share of the questions held out, by whole documents (default {DEFAULTS.dev_share})",
    )
    p.add_argument(
        "--squad-mix",
        type=float,
        default=DEFAULTS.squad_mix,
        help=f"SQuAD v1.1 train questions mixed in per training label (default {DEFAULTS.squad_mix:g}; 0: your "
        "questions alone)",
    )
    p.add_argument(
        "--squad-train", help="SQuAD v1.1 train file to mix in (default: found in --data-dir or $RCKIT_DATA)"
    )
    p.add_argument("--data-dir", help="folder holding train-v1.1.json (default: $RCKIT_DATA)")
    p.add_argument(
        "--epochs",
        type=int,
        default=DEFAULTS.epochs,
        help=f"passes over the training questions (default {DEFAULTS.epochs})",
    )
    p.add_argument(
        "--lr-scale",
        type=float,
        default=DEFAULTS.lr_scale,
        help=f"the learning rate, as a share of the model's own (default {DEFAULTS.lr_scale})",
    )
    p.add_argument(
        "--limit", type=int, metavar="N", help="learn from N of your training questions only, drawn at random (seeded)"
    )
    p.add_argument("--seed", type=int, default=DEFAULTS.seed)
    p.add_argument("--resume", action="store_true", help="go on with a run in OUT that was stopped")
    p.add_argument(
        "--embeddings",
        help="the GloVe text file the model was trained with (default: the glove-6b-50d "
        "package, as the installed models were)",
    )
    p.add_argument("--cache-dir", help="where prepared data go (default: $RCKIT_CACHE or ~/.cache/rckit)")
    p.add_argument("--device", default=DEFAULTS.device, help="cpu, cuda, ... (default: cuda if available)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def squad_train_file(args: argparse.Namespace) -> Path | None:
    """The SQuAD v1.1 train file mixed in: given, or found on disk (never downloaded here)."""
    if args.squad_mix == 0:
        return None
    if args.squad_train:
        return Path(args.squad_train)
    from rckit.data.download import resolve_squad_files

    try:
        return resolve_squad_files(
            "1.1", data_dir=args.data_dir, cache_dir=args.cache_dir, download=False, splits=("train",)
        )["train"]
    except FileNotFoundError as e:
        raise FileNotFoundError(
            f"{e}; give --squad-train FILE, or --squad-mix 0 to adapt on your questions alone"
        ) from None


def run(args: argparse.Namespace) -> int:
    memory.use_huge_pages()  # before torch is imported
    from rckit.model_files.reader_file import is_reader_file
    from rckit.model_files.source import pytorch_source

    if args.run is not None and args.model is not None:
        raise ValueError(f"give the model once: NAME|RUN|FILE ({args.run}) or --model ({args.model}), not both")
    settings = AdaptSettings(
        dev=args.dev,
        squad_train=squad_train_file(args),
        squad_mix=args.squad_mix,
        dev_share=args.dev_share,
        epochs=args.epochs,
        lr_scale=args.lr_scale,
        limit=args.limit,
        seed=args.seed,
        embeddings=args.embeddings,
        cache_dir=args.cache_dir,
        device=args.device,
        progress=not args.no_progress,
        resume=args.resume,
    )
    source = pytorch_source(args.run if args.run is not None else args.model)
    if is_reader_file(source):  # rckit's own reader: its own recipe
        from rckit.training.adapt_reader import adapt_reader

        report = adapt_reader(source, args.labels, args.out, settings, to_stderr)
    else:
        report = adapt(source, args.labels, args.out, settings)
    print(json.dumps(report))
    before, after = report["dev_before"]["f1"], report["dev_after"]["f1"]
    if after <= before:
        print(
            f"rckit adapt: the adapted model scores no better on your dev ({after:.2f} F1, before "
            f"{before:.2f}): keep the one you started from, or label more questions",
            file=sys.stderr,
        )
    return 0
