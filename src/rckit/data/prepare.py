"""SQuAD files -> tokenized, indexed arrays, cached on disk under a key of their settings.

The path: :func:`tokenize_dataset` (examples with character offsets -> token forms and
offsets, answer token spans) -> vocabularies from the training split -> :func:`index_split`
(token forms -> word ids and character ids) -> a directory of ``.npy``/``.json`` files named
by a hash of everything that shaped them (input file contents, settings, tokenizer and format
versions, embedding identity). A changed setting therefore rebuilds, an unchanged one loads.

Token strings are stored once per distinct *form* in a split, with its word id and character
ids; tokens are int32 form ids. That keeps the cache small (train is ~2.7 M context tokens but
~90 k forms) and makes batching a pair of gathers.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from rckit.data import vocab as V
from rckit.data.squad import SquadDataset, read_squad
from rckit.data.tokenize import TOKENIZER_VERSION, char_to_token_span_fast, tokenize
from rckit.data.vocab import Vocabularies, form_rows

FORMAT_VERSION = 2  # 2: question token offsets and question texts (what contextual states are read from)


@dataclass
class PrepareConfig:
    embeddings: str = V.DEFAULT_EMBEDDINGS  # "glove-6b-50d" or a GloVe text file
    char_embeddings: str | None = None  # GloVe-format character vectors, optional
    lowercase: bool | None = None  # None: follow the embeddings (6B is lower-cased)
    max_word_len: int = 16  # characters kept per token
    char_min_count: int = 1
    trainable_min_count: int = 0  # >0 keeps train words without vectors as trainable rows
    extend_vocab_with_pretrained: bool = True  # dev words with a pretrained vector enter the vocab
    base_vocab: str | None = None  # a vocab.json the vocabulary extends, every word kept (rckit adapt: the model's)
    seed: int = 0


@dataclass
class TokenizedSplit:
    """One split after tokenization, before any vocabulary exists."""

    qids: list[str]
    contexts: list[str]
    forms: list[str]  # distinct token strings, index = form id
    form_counts: np.ndarray  # occurrences of each form in the split (contexts counted once)
    ctx_ptr: np.ndarray  # (n_ctx + 1,) int64 into ctx_forms
    ctx_forms: np.ndarray  # (N,) int32
    ctx_offsets: np.ndarray  # (N, 2) int32 half-open character spans
    q_ptr: np.ndarray  # (n_q + 1,) int64 into q_forms
    q_forms: np.ndarray  # (Nq,) int32
    q_offsets: np.ndarray  # (Nq, 2) int32 half-open character spans in the question
    questions: list[str]
    q_ctx: np.ndarray  # (n_q,) int32 context of each question
    y_start: np.ndarray  # (n_q,) int32 first answer's first token, -1 if none
    y_end: np.ndarray  # (n_q,) int32 inclusive
    answerable: np.ndarray  # (n_q,) bool
    stats: dict = field(default_factory=dict)


@dataclass
class TextTokens:
    """Contexts and questions tokenized, each distinct token string (form) once."""

    forms: list[str]  # distinct token strings, index = form id
    ctx_ptr: list[int]  # (n_ctx + 1,) into ctx_forms
    ctx_forms: list[int]
    ctx_offsets: list[tuple[int, int]]  # half-open character spans
    q_ptr: list[int]  # (n_q + 1,) into q_forms
    q_forms: list[int]
    q_offsets: list[tuple[int, int]]  # half-open character spans in the question

    def arrays(self) -> dict[str, np.ndarray]:
        """The token arrays as a prepared split holds them (pointers int64, form ids int32)."""
        return {
            "ctx_ptr": np.asarray(self.ctx_ptr, np.int64),
            "ctx_forms": np.asarray(self.ctx_forms, np.int32),
            "ctx_offsets": np.asarray(self.ctx_offsets, np.int32).reshape(-1, 2),
            "q_ptr": np.asarray(self.q_ptr, np.int64),
            "q_forms": np.asarray(self.q_forms, np.int32),
            "q_offsets": np.asarray(self.q_offsets, np.int32).reshape(-1, 2),
        }


def tokenize_texts(contexts: list[str], questions) -> TextTokens:
    """Tokenize ``contexts`` and ``questions`` (any iterable of strings) into shared form ids."""
    form_ids: dict[str, int] = {}
    forms: list[str] = []

    def ids_of(tokens: list[str]) -> list[int]:
        out = []
        for t in tokens:
            i = form_ids.get(t)
            if i is None:
                i = form_ids[t] = len(forms)
                forms.append(t)
            out.append(i)
        return out

    ctx_ptr, ctx_forms, ctx_offsets = [0], [], []
    for c in contexts:
        toks, offs = tokenize(c)
        ctx_forms.extend(ids_of(toks))
        ctx_offsets.extend(offs)
        ctx_ptr.append(len(ctx_forms))
    q_ptr, q_forms, q_offsets = [0], [], []
    for q in questions:
        toks, offs = tokenize(q)
        q_forms.extend(ids_of(toks))
        q_offsets.extend(offs)
        q_ptr.append(len(q_forms))
    return TextTokens(forms, ctx_ptr, ctx_forms, ctx_offsets, q_ptr, q_forms, q_offsets)


def tokenize_dataset(ds: SquadDataset) -> TokenizedSplit:
    t = tokenize_texts(ds.contexts, (ex.question for ex in ds.examples))
    forms, ctx_ptr, ctx_forms, ctx_offsets, q_ptr, q_forms = (
        t.forms,
        t.ctx_ptr,
        t.ctx_forms,
        t.ctx_offsets,
        t.q_ptr,
        t.q_forms,
    )
    bounds = []  # per context: (starts, ends) lists for span mapping
    for lo, hi in zip(ctx_ptr, ctx_ptr[1:]):
        offs = ctx_offsets[lo:hi]
        bounds.append(([s for s, _ in offs], [e for _, e in offs]))

    n = len(ds.examples)
    q_ctx = np.empty(n, np.int32)
    y_start = np.full(n, -1, np.int32)
    y_end = np.full(n, -1, np.int32)
    answerable = np.zeros(n, bool)
    answers = exact = unmappable = no_offset = 0
    for k, ex in enumerate(ds.examples):
        q_ctx[k] = ex.context_index
        answerable[k] = not ex.is_impossible and bool(ex.answers)
        starts, ends = bounds[ex.context_index]
        for j, a in enumerate(ex.answers):
            answers += 1
            if a.start is None:
                no_offset += 1
                continue
            text = a.text
            s = a.start + (len(text) - len(text.lstrip()))
            e = a.start + len(text.rstrip())
            span = char_to_token_span_fast(starts, ends, s, e) if e > s else None
            if span is None:
                unmappable += 1
                continue
            exact += span[2]
            if y_start[k] < 0:  # the first answer with a usable offset is the training target
                y_start[k], y_end[k] = span[0], span[1]
    counts = np.zeros(len(forms), np.int64)
    np.add.at(counts, np.asarray(ctx_forms, np.int64), 1)
    np.add.at(counts, np.asarray(q_forms, np.int64), 1)
    c_len = np.diff(np.asarray(ctx_ptr))
    q_len = np.diff(np.asarray(q_ptr))
    stats = {
        "questions": n,
        "contexts": len(ds.contexts),
        "answers": answers,
        "answers_on_token_boundaries": exact,
        "answers_cutting_a_token": answers - exact - unmappable - no_offset,
        "answers_without_tokens": unmappable,
        "answers_misaligned_offset": no_offset,
        "alignment": exact / max(1, answers),
        "questions_without_target": int(((y_start < 0) & answerable).sum()),
        "context_tokens": _lengths(c_len),
        "question_tokens": _lengths(q_len),
    }
    return TokenizedSplit(
        qids=[ex.qid for ex in ds.examples],
        contexts=ds.contexts,
        forms=forms,
        form_counts=counts,
        **t.arrays(),
        questions=[ex.question for ex in ds.examples],
        q_ctx=q_ctx,
        y_start=y_start,
        y_end=y_end,
        answerable=answerable,
        stats=stats,
    )


def _lengths(x: np.ndarray) -> dict:
    if len(x) == 0:
        return {"mean": 0.0, "p95": 0, "max": 0}
    return {"mean": round(float(x.mean()), 1), "p95": int(np.percentile(x, 95)), "max": int(x.max())}


def index_split(tok: TokenizedSplit, vocabs: Vocabularies) -> dict[str, np.ndarray]:
    """Word and character ids for every form of a split; returns the arrays to store."""
    form_words, form_chars = form_rows(tok.forms, vocabs)
    return {
        "form_words": form_words,
        "form_chars": form_chars,
        "ctx_ptr": tok.ctx_ptr,
        "ctx_forms": tok.ctx_forms,
        "ctx_offsets": tok.ctx_offsets,
        "q_ptr": tok.q_ptr,
        "q_forms": tok.q_forms,
        "q_offsets": tok.q_offsets,
        "q_ctx": tok.q_ctx,
        "y_start": tok.y_start,
        "y_end": tok.y_end,
        "answerable": tok.answerable,
    }


def coverage(tok: TokenizedSplit, arrays: dict, vocabs: Vocabularies) -> dict:
    """Share of tokens (and distinct forms) that get a pretrained vector."""
    fw = arrays["form_words"]
    has_vec = fw >= vocabs.words.n_trainable
    in_vocab = fw != V.UNK
    counts = tok.form_counts
    total = max(1, int(counts.sum()))
    return {
        "tokens_with_pretrained_vector": round(float(counts[has_vec].sum()) / total, 4),
        "tokens_in_vocab": round(float(counts[in_vocab].sum()) / total, 4),
        "forms_with_pretrained_vector": round(float(has_vec.mean()) if len(fw) else 0.0, 4),
    }


def build_vocabularies(
    train: TokenizedSplit, others: list[TokenizedSplit], cfg: PrepareConfig, pre: V.Pretrained
) -> Vocabularies:
    base = None
    if cfg.base_vocab:
        base = Vocabularies.from_json(json.loads(Path(cfg.base_vocab).read_text()))
    lowercase = base.lowercase if base else pre.lowercase if cfg.lowercase is None else cfg.lowercase
    word_counts: Counter = Counter()
    char_counts: Counter = Counter()
    for f, c in zip(train.forms, train.form_counts.tolist()):
        word_counts[V.normalize_word(f, lowercase)] += c
        for ch in f[: cfg.max_word_len]:
            char_counts[ch] += c
    extra = []
    if cfg.extend_vocab_with_pretrained:
        extra = [V.normalize_word(f, lowercase) for o in others for f in o.forms]
    if base is None:
        words = V.build_word_vocab(word_counts, pre, extra, cfg.trainable_min_count)
        chars = V.build_char_vocab(char_counts, cfg.char_min_count)
        return Vocabularies(words, chars, lowercase, cfg.max_word_len)
    words = V.extend_word_vocab(base.words, word_counts, pre, extra, cfg.trainable_min_count)
    known = set(base.chars.itos)
    added = [c for c in V.build_char_vocab(char_counts, cfg.char_min_count).itos if c not in known]
    chars = V.Vocab(base.chars.itos + added, len(base.chars.itos) + len(added))
    return Vocabularies(words, chars, lowercase, base.max_word_len)


# ---------------------------------------------------------------------------- the cache


def file_digest(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def cache_key(files: dict[str, str | Path], cfg: PrepareConfig) -> str:
    parts = {
        "format": FORMAT_VERSION,
        "tokenizer": TOKENIZER_VERSION,
        # base_vocab (rckit adapt) unset is left out: caches built before the setting existed keep their key
        "config": {k: v for k, v in asdict(cfg).items() if not (k == "base_vocab" and v is None)},
        "embeddings": V.embeddings_identity(cfg.embeddings),
        "char_embeddings": V.embeddings_identity(cfg.char_embeddings) if cfg.char_embeddings else None,
        "files": {k: file_digest(p) for k, p in sorted(files.items())},
        **({"base_vocab": file_digest(cfg.base_vocab)} if cfg.base_vocab else {}),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


@dataclass
class Prepared:
    """A prepared data directory: vocabularies, embeddings and one array set per split."""

    root: Path
    meta: dict
    vocabs: Vocabularies
    word_vectors: np.ndarray
    char_vectors: np.ndarray | None
    from_cache: bool = False

    @property
    def states_root(self) -> Path:
        """Where the contextual states of this data's splits are cached (:mod:`rckit.contextual.cache`)."""
        return self.root / "states"

    # batching and embeddings import torch (2.3 s on the development machine): they are imported
    # where a split is used, so that `rckit prepare` and `rckit score` run without torch.
    def split(self, name: str):
        from rckit.data.split import SquadSplit

        return SquadSplit.load(self.root, name)

    def embedding_info(self):
        import torch

        from rckit.data.embeddings import EmbeddingInfo

        return EmbeddingInfo(
            word_vectors=torch.from_numpy(self.word_vectors),
            n_trainable_words=self.vocabs.words.n_trainable,
            n_chars=len(self.vocabs.chars),
            char_vectors=None if self.char_vectors is None else torch.from_numpy(self.char_vectors),
        )


