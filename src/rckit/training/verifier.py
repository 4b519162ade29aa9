"""Training the verifier that decides whether a frozen span reader's text holds the answer
(:mod:`rckit.answering.verifier`).

The reader is only read, never changed. Its training side, as the no-answer files of
:mod:`rckit.data.no_answer` draw it (the evaluation half of SQuAD v2.0 dev, its articles at odd
positions, is never read here):

- **answerable**: questions of SQuAD v1.1 train beside their own paragraph;
- **made unanswerable pairs**: a v1.1 train question beside a paragraph of its own article that
  holds none of its answers, the one sharing the most words with it (same topic, the hardest
  such pair), and beside the paragraph of other articles that shares the most words with it
  (what a retriever would bring back from a collection without the answer);
- **made by rule** (``--made``, :mod:`rckit.data.unanswerable`): v1.1 train questions changed so
  that their paragraph no longer answers them (an entity or number swapped, a negation put in or
  taken out, asked of the nearest other paragraph), kept where the reader still answered them
  with confidence (:mod:`rckit.training.made_filter`);
- **the v2.0 dev training quarter** (positions 0, 4, 8, ...): its 1,458 written unanswerable
  questions, the only ones like SQuAD 2.0's, and (``dev_answerable``, the default) its 1,462
  answerable ones beside the same paragraphs, each weighed ``written_weight`` times. The
  answerable ones are what the reader never trained on: its confidence on v1.1 train questions
  is higher than on new ones, and a verifier that only saw those learns to distrust every new
  question (tuning F1 56.75 without them, 57.6 with). They are v1.1 dev questions, so v1.1 dev
  figures are given with and without them (RESULTS.md).

Every candidate form (:data:`FORMS`: logistic regression, and one hidden layer of 16 or 32
ReLUs, each at some weights of the written questions) is trained on the same features and
judged on the **tuning quarter** of v2.0 dev (positions 2, 6, ...: real written unanswerable
questions and answerable ones the reader never saw) by the official v2.0 F1 at its best
threshold. The winner carries by default the lowest threshold that keeps 98 % of the answers'
F1 on the quarter (:func:`keeping`): the quarter is half unanswerable by design, and its best-F1
threshold (recorded beside it with the quarter's curve, ``--default-threshold best-f1``) turns
away most answers of ordinary questions (measured: SQuAD v1.1 dev F1 82.09 always answering,
39.37 at the best-F1 threshold of the verifier trained with the made questions; docs/no-answer.md).
The features of each pair are computed once and may be kept in a cache (:class:`FeatureCache`:
they depend on the reader and the pair only).
"""

from __future__ import annotations

import hashlib
import json
import random
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from rckit.answering.reader import Reader
from rckit.answering.verifier import CollectionVerifier, Verifier
from rckit.answering.verifier_features import FEATURES, FEATURES_VERSION, READER_FEATURES, content, words
from rckit.data.no_answer import split_v2_dev
from rckit.data.squad import load_json, normalize_answer
from rckit.data.unanswerable import holds_answer, normalised_answers
from rckit.evaluation.squad_metrics import abstaining, best_thresholds, per_question_scores, score_predictions

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

# (hidden units, weight of a written unanswerable question): the forms compared on the tuning quarter.
FORMS = ((0, 1.0), (0, 10.0), (0, 30.0), (16, 30.0), (32, 10.0), (32, 30.0))
# The default threshold keeps this share of the answers' F1 on the tuning quarter's answerable questions.
KEEP = 0.98


@dataclass(frozen=True)
class Pair:
    """A (context, question) pair to read, with whether its text holds no answer."""

    context: str
    question: str
    unanswerable: bool
    kind: str  # answerable, same_article, other_article, written
    qid: str = ""


def _questions(articles: list[dict]):
    for a, article in enumerate(articles):
        for p, para in enumerate(article["paragraphs"]):
            for qa in para["qas"]:
                yield a, p, qa


