"""Cloze-style reading comprehension data (Hermann et al. 2015): readers, vocabulary, tensors.

An example is a document, a query with the answer removed, and the answer: an anonymised entity
marker ``@entityK`` that occurs in the document. Every entity mention is one marker token and
the numbering is permuted per example, so a model can only answer from the text.

Two on-disk formats are read, both into :class:`ClozeExample`:

* DeepMind Q&A ``.question`` files (one example per file, Hermann et al.)::

      http://url-of-the-story            line 1
                                         line 2 (blank)
      @entity0 ( @entity1 ) -- ...       line 3: the document, tokens separated by spaces
                                         line 4
      @placeholder was arrested ...      line 5: the query, with one @placeholder
                                         line 6
      @entity5                           line 7: the answer
                                         line 8
      @entity0:CNN                       line 9 on: marker:surface name, one per line
      @entity1:Amy Winehouse

  The example id is the file name without ``.question`` (the story's hash).

* Chen et al. (2016)'s preprocessed ``train.txt`` / ``dev.txt`` / ``test.txt``: blocks of four
  lines, question, answer, document, blank. This follows the reader in their code
  (``utils.load_data`` of ``danqi/rc-cnn-dailymail``): the question and document are
  lower-cased on reading, the answer is taken as written and must be an entity marker, there is
  no entity-name table (``entities`` stays empty). The file may end without the final blank
  line. Ids are ``<file stem>:<block number from 0>``.

Broken input raises :class:`ClozeFormatError` naming the file, the line and what was expected.

Tensors: :class:`ClozeVocab` fixes ids 0 ``<pad>``, 1 ``<unk>``, 2 the delimiter ``|||``,
3 ``@placeholder``, then ``@entity0 .. @entity{N-1}`` contiguously from
:data:`ENTITY_OFFSET` (so entity k has word id ``ENTITY_OFFSET + k`` and class k), then the
training words by frequency. :class:`ClozeSplit` keeps a split as flat numpy arrays and
:meth:`ClozeSplit.collate` pads a batch into a :class:`ClozeBatch`.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import numpy as np
import torch

from rckit.data.vocab import normalize_word

PAD, UNK, DELIM, PLACEHOLDER_ID = 0, 1, 2, 3
PLACEHOLDER = "@placeholder"
DELIMITER = "|||"
SPECIALS = ["<pad>", "<unk>", DELIMITER, PLACEHOLDER]
ENTITY_OFFSET = len(SPECIALS)  # word id of @entity0
ENTITY_RE = re.compile(r"@entity(\d+)\Z")


class ClozeFormatError(ValueError):
    """A cloze file that cannot be read; the message names the file, the line and what was expected."""


@dataclass
class ClozeExample:
    id: str
    document: list[str]  # tokens; every entity mention is one @entityN token
    query: list[str]  # tokens; may contain @placeholder
    answer: str  # an entity marker present in the document
    candidates: list[str]  # entity markers in the document, in order of first mention
    entities: dict[str, str] = field(default_factory=dict)  # marker -> surface name, may be empty


def entity_number(token: str) -> int | None:
    """``k`` for ``@entityk``, else None."""
    m = ENTITY_RE.match(token)
    return int(m.group(1)) if m else None


def document_candidates(document: Sequence[str]) -> list[str]:
    """Entity markers of a document, each once, in order of first mention."""
    seen: dict[str, None] = {}
    for t in document:
        if t not in seen and ENTITY_RE.match(t):
            seen[t] = None
    return list(seen)


def _check_answer(path: Path, lineno: int, answer: str, document: list[str]) -> None:
    if not answer:
        raise ClozeFormatError(
            f"{path}:{lineno}: missing answer: expected an entity marker like @entity3, got an empty line"
        )
    if not ENTITY_RE.match(answer):
        raise ClozeFormatError(
            f"{path}:{lineno}: answer should be one entity marker like @entity3, got {answer[:60]!r}"
        )
    if answer not in document:
        raise ClozeFormatError(f"{path}:{lineno}: answer {answer} does not occur in the document")


# ---------------------------------------------------------------------------------------------
# DeepMind .question files


def read_question_file(path: str | Path) -> ClozeExample:
    """Read one DeepMind Q&A ``.question`` file (layout in the module docstring)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ClozeFormatError(f"{path}: cannot read: {e}") from e
    lines = [line.rstrip("\r") for line in text.split("\n")]
    expected = {1: "the story URL", 3: "the document", 5: "the query", 7: "the answer"}
    for lineno in range(1, 8):
        if lineno > len(lines) or (lineno == len(lines) and lines[-1] == "" and lineno % 2):
            what = expected.get(lineno, "a blank line")
            raise ClozeFormatError(
                f"{path}:{lineno}: truncated file: expected {what}, the file ends at line {lineno - 1}"
            )
        line = lines[lineno - 1]
        if lineno % 2 == 0 and line.strip():
            raise ClozeFormatError(
                f"{path}:{lineno}: expected a blank line after {expected[lineno - 1]}, got {line[:60]!r}"
            )
        if lineno in (1, 3, 5) and not line.strip():
            raise ClozeFormatError(f"{path}:{lineno}: expected {expected[lineno]}, got an empty line")
    document = lines[2].split()
    query = lines[4].split()
    if PLACEHOLDER not in query:
        raise ClozeFormatError(f"{path}:5: expected a query containing {PLACEHOLDER}, got {lines[4][:60]!r}")
    answer = lines[6].strip()
    _check_answer(path, 7, answer, document)
    if len(lines) > 7 and lines[7].strip():
        raise ClozeFormatError(f"{path}:8: expected a blank line after the answer, got {lines[7][:60]!r}")
    entities: dict[str, str] = {}
    for lineno, line in enumerate(lines[8:], 9):
        if not line.strip():
            continue
        marker, sep, name = line.partition(":")
        if not sep or not ENTITY_RE.match(marker):
            raise ClozeFormatError(f"{path}:{lineno}: expected an entity line '@entityN:name', got {line[:60]!r}")
        entities[marker] = name
    return ClozeExample(
        path.name.removesuffix(".question"), document, query, answer, document_candidates(document), entities
    )


