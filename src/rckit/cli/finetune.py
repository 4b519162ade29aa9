"""``rckit finetune``: fine-tune rckit's own reader, the encoder end to end, for answers and "no answer"."""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Fine-tune a contextual encoder (all-MiniLM-L6-v2 by default) end to end as a reader: it reads "
        "[CLS] question [SEP] passage [SEP] and points at the answer's first and last pieces, or at [CLS] "
        "where the passage does not answer (rckit.training.encoder_reader). TRAIN is a SQuAD v1.1 or v2.0 "
        "file (`rckit prepare squad-near-miss` writes one with near-miss unanswerable questions). Every "
        "--eval-every steps the run is judged on SQuAD v1.1 dev's first questions and v2.0 dev's tuning "
        "quarter (written to OUT/log.jsonl); the run is planned, time-budgeted and resumable, and with "
        "--carry it also keeps a small state (int8 changes) that continues it where OUT is gone."
    )
    p.add_argument("--train", required=True, help="the training file (SQuAD JSON, .json or .json.gz)")
    p.add_argument("--dev", required=True, help="SQuAD v1.1 dev (the learning curve's F1)")
    p.add_argument("--v2-dev", required=True, help="SQuAD v2.0 dev (its tuning quarter: the no-answer figures)")
    p.add_argument("--out", required=True, help="the run's folder (last.pt, best.pt, log.jsonl, items.npz)")
    p.add_argument("--encoder", default="minilm", help="a known encoder's name or a folder (default minilm)")
    p.add_argument("--carry", help="also keep the run's carry here, and continue from it where OUT has no last.pt")
    p.add_argument("--max-pieces", type=int, default=256, help="a window's pieces, special ones included (256)")
    p.add_argument("--stride", type=int, default=128, help="passage pieces between two windows (128)")
    p.add_argument("--batch-size", type=int, default=16, help="windows a step (16)")
    p.add_argument("--lr", type=float, default=8e-5, help="peak learning rate (8e-5)")
    p.add_argument("--epochs", type=float, default=1.0, help="passes over the training windows (1)")
    p.add_argument("--eval-every", type=int, default=1000, help="steps between the learning curve's lines (1000)")
    p.add_argument("--dev-questions", type=int, default=1000, help="v1.1 dev questions judged (1000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--minutes", type=float, help="stop after this many minutes of training (resume later)")
    p.add_argument("--max-steps", type=int, help="stop after this many steps in all")
    p.add_argument("--resume", action="store_true", help="continue the run in OUT (or its --carry)")
    p.add_argument("--threads", type=int, help="PyTorch's threads (default: PyTorch's choice)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    import torch

    from rckit.contextual.encoders import find_encoder
    from rckit.training.encoder_reader import ReaderTrainConfig, fine_tune

    if args.threads:
        torch.set_num_threads(args.threads)
    config = ReaderTrainConfig(
        max_pieces=args.max_pieces,
        stride=args.stride,
        batch_size=args.batch_size,
        lr=args.lr,
        epochs=args.epochs,
        eval_every=args.eval_every,
        dev_questions=args.dev_questions,
        seed=args.seed,
    )
    got = fine_tune(
        find_encoder(args.encoder),
        args.train,
        args.dev,
        args.v2_dev,
        args.out,
        config,
        args.minutes,
        args.max_steps,
        args.resume,
        args.carry,
        log=lambda m: print(m, file=sys.stderr),
        progress=not args.no_progress,
    )
    print(json.dumps(got))
    return 0
