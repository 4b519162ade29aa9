"""A collection of any size for measuring ``rckit index`` / ``search`` / ``ask`` at scale.

    python benchmarks/make_collection.py --train TRAIN.json.gz --dev DEV.json.gz --passages 1000000 --out DIR

Writes JSON-lines files of 10,000 documents each into ``DIR``: first every paragraph of SQuAD v1.1
train and dev (``squad-NNNN.jsonl``, the real documents, titled by their article; ids
``train/ARTICLE/PARAGRAPH``, ``dev/...``), then generated documents (``generated-NNNN.jsonl``)
until the collection holds about ``--passages`` passages.

A generated document is one paragraph of 100 to 180 words made of sentences drawn at random from
the training paragraphs, so its words, their frequencies and the lengths of the index's posting
lists are those of real text, and a question's words occur in many generated passages as they
would in a large real collection: the retriever has to rank the real paragraph above them. Each
has at most 180 words, so it is one passage of the index's default 200 words; the real paragraphs
give slightly more passages than documents (SQuAD train + dev: 20,963 paragraphs, 22,305
passages). The draw is seeded: the generated files of a smaller collection are the first files of
a larger one. Streams: never more than one file's documents in memory.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

from rckit.data.squad import load_json

PER_FILE = 10_000
REAL_PASSAGES = 22_305  # SQuAD v1.1 train + dev cut at 200 words (BENCHMARKS.md, "Asking a collection")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def real_documents(train: str, dev: str):
    for name, path in (("train", train), ("dev", dev)):
        for a, article in enumerate(load_json(path)["data"]):
            for p, para in enumerate(article["paragraphs"]):
                yield {"id": f"{name}/{a}/{p}", "title": article["title"].replace("_", " "), "text": para["context"]}


def sentences_of(train: str) -> tuple[list[str], list[str]]:
    sentences, titles = [], []
    for article in load_json(train)["data"]:
        titles.append(article["title"].replace("_", " "))
        for para in article["paragraphs"]:
            sentences += [s for s in _SENTENCE.split(para["context"].strip()) if len(s.split()) >= 4]
    return sentences, titles


def generated_documents(train: str, seed: int):
    sentences, titles = sentences_of(train)
    rng = random.Random(seed)
    n = 0
    while True:
        target, words, parts = rng.randint(100, 180), 0, []
        while True:
            s = rng.choice(sentences)
            w = len(s.split())
            if words + w > 180:
                if words >= 100 or not parts:
                    break
                continue
            parts.append(s)
            words += w
            if words >= target:
                break
        yield {"id": f"gen/{n}", "title": f"{rng.choice(titles)} (generated)", "text": " ".join(parts)}
        n += 1


def write_files(out: Path, stem: str, documents, limit: int | None = None) -> int:
    written, f, k = 0, None, 0
    for doc in documents:
        if limit is not None and written >= limit:
            break
        if written % PER_FILE == 0:
            if f:
                f.close()
            f = (out / f"{stem}-{k:04d}.jsonl").open("w", encoding="utf-8")
            k += 1
        f.write(json.dumps(doc, ensure_ascii=False) + "\n")
        written += 1
    if f:
        f.close()
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", required=True)
    ap.add_argument("--dev", required=True)
    ap.add_argument("--passages", type=int, required=True, help="about how many passages in all")
    ap.add_argument("--out", required=True, help="a new or empty folder")
    ap.add_argument("--seed", type=int, default=41)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise SystemExit(f"{out}: not empty")
    real = write_files(out, "squad", real_documents(args.train, args.dev))
    generated = write_files(
        out, "generated", generated_documents(args.train, args.seed), max(0, args.passages - REAL_PASSAGES)
    )
    print(
        json.dumps(
            {
                "out": str(out),
                "real_documents": real,
                "generated_documents": generated,
                "bytes": sum(f.stat().st_size for f in out.iterdir()),
            }
        )
    )


if __name__ == "__main__":
    main()