def load_prepared(root: str | Path) -> Prepared:
    root = Path(root)
    meta_path = root / "meta.json"
    if not meta_path.exists():
        raise FileNotFoundError(f"{root}: not a prepared data directory (no meta.json)")
    meta = json.loads(meta_path.read_text())
    vocabs = Vocabularies.from_json(json.loads((root / "vocab.json").read_text()))
    wv = np.load(root / "word_vectors.npy")
    cv_path = root / "char_vectors.npy"
    cv = np.load(cv_path) if cv_path.exists() else None
    return Prepared(root, meta, vocabs, wv, cv, from_cache=True)


def save_split(root: Path, name: str, tok: TokenizedSplit, arrays: dict[str, np.ndarray]) -> None:
    for k, a in arrays.items():
        np.save(root / f"{name}.{k}.npy", a)
    (root / f"{name}.text.json").write_text(
        json.dumps({"qids": tok.qids, "contexts": tok.contexts, "questions": tok.questions})
    )


def prepare_squad(
    train_path: str | Path,
    dev_paths: dict[str, str | Path],
    out_dir: str | Path,
    cfg: PrepareConfig | None = None,
    rebuild: bool = False,
) -> Prepared:
    """Prepare train and one or more evaluation splits, or load them if already prepared.

    ``dev_paths`` maps split names (``"dev"``, ``"dev-v2.0"`` ...) to files. Returns the
    prepared directory ``out_dir/<key>``; ``out_dir/latest`` records the last key.
    """
    cfg = cfg or PrepareConfig()
    files = {"train": train_path, **dev_paths}
    key = cache_key(files, cfg)
    out_dir = Path(out_dir)
    root = out_dir / f"squad-{key}"
    if root.exists() and not rebuild and (root / "meta.json").exists():
        return load_prepared(root)

    t0 = time.perf_counter()
    reads = {name: read_squad(p) for name, p in files.items()}
    toks = {name: tokenize_dataset(ds) for name, ds in reads.items()}
    t_tok = time.perf_counter()
    pre = _pretrained_for(toks, cfg)
    others = [t for name, t in toks.items() if name != "train"]
    vocabs = build_vocabularies(toks["train"], others, cfg, pre)
    wv = V.word_vectors(vocabs.words, pre, cfg.seed)
    cv, chars_found = (None, 0)
    if cfg.char_embeddings:
        cv, chars_found = V.char_vectors(vocabs.chars, cfg.char_embeddings, cfg.seed)

    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".squad-{key}-", dir=out_dir))
    try:
        splits = {name: _write_split(tmp, name, tok, reads[name], files[name], vocabs) for name, tok in toks.items()}
        _write_vectors(tmp, vocabs, wv, cv)
        seconds = {"tokenize": round(t_tok - t0, 2), "total": round(time.perf_counter() - t0, 2)}
        _write_meta(tmp, key, cfg, pre, vocabs, chars_found, splits, seconds)
        _move_into_place(tmp, root, rebuild)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    (out_dir / "latest").write_text(root.name + "\n")
    prepared = load_prepared(root)
    prepared.from_cache = False
    return prepared


