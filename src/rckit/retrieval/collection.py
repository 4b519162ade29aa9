"""Asking a collection of documents: retrieve, then read (DrQA, Haystack), as :class:`Collection`.

``Collection.open(PATH)`` (public as ``rckit.Index.open``) opens or creates a passage store, one
SQLite file (:class:`rckit.retrieval.store.PassageStore`, written by ``rckit index``);
``collection.add([FOLDER])`` indexes or re-indexes files; ``collection.ask(question)`` takes the
retriever's ``passages`` best passages (BM25), reads them all with a :class:`Reader` in one batched
call, and ranks the spans found over every passage by one score::

    score = p_reader(span | passage) * exp(retriever_weight * (bm25(passage) - bm25(best passage)))

``retriever_weight`` 0 ranks by the reader alone, as DrQA does; a positive weight lets a passage
the retriever prefers win over a reader's confident span in a passage it ranked low (the
reader's probability is normalised within each passage, so it is as sure in a wrong passage as
in the right one). The default is the weight that won on questions of the SQuAD training file
(RESULTS.md, "Asking a collection").

Retrieve -> read -> rank is written once: :func:`retrieve` gives the hits and the (passage,
question) pairs to read, whoever reads them (:meth:`Collection.ask_many` with
:meth:`Reader.answer_batch`, the server with its batcher), and :meth:`Retrieved.rank` ranks what
was read.

Each answer (:class:`rckit.answering.answer.FoundAnswer`) says where it is: ``source`` (the file),
``key`` (the record or SQuAD paragraph of that file, or None), ``title``, ``page`` (PDF) and
``section`` (the heading above it, for formats with headings), ``start``/``end`` as
character offsets into that document's text (for a text file: into the file's own text, so
``open(source).read()[start:end] == answer``), and ``passage`` (the passage's own offsets). A
reader that can abstain (SQuAD v2.0) reads passages where it finds nothing; where it abstains on
every passage read, the answer is ``""`` with ``start``/``end`` None: no answer in these documents.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from rckit.answering.answer import Answer, FoundAnswer, Passage
from rckit.answering.own_verifier import OwnVerifier
from rckit.answering.pointer_reader import PointerReader
from rckit.answering.reader import Reader
from rckit.answering.verifier import CollectionVerifier
from rckit.answering.verifier_features import collection_features
from rckit.retrieval.store import Hit, PassageStore

DEFAULT_PASSAGES = 20
OWN_CANDIDATES = 3  # a collection's best answers that the verifier's own reader reads
# The best of the weights tried on SQuAD training questions (RESULTS.md, "Asking a collection").
DEFAULT_RETRIEVER_WEIGHT = 0.25


@dataclass(frozen=True)
class Retrieved:
    """The passages retrieved for some questions, and what the reader is to read of them."""

    hits: list[list[Hit]]  # for each question, its passages, best first
    pairs: list[tuple[str, str]]  # (passage text, question) of every hit, question by question

    questions: list[str] | None = None

    def rank(
        self,
        answers: list[list[Answer]],
        top_k: int,
        retriever_weight: float,
        verifier: CollectionVerifier | None = None,
        own: tuple[OwnVerifier, float] | None = None,
    ) -> list[list[FoundAnswer]]:
        """Each question's ``top_k`` best answers (:func:`rank`), given the reader's ``answers``
        to :attr:`pairs`, in their order; ``verifier``: the reader's collection verifier; ``own``:
        its own reader and threshold, which check the best answers (:func:`checked`)."""
        read = iter(answers)
        questions = self.questions or [None] * len(self.hits)
        passages = [[(h, next(read)) for h in hits] for hits in self.hits]
        ranked = [
            rank(read_here, top_k if own is None else max(top_k, OWN_CANDIDATES), retriever_weight, q, verifier)
            for read_here, q in zip(passages, questions)
        ]
        if own is None:
            return ranked
        # the feature network's p(no answer) of each passage (read with own=False): a join reads it
        p_features = [
            {h.passage_id: got[0]["no_answer_probability"] for h, got in read_here if got} for read_here in passages
        ]
        return checked(ranked, questions, own, top_k, p_features)


def retrieve(store: PassageStore, questions: list[str], passages: int) -> Retrieved:
    """Each question's ``passages`` best passages in ``store``, and the pairs to read them with."""
    hits = [store.search(q, passages) for q in questions]
    return Retrieved(hits, [(h.text, q) for q, hs in zip(questions, hits) for h in hs], list(questions))