def training_pairs(
    v11_train: dict,
    v2_dev: dict,
    per_kind: int,
    seed: int = 0,
    dev_answerable: bool = True,
    made_set: dict | None = None,
) -> list[Pair]:
    """The training side (module docstring): ``per_kind`` answerable questions and as many made
    pairs of each kind, drawn with ``seed``, every written unanswerable question of the v2.0
    dev training quarter, and, given ``made_set`` (``rckit prepare squad-unanswerable``'s SQuAD v2.0
    file), up to ``per_kind`` of its questions of each rule (kind ``made_<rule>``)."""
    rng = random.Random(seed)
    articles = v11_train["data"]
    qas = list(_questions(articles))
    norm = [[normalize_answer(p["context"]) for p in art["paragraphs"]] for art in articles]
    stems = [[content(words(p["context"])) for p in art["paragraphs"]] for art in articles]
    pairs: list[Pair] = []
    for a, p, qa in rng.sample(qas, min(per_kind, len(qas))):
        pairs.append(Pair(articles[a]["paragraphs"][p]["context"], qa["question"], False, "answerable", qa["id"]))

    for kind in ("same_article", "other_article"):
        made = 0
        for a, p, qa in rng.sample(qas, len(qas)):
            if made == per_kind:
                break
            answers = normalised_answers(qa)
            asked = content(words(qa["question"]))
            if kind == "same_article":
                places = [(a, j) for j in range(len(articles[a]["paragraphs"])) if j != p]
            else:
                others = rng.sample([b for b in range(len(articles)) if b != a], min(8, len(articles) - 1))
                places = [(b, j) for b in others for j in range(len(articles[b]["paragraphs"]))]
            places = [(b, j) for b, j in places if not holds_answer(norm[b][j], answers)]
            if not places:
                continue
            b, j = max(places, key=lambda bj: (len(asked & stems[bj[0]][bj[1]]), rng.random()))
            pairs.append(Pair(articles[b]["paragraphs"][j]["context"], qa["question"], True, kind, qa["id"]))
            made += 1
    if made_set is not None:
        pairs += made_pairs(made_set, per_kind, rng)
    train_quarter = split_v2_dev(v2_dev)[0]
    for a, p, qa in _questions(train_quarter):
        if qa.get("is_impossible") or dev_answerable:
            kind = "written" if qa.get("is_impossible") else "dev_answerable"
            pairs.append(
                Pair(
                    train_quarter[a]["paragraphs"][p]["context"],
                    qa["question"],
                    bool(qa.get("is_impossible")),
                    kind,
                    qa["id"],
                )
            )
    return pairs