def _pretrained_for(toks: dict[str, TokenizedSplit], cfg: PrepareConfig) -> V.Pretrained:
    """The pretrained vectors of ``cfg.embeddings``; from a file other than the default, only the
    rows of words the splits (and the base vocabulary) hold are kept."""
    wanted = None
    if cfg.embeddings != V.DEFAULT_EMBEDDINGS:
        wanted = {V.normalize_word(f, False) for t in toks.values() for f in t.forms}
        if cfg.base_vocab:
            wanted |= set(json.loads(Path(cfg.base_vocab).read_text())["words"])
    return V.load_pretrained(cfg.embeddings, wanted)


def _write_split(
    root: Path, name: str, tok: TokenizedSplit, read: SquadDataset, file: str | Path, vocabs: Vocabularies
) -> dict:
    """Index one split with the vocabularies, write its arrays and texts into ``root``, and return
    its entry of ``meta.json``: its file, version, statistics, coverage and misaligned offsets."""
    arrays = index_split(tok, vocabs)
    save_split(root, name, tok, arrays)
    rep = read.report
    return {
        "file": str(file),
        "version": rep.version,
        **tok.stats,
        "coverage": coverage(tok, arrays, vocabs),
        "misaligned_offsets": [
            {
                "id": m.qid,
                "answer": m.answer_index,
                "text": m.text,
                "answer_start": m.answer_start,
                "found": m.found,
            }
            for m in rep.misaligned
        ],
    }


