"""Near-miss unanswerable questions made at scale from SQuAD v1.1 train: the answering sentence removed.

SQuAD 2.0's written unanswerable questions sit beside a paragraph on the very thing they ask
about (Rajpurkar, Jia & Liang 2018): the topic and most of the question's words are there, only
the answer is not. A question asked of another paragraph (``other_paragraph``) is easier to
reject, since the topic itself has moved. Removing from a question's own paragraph the sentence
that holds its answer keeps the topic and the neighbouring sentences and takes away only the
answer: a near miss, made for every answerable question of v1.1 train without a writer.

The kinds (``kind`` on each question of the written file; ``source``: the question it was made from):

- ``squad_answerable``: v1.1 train's own questions, unchanged.
- ``sentence_removed``: a question asked of its paragraph with the sentence(s) holding its first
  answer cut out (the character range of the sentence and its trailing whitespace; the rest keeps
  its characters exactly). Kept only where the trimmed passage holds none of the question's
  answers by SQuAD's answer comparison (:func:`rckit.data.unanswerable.holds_answer`), so an
  answer met twice in a paragraph makes no question. Its ``plausible_answers`` are the source's
  answers, with their offsets into the *source* paragraph: the trimmed passage no longer holds them.
- ``kept_in_trimmed``: another question of the same paragraph whose answer lies outside the cut,
  asked of the trimmed passage with its offsets moved, so that a trimmed passage is no sign of
  "no answer" by itself (at most ``kept_per_passage`` per passage, drawn with the seed).
- ``other_paragraph``: :func:`rckit.data.unanswerable.unanswerable_pairs` with the overlap pairing.
- ``written_unanswerable`` / ``written_answerable``: SQuAD v2.0's own questions, copied: v2.0
  dev's training quarter only (:func:`rckit.data.no_answer.split_v2_dev`; the tuning quarter and
  the evaluation half never enter) and, where given, the v2.0 train articles.

The mix: every answerable and written question is kept, ``other_paragraph`` at its own rate, and
the trimmed passages (each with its kept questions) are drawn in a seeded order until the file's
unanswerable share reaches the target (SQuAD 2.0 train: about one in three).

:func:`build_near_miss` writes ``train-near-miss.json.gz`` (SQuAD v2.0 JSON) and ``report.json``,
then reads the file back and checks it: no made unanswerable question's passage holds its source's
answers, every answerable question's offsets point at its text, no id twice. A failure raises.
"""

from __future__ import annotations

import json
import random
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rckit.data.no_answer import _write, split_v2_dev
from rckit.data.squad import SquadFormatError, load_json, normalize_answer, read_squad
from rckit.data.unanswerable import PAIR_SUFFIX, holds_answer, normalised_answers, unanswerable_pairs

TRAIN_FILE = "train-near-miss.json.gz"
REPORT_FILE = "report.json"
SENTENCE_SUFFIX = "-nm-sent"  # a sentence_removed question's id: its source's id + this
KEPT_SUFFIX = "-nm-kept-s"  # a kept_in_trimmed question's id: its source's id + this + the sentences cut
KINDS = (
    "squad_answerable",
    "sentence_removed",
    "kept_in_trimmed",
    "other_paragraph",
    "written_unanswerable",
    "written_answerable",
)
MADE_UNANSWERABLE = ("sentence_removed", "other_paragraph")
SKIPS = ("one_sentence", "too_short", "answer_still_in_passage")

