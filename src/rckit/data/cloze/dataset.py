"""A cloze dataset ready to train on: examples from disk -> vocabulary -> tensors -> vectors.

``load_cloze_data(path)`` reads any of the three layouts rckit knows and picks the training
and evaluation splits:

- ``rckit prepare squad-cloze`` output: ``train.jsonl`` and ``dev.jsonl``;
- Chen et al. (2016): ``train.txt`` and ``dev.txt`` (``test.txt`` as ``--eval-split test``);
- DeepMind Q&A: ``training/``, ``validation/``, ``test/`` directories of ``.question`` files
  (the ``questions`` folder of ``cnn.tgz`` / ``dailymail.tgz``).

The vocabulary comes from the training split only (words under ``min_count`` become
``<unk>``); entity markers get ids for the largest entity number of any split, so no dev
marker is unknown. Word vectors start from GloVe where a word has one (scaled random rows
otherwise, the entity markers included) and are all trained: Hermann et al. learn their
embeddings, and the markers carry no meaning a pretrained vector could know.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from rckit.data.cloze.examples import (
    ClozeSplit,
    ClozeVocab,
    load_cloze_jsonl,
    max_entity_number,
    read_chen_file,
    read_question_dir,
)
from rckit.data.embeddings import EmbeddingInfo
from rckit.data.vocab import DEFAULT_EMBEDDINGS, load_pretrained

LAYOUTS = {
    "squad-cloze": {"train": "train.jsonl", "dev": "dev.jsonl"},
    "chen": {"train": "train.txt", "dev": "dev.txt", "test": "test.txt"},
    "deepmind": {"train": "training", "dev": "validation", "test": "test"},
}


def detect_layout(root: str | Path) -> str:
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"cloze data directory not found: {root}")
    for name, files in LAYOUTS.items():
        if (root / files["train"]).exists() and (root / files["dev"]).exists():
            return name
    raise ValueError(
        f"{root}: not a cloze dataset: expected train.jsonl + dev.jsonl (rckit prepare squad-cloze), "
        "train.txt + dev.txt (Chen et al. 2016) or training/ + validation/ of .question files (DeepMind Q&A)"
    )


def read_split(root: Path, layout: str, split: str):
    files = LAYOUTS[layout]
    if split not in files:
        raise ValueError(f"{root}: a {layout} dataset has no {split!r} split (has {', '.join(files)})")
    path = root / files[split]
    if not path.exists():
        raise FileNotFoundError(f"{path}: missing {split} split")
    if layout == "squad-cloze":
        return load_cloze_jsonl(path)
    if layout == "chen":
        return read_chen_file(path)
    return read_question_dir(path)


@dataclass
class ClozeData:
    root: Path
    layout: str
    eval_split: str
    vocab: ClozeVocab
    train: ClozeSplit
    dev: ClozeSplit
    word_vectors: np.ndarray  # (V, Dw) float32
    embeddings: str | None

    def embedding_info(self) -> EmbeddingInfo:
        return EmbeddingInfo(
            word_vectors=torch.from_numpy(self.word_vectors),
            n_trainable_words=len(self.vocab),
            n_chars=0,
            n_entities=self.vocab.n_entities,
        )

    def vocab_json(self) -> dict:
        return {"itos": self.vocab.itos, "n_entities": self.vocab.n_entities, "lowercase": self.vocab.lowercase}

    def describe(self) -> dict:
        return {
            "cloze_dir": str(self.root),
            "layout": self.layout,
            "eval_split": self.eval_split,
            "embeddings": self.embeddings,
            "train_examples": len(self.train),
            "dev_examples": len(self.dev),
        }


def cloze_vectors(vocab: ClozeVocab, spec: str | None, seed: int = 0) -> tuple[np.ndarray, int]:
    """(V, D) initial word vectors and how many words had a pretrained vector."""
    rng = np.random.default_rng(seed)
    if spec is None:
        # N(0, 1) like nn.Embedding: at 0.1 the LSTM readers' input projections (uniform
        # +-1/sqrt(H)) hardly see the input, and the Deep LSTM Reader learned slowly to copy
        # an entity out of a synthetic document (docs/investigations/cloze-readers.md, the diagnosis).
        out = rng.standard_normal((len(vocab), 50)).astype(np.float32)
        out[0] = 0.0  # <pad>
        return out, 0
    pre = load_pretrained(spec, wanted=vocab.itos)
    sample = np.asarray(pre.vectors[: min(10000, pre.vectors.shape[0])])
    scale = float(sample.std()) if sample.size > 1 else 0.1  # random rows as spread as the pretrained ones
    out = (rng.standard_normal((len(vocab), pre.dim)) * scale).astype(np.float32)
    found = 0
    start = 4 + vocab.n_entities  # specials and markers keep random rows
    for i, w in enumerate(vocab.itos[start:], start):
        j = pre.lookup(w)
        if j is not None:
            out[i] = pre.vectors[j]
            found += 1
    out[0] = 0.0  # <pad>
    return out, found


def load_cloze_data(
    root: str | Path,
    eval_split: str = "dev",
    min_count: int = 1,
    embeddings: str | None = DEFAULT_EMBEDDINGS,
    seed: int = 0,
) -> ClozeData:
    """A cloze directory's training and ``eval_split`` splits, vocabulary and initial vectors.

    ``embeddings``: the packaged GloVe set (default), a GloVe text file, or None for random
    vectors. Paths are recorded absolute, so a run's data is found from any directory.
    """
    root = Path(root)
    if embeddings not in (None, DEFAULT_EMBEDDINGS):
        embeddings = str(Path(embeddings).resolve())
    layout = detect_layout(root)
    train_ex = read_split(root, layout, "train")
    eval_ex = read_split(root, layout, eval_split)
    if not train_ex:
        raise ValueError(f"{root}: the training split has no examples")
    n_entities = max(max_entity_number(train_ex), max_entity_number(eval_ex)) + 1
    vocab = ClozeVocab.build(train_ex, min_count=min_count, n_entities=n_entities)
    vectors, _ = cloze_vectors(vocab, embeddings, seed)
    return ClozeData(
        root.resolve(),
        layout,
        eval_split,
        vocab,
        ClozeSplit.from_examples(train_ex, vocab),
        ClozeSplit.from_examples(eval_ex, vocab),
        vectors,
        embeddings,
    )


def load_eval_split(root: str | Path, split: str, vocab_json: dict) -> ClozeSplit:
    """One split of a cloze dataset encoded with a trained run's vocabulary."""
    root = Path(root)
    vocab = ClozeVocab(vocab_json["itos"], vocab_json["n_entities"], vocab_json.get("lowercase", True))
    return ClozeSplit.from_examples(read_split(root, detect_layout(root), split), vocab)
