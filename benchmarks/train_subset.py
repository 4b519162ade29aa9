"""A seeded random fraction of a SQuAD training file, by paragraph (for step-counted experiments).

    python benchmarks/train_subset.py ../shared/data/squad-v1.1/train-v1.1.reconstructed.json.gz \\
        --fraction 0.25 --out runs/plateau/train-quarter.json

Each paragraph is kept with probability ``--fraction`` (seeded); articles left with no paragraph
are dropped. Prints how many questions the subset holds.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("train")
    ap.add_argument("--fraction", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    opener = gzip.open if args.train.endswith(".gz") else open
    with opener(args.train, "rt", encoding="utf-8") as fh:
        data = json.load(fh)
    rng = random.Random(args.seed)
    n = 0
    for art in data["data"]:
        art["paragraphs"] = [p for p in art["paragraphs"] if rng.random() < args.fraction]
        n += sum(len(p["qas"]) for p in art["paragraphs"])
    data["data"] = [a for a in data["data"] if a["paragraphs"]]
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    print(f"{n} questions in {args.out}")


if __name__ == "__main__":
    main()