# Words whose "." ends an abbreviation, not a sentence (lower case, without the final "."). Initials
# ("J."), dotted abbreviations ("U.S.", "e.g.") are told by their shape. A sentence that does end on
# one is joined to the next: a longer cut, never a cut inside a sentence.
ABBREVIATIONS = frozenset(
    "mr mrs ms messrs dr prof st mt ft jr sr rev hon gen col lt capt cmdr adm sgt maj gov sen rep pres "
    "fr vs v no nos vol vols p pp c ca cf fig figs approx est dept univ bros co corp inc ltd ave rd "
    "jan feb mar apr jun jul aug sep sept oct nov dec op ed eds al e.g i.e u.s u.k u.n a.d b.c".split()
)
_STOP = re.compile(r"[.!?]+[\"'”’)\]]*\s+")  # a stop, closing quotes or brackets, the whitespace after
_OPENERS = "\"'“‘(["


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """The sentences of ``text`` as half-open character ranges covering it end to end: each
    sentence keeps its closing quote or bracket and the whitespace after it.

    A sentence ends at ".", "!" or "?" followed by whitespace and an upper-case letter, a digit or
    an opening quote or bracket, except after an abbreviation or an initial (:data:`ABBREVIATIONS`).
    Deterministic and dependency-free: the cut must be the same on every machine.
    """
    spans, start = [], 0
    for m in _STOP.finditer(text):
        end = m.end()
        if end >= len(text):
            break
        after = text[end]
        if not (after.isupper() or after.isdigit() or after in _OPENERS):
            continue
        if m.group(0).startswith(".") and not m.group(0).startswith("..") and _abbreviation(text, m.start()):
            continue
        spans.append((start, end))
        start = end
    spans.append((start, len(text)))
    return spans


def _abbreviation(text: str, dot: int) -> bool:
    """Whether the "." at ``dot`` ends an abbreviation or an initial rather than a sentence."""
    word = re.search(r"[\w.]*$", text[:dot]).group(0).lstrip(".")
    if not word:
        return False
    if len(word) == 1 and word.isupper():  # an initial: "J. R. R. Tolkien"
        return True
    return word.lower() in ABBREVIATIONS or re.fullmatch(r"(?:[^\W\d_]\.)+[^\W\d_]", word) is not None


@dataclass(frozen=True)
class NearMissConfig:
    """How the near-miss training file is made (module docstring)."""

    seed: int = 0
    unanswerable_share: float = 1 / 3  # the target share of unanswerable questions in the file
    other_rate: float = 0.2  # share of v1.1 questions drawn for an other_paragraph pair
    kept_per_passage: int = 1  # kept_in_trimmed questions per trimmed passage, at most
    articles: int | None = None  # the first N articles of v1.1 train (None: all)
    min_passage_chars: int = 20  # a shorter trimmed passage makes no question
    max_sentence_removed: int | None = None  # a cap on sentence_removed questions (None: the share decides)

    def check(self) -> None:
        if not 0.0 < self.unanswerable_share < 1.0:
            raise ValueError(f"unanswerable share {self.unanswerable_share}: a share strictly between 0 and 1")
        if not 0.0 <= self.other_rate <= 1.0:
            raise ValueError(f"other_paragraph rate {self.other_rate}: a share, 0 to 1")
        if self.kept_per_passage < 0:
            raise ValueError(f"kept_per_passage {self.kept_per_passage}: 0 or more")
        if self.articles is not None and self.articles < 1:
            raise ValueError(f"articles {self.articles}: at least 1")


@dataclass
class Passage:
    """A v1.1 paragraph with one range of sentences cut out, and the questions asked of it."""

    article: int  # its place in the v1.1 articles
    paragraph: int  # and in its article
    sentences: tuple[int, int]  # the first and the last sentence cut (their indices in the paragraph)
    removed: tuple[int, int]  # the character range cut, half-open
    context: str
    unanswerable: list[dict] = field(default_factory=list)  # sentence_removed questions
    kept: list[dict] = field(default_factory=list)  # kept_in_trimmed questions


def cut(context: str, spans: list[tuple[int, int]], start: int, end: int) -> tuple[tuple[int, int], int, int]:
    """((first, last) sentence, character start, character end) of the sentences holding the answer
    ``[start, end)``: usually one, two where the splitter ended a sentence inside the answer. A cut
    of the paragraph's last sentence takes the whitespace before it too, so no passage ends in
    whitespace."""
    last_char = max(end, start + 1) - 1
    first = next(i for i, (s, e) in enumerate(spans) if s <= start < e)
    last = next(i for i, (s, e) in enumerate(spans) if s <= last_char < e)
    lo, hi = spans[first][0], spans[last][1]
    if hi == len(context):
        lo = len(context[:lo].rstrip())
    return (first, last), lo, hi


