"""Does a cloze reader learn the synthetic task, and how fast? The diagnosis in
docs/investigations/cloze-readers.md, "The diagnosis, on a synthetic cloze task".

Trains one reader on a synthetic cloze set (:mod:`rckit.data.cloze.synthetic`) with the
library's own model, loss and renumbering, and prints dev accuracy every ``--every`` steps and
the first step at which it passes 95 %. The switches undo one fix each:

    --scale 0.1          random word rows at std 0.1 (the old default) instead of N(0, 1)
    --free-output        a free output row per entity number instead of W(a) = e(a)^T M
    --fixed-numbering    keep each example's entity numbering instead of redrawing it per batch
    --chrono T           Deep LSTM Reader: model.chrono=T (chrono-initialised gate biases)

    python benchmarks/cloze_learning.py --model attentive_reader --entities 100 --free-output --fixed-numbering
    python benchmarks/cloze_learning.py --model deep_lstm_reader --markers 1 --scale 0.1
    python benchmarks/cloze_learning.py --model attentive_reader --min-len 30 --max-len 80 --markers 4 \
        --marker-types 20 --entities-per-doc 6 --entities 20 --fillers 200 --train 40000    (the default set)

One thread, seeded: the same command prints the same curve on the same machine.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from rckit.data.cloze.dataset import cloze_vectors
from rckit.data.cloze.examples import ClozeSplit, ClozeVocab, renumber_entities
from rckit.data.cloze.synthetic import SyntheticClozeConfig, synthetic_cloze
from rckit.data.embeddings import EmbeddingInfo
from rckit.models import MODELS
from rckit.models.losses import cloze_loss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--model", default="deep_lstm_reader", choices=["deep_lstm_reader", "attentive_reader", "impatient_reader"]
    )
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--entities", type=int, default=10, help="entity numbers drawn from 0 .. N-1")
    ap.add_argument("--markers", type=int, default=2, help="markers per document (1: copying alone answers)")
    ap.add_argument("--marker-types", type=int, default=4, help="marker vocabulary")
    ap.add_argument("--entities-per-doc", type=int, default=3)
    ap.add_argument("--fillers", type=int, default=20, help="filler vocabulary")
    ap.add_argument("--min-len", type=int, default=8)
    ap.add_argument("--max-len", type=int, default=12)
    ap.add_argument("--train", type=int, default=4000, help="training examples")
    ap.add_argument("--scale", type=float, default=1.0, help="std of the random word rows")
    ap.add_argument("--free-output", action="store_true")
    ap.add_argument("--fixed-numbering", action="store_true")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chrono", type=float, default=0.0)
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    cfg = SyntheticClozeConfig(
        min_len=args.min_len,
        max_len=args.max_len,
        n_fillers=args.fillers,
        n_markers=args.marker_types,
        markers_per_doc=args.markers,
        entities_per_doc=args.entities_per_doc,
        n_entities=args.entities,
    )
    train = synthetic_cloze(args.train, args.seed, cfg)
    dev = synthetic_cloze(500, args.seed + 1, cfg, prefix="d")
    vocab = ClozeVocab.build(train, n_entities=cfg.n_entities)
    tr, dv = ClozeSplit.from_examples(train, vocab), ClozeSplit.from_examples(dev, vocab)
    vectors, _ = cloze_vectors(vocab, None, args.seed)
    vectors[1:] *= args.scale  # cloze_vectors draws N(0, 1) rows; <pad> stays 0
    info = EmbeddingInfo(
        word_vectors=torch.from_numpy(vectors), n_trainable_words=len(vocab), n_chars=0, n_entities=vocab.n_entities
    )
    config_cls, model_cls = MODELS[args.model]
    sizes = (
        {"hidden": args.hidden}
        if args.model == "deep_lstm_reader"
        else {"hidden": args.hidden, "attention": args.hidden}
    )
    if args.chrono:
        sizes["chrono"] = args.chrono
    model = model_cls(config_cls(dropout=0.0, tied_output=not args.free_output, **sizes), info)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    rng = np.random.default_rng(args.seed)
    dev_batch = dv.collate(np.arange(len(dv)))
    train_probe = tr.collate(np.arange(500))  # seen in training: memorising shows as train >> dev

    def accuracy(batch) -> float:
        model.eval()
        with torch.no_grad():
            acc = float((model(batch).logits.argmax(-1) == batch.answer).float().mean())
        model.train()
        return acc

    t0, losses, first_95, dev_acc = time.perf_counter(), [], None, None
    for step in range(1, args.steps + 1):
        batch = tr.collate(rng.choice(len(tr), 32, replace=False))
        if not args.fixed_numbering:
            batch = renumber_entities(batch)
        loss = cloze_loss(model(batch).logits, batch.answer)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step % args.every == 0:
            dev_acc = accuracy(dev_batch)
            if first_95 is None and dev_acc > 0.95:
                first_95 = step
            print(
                f"step {step:5d}  loss {np.mean(losses[-args.every :]):.3f}  train {accuracy(train_probe):.3f}  "
                f"dev {dev_acc:.3f}  {time.perf_counter() - t0:.0f}s",
                flush=True,
            )
    print(
        json.dumps(
            {
                **vars(args),
                "final_dev_acc": dev_acc,
                "first_step_over_95": first_95,
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
