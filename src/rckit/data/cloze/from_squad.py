"""An entity-anonymised cloze set built from SQuAD v1.1, in the style of Hermann et al. (2015).

Each kept SQuAD question becomes a :class:`~rckit.data.cloze.examples.ClozeExample`: its paragraph and
question with every entity mention replaced by one ``@entityN`` token, the answer the marker of the
entity its first gold answer names; the query is the anonymised question (no ``@placeholder``).

Entities (deterministic, no model): text is split with :func:`rckit.data.tokenize.tokenize`.

1. *Name tokens.* A token is a name token if it starts with a digit (numbers, years, ``1990s``), or
   if it starts with an upper-case letter, is not ``I`` and is not a function word
   (:data:`FUNCTION_WORDS`: articles, pronouns, prepositions, conjunctions, auxiliaries, wh-words
   and common sentence adverbs such as ``However``, in any case; all-capital acronyms of two or more
   letters such as ``US`` or ``WHO`` are not function words), and either (a) it is not
   sentence-initial, or (b) it is sentence-initial and the next token is a name token (``Denver
   Broncos won``), or (c) it is sentence-initial and the same word occurs capitalised in a
   non-initial position of the paragraph. A token is sentence-initial if it is the first token, or
   follows ``. ! ?`` (except an abbreviation dot, below) or one of ``" “ :``. An all-capital token
   of two or more letters (``NFL``) is a name token even when sentence-initial.
2. *Runs.* A mention is a maximal run of name tokens, also joined across: a full stop glued to a
   single capital letter or a listed abbreviation (``U.S. Army``, ``St. Louis``, ``Inc.``); a hyphen
   or slash glued on both sides (``Franco-Prussian War``); ``&``; and the lower-case name connectors
   of :data:`CONNECTORS` (``of``, ``of the``, ``de la``, ``van der``, ``bin`` ...) when a
   capitalised name token follows (``University of Notre Dame``).
3. *Keys.* An entity is its token sequence (curly apostrophes straightened, case kept): two mentions
   are the same entity iff they are the same token sequence. After detection the paragraph is
   scanned left to right, taking at each position the longest entity key that matches, so every
   occurrence of a detected name is a mention, even one the rules missed (a lone ``Paris``).
4. *Query.* The question is run through rules 1-2 (rule 1c also sees the paragraph's capitalised
   words); runs that are not paragraph entities become query-only entities. The question is then
   scanned with the paragraph's keys plus those, so a name written the same way in paragraph and
   question always gets the same marker.
5. *Numbering.* Paragraph entities in order of first mention, then query-only entities, get the
   markers ``@entity{perm[i]}`` with ``perm`` a permutation of ``0..n-1`` drawn from
   ``numpy.random.default_rng([seed, crc32(question id)])``: deterministic, different across
   questions. Markers are therefore 0..n-1 and the largest n is the class count a model needs.

Known failure modes (no coreference, case-sensitive, title words merging with names ...):
docs/investigations/squad-cloze.md, "How entities are found, and where it fails".

Keeping a question (first gold answer only): its character span must map exactly onto tokens
(``answer_not_token_aligned`` otherwise) and those tokens must be exactly one mention of the
paragraph, as they are or without leading articles (``the``/``a``/``an``, any case) and leading or
trailing punctuation (``the Denver Broncos`` -> ``Denver Broncos``). Else it is dropped, counted
as ``answer_overlaps_entity`` (overlaps mentions, is not exactly one), ``answer_not_entity`` (no
mention in it), ``answer_offset_unknown`` (its offset could not be placed) or ``impossible`` (v2.0).
"""

from __future__ import annotations

import json
import statistics
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rckit.data.cloze.baselines import score_baselines
from rckit.data.cloze.examples import ClozeExample, load_cloze_jsonl, write_cloze_jsonl
from rckit.data.squad import Answer, SquadDataset, SquadExample, read_squad
from rckit.data.tokenize import char_to_token_span_fast, tokenize
from rckit.data.vocab import normalize_word

__all__ = ["build_squad_cloze", "write_squad_cloze", "load_cloze_jsonl", "find_entity_runs", "FUNCTION_WORDS"]