def moved_answers(qa: dict, removed: tuple[int, int], trimmed: str) -> list[dict] | None:
    """``qa``'s answers with their offsets moved into ``trimmed``, or None if one lies in the cut."""
    lo, hi = removed
    out = []
    for a in qa["answers"]:
        start, text = a["answer_start"], a["text"]
        if start + len(text) <= lo:
            moved = start
        elif start >= hi:
            moved = start - (hi - lo)
        else:
            return None
        if trimmed[moved : moved + len(text)] != text:
            return None
        out.append({"text": text, "answer_start": moved})
    return out or None


def sentence_removed(articles: list[dict], config: NearMissConfig) -> tuple[list[Passage], dict]:
    """The trimmed passages of ``articles`` (v1.1's ``data``), in file order, each with its
    ``sentence_removed`` questions (those whose answers share the cut) and up to
    ``config.kept_per_passage`` ``kept_in_trimmed`` questions; and the counts."""
    rng = random.Random(f"{config.seed}-kept")
    counts = {"tried": 0, "made": 0, "skipped": dict.fromkeys(SKIPS, 0), "kept_eligible": 0, "kept_made": 0}
    passages: list[Passage] = []
    for a_i, article in enumerate(articles):
        for p_i, para in enumerate(article["paragraphs"]):
            context = para["context"]
            spans = sentence_spans(context)
            by_cut: dict[tuple[int, int], Passage] = {}
            for qa in para["qas"]:
                counts["tried"] += 1
                first_answer = qa["answers"][0]
                start = first_answer["answer_start"]
                sentences, lo, hi = cut(context, spans, start, start + len(first_answer["text"]))
                trimmed = context[:lo] + context[hi:]
                why = _skip(lo, hi, context, trimmed, qa, config.min_passage_chars)
                if why:
                    counts["skipped"][why] += 1
                    continue
                passage = by_cut.setdefault((lo, hi), Passage(a_i, p_i, sentences, (lo, hi), trimmed))
                passage.unanswerable.append(
                    {
                        "id": qa["id"] + SENTENCE_SUFFIX,
                        "question": qa["question"],
                        "answers": [],
                        "is_impossible": True,
                        "plausible_answers": [dict(a) for a in qa["answers"]],
                        "kind": "sentence_removed",
                        "source": qa["id"],
                    }
                )
                counts["made"] += 1
            for passage in by_cut.values():
                sources = {q["source"] for q in passage.unanswerable}
                first, last = passage.sentences
                suffix = KEPT_SUFFIX + (str(first) if first == last else f"{first}-{last}")
                eligible = []
                for qa in para["qas"]:
                    answers = None if qa["id"] in sources else moved_answers(qa, passage.removed, passage.context)
                    if answers:
                        eligible.append(_asked(qa, answers, suffix))
                counts["kept_eligible"] += len(eligible)
                passage.kept = rng.sample(eligible, min(config.kept_per_passage, len(eligible)))
                counts["kept_made"] += len(passage.kept)
            passages.extend(by_cut.values())
    return passages, counts


def _skip(lo: int, hi: int, context: str, trimmed: str, qa: dict, min_chars: int) -> str | None:
    """Why a cut makes no question (one of :data:`SKIPS`), or None."""
    if lo == 0 and hi == len(context):
        return "one_sentence"
    if len(trimmed.strip()) < min_chars:
        return "too_short"
    if holds_answer(normalize_answer(trimmed), normalised_answers(qa)):
        return "answer_still_in_passage"
    return None


