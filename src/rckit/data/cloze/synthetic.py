"""A synthetic cloze task that a working reader solves almost perfectly within a minute.

Each document is a random sequence of filler words (``w0 .. w{F-1}``) with entity mentions
(``@entityK``, numbered afresh for every example) and a few *marker* words (``m0 .. m{M-1}``),
each marker followed directly by an entity. The query names one of the document's markers::

    document: w17 @entity3 w4 m2 @entity7 w90 @entity1 m5 @entity3 w11 ...
    query:    what follows m5 ? @placeholder
    answer:   @entity3

To answer, a reader must find the query's marker in the document and report the entity that
comes next; entity numbers carry nothing, because they are drawn per example. Frequency is
no help either: distractor entities are repeated as often as the answer. This is the
smallest task with the shape of CNN/Daily Mail (anonymised entities, a query that must be
matched against the document, an answer that must be copied out of it) and it separates a
reader that reads from one that has not learned to (chance is 1 / candidates, ~15 %).

The set is written in the ``squad-cloze`` layout (``train.jsonl``, ``dev.jsonl``), so every
cloze model trains on it with ``--cloze-data``: ``rckit prepare cloze-synthetic --out DIR``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rckit.data.cloze.examples import PLACEHOLDER, ClozeExample, document_candidates, write_cloze_jsonl


@dataclass
class SyntheticClozeConfig:
    min_len: int = 30  # document tokens, markers and entities included
    max_len: int = 80
    n_fillers: int = 200  # filler vocabulary
    n_markers: int = 20  # marker vocabulary
    markers_per_doc: int = 4  # distinct markers in a document, each followed by an entity
    entities_per_doc: int = 6  # distinct entities in a document
    n_entities: int = 20  # entity numbers are drawn from 0 .. n_entities - 1


def synthetic_example(rng: np.random.Generator, cfg: SyntheticClozeConfig, ident: str) -> ClozeExample:
    """One document, query and answer (layout in the module docstring)."""
    n = int(rng.integers(cfg.min_len, cfg.max_len + 1))
    ents = [f"@entity{k}" for k in rng.choice(cfg.n_entities, cfg.entities_per_doc, replace=False)]
    markers = [f"m{k}" for k in rng.choice(cfg.n_markers, cfg.markers_per_doc, replace=False)]
    # Each marker's entity; every entity of the document is mentioned exactly twice so that
    # counting mentions says nothing about the answer.
    after = [ents[i % len(ents)] for i in range(len(markers))]
    rng.shuffle(after)
    loose = [e for e in ents for _ in range(2 - after.count(e))]
    body = [f"w{k}" for k in rng.integers(0, cfg.n_fillers, n - 2 * len(markers) - len(loose))]
    pieces: list[list[str]] = [[w] for w in body] + [[e] for e in loose] + [[m, e] for m, e in zip(markers, after)]
    order = rng.permutation(len(pieces))
    document = [tok for i in order for tok in pieces[i]]
    q = int(rng.integers(len(markers)))
    query = ["what", "follows", markers[q], "?", PLACEHOLDER]
    return ClozeExample(ident, document, query, after[q], document_candidates(document))


def synthetic_cloze(
    n: int, seed: int = 0, cfg: SyntheticClozeConfig | None = None, prefix: str = "syn"
) -> list[ClozeExample]:
    """``n`` examples drawn from ``numpy.random.default_rng(seed)``."""
    cfg = cfg or SyntheticClozeConfig()
    if cfg.markers_per_doc > cfg.n_markers or cfg.entities_per_doc > cfg.n_entities:
        raise ValueError("markers_per_doc and entities_per_doc must not exceed n_markers and n_entities")
    if cfg.markers_per_doc > cfg.entities_per_doc or cfg.markers_per_doc + 2 * cfg.entities_per_doc > cfg.min_len:
        raise ValueError(f"need markers_per_doc <= entities_per_doc and min_len >= markers + 2 x entities, got {cfg}")
    rng = np.random.default_rng(seed)
    return [synthetic_example(rng, cfg, f"{prefix}{i}") for i in range(n)]


def write_synthetic_cloze(
    out_dir: str | Path, n_train: int = 5000, n_dev: int = 500, seed: int = 0, cfg: SyntheticClozeConfig | None = None
) -> Path:
    """``train.jsonl``, ``dev.jsonl`` and ``stats.json`` in ``out_dir`` (train and dev from different seeds)."""
    cfg = cfg or SyntheticClozeConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_cloze_jsonl(out / "train.jsonl", synthetic_cloze(n_train, seed, cfg, "train"))
    write_cloze_jsonl(out / "dev.jsonl", synthetic_cloze(n_dev, seed + 1_000_003, cfg, "dev"))
    stats = {"kind": "cloze-synthetic", "train": n_train, "dev": n_dev, "seed": seed, "config": cfg.__dict__}
    (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    return out
