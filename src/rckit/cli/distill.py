"""``rckit distill``: train rckit's small contextual encoder from a teacher's cached states."""

from __future__ import annotations

import argparse
import json
import sys

from rckit.cli.arguments import data_arguments, data_source
from rckit.contextual.encoders import DEFAULT_LAYERS
from rckit.training import memory


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Distil a student encoder of a few layers from a contextual encoder (the teacher), so that its "
        "last layers give, word by word, the states a reader reads from the teacher's (rckit.training.distill). "
        "The targets are the teacher's states of SQuAD's texts that `rckit prepare squad --contextual "
        "TEACHER` caches (built first where missing). The student lands in OUT/encoder, an encoder folder "
        "that `--contextual OUT/encoder` reads; the run is resumable and time-budgeted."
    )
    data_arguments(p)
    p.add_argument("--out", required=True, help="the run's folder (last.pt, log.jsonl, encoder/)")
    p.add_argument(
        "--teacher", default="minilm", help="the teacher: a known encoder's name or a folder (default minilm)"
    )
    layers = ",".join(map(str, DEFAULT_LAYERS))
    p.add_argument("--teacher-layers", default=layers, help=f"the teacher's layers the reader reads (default {layers})")
    p.add_argument("--layers", type=int, default=2, help="the student's layers (default 2)")
    p.add_argument("--loss", default="mse", choices=["mse", "cosine"], help="per word and layer (default mse)")
    p.add_argument("--lr", type=float, default=2e-4, help="peak learning rate (default 2e-4)")
    p.add_argument("--epochs", type=float, default=3.0, help="passes over the training texts (default 3)")
    p.add_argument("--batch-pieces", type=int, default=4096, help="padded pieces a batch (default 4096)")
    p.add_argument("--eval-every", type=int, default=200, help="steps between held-out figures (default 200)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--minutes", type=float, help="stop after this many minutes of training (resume later)")
    p.add_argument("--max-steps", type=int, help="stop after this many steps in all")
    p.add_argument("--resume", action="store_true", help="continue the run in OUT")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    memory.use_huge_pages()  # before torch is imported
    from rckit.contextual.encoders import find_encoder
    from rckit.contextual.spec import ContextualSpec
    from rckit.contextual.states import ContextualEncoder
    from rckit.data.sources import prepare_data
    from rckit.training.distill import DistillConfig, distill

    try:
        teacher_layers = tuple(int(x) for x in args.teacher_layers.split(","))
    except ValueError:
        raise ValueError(f"--teacher-layers {args.teacher_layers!r}: layer numbers separated by commas") from None
    progress = not args.no_progress
    prepared = prepare_data(data_source(args))
    teacher = ContextualEncoder.load(ContextualSpec(args.teacher, teacher_layers))
    config = DistillConfig(
        n_layers=args.layers,
        teacher_layers=teacher_layers,
        loss=args.loss,
        lr=args.lr,
        epochs=args.epochs,
        batch_pieces=args.batch_pieces,
        max_pieces=teacher.max_pieces,  # the window the teacher's cached states were read in
        eval_every=args.eval_every,
        seed=args.seed,
    )
    train = prepared.split("train").with_encoder(prepared.states_root, teacher, "train", progress)
    dev = prepared.split("dev").with_encoder(prepared.states_root, teacher, "dev", progress)
    got = distill(
        find_encoder(args.teacher),
        train,
        dev,
        args.out,
        config,
        args.minutes,
        args.max_steps,
        args.resume,
        log=lambda m: print(m, file=sys.stderr),
        progress=progress,
    )
    print(json.dumps(got))
    return 0