def _asked(qa: dict, answers: list[dict], suffix: str) -> dict:
    """``qa`` asked of a trimmed passage, ``answers`` its moved answers."""
    return {
        "id": qa["id"] + suffix,
        "question": qa["question"],
        "answers": answers,
        "is_impossible": False,
        "kind": "kept_in_trimmed",
        "source": qa["id"],
    }


def mix(passages: list[Passage], answerable: int, unanswerable: int, config: NearMissConfig) -> list[Passage]:
    """The trimmed passages the file keeps, in file order: drawn in a seeded order, each with its
    questions, while the unanswerable share (counting ``answerable`` and ``unanswerable`` questions
    already in the file) is below the target and ``config.max_sentence_removed`` allows."""
    order = list(range(len(passages)))
    random.Random(f"{config.seed}-mix").shuffle(order)
    chosen, made = [], 0
    for i in order:
        if unanswerable >= config.unanswerable_share * (answerable + unanswerable):
            break
        p = passages[i]
        if config.max_sentence_removed is not None and made + len(p.unanswerable) > config.max_sentence_removed:
            continue
        chosen.append(i)
        made += len(p.unanswerable)
        unanswerable += len(p.unanswerable)
        answerable += len(p.kept)
    return [passages[i] for i in sorted(chosen)]


def _tagged(articles: list[dict]) -> list[dict]:
    """v1.1 articles with their other_paragraph pairs: each question marked with its kind."""
    out = []
    for article in articles:
        paragraphs = []
        for para in article["paragraphs"]:
            qas = []
            for qa in para["qas"]:
                if qa.get("is_impossible") and qa["id"].endswith(PAIR_SUFFIX):
                    qas.append({**qa, "kind": "other_paragraph", "source": qa["id"][: -len(PAIR_SUFFIX)]})
                else:
                    qas.append({**qa, "is_impossible": False, "kind": "squad_answerable"})
            paragraphs.append({"context": para["context"], "qas": qas})
        out.append({"title": article.get("title", ""), "paragraphs": paragraphs})
    return out


def _written(articles: list[dict]) -> list[dict]:
    """SQuAD v2.0 articles as they are, each question marked written_unanswerable or written_answerable."""
    return [
        {
            **a,
            "paragraphs": [
                {
                    **p,
                    "qas": [
                        {**qa, "kind": "written_unanswerable" if qa.get("is_impossible") else "written_answerable"}
                        for qa in p["qas"]
                    ],
                }
                for p in a["paragraphs"]
            ],
        }
        for a in articles
    ]


def _assemble(v11: list[dict], chosen: list[Passage], written: list[dict]) -> list[dict]:
    """The file's articles: each trimmed passage right after the paragraph it was cut from."""
    after: dict[tuple[int, int], list[dict]] = {}
    for p in chosen:
        after.setdefault((p.article, p.paragraph), []).append({"context": p.context, "qas": p.unanswerable + p.kept})
    out = []
    for a_i, article in enumerate(v11):
        paragraphs = []
        for p_i, para in enumerate(article["paragraphs"]):
            paragraphs += [para, *after.get((a_i, p_i), [])]
        out.append({**article, "paragraphs": paragraphs})
    return out + written


def with_near_misses(articles: list[dict], config: NearMissConfig = NearMissConfig()) -> tuple[list[dict], dict]:
    """``articles`` (a SQuAD file's ``data``, v1.1 or v2.0) with trimmed passages of their own
    (``sentence_removed`` and ``kept_in_trimmed`` questions, :func:`sentence_removed`) each placed
    after the paragraph it was cut from, drawn until the unanswerable share reaches the target
    (:func:`mix`; unanswerable questions already there count): what ``rckit adapt`` teaches rckit's
    own reader on, so that it goes on learning to abstain while it learns a new domain. Returns the
    articles and ``{"made", "in_file"}``: the sentence_removed questions made and kept."""
    config.check()
    answerable = [
        {
            **a,
            "paragraphs": [
                {**p, "qas": [qa for qa in p["qas"] if qa.get("answers") and not qa.get("is_impossible")]}
                for p in a["paragraphs"]
            ],
        }
        for a in articles
    ]
    passages, counts = sentence_removed(answerable, config)
    every = [qa for a in articles for p in a["paragraphs"] for qa in p["qas"]]
    unanswerable = sum(1 for qa in every if qa.get("is_impossible") or not qa.get("answers"))
    chosen = mix(passages, len(every) - unanswerable, unanswerable, config)
    kept = sum(len(p.unanswerable) for p in chosen)
    return _assemble(articles, chosen, []), {"made": counts["made"], "in_file": kept}