def read_question_dir(directory: str | Path) -> list[ClozeExample]:
    """Every ``*.question`` file of a directory, in sorted file-name order."""
    directory = Path(directory)
    files = sorted(directory.glob("*.question"))
    if not files:
        raise FileNotFoundError(f"{directory}: no .question files")
    return [read_question_file(f) for f in files]


# ---------------------------------------------------------------------------------------------
# Chen et al. (2016) train.txt / dev.txt / test.txt


def read_chen_file(path: str | Path, lowercase: bool = True) -> list[ClozeExample]:
    """Read Chen et al.'s preprocessed file: blocks of question, answer, document, blank line."""
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as fh:
            lines = [line.rstrip("\r\n") for line in fh]
    except (OSError, UnicodeDecodeError) as e:
        raise ClozeFormatError(f"{path}: cannot read: {e}") from e
    while lines and not lines[-1].strip():
        lines.pop()
    examples = []
    for b, first in enumerate(range(0, len(lines), 4)):
        block = lines[first : first + 4]
        q_no, a_no, d_no = first + 1, first + 2, first + 3
        if not block[0].strip():
            raise ClozeFormatError(f"{path}:{q_no}: expected the question of block {b}, got an empty line")
        if len(block) < 3:
            what = "the answer" if len(block) == 1 else "the document"
            raise ClozeFormatError(
                f"{path}:{first + len(block) + 1}: truncated block {b}: expected {what}, the file ends"
            )
        if len(block) == 4 and block[3].strip():
            raise ClozeFormatError(f"{path}:{first + 4}: expected a blank line ending block {b}, got {block[3][:60]!r}")
        if not block[2].strip():
            raise ClozeFormatError(f"{path}:{d_no}: expected the document of block {b}, got an empty line")
        question, document = block[0].strip(), block[2].strip()
        if lowercase:
            question, document = question.lower(), document.lower()
        doc = document.split()
        answer = block[1].strip()
        _check_answer(path, a_no, answer, doc)
        examples.append(ClozeExample(f"{path.stem}:{b}", doc, question.split(), answer, document_candidates(doc)))
    return examples


# ---------------------------------------------------------------------------------------------
# JSON lines (the format squad-cloze is written in)


