"""The data of adapting a reader to one's own documents (``rckit adapt``, docs/adapt.md).

A user brings a few hundred labelled questions in the SQuAD layout (from the page's Label tab or
another tool). :func:`adapt_files` turns them into the two files a run reads:

- **dev**: the user's questions about some of their documents, chosen whole (a document's
  questions are all on one side, as a new document's would be), about ``dev_share`` of the
  questions, seeded; or the user's own dev file;
- **train**: the other documents' questions, with questions of SQuAD v1.1 train mixed in
  (``squad_mix`` of them for each of the user's, whole paragraphs drawn at random, seeded), so
  that a short fine-tune learns the new domain without forgetting how to read Wikipedia.

A document is a SQuAD article (its ``title``). A file of one article is split by paragraph
instead, and the split says so. This module reads and writes JSON only; no PyTorch.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from rckit.data.squad import load_json, read_squad


@dataclass
class AdaptFiles:
    """What :func:`adapt_files` wrote: the run's train and dev files and how they were made."""

    train: Path
    dev: Path
    counts: dict = field(default_factory=dict)  # questions and documents on each side, SQuAD questions mixed in
    notes: list[str] = field(default_factory=list)


def _questions(article: dict) -> int:
    return sum(len(p["qas"]) for p in article["paragraphs"])


def _load(path: str | Path) -> list[dict]:
    """The articles of a SQuAD-layout file, checked by :func:`read_squad` first (a missing or
    mistyped field is named with its position there)."""
    read_squad(path)
    return load_json(path)["data"]


def _by_paragraph(articles: list[dict]) -> list[dict]:
    return [
        {"title": f"{a.get('title', '')} [{i}]", "paragraphs": [p]}
        for a in articles
        for i, p in enumerate(a["paragraphs"])
    ]


def split_documents(articles: list[dict], dev_share: float, seed: int) -> tuple[list[dict], list[dict], str]:
    """(train, dev, unit): whole documents drawn at random (seeded) to dev until it holds at least
    ``dev_share`` of the questions, at least one on each side. With fewer than two documents
    the unit is the paragraph."""
    if not 0.0 < dev_share < 1.0:
        raise ValueError(f"the dev share is a fraction between 0 and 1, got {dev_share}")
    unit = "document"
    docs = [a for a in articles if _questions(a)]
    if len(docs) < 2:
        unit, docs = "paragraph", [a for a in _by_paragraph(articles) if _questions(a)]
    if len(docs) < 2:
        raise ValueError("adapting needs questions about at least two paragraphs: one to learn from, one to check on")
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    total, dev, held = sum(_questions(d) for d in docs), [], 0
    for i in order[:-1]:  # the last one always stays in train
        if held >= dev_share * total:
            break
        dev.append(i)
        held += _questions(docs[i])
    chosen = set(dev)
    return [d for i, d in enumerate(docs) if i not in chosen], [docs[i] for i in sorted(dev)], unit


def squad_sample(path: str | Path, questions: int, seed: int) -> list[dict]:
    """Whole paragraphs of a SQuAD file drawn at random (seeded) until they hold ``questions``
    questions, grouped under their articles' titles; their ids marked ``squad:``."""
    if questions <= 0:
        return []
    paragraphs = [(a["title"], p) for a in _load(path) for p in a["paragraphs"]]
    random.Random(seed).shuffle(paragraphs)
    out: dict[str, list[dict]] = {}
    n = 0
    for title, p in paragraphs:
        if n >= questions:
            break
        qas = [{**qa, "id": f"squad:{qa['id']}"} for qa in p["qas"]]  # never the same id as a label's
        out.setdefault(title, []).append({**p, "qas": qas})
        n += len(qas)
    return [{"title": t, "paragraphs": ps} for t, ps in out.items()]


def adapt_files(
    labels: str | Path,
    out_dir: str | Path,
    *,
    dev: str | Path | None = None,
    squad_train: str | Path | None = None,
    squad_mix: float = 1.0,
    dev_share: float = 0.2,
    seed: int = 0,
    limit: int | None = None,
) -> AdaptFiles:
    """Write ``out_dir/train.json`` and ``out_dir/dev.json`` (see the module docstring).

    ``labels``: the user's questions; ``dev``: their own dev file (else documents of ``labels``
    are held out). ``squad_train``: SQuAD v1.1 train, mixed in at ``squad_mix`` questions per
    training label (0: none). ``limit``: learn from only N of the user's training questions,
    drawn at random (seeded; how the gain grows with labels is measured this way, dev unchanged).
    """
    out_dir = Path(out_dir)
    articles, notes = _load(labels), []
    if dev is None:
        train, held, unit = split_documents(articles, dev_share, seed)
        if unit == "paragraph":
            notes.append(f"{labels} holds one document: its paragraphs were split between train and dev")
    else:
        train, held, unit = articles, _load(dev), "document"
    if limit is not None:
        train = _some_questions(train, limit, seed)
    n_train = sum(_questions(a) for a in train)
    if n_train == 0:
        raise ValueError(f"{labels}: no questions left to learn from")
    mixed = []
    if squad_mix > 0:
        if squad_train is None:
            raise ValueError(
                "mixing SQuAD questions in needs SQuAD v1.1 train (--data-dir or $RCKIT_DATA); "
                "--squad-mix 0 adapts on your questions alone"
            )
        mixed = squad_sample(squad_train, round(squad_mix * n_train), seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = AdaptFiles(out_dir / "train.json", out_dir / "dev.json", notes=notes)
    for path, data in ((files.train, train + mixed), (files.dev, held)):
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"version": "1.1", "data": data}, ensure_ascii=False), encoding="utf-8")
        tmp.replace(path)
    files.counts = {
        "split_by": unit,
        "dev_from": str(dev) if dev is not None else "held-out " + unit + "s",
        "train_questions": n_train,
        "train_documents": len(train),
        "dev_questions": sum(_questions(a) for a in held),
        "dev_documents": len(held),
        "squad_questions": sum(_questions(a) for a in mixed),
    }
    return files


def _some_questions(articles: list[dict], n: int, seed: int) -> list[dict]:
    """``n`` questions of ``articles`` drawn at random (seeded), their paragraphs and articles kept,
    in document order. A smaller ``n`` with the same seed draws a subset of a larger one's."""
    where = [
        (i, j, k) for i, a in enumerate(articles) for j, p in enumerate(a["paragraphs"]) for k in range(len(p["qas"]))
    ]
    random.Random(seed).shuffle(where)
    keep = set(where[:n])
    out = []
    for i, a in enumerate(articles):
        paragraphs = [
            {**p, "qas": [qa for k, qa in enumerate(p["qas"]) if (i, j, k) in keep]}
            for j, p in enumerate(a["paragraphs"])
        ]
        paragraphs = [p for p in paragraphs if p["qas"]]
        if paragraphs:
            out.append({**a, "paragraphs": paragraphs})
    return out