def check_near_miss(articles: list[dict], gold: dict[str, list[str]]) -> dict:
    """Counts of what must never be in the file; raises RuntimeError if one is not 0.

    ``gold``: each v1.1 question's normalised answers, by id (:func:`normalised_answers`). A made
    unanswerable question must be asked of a passage holding none of its source's answers; written
    questions are exempt (SQuAD 2.0's writers judged theirs). Every answerable question's offsets
    must point at its text, and no id may be met twice.
    """
    found = {"made_unanswerable_checked": 0, "made_unanswerable_holding_answer": 0, "answerable_checked": 0}
    found |= {"answerable_offsets_wrong": 0, "duplicate_ids": 0}
    seen, bad = set(), []
    for article in articles:
        for para in article["paragraphs"]:
            context, normalised = para["context"], None
            for qa in para["qas"]:
                found["duplicate_ids"] += qa["id"] in seen
                seen.add(qa["id"])
                if qa.get("is_impossible"):
                    if qa.get("kind") not in MADE_UNANSWERABLE:
                        continue
                    normalised = normalised if normalised is not None else normalize_answer(context)
                    found["made_unanswerable_checked"] += 1
                    if holds_answer(normalised, gold[qa["source"]]):
                        found["made_unanswerable_holding_answer"] += 1
                        bad.append(qa["id"])
                    continue
                found["answerable_checked"] += 1
                if not qa["answers"] or any(
                    context[a["answer_start"] : a["answer_start"] + len(a["text"])] != a["text"] for a in qa["answers"]
                ):
                    found["answerable_offsets_wrong"] += 1
                    bad.append(qa["id"])
    wrong = {k: v for k, v in found.items() if not k.endswith("_checked") and v}
    if wrong:
        raise RuntimeError(f"near-miss file check failed: {wrong}; first questions: {bad[:5]}")
    return found


def _read(path: str | Path, version: str, role: str) -> list[dict]:
    """The articles of a SQuAD file, refused (naming the file) if it is not SQuAD JSON of ``version``."""
    ds = read_squad(path)
    if ds.report.version != version:
        raise SquadFormatError(
            f"{path}: not a SQuAD v{version} file (version {ds.report.declared or 'none'!r}, read by the "
            f"v{ds.report.version} rules); the {role} must be SQuAD v{version}"
        )
    if ds.report.misaligned:
        first = ds.report.misaligned[0]
        raise SquadFormatError(
            f"{path}: {len(ds.report.misaligned)} answers whose answer_start does not point at their text "
            f"(first: question {first.qid!r}); the {role}'s offsets must hold"
        )
    return ds.raw["data"]


def _counts(articles: list[dict]) -> dict[str, int]:
    kinds = dict.fromkeys(KINDS, 0)
    for a in articles:
        for p in a["paragraphs"]:
            for qa in p["qas"]:
                kinds[qa["kind"]] += 1
    return kinds