def _write_vectors(root: Path, vocabs: Vocabularies, wv: np.ndarray, cv: np.ndarray | None) -> None:
    """Write the word vectors, the character vectors (where there are any) and the vocabularies."""
    np.save(root / "word_vectors.npy", wv)
    if cv is not None:
        np.save(root / "char_vectors.npy", cv)
    (root / "vocab.json").write_text(json.dumps(vocabs.to_json()))


def _write_meta(
    root: Path,
    key: str,
    cfg: PrepareConfig,
    pre: V.Pretrained,
    vocabs: Vocabularies,
    chars_found: int,
    splits: dict[str, dict],
    seconds: dict[str, float],
) -> None:
    """Write ``meta.json``: the key and every setting that shaped the data, the vocabularies'
    sizes, each split's entry and the time taken. Written last: its presence marks a whole build."""
    meta = {
        "key": key,
        "config": asdict(cfg),
        "tokenizer": TOKENIZER_VERSION,
        "format": FORMAT_VERSION,
        "embeddings_source": pre.source,
        "embedding_dim": pre.dim,
        "lowercase": vocabs.lowercase,
        "vocab": {
            "words": len(vocabs.words),
            "trainable_words": vocabs.words.n_trainable,
            "chars": len(vocabs.chars),
        },
        "char_vectors_found": chars_found,
        "splits": splits,
        "seconds": seconds,
    }
    (root / "meta.json").write_text(json.dumps(meta, indent=1))


def _move_into_place(tmp: Path, root: Path, rebuild: bool) -> None:
    """Rename the finished build ``tmp`` to ``root`` (an old one removed first on ``rebuild``),
    unless another process finished the same build first; then ``tmp`` is dropped."""
    if rebuild and root.exists():
        shutil.rmtree(root)
    try:
        os.replace(tmp, root)  # the directory appears complete or not at all
    except OSError:
        if not (root / "meta.json").exists():
            raise
        shutil.rmtree(tmp)  # another process finished the same build first


def featurize(ds: SquadDataset, vocabs: Vocabularies):
    """Index a new dataset with existing vocabularies (evaluation on any SQuAD file)."""
    from rckit.data.split import SquadSplit

    tok = tokenize_dataset(ds)
    return SquadSplit.from_arrays(index_split(tok, vocabs), tok.qids, tok.contexts, tok.questions), tok.stats