FUNCTION_WORDS = frozenset(
    """
    a an the this that these those it its he she they we you i me him her his hers their them
    our us your my mine there here what who whom whose which when where why how whatever
    in on at to for from by with of as into onto upon over under after before during since
    until till while about above below beyond near across along around among amongst between
    within without through throughout toward towards against via per despite unlike like
    according following including regarding concerning besides beside behind inside outside
    and or but nor so yet if although though because unless whereas whether than then
    however also thus therefore hence moreover furthermore meanwhile instead otherwise
    is are was were be been being has have had do does did can could may might must shall
    should will would not no yes
    all any some many most much more less few several each every both either neither other
    others another such only even still just once
    later today currently previously recently originally initially finally eventually
    additionally similarly traditionally generally especially notably often sometimes usually
    """.split()
)
ABBREVIATIONS = frozenset(
    "Mr Mrs Ms Dr St Mt Jr Sr Ft Gen Gov Sen Rep Col Lt Sgt Capt Rev Prof Inc Co Corp Ltd Bros No Vol".split()
)
CONNECTORS = sorted(
    [("of",), ("of", "the"), ("de",), ("de", "la"), ("da",), ("di",), ("del",), ("della",), ("des",), ("du",),
     ("van",), ("van", "der"), ("von",), ("von", "der"), ("der",), ("y",), ("al",), ("bin",)],
    key=len, reverse=True,
)  # fmt: skip
_INITIAL_AFTER = frozenset('.!?"\u201c:')
_ARTICLES = frozenset(["the", "a", "an"])


def _is_cap(tok: str) -> bool:
    if not tok[0].isupper() or tok == "I":
        return False
    return tok.lower() not in FUNCTION_WORDS or (len(tok) > 1 and tok.isupper())  # US, WHO: acronyms


def _is_num(tok: str) -> bool:
    return tok[0].isdigit()


def _abbrev_dot(tokens: Sequence[str], offsets, i: int) -> bool:
    """Token ``i`` is a full stop glued to a single capital letter or a listed abbreviation."""
    if tokens[i] != "." or i == 0 or offsets[i - 1][1] != offsets[i][0]:
        return False
    prev = tokens[i - 1]
    return (len(prev) == 1 and prev.isupper()) or prev in ABBREVIATIONS


def _initial(tokens: Sequence[str], offsets, i: int) -> bool:
    if i == 0:
        return True
    prev = tokens[i - 1]
    if prev in (".", "!", "?"):
        return not _abbrev_dot(tokens, offsets, i - 1)
    return prev in _INITIAL_AFTER


def capitalised_non_initial(tokens: Sequence[str], offsets) -> set[str]:
    return {t for i, t in enumerate(tokens) if _is_cap(t) and not _initial(tokens, offsets, i)}


def find_entity_runs(tokens: Sequence[str], offsets, caps_elsewhere: set[str] | None = None) -> list[tuple[int, int]]:
    """Inclusive token spans of entity mentions by rules 1-2 of the module docstring."""
    n = len(tokens)
    if caps_elsewhere is None:
        caps_elsewhere = capitalised_non_initial(tokens, offsets)
    initial = [_initial(tokens, offsets, i) for i in range(n)]
    name = [
        _is_num(t) or (_is_cap(t) and (not initial[i] or t in caps_elsewhere or (len(t) > 1 and t.isupper())))
        for i, t in enumerate(tokens)
    ]
    for i in range(n - 1):  # rule 1b: a sentence-initial capitalised word starting a name
        if not name[i] and _is_cap(tokens[i]) and name[i + 1]:
            name[i] = True
    spans = []
    i = 0
    while i < n:
        if not name[i]:
            i += 1
            continue
        e = i
        j = i + 1
        while j < n:
            if name[j]:
                e = j
                j += 1
            elif _abbrev_dot(tokens, offsets, j):
                e = j
                j += 1
            elif (
                tokens[j] in ("-", "/")
                and j + 1 < n
                and name[j + 1]
                and offsets[e][1] == offsets[j][0]
                and offsets[j][1] == offsets[j + 1][0]
            ):
                e = j + 1
                j += 2
            elif tokens[j] == "&" and j + 1 < n and name[j + 1]:
                e = j + 1
                j += 2
            else:
                for conn in CONNECTORS:
                    k = j + len(conn)
                    if tuple(tokens[j:k]) == conn and k < n and name[k] and _is_cap(tokens[k]) and _is_cap(tokens[e]):
                        e = k
                        j = k + 1
                        break
                else:
                    break
        spans.append((i, e))
        i = e + 1
    return spans