def build_near_miss(
    v11_train_path: str | Path,
    out_dir: str | Path,
    v2_dev_path: str | Path | None = None,
    v2_train_path: str | Path | None = None,
    config: NearMissConfig = NearMissConfig(),
) -> dict:
    """Write ``out_dir/train-near-miss.json.gz`` and ``out_dir/report.json`` (module docstring);
    return the report. ``v2_dev_path``: SQuAD v2.0 dev, of which only the training quarter is
    read; ``v2_train_path``: SQuAD v2.0 train articles (all of the file), both optional."""
    t0 = time.perf_counter()
    config.check()
    v11 = _read(v11_train_path, "1.1", "v1.1 training file")[: config.articles]
    written = []
    if v2_dev_path is not None:
        written += split_v2_dev({"data": _read(v2_dev_path, "2.0", "v2.0 dev file")})[0]
    if v2_train_path is not None:
        written += _read(v2_train_path, "2.0", "v2.0 training file")
    written = _written(written)
    paired, pair_counts = unanswerable_pairs(v11, config.other_rate, config.seed, pairing="overlap")
    paired = _tagged(paired)
    passages, cut_counts = sentence_removed(v11, config)
    before = _counts(paired + written)
    unanswerable = before["other_paragraph"] + before["written_unanswerable"]
    chosen = mix(passages, sum(before.values()) - unanswerable, unanswerable, config)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _write(out / TRAIN_FILE, _assemble(paired, chosen, written))
    final = load_json(out / TRAIN_FILE)["data"]  # the check reads what was written
    gold = {qa["id"]: normalised_answers(qa) for a in v11 for p in a["paragraphs"] for qa in p["qas"]}
    try:
        check = check_near_miss(final, gold)
    except RuntimeError:
        (out / TRAIN_FILE).unlink()
        raise
    in_file = _counts(final)
    report = _report(config, cut_counts, pair_counts, in_file, check, final)
    report["inputs"] = {
        "v1.1_train": str(v11_train_path),
        "v2.0_dev": None if v2_dev_path is None else f"{v2_dev_path} (training quarter only: positions 0, 4, 8, ...)",
        "v2.0_train": None if v2_train_path is None else str(v2_train_path),
        "v1.1_articles": len(v11),
        "trimmed_passages_made": len(passages),
        "trimmed_passages_in_file": len(chosen),
    }
    report["seconds"] = round(time.perf_counter() - t0, 1)
    tmp = out / (REPORT_FILE + ".tmp")
    tmp.write_text(json.dumps(report, indent=1) + "\n")
    tmp.replace(out / REPORT_FILE)
    return report


def _report(
    config: NearMissConfig, cut_counts: dict, pair_counts: dict, in_file: dict, check: dict, final: list
) -> dict:
    unanswerable = sum(in_file[k] for k in ("sentence_removed", "other_paragraph", "written_unanswerable"))
    total = sum(in_file.values())
    return {
        "file": TRAIN_FILE,
        "seed": config.seed,
        "config": asdict(config),
        "kinds": {
            "squad_answerable": {"in_file": in_file["squad_answerable"]},
            "sentence_removed": {
                "tried": cut_counts["tried"],
                "made": cut_counts["made"],
                "skipped": cut_counts["skipped"],
                "in_file": in_file["sentence_removed"],
            },
            "kept_in_trimmed": {
                "eligible": cut_counts["kept_eligible"],
                "made": cut_counts["kept_made"],
                "in_file": in_file["kept_in_trimmed"],
            },
            "other_paragraph": {
                "tried": pair_counts["questions"],
                "drawn": pair_counts["drawn"],
                "made": pair_counts["made"],
                "skipped": {"no_paragraph_without_answer": pair_counts["no_paragraph_without_answer"]},
                "in_file": in_file["other_paragraph"],
            },
            "written_unanswerable": {"in_file": in_file["written_unanswerable"]},
            "written_answerable": {"in_file": in_file["written_answerable"]},
        },
        "totals": {
            "articles": len(final),
            "paragraphs": sum(len(a["paragraphs"]) for a in final),
            "questions": total,
            "answerable": total - unanswerable,
            "unanswerable": unanswerable,
            "unanswerable_share": round(unanswerable / total, 4) if total else 0.0,
            "target_share": round(config.unanswerable_share, 4),
        },
        "check": check,
    }