class Collection:
    """A passage store and a reader: ``add`` documents, ``ask`` questions of all of them."""

    def __init__(
        self,
        store: PassageStore,
        reader: Reader | None = None,
        retriever_weight: float = DEFAULT_RETRIEVER_WEIGHT,
        model: str | Path | None = None,
    ):
        self.store = store
        self._reader = reader
        self._model = model  # what to load the reader from when first asked (None: the default model)
        self.retriever_weight = retriever_weight

    @classmethod
    def open(
        cls,
        path: str | Path,
        model: str | Path | Reader | PointerReader | None = None,
        retriever_weight: float = DEFAULT_RETRIEVER_WEIGHT,
    ) -> Collection:
        """The store at ``path`` (created if missing) with ``model``'s reader (a run, an exported
        file, a loaded reader, or None: the default model, loaded when first asked)."""
        if isinstance(model, (Reader, PointerReader)):
            return cls(PassageStore(path), model, retriever_weight)
        return cls(PassageStore(path), None, retriever_weight, model)

    @property
    def reader(self) -> Reader:
        if self._reader is None:
            self._reader = Reader.load(self._model)
        return self._reader

    def add(self, paths: list[str | Path], progress: bool = False) -> dict:
        """Index (or re-index) files and folders; see :meth:`PassageStore.add`."""
        return self.store.add(paths, progress)

    def ask(self, question: str, top_k: int = 1, passages: int = DEFAULT_PASSAGES) -> list[FoundAnswer]:
        """The ``top_k`` best answers to ``question`` over the collection, best first."""
        return self.ask_many([question], top_k, passages)[0]

    def ask_many(
        self, questions: list[str], top_k: int = 1, passages: int = DEFAULT_PASSAGES, chunk: int = 64
    ) -> list[list[FoundAnswer]]:
        """:meth:`ask` for many questions, their passages read in one batched call."""
        if top_k < 1 or passages < 1:
            raise ValueError(f"top_k and passages must be at least 1, got {top_k} and {passages}")
        results = []
        for lo in range(0, len(questions), chunk):  # bounded memory for a file of questions
            found = retrieve(self.store, questions[lo : lo + chunk], passages)
            answers = self.reader.answer_batch(found.pairs, top_k, own=False) if found.pairs else []
            results += found.rank(
                answers, top_k, self.retriever_weight, self.reader.collection_verifier, self.reader.own_verifier
            )
        return results

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Collection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def rank(
    read: list[tuple[Hit, list[Answer]]],
    top_k: int,
    retriever_weight: float,
    question: str | None = None,
    verifier: CollectionVerifier | None = None,
) -> list[FoundAnswer]:
    """The ``top_k`` best spans over the passages ``read`` of one question (each hit with the
    reader's answers on it), by the module docstring's score; a span found in two passages counts
    once. With no span left (nothing retrieved, or the reader abstained on every passage): the
    abstention. ``verifier`` (with the ``question``): the collection's decision over all the
    passages read (:func:`collection_evidence`): the abstention where its p(no answer) is above
    its threshold, else the answers carry that probability."""
    if not read:
        return [none_found(None)]
    best_bm25 = max(h.score for h, _ in read)
    found: dict[tuple, FoundAnswer] = {}
    nulls = []
    for hit, answers in read:
        if answers and answers[0]["start"] is None:  # the reader says this passage holds no answer
            nulls.append(answers[0]["no_answer_probability"])
            continue
        weight = math.exp(retriever_weight * (hit.score - best_bm25))
        for a in answers:
            if a["start"] is None:
                continue
            where = (hit.source, hit.key, hit.start + a["start"], hit.start + a["end"])
            score = a["score"] * weight
            if where not in found or score > found[where]["score"]:
                found[where] = found_in(hit, a, score)
    if not found:
        return [none_found(min(nulls) if nulls and None not in nulls else None)]
    ranked = sorted(found.values(), key=lambda a: (-a["score"], a["source"], a["start"]))
    if verifier is not None and question is not None:
        p = float(verifier.probability(collection_evidence(question, read, ranked[0])[None])[0])
        if p > verifier.threshold:
            return [none_found(p)]
        return [FoundAnswer(**{**a, "no_answer_probability": p}) for a in ranked[:top_k]]
    return ranked[:top_k]