def _key_index(keys) -> dict[str, list[tuple[str, ...]]]:
    """First token -> keys starting with it, longest first."""
    index: dict[str, list[tuple[str, ...]]] = {}
    for key in keys:
        index.setdefault(key[0], []).append(key)
    for v in index.values():
        v.sort(key=len, reverse=True)
    return index


def _scan(norm: Sequence[str], index) -> list[tuple[int, int, tuple[str, ...]]]:
    """Left-to-right longest match of entity keys: (first, last, key) mentions."""
    out = []
    i, n = 0, len(norm)
    while i < n:
        for key in index.get(norm[i], ()):
            L = len(key)
            if tuple(norm[i : i + L]) == key:
                out.append((i, i + L - 1, key))
                i += L
                break
        else:
            i += 1
    return out


@dataclass
class _Paragraph:
    tokens: list[str]
    starts: list[int]
    ends: list[int]
    norm: list[str]
    caps: set[str]
    keys: list[tuple[str, ...]]  # paragraph entities in order of first mention
    surface: dict[tuple[str, ...], str]
    mentions: list[tuple[int, int, tuple[str, ...]]]
    index: dict
    at: dict  # (first, last) -> key of each mention


def _paragraph(context: str) -> _Paragraph:
    tokens, offsets = tokenize(context)
    norm = [normalize_word(t, False) for t in tokens]
    caps = capitalised_non_initial(tokens, offsets)
    detected = {tuple(norm[s : e + 1]) for s, e in find_entity_runs(tokens, offsets, caps)}
    index = _key_index(detected)
    mentions = _scan(norm, index)
    keys: dict[tuple[str, ...], None] = {}
    surface = {}
    for s, e, key in mentions:
        if key not in keys:
            keys[key] = None
            surface[key] = context[offsets[s][0] : offsets[e][1]]
    return _Paragraph(
        tokens,
        [s for s, _ in offsets],
        [e for _, e in offsets],
        norm,
        caps,
        list(keys),
        surface,
        mentions,
        index,
        {(s, e): key for s, e, key in mentions},
    )


def _trim(tokens: Sequence[str], first: int, last: int) -> tuple[int, int]:
    def punct(t: str) -> bool:
        return not any(c.isalnum() for c in t)

    while first <= last and (tokens[first].lower() in _ARTICLES or punct(tokens[first])):
        first += 1
    while last >= first and punct(tokens[last]):
        last -= 1
    return first, last


def _anonymise(tokens, mentions, marker_of) -> list[str]:
    out, i = [], 0
    for s, e, key in mentions:
        out.extend(tokens[i:s])
        out.append(marker_of[key])
        i = e + 1
    out.extend(tokens[i:])
    return out


def _summary(values) -> dict:
    if not values:
        return {"mean": 0.0, "median": 0.0, "min": 0, "max": 0}
    return {
        "mean": round(statistics.fmean(values), 2),
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
    }


def build_squad_cloze(dataset: SquadDataset, seed: int = 0) -> tuple[list[ClozeExample], dict]:
    """Anonymised cloze examples from a SQuAD dataset, and statistics about what was kept.

    Rules are in the module docstring. The statistics count every question: ``questions_kept
    + sum(dropped.values()) == questions_total``.
    """
    paragraphs: dict[int, _Paragraph] = {}
    examples: list[ClozeExample] = []
    dropped: Counter = Counter()
    kept = _Kept()
    for sq in dataset.examples:
        if sq.is_impossible or not sq.answers:
            dropped["impossible"] += 1
            continue
        p = paragraphs.get(sq.context_index)
        if p is None:
            p = paragraphs[sq.context_index] = _paragraph(sq.context)
        key, why = _answer_entity(sq.answers[0], p)
        if key is None:
            dropped[why] += 1
            continue
        example, query_mentions = _cloze_example(sq, p, key, seed)
        examples.append(example)
        kept.count(example, p, key, query_mentions)
    return examples, _statistics(dataset, seed, examples, dropped, paragraphs, kept)


