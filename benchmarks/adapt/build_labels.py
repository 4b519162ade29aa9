"""The adaptation benchmark's labelled questions, as SQuAD v1.1 files.

Reads the passages ``make_passages.py`` wrote and the questions written over them (one JSON
object per line: ``{"passage": "a:3", "question": ..., "answer": ...}``, the answer copied from
the passage, occurring there once) and writes ``train.json`` (groups a-d) and ``dev.json`` (the
dev group, documents of packages no training group reads). An article is a document; its
paragraphs are the passages asked about, in document order.

    python benchmarks/adapt/build_labels.py --passages runs/adapt/passages --written runs/adapt/written \\
        --out benchmarks/adapt/data
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SIDES = {"train": ["a", "b", "c", "d"], "dev": ["dev"]}


def build(passages: Path, written: Path, groups: list[str]) -> dict:
    articles: dict[str, dict] = {}
    for group in groups:
        rows = {p["id"]: p for p in json.loads((passages / f"{group}.json").read_text())["passages"]}
        asked: dict[str, list] = {}
        for n, line in enumerate((written / f"{group}.jsonl").read_text().splitlines(), 1):
            if not line.strip():
                continue
            q = json.loads(line)
            p = rows.get(q["passage"])
            if p is None:
                raise ValueError(f"{written / group}.jsonl line {n}: no passage {q['passage']!r}")
            start = p["text"].find(q["answer"])
            if start < 0 or p["text"].find(q["answer"], start + 1) >= 0:
                raise ValueError(f"{written / group}.jsonl line {n}: the answer should occur once in its passage")
            qas = asked.setdefault(q["passage"], [])
            qas.append(
                {
                    "id": f"{q['passage']}:{len(qas)}",
                    "question": q["question"],
                    "answers": [{"text": q["answer"], "answer_start": start}],
                }
            )
        for pid, p in rows.items():  # in passage order, which is document order
            if pid in asked:
                article = articles.setdefault(p["document"], {"title": p["document"], "paragraphs": []})
                article["paragraphs"].append({"context": p["text"], "qas": asked[pid]})
    return {"version": "1.1", "data": list(articles.values())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--passages", type=Path, required=True)
    ap.add_argument("--written", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for side, groups in SIDES.items():
        data = build(args.passages, args.written, groups)
        (args.out / f"{side}.json").write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        n = sum(len(p["qas"]) for a in data["data"] for p in a["paragraphs"])
        print(f"{side}: {n} questions, {len(data['data'])} documents")


if __name__ == "__main__":
    main()