def write_cloze_jsonl(path: str | Path, examples: Iterable[ClozeExample]) -> None:
    """One JSON object per line with the :class:`ClozeExample` fields; written atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # open(), not mkstemp: keep umask permissions
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            for ex in examples:
                fh.write(json.dumps(asdict(ex), ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def load_cloze_jsonl(path: str | Path) -> list[ClozeExample]:
    """Read :func:`write_cloze_jsonl` output, checking every field."""
    path = Path(path)
    kinds = {"id": str, "document": list, "query": list, "answer": str, "candidates": list, "entities": dict}
    examples = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ClozeFormatError(f"{path}:{lineno}: not valid JSON: {e.msg}") from e
            if not isinstance(obj, dict):
                raise ClozeFormatError(f"{path}:{lineno}: expected a JSON object")
            for key, kind in kinds.items():
                if not isinstance(obj.get(key), kind):
                    raise ClozeFormatError(f"{path}:{lineno}: field {key!r} should be {kind.__name__}")
            _check_answer(path, lineno, obj["answer"], obj["document"])
            examples.append(ClozeExample(**{k: obj[k] for k in kinds}))
    return examples


# ---------------------------------------------------------------------------------------------
# Vocabulary and tensors


def max_entity_number(examples: Iterable[ClozeExample]) -> int:
    """Largest k of any @entityk in the documents, queries and answers; -1 if none."""
    top = -1
    for ex in examples:
        for t in (*ex.document, *ex.query, ex.answer):
            k = entity_number(t)
            if k is not None and k > top:
                top = k
    return top


@dataclass
class ClozeVocab:
    """Word ids: :data:`SPECIALS`, then ``@entity0..@entity{n_entities-1}``, then words."""

    itos: list[str]
    n_entities: int
    lowercase: bool = True

    def __post_init__(self) -> None:
        want = SPECIALS + [f"@entity{k}" for k in range(self.n_entities)]
        if self.itos[: len(want)] != want:
            raise ValueError("ClozeVocab must start with the specials and @entity0..@entity{N-1}")
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    @classmethod
    def build(
        cls,
        examples: Iterable[ClozeExample],
        min_count: int = 1,
        n_entities: int | None = None,
        lowercase: bool = True,
    ) -> ClozeVocab:
        """Vocabulary of the training ``examples``' document and query words.

        Words occurring fewer than ``min_count`` times map to ``<unk>``; order is by count, then
        alphabetical, so the same data gives the same ids. ``n_entities`` defaults to one more
        than the largest entity number seen (data numbered 0..n-1 per example: the largest
        entity count); pass the maximum over every split so dev markers have an id too.
        """
        examples = list(examples)
        counts: Counter = Counter()
        for ex in examples:
            for t in (*ex.document, *ex.query):
                if t not in SPECIALS and not ENTITY_RE.match(t):
                    counts[normalize_word(t, lowercase)] += 1
        if n_entities is None:
            n_entities = max_entity_number(examples) + 1
        words = sorted(
            (w for w, c in counts.items() if c >= min_count and w not in SPECIALS), key=lambda w: (-counts[w], w)
        )
        return cls(SPECIALS + [f"@entity{k}" for k in range(n_entities)] + words, n_entities, lowercase)

    def encode(self, tokens: Sequence[str]) -> list[int]:
        out = []
        for t in tokens:
            i = self.stoi.get(t) if (t in SPECIALS or t.startswith("@entity")) else None
            if i is None:
                k = entity_number(t)
                if k is not None:
                    raise ValueError(f"{t} is beyond this vocabulary's {self.n_entities} entities")
                i = self.stoi.get(normalize_word(t, self.lowercase), UNK)
            out.append(i)
        return out

    def save(self, path: str | Path) -> None:
        Path(path).write_text(
            json.dumps({"itos": self.itos, "n_entities": self.n_entities, "lowercase": self.lowercase})
        )

    @classmethod
    def load(cls, path: str | Path) -> ClozeVocab:
        d = json.loads(Path(path).read_text())
        return cls(d["itos"], d["n_entities"], d["lowercase"])


@dataclass
class ClozeBatch:
    c_words: torch.Tensor  # (B, Td) long word ids of the document, 0 = <pad>
    c_mask: torch.Tensor  # (B, Td) bool, True = real token
    q_words: torch.Tensor  # (B, Tq) long word ids of the query
    q_mask: torch.Tensor  # (B, Tq) bool
    candidates: torch.Tensor  # (B, N) bool, entity k is mentioned in the (possibly cut) document
    answer: torch.Tensor  # (B,) long, entity number k of the answer
    answer_cut: torch.Tensor  # (B,) bool, every mention of the answer was cut off by max_doc_len
    index: torch.Tensor  # (B,) long, row of each example in its split
    copy_at: torch.Tensor | None = None  # (B,) long, training's copy task: a document position of an entity, -1: none

    def to(self, device: torch.device | str, non_blocking: bool = False) -> ClozeBatch:
        def move(v):
            return None if v is None else v.to(device, non_blocking=non_blocking)

        return ClozeBatch(**{f.name: move(getattr(self, f.name)) for f in fields(self)})

    def __len__(self) -> int:
        return self.c_words.shape[0]


def renumber_entities(batch: ClozeBatch, generator: torch.Generator | None = None) -> ClozeBatch:
    """The same batch with every example's entity numbers redrawn (a random permutation of 0..N-1 per row).

    Anonymisation makes entity numbers meaningless; a split fixes one numbering per example,
    so a model can memorise (example, numbering) pairs, and each number's output row learns
    only from the examples that happen to use it. Redrawing the numbering at every training
    batch keeps the numbers meaningless and shows every number in every role (Hermann et al.
    permute once per document; this permutes once per use). Documents, queries, candidates
    and the answer are renumbered together, so the example is unchanged but for the names.
    """
    B, N = batch.candidates.shape
    perm = torch.argsort(torch.rand(B, N, generator=generator), dim=1)  # (B, N): entity k -> perm[b, k]

    def renumber(ids: torch.Tensor) -> torch.Tensor:  # (B, T) word ids
        k = ids - ENTITY_OFFSET
        is_entity = (k >= 0) & (k < N)
        return torch.where(is_entity, perm.gather(1, k.clamp(0, N - 1)) + ENTITY_OFFSET, ids)

    candidates = torch.zeros_like(batch.candidates).scatter_(1, perm, batch.candidates)  # (B, N)
    return ClozeBatch(
        c_words=renumber(batch.c_words),
        c_mask=batch.c_mask,
        q_words=renumber(batch.q_words),
        q_mask=batch.q_mask,
        candidates=candidates,
        answer=perm.gather(1, batch.answer.unsqueeze(1)).squeeze(1),
        answer_cut=batch.answer_cut,
        index=batch.index,
        copy_at=batch.copy_at,
    )


def entity_mentions(batch: ClozeBatch) -> torch.Tensor:
    """(B, Td) bool: the real document tokens that are entity markers."""
    k = batch.c_words - ENTITY_OFFSET
    return batch.c_mask & (k >= 0) & (k < batch.candidates.shape[1])


def with_copy_positions(batch: ClozeBatch, generator: torch.Generator | None = None) -> ClozeBatch:
    """The same batch with ``copy_at``: one entity mention per document, drawn uniformly; -1 where a
    document has none. The copy task asks the reader which entity stands there (models/attentive_reader.py)."""
    mentions = entity_mentions(batch)  # (B, Td)
    has = mentions.any(1)  # (B,)
    weights = torch.where(has.unsqueeze(1), mentions, batch.c_mask).float()  # rows without an entity: any token
    t = torch.multinomial(weights, 1, generator=generator).squeeze(1)  # (B,)
    return replace(batch, copy_at=torch.where(has, t, torch.full_like(t, -1)))


def copy_targets(batch: ClozeBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """The entity number at each ``copy_at`` (B,) and which rows have one (B,) bool."""
    valid = batch.copy_at >= 0
    at = batch.copy_at.clamp(min=0).unsqueeze(1)  # (B, 1)
    target = batch.c_words.gather(1, at).squeeze(1) - ENTITY_OFFSET  # (B,)
    return torch.where(valid, target, torch.zeros_like(target)), valid


class ClozeSplit:
    """One split of cloze examples as flat numpy arrays.

    ``doc_ids[doc_ptr[i]:doc_ptr[i+1]]`` are example i's document word ids (likewise the query);
    ``answer[i]`` is the answer's entity number and ``answer_first[i]`` the document position of
    its first mention, which is all that truncation needs to know.
    """

    ARRAYS = ("doc_ptr", "doc_ids", "query_ptr", "query_ids", "answer", "answer_first")

    def __init__(self, arrays: dict[str, np.ndarray], ids: list[str], n_entities: int):
        missing = [k for k in self.ARRAYS if k not in arrays]
        if missing:
            raise ValueError(f"split is missing arrays: {missing}")
        self.a = arrays
        self.ids = ids
        self.n_entities = n_entities
        self.doc_len = np.diff(arrays["doc_ptr"])
        self.query_len = np.diff(arrays["query_ptr"])

    @classmethod
    def from_examples(cls, examples: Sequence[ClozeExample], vocab: ClozeVocab) -> ClozeSplit:
        doc_ids, query_ids, answer, first = [], [], [], []
        doc_ptr, query_ptr = [0], [0]
        for ex in examples:
            k = entity_number(ex.answer)
            if k is None or ex.answer not in ex.document:
                raise ValueError(f"example {ex.id}: answer {ex.answer!r} is not an entity marker of the document")
            try:
                d, q = vocab.encode(ex.document), vocab.encode(ex.query)
            except ValueError as e:
                raise ValueError(f"example {ex.id}: {e}") from e
            doc_ids.extend(d)
            query_ids.extend(q)
            doc_ptr.append(len(doc_ids))
            query_ptr.append(len(query_ids))
            answer.append(k)
            first.append(ex.document.index(ex.answer))
        arrays = {
            "doc_ptr": np.array(doc_ptr, np.int64),
            "doc_ids": np.array(doc_ids, np.int32),
            "query_ptr": np.array(query_ptr, np.int64),
            "query_ids": np.array(query_ids, np.int32),
            "answer": np.array(answer, np.int64),
            "answer_first": np.array(first, np.int64),
        }
        return cls(arrays, [ex.id for ex in examples], vocab.n_entities)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def lengths(self) -> np.ndarray:
        """Document plus query length of every example, for ``BucketBatchSampler``."""
        return self.doc_len + self.query_len

    def answers_cut(self, max_doc_len: int | None) -> int:
        """How many answers lose every mention when documents are cut to ``max_doc_len``."""
        if max_doc_len is None:
            return 0
        return int((self.a["answer_first"] >= max_doc_len).sum())

    def collate(self, indices, max_doc_len: int | None = None) -> ClozeBatch:
        """Pad the examples ``indices`` to the longest document and query in the batch.

        Documents longer than ``max_doc_len`` keep their first ``max_doc_len`` tokens. An
        example whose answer is mentioned only beyond the cut is kept, not dropped: its
        ``answer_cut`` is True and the answer stays set in ``candidates`` (so a softmax over
        candidates has a finite loss); :meth:`answers_cut` counts such examples over the split,
        and training or evaluation code decides what to do with them.
        """
        a = self.a
        idx = np.asarray(indices, dtype=np.int64)
        d_len = self.doc_len[idx]
        if max_doc_len is not None:
            d_len = np.minimum(d_len, max_doc_len)
        q_len = self.query_len[idx]
        B, Td, Tq = len(idx), max(1, int(d_len.max(initial=1))), max(1, int(q_len.max(initial=1)))
        doc = np.zeros((B, Td), np.int64)
        query = np.zeros((B, Tq), np.int64)
        for b, i in enumerate(idx):
            lo = a["doc_ptr"][i]
            doc[b, : d_len[b]] = a["doc_ids"][lo : lo + d_len[b]]
            lo = a["query_ptr"][i]
            query[b, : q_len[b]] = a["query_ids"][lo : lo + q_len[b]]
        doc_mask = np.arange(Td)[None, :] < d_len[:, None]  # (B, Td)
        query_mask = np.arange(Tq)[None, :] < q_len[:, None]  # (B, Tq)
        N = self.n_entities
        ent = doc - ENTITY_OFFSET  # (B, Td) entity number where the token is a marker
        is_ent = doc_mask & (ent >= 0) & (ent < N)
        candidates = np.zeros((B, N), bool)
        rows, cols = np.nonzero(is_ent)
        candidates[rows, ent[rows, cols]] = True
        answer = a["answer"][idx]
        answer_cut = a["answer_first"][idx] >= d_len
        candidates[np.arange(B), answer] = True
        t = torch.from_numpy
        return ClozeBatch(
            c_words=t(doc),
            c_mask=t(doc_mask),
            q_words=t(query),
            q_mask=t(query_mask),
            candidates=t(candidates),
            answer=t(answer.astype(np.int64)),
            answer_cut=t(answer_cut),
            index=t(idx),
        )

    def save(self, directory: str | Path) -> None:
        """``<name>.npy`` per array and ``split.json`` (ids, entity count) in ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for k in self.ARRAYS:
            np.save(directory / f"{k}.npy", self.a[k])
        (directory / "split.json").write_text(json.dumps({"ids": self.ids, "n_entities": self.n_entities}))

    @classmethod
    def load(cls, directory: str | Path) -> ClozeSplit:
        directory = Path(directory)
        if not (directory / "split.json").exists():
            raise FileNotFoundError(f"{directory}: no saved cloze split (split.json missing)")
        meta = json.loads((directory / "split.json").read_text())
        arrays = {k: np.load(directory / f"{k}.npy") for k in cls.ARRAYS}
        return cls(arrays, meta["ids"], meta["n_entities"])