def made_pairs(made: dict, per_kind: int, rng: random.Random) -> list[Pair]:
    """Up to ``per_kind`` unanswerable questions of each rule of a made set (drawn with ``rng``
    where a rule has more), as pairs of kind ``made_<rule>``."""
    by_rule: dict[str, list[Pair]] = {}
    for article in made["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                if not qa.get("is_impossible"):
                    raise ValueError(
                        f"made question {qa.get('id')}: not marked is_impossible (made sets hold no other)"
                    )
                kind = f"made_{qa.get('rule', 'other')}"
                by_rule.setdefault(kind, []).append(Pair(para["context"], qa["question"], True, kind, qa["id"]))
    out = []
    for kind in sorted(by_rule):
        got = by_rule[kind]
        out += got if len(got) <= per_kind else rng.sample(got, per_kind)
    return out


def tuning_pairs(v2_dev: dict) -> tuple[list[Pair], dict]:
    """Every question of the v2.0 dev tuning quarter, and that quarter as SQuAD JSON (for scoring)."""
    tune = split_v2_dev(v2_dev)[1]
    pairs = [
        Pair(tune[a]["paragraphs"][p]["context"], qa["question"], bool(qa.get("is_impossible")), "tune", qa["id"])
        for a, p, qa in _questions(tune)
    ]
    return pairs, {"version": "v2.0", "data": tune}


def read_features(
    reader: Reader, pairs: list[Pair], progress: Callable[[int], object] | None = None
) -> tuple[np.ndarray, list[str]]:
    """(features (n, len(FEATURES)), best span text) of each pair, read as the reader answers
    (windows of its length), the reader's evidence collected without a verifier."""
    xs, texts = [], []
    for job in reader.read_chunks([(p.context, p.question) for p in pairs], evidence=True, progress=progress):
        xs.append(job.features())
        texts += [text for text, _ in job.best_spans()]
    return (np.concatenate(xs) if xs else np.zeros((0, len(FEATURES)), np.float32)), texts


def reader_key(reader: Reader) -> str:
    """What names a reader's features in a cache: the model, its settings, the training step it was
    exported at and its dev figures (another run's file differs), the backend and contextual encoder
    it reads with, and the features' version. Not the file's path or digest: putting a verifier into
    a file, or installing it under another name, does not change what it reads."""
    info = reader.info
    named = [info.get(k) for k in ("model", "format", "config", "step", "dev_score", "backend", "contextual")]
    return hashlib.sha256(json.dumps([named, list(FEATURES), FEATURES_VERSION], default=str).encode()).hexdigest()[:16]


def pair_key(pair: Pair) -> str:
    return hashlib.sha1(f"{pair.context}\0{pair.question}".encode()).hexdigest()


class FeatureCache:
    """The features and best span of each (context, question) pair one reader has read, kept in
    ``DIR/verifier-features-<reader key>.npz`` and grown as new pairs are read: preparing the made
    questions (its adversarial filter) and training the verifier read each pair once between them.
    Saved whole (temporary file and rename) after every block read, so a killed run keeps what it read."""

    BLOCK = 2048

    def __init__(self, folder: Path, reader: Reader):
        self.reader = reader
        self.path = Path(folder) / f"verifier-features-{reader_key(reader)}.npz"
        self.rows: dict[str, int] = {}
        self.x = np.zeros((0, len(FEATURES)), np.float32)
        self.texts: list[str] = []
        if self.path.is_file():
            try:
                got = np.load(self.path)
                keys, x, texts = [str(k) for k in got["keys"]], got["x"], [str(t) for t in got["texts"]]
            except (OSError, ValueError, KeyError, zipfile.BadZipFile) as e:
                raise ValueError(f"{self.path}: not a verifier feature cache ({e}); remove it") from e
            if x.shape != (len(keys), len(FEATURES)) or len(texts) != len(keys):
                raise ValueError(f"{self.path}: its arrays disagree in length; remove it")
            self.rows = {k: i for i, k in enumerate(keys)}
            self.x, self.texts = x.astype(np.float32), texts

    def features(
        self, pairs: list[Pair], progress: Callable[[int], object] | None = None
    ) -> tuple[np.ndarray, list[str]]:
        """(features, best span text) of ``pairs``: those not kept yet are read, then kept."""
        keys = [pair_key(p) for p in pairs]
        missing = list({k: p for k, p in zip(keys, pairs) if k not in self.rows}.items())
        for lo in range(0, len(missing), self.BLOCK):
            block = missing[lo : lo + self.BLOCK]
            x, texts = read_features(self.reader, [p for _, p in block], progress)
            for k, _ in block:
                self.rows[k] = len(self.rows)
            self.x = np.concatenate([self.x, x])
            self.texts += texts
            self.save()
        if progress is not None and not missing:
            progress(0)
        rows = [self.rows[k] for k in keys]
        return self.x[rows], [self.texts[r] for r in rows]

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp.npz")
        keys = sorted(self.rows, key=self.rows.get)
        np.savez(tmp, keys=np.asarray(keys), x=self.x, texts=np.asarray(self.texts, dtype=object).astype(str))
        tmp.replace(self.path)


def cached_features(
    reader: Reader, pairs: list[Pair], cache: Path | None, progress: Callable[[int], object] | None = None
) -> tuple[np.ndarray, list[str]]:
    """:func:`read_features`, kept in ``cache`` (:class:`FeatureCache`) where one is given, so that
    comparing forms again, or training after the made questions were filtered, does not read again."""
    if cache is None:
        return read_features(reader, pairs, progress)
    return FeatureCache(Path(cache), reader).features(pairs, progress)


def fit(
    x: np.ndarray,
    y: np.ndarray,
    weight: np.ndarray,
    hidden: int,
    seed: int = 0,
    epochs: int = 40,
    threshold: float = 0.5,
    record: dict | None = None,
    collection: bool = False,
) -> Verifier | CollectionVerifier:
    """A :class:`Verifier` (``collection``: a :class:`CollectionVerifier`) fitted to features
    ``x``, labels ``y`` (1: no answer) and example weights ``weight`` by weighted cross-entropy
    (AdamW, mini-batches of 256); ``hidden`` 0 is logistic regression."""
    torch.manual_seed(seed)
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale = np.where(scale > 1e-6, scale, 1.0).astype(np.float32)
    xt = torch.from_numpy((x - mean) / scale).float()
    yt, wt = torch.from_numpy(y).float(), torch.from_numpy(weight / weight.mean()).float()
    n_in = x.shape[1]
    net = (
        torch.nn.Linear(n_in, 1)
        if hidden == 0
        else torch.nn.Sequential(torch.nn.Linear(n_in, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))
    )
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3, weight_decay=1e-4)
    g = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for idx in torch.randperm(len(xt), generator=g).split(256):
            loss = torch.nn.functional.binary_cross_entropy_with_logits(net(xt[idx])[:, 0], yt[idx], weight=wt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    linears = [m for m in (net if hidden else [net]) if isinstance(m, torch.nn.Linear)]
    layers = [(m.weight.detach().numpy().copy(), m.bias.detach().numpy().copy()) for m in linears]
    if collection:
        return CollectionVerifier(mean, scale, layers, threshold, record)
    return Verifier(mean, scale, layers, threshold, record)


def tuned(p: np.ndarray, texts: list[str], pairs: list[Pair], raw: dict, threshold: float | None = None) -> dict:
    """The official v2.0 figures on the tuning quarter of a verifier's ``p(no answer)`` of its
    ``pairs`` (``texts`` the reader's best spans) at ``threshold``; None: at the threshold of the
    best F1, which is returned with them."""
    spans = {pair.qid: text for pair, text in zip(pairs, texts)}
    margins = {pair.qid: float(v) for pair, v in zip(pairs, p)}
    if threshold is None:
        best = best_thresholds(raw, spans, margins)
        threshold = float(min(max(best["best_f1_thresh"], 0.0), 1.0))
    at = score_predictions(raw, abstaining(spans, margins, threshold), "2.0")
    return {
        "f1": at["f1"],
        "exact_match": at["exact_match"],
        "HasAns_f1": at.get("HasAns_f1"),
        "NoAns_f1": at.get("NoAns_f1"),
        "threshold": threshold,
    }


def keeping(p: np.ndarray, texts: list[str], pairs: list[Pair], raw: dict, keep: float = KEEP) -> float:
    """The lowest threshold on ``p(no answer)`` (of the tuning quarter's ``pairs``) at which its
    answerable questions keep ``keep`` of the F1 they score when the reader always answers: a
    reader used on ordinary questions, most of them answerable, should lose few answers to catch
    the texts without one."""
    spans = {pair.qid: text for pair, text in zip(pairs, texts)}
    f1 = per_question_scores(raw, spans, "2.0")
    answered = sorted((float(v), f1[pair.qid][1]) for pair, v in zip(pairs, p) if not pair.unanswerable)
    total = sum(f for _, f in answered)
    lost = 0.0
    for v, f in reversed(answered):  # abstain on the least likely answerable first
        if lost + f > (1.0 - keep) * total:
            return v
        lost += f
    return 0.0


def curve(p: np.ndarray, texts: list[str], pairs: list[Pair], raw: dict, more: Iterable[float] = ()) -> list[dict]:
    """The tuning quarter's official figures at thresholds 0.1 ... 0.9 and ``more`` (the
    verifier's own): the trade a person makes with it."""
    thresholds = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, *more)
    spans = {pair.qid: text for pair, text in zip(pairs, texts)}
    margins = {pair.qid: float(v) for pair, v in zip(pairs, p)}
    rows = []
    for t in sorted(set(thresholds)):
        at = score_predictions(raw, abstaining(spans, margins, t), "2.0")
        rows.append(
            {"threshold": round(t, 4), "f1": at["f1"], "HasAns_f1": at.get("HasAns_f1"), "NoAns_f1": at.get("NoAns_f1")}
        )
    return rows