def _answer_entity(ans: Answer, p: _Paragraph) -> tuple[tuple[str, ...] | None, str]:
    """The paragraph entity the first gold answer ``ans`` names, as it is or trimmed (the module
    docstring, "Keeping a question"), and ``""``; or None and why the question is dropped."""
    if ans.start is None:
        return None, "answer_offset_unknown"
    span = char_to_token_span_fast(p.starts, p.ends, ans.start, ans.end)
    if span is None or not span[2]:
        return None, "answer_not_token_aligned"
    first, last = span[0], span[1]
    key = p.at.get((first, last)) or p.at.get(_trim(p.tokens, first, last))
    if key is None:
        overlaps = any(s <= last and e >= first for s, e, _ in p.mentions)
        return None, "answer_overlaps_entity" if overlaps else "answer_not_entity"
    return key, ""


def _query_mentions(question: str, p: _Paragraph) -> tuple[list[str], list, list[tuple[int, int, tuple[str, ...]]]]:
    """The question's tokens, their offsets and its entity mentions (rule 4): its own runs that are
    not paragraph entities join the paragraph's keys, and the question is scanned with them all."""
    q_tokens, q_offsets = tokenize(question)
    q_norm = [normalize_word(t, False) for t in q_tokens]
    caps = p.caps | capitalised_non_initial(q_tokens, q_offsets)
    q_keys = {tuple(q_norm[s : e + 1]) for s, e in find_entity_runs(q_tokens, q_offsets, caps)}
    extra = q_keys.difference(p.keys)
    index = p.index if not extra else _key_index([*p.keys, *extra])
    return q_tokens, q_offsets, _scan(q_norm, index)


def _example_entities(
    p: _Paragraph, question: str, q_offsets, q_mentions: list[tuple[int, int, tuple[str, ...]]]
) -> tuple[list[tuple[str, ...]], dict[tuple[str, ...], str]]:
    """Every entity of one example, the paragraph's in order of first mention and then the
    query-only ones in order of mention, and the text each is written as."""
    all_keys = list(p.keys)
    known = set(all_keys)
    surface = dict(p.surface)
    for s, e, k in q_mentions:
        if k not in known:
            known.add(k)
            all_keys.append(k)
            surface[k] = question[q_offsets[s][0] : q_offsets[e][1]]
    return all_keys, surface


def _markers(all_keys: list[tuple[str, ...]], qid: str, seed: int) -> dict[tuple[str, ...], str]:
    """Each entity's ``@entityN`` marker, numbered by a permutation drawn for this question (rule 5)."""
    rng = np.random.default_rng([seed, zlib.crc32(qid.encode("utf-8"))])
    perm = rng.permutation(len(all_keys))
    return {k: f"@entity{perm[i]}" for i, k in enumerate(all_keys)}


def _cloze_example(sq: SquadExample, p: _Paragraph, key: tuple[str, ...], seed: int) -> tuple[ClozeExample, int]:
    """The cloze example of one kept question whose answer is the entity ``key``: paragraph and
    question anonymised with one numbering; and how many entity mentions its query holds."""
    q_tokens, q_offsets, q_mentions = _query_mentions(sq.question, p)
    all_keys, surface = _example_entities(p, sq.question, q_offsets, q_mentions)
    marker_of = _markers(all_keys, sq.qid, seed)
    document = _anonymise(p.tokens, p.mentions, marker_of)
    query = _anonymise(q_tokens, q_mentions, marker_of)
    candidates = [marker_of[k] for k in p.keys]
    answer = marker_of[key]
    entities = {marker_of[k]: surface[k] for k in all_keys}
    return ClozeExample(sq.qid, document, query, answer, candidates, entities), len(q_mentions)