def checked(
    ranked: list[list[FoundAnswer]],
    questions: list[str | None],
    own: tuple[OwnVerifier, float],
    top_k: int,
    p_features: list[dict[int, float | None]],
) -> list[list[FoundAnswer]]:
    """Each question's best :data:`OWN_CANDIDATES` answers judged by the verifier's own reader on
    their passages (one batched read for all questions; ``p_features``: each question's passages'
    feature-network p(no answer) by passage id, which a joined verifier reads beside its own): those
    it accepts (p(no answer) at most the threshold) are kept in their order, the first ``top_k``,
    each with its probability; where it accepts none, no answer in these documents (with the
    lowest of its probabilities). An abstention already made stays."""
    verifier, threshold = own
    todo = [
        (i, a)
        for i, (answers, q) in enumerate(zip(ranked, questions))
        if q is not None
        for a in answers[:OWN_CANDIDATES]
        if a["start"] is not None and a["passage"] is not None
    ]
    p = verifier.probability(
        [(a["passage"]["text"], questions[i]) for i, a in todo],
        [p_features[i][a["passage"]["id"]] for i, a in todo] if verifier.join is not None else None,
    )
    judged: dict[int, list[tuple[FoundAnswer, float]]] = {}
    for (i, a), pa in zip(todo, p.tolist()):
        judged.setdefault(i, []).append((a, pa))
    out = []
    for i, answers in enumerate(ranked):
        if i not in judged:
            out.append(answers[:top_k])
            continue
        kept = [FoundAnswer(**{**a, "no_answer_probability": pa}) for a, pa in judged[i] if pa <= threshold]
        out.append(kept[:top_k] if kept else [none_found(min(pa for _, pa in judged[i]))])
    return out


def collection_evidence(question: str, read: list[tuple[Hit, list[Answer]]], best: FoundAnswer | None):
    """:func:`rckit.answering.verifier_features.collection_features` of the passages ``read`` for
    ``question``, ``best`` the answer ranked first."""
    rows, at = [], None
    for i, (hit, answers) in enumerate(read):
        span = next((a for a in answers if a["start"] is not None), None)
        p = answers[0]["no_answer_probability"] if answers else None
        rows.append(
            (hit.score, hit.text, None if span is None else span["score"], p, None if span is None else span["answer"])
        )
        if best is not None and best["passage"] is not None and best["passage"]["id"] == hit.passage_id:
            at = i if at is None else at
    return collection_features(question, rows, at, None if best is None else best["answer"])


def found_in(hit: Hit, a: Answer, score: float) -> FoundAnswer:
    """The reader's span ``a`` of ``hit``'s passage as an answer of the collection, ranked by
    ``score``: its offsets moved from the passage into the passage's document."""
    start = hit.start + a["start"]
    region = hit.region_at(start)
    return FoundAnswer(
        answer=a["answer"],
        score=score,
        start=start,
        end=hit.start + a["end"],
        source=hit.source,
        key=hit.key,
        title=hit.title,
        page=region and region.page,
        section=region and region.section,
        passage=Passage(id=hit.passage_id, start=hit.start, end=hit.end, text=hit.text),
        reader_score=a["score"],
        retriever_score=hit.score,
        no_answer_probability=a["no_answer_probability"],
    )


def none_found(p_null: float | None) -> FoundAnswer:
    """No answer in these documents, with the lowest no-answer probability over the passages read
    (:func:`rckit.answering.answer.no_answer` with nowhere to point)."""
    return FoundAnswer(
        answer="",
        score=p_null,
        start=None,
        end=None,
        source=None,
        key=None,
        title=None,
        page=None,
        section=None,
        passage=None,
        reader_score=None,
        retriever_score=None,
        no_answer_probability=p_null,
    )