def train_verifier(
    reader: Reader,
    v11_train: str | Path,
    v2_dev: str | Path,
    per_kind: int = 10_000,
    seed: int = 0,
    cache: str | Path | None = None,
    forms: Iterable[tuple[int, float]] = FORMS,
    log: Callable[[str], object] = print,
    dev_answerable: bool = True,
    made: str | Path | None = None,
    default: str = "keep",
) -> tuple[Verifier, dict]:
    """The verifier of ``reader`` (module docstring), and a report of every form compared.
    ``made``: a made set (``rckit prepare squad-unanswerable``) to train on besides; ``default``:
    the threshold the verifier carries, ``keep`` (the lowest keeping :data:`KEEP` of the answers'
    F1 on the tuning quarter) or ``best_f1`` (the quarter's best F1)."""
    if default not in ("best_f1", "keep"):
        raise ValueError(f"default threshold {default!r}: best_f1 or keep")
    t0 = time.time()
    train_raw, dev_raw = load_json(v11_train), load_json(v2_dev)
    made_raw = load_json(made) if made else None
    pairs = training_pairs(train_raw, dev_raw, per_kind, seed, dev_answerable, made_raw)
    tune, tune_raw = tuning_pairs(dev_raw)
    counts: dict[str, int] = {}
    for p in pairs:
        counts[p.kind] = counts.get(p.kind, 0) + 1
    log(f"reading {len(pairs):,} training pairs {counts} and {len(tune):,} tuning questions")
    cache = Path(cache) if cache else None
    x, _ = cached_features(reader, pairs, cache)
    xt, texts = cached_features(reader, tune, cache)
    read_s = time.time() - t0
    y = np.asarray([p.unanswerable for p in pairs], np.float32)
    written = np.asarray([p.kind in ("written", "dev_answerable") for p in pairs])
    tried, (v, hidden, w, got) = _forms_compared(x, y, written, xt, texts, tune, tune_raw, forms, seed, log)
    ablations = _ablations(x, y, written, xt, texts, tune, tune_raw, hidden, w, seed, log)
    p = v.probability(xt)
    keep = keeping(p, texts, tune, tune_raw)
    at_keep = {**tuned(p, texts, tune, tune_raw, keep), "keeps": KEEP}
    threshold, at_default = (got["threshold"], got) if default == "best_f1" else (keep, at_keep)
    log(
        f"  chosen: hidden {hidden}, written x{w:g}; best-F1 threshold {got['threshold']:.3f} (tuning F1 "
        f"{got['f1']:.2f}), keeping {KEEP:.0%} of the answers' F1 {keep:.3f} (tuning F1 {at_keep['f1']:.2f}); "
        f"default: {threshold:.3f}"
    )
    record = {
        "form": {"hidden": hidden, "written_weight": w},
        "trained_on": counts,
        "seed": seed,
        "tuning": {
            "file": Path(v2_dev).name,
            "positions": "2, 6, 10, ...",
            "questions": len(tune),
            "best_f1": got,
            "keeping": at_keep,
            "default": {**at_default, "rule": default},
        },
        "compared": tried,
        "ablations": ablations,
        "read_seconds": round(read_s, 1),
        "reader": Path(str(reader.info.get("source"))).name,
        "made": None if made is None else Path(made).name,
    }
    verifier = Verifier(v.mean, v.scale, v.layers, threshold, record)
    verifier.record["curve"] = curve(p, texts, tune, tune_raw, (got["threshold"], keep, threshold))
    return verifier, verifier.record