@dataclass
class _Kept:
    """What the statistics say of the kept examples, counted as each is made."""

    most_frequent: int = 0  # answers that are (one of) their paragraph's most mentioned entities
    answer_in_query: int = 0
    single: int = 0  # examples with one candidate
    max_entities: int = 0  # paragraph + query-only entities of an example, the largest
    cands: list[int] = field(default_factory=list)
    doc_lens: list[int] = field(default_factory=list)
    query_lens: list[int] = field(default_factory=list)
    query_mentions: list[int] = field(default_factory=list)

    def count(self, example: ClozeExample, p: _Paragraph, key: tuple[str, ...], query_mentions: int) -> None:
        """Count one kept example, made from paragraph ``p`` with the answer entity ``key``."""
        counts = Counter(k for _, _, k in p.mentions)
        self.most_frequent += counts[key] == max(counts.values())
        self.answer_in_query += example.answer in example.query
        self.single += len(example.candidates) == 1
        self.max_entities = max(self.max_entities, len(example.entities))  # a marker per entity
        self.cands.append(len(example.candidates))
        self.doc_lens.append(len(example.document))
        self.query_lens.append(len(example.query))
        self.query_mentions.append(query_mentions)


def _statistics(
    dataset: SquadDataset,
    seed: int,
    examples: list[ClozeExample],
    dropped: Counter,
    paragraphs: dict[int, _Paragraph],
    kept: _Kept,
) -> dict:
    """The statistics :func:`build_squad_cloze` returns: what was kept and dropped, and the kept
    examples' sizes."""
    total = len(dataset.examples)
    n_kept = len(examples)
    return {
        "source": dataset.report.path,
        "seed": seed,
        "questions_total": total,
        "questions_kept": n_kept,
        "kept_pct": round(100.0 * n_kept / max(total, 1), 2),
        "dropped": dict(sorted(dropped.items())),
        "paragraphs": len(paragraphs),
        "entities_per_paragraph": _summary([len(p.keys) for p in paragraphs.values()]),
        "candidates_per_question": _summary(kept.cands),
        "max_entities_per_example": kept.max_entities,  # paragraph + query-only; the class count needed
        "document_tokens": _summary(kept.doc_lens),
        "query_tokens": _summary(kept.query_lens),
        "query_entity_mentions": _summary(kept.query_mentions),
        "single_candidate_questions": kept.single,
        "answer_in_query": kept.answer_in_query,
        "answer_most_frequent_pct": round(100.0 * kept.most_frequent / max(n_kept, 1), 2),  # ties count as hits
    }


def write_squad_cloze(
    out_dir: str | Path, train: Sequence[ClozeExample], dev: Sequence[ClozeExample], stats: dict
) -> Path:
    """Write ``train.jsonl``, ``dev.jsonl`` and ``stats.json`` into ``out_dir``; returns it."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_cloze_jsonl(out / "train.jsonl", train)
    write_cloze_jsonl(out / "dev.jsonl", dev)
    (out / "stats.json").write_text(json.dumps(stats, indent=2, ensure_ascii=False) + "\n")
    return out


def prepare_squad_cloze(train_file: str | Path, dev_file: str | Path, out_dir: str | Path, seed: int = 0) -> dict:
    """``rckit prepare squad-cloze``: both splits built from SQuAD v1.1 files and written to
    ``out_dir``, with their statistics and Hermann et al.'s symbolic baselines on each (how hard
    the set is) in ``stats.json``; returns those statistics."""
    train, train_stats = build_squad_cloze(read_squad(train_file), seed=seed)
    dev, dev_stats = build_squad_cloze(read_squad(dev_file), seed=seed)
    baselines = {"train": score_baselines(train), "dev": score_baselines(dev)}
    stats = {
        "train": train_stats,
        "dev": dev_stats,
        "baselines": baselines,
        "seed": seed,
        "sources": {"train": str(train_file), "dev": str(dev_file)},
    }
    write_squad_cloze(out_dir, train, dev, stats)
    return stats