def _forms_compared(
    x: np.ndarray,
    y: np.ndarray,
    written: np.ndarray,
    xt: np.ndarray,
    texts: list[str],
    tune: list[Pair],
    tune_raw: dict,
    forms: Iterable[tuple[int, float]],
    seed: int,
    log: Callable[[str], object],
) -> tuple[list[dict], tuple[Verifier, int, float, dict]]:
    """Each form (hidden units, the written questions' weight) fitted and tuned: the figures of
    each, and the best on the tuning quarter (its network, form and figures)."""
    tried: list[dict] = []
    best: tuple[float, Verifier, int, float, dict] | None = None
    for hidden, w in forms:
        weight = np.where(written, w, 1.0).astype(np.float32)
        v = fit(x, y, weight, hidden, seed)
        got = tuned(v.probability(xt), texts, tune, tune_raw)
        tried.append({"hidden": hidden, "written_weight": w, **got})
        log(f"  hidden {hidden:>2}, written x{w:g}: tuning F1 {got['f1']:.2f} at threshold {got['threshold']:.3f}")
        if best is None or got["f1"] > best[0]:
            best = (got["f1"], v, hidden, w, got)
    return tried, best[1:]


def _ablations(
    x: np.ndarray,
    y: np.ndarray,
    written: np.ndarray,
    xt: np.ndarray,
    texts: list[str],
    tune: list[Pair],
    tune_raw: dict,
    hidden: int,
    w: float,
    seed: int,
    log: Callable[[str], object],
) -> dict:
    """What each half of the evidence is worth, in the chosen form: the other half held constant."""
    ablations = {}
    reader_cols = np.arange(len(READER_FEATURES))
    for name, cols in (("reader_only", np.arange(len(READER_FEATURES), len(FEATURES))), ("lexical_only", reader_cols)):
        xa, xta = x.copy(), xt.copy()
        xa[:, cols] = 0.0
        xta[:, cols] = 0.0
        fitted = fit(xa, y, np.where(written, w, 1.0).astype(np.float32), hidden, seed)
        ablations[name] = tuned(fitted.probability(xta), texts, tune, tune_raw)
        log(f"  {name}: tuning F1 {ablations[name]['f1']:.2f}")
    return ablations
