"""The no-answer verifier (rckit issue 43): its features by hand, its training and threshold,
its JSON, its place in exported files (``.safetensors`` and ``.onnx``, read without PyTorch),
and what the Reader and a collection answer with it.

Readers here are conftest's tiny QANet run exported (``tiny_export``), with verifiers made by
hand: :func:`constant_verifier` says one probability of "no answer" whatever it reads, and
:func:`name_verifier` says "no answer" where a name of the question is missing from the text.
"""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

from rckit.answering.answer import shown
from rckit.answering.reader import Reader
from rckit.answering.verifier import CollectionVerifier, Verifier
from rckit.answering.verifier_features import (
    COLLECTION_FEATURES,
    FEATURES,
    LEXICAL_FEATURES,
    READER_FEATURES,
    ReaderEvidence,
    collection_features,
    features_of,
    lexical_features,
    names,
    question_word,
    sentence_around,
    words,
)
from rckit.export.metadata_edit import set_verifier
from rckit.model_files.metadata import read_metadata
from tests.conftest import squad_json

N = len(FEATURES)
CONTEXT = "alpha beta gamma delta epsilon zeta eta theta."
QUESTION = "what follows gamma ?"


# ---------------------------------------------------------------- verifiers made by hand, shared with the CLI,
# serve and page tests


def constant_verifier(p: float, threshold: float = 0.5, record: dict | None = None) -> Verifier:
    """A verifier whose p(no answer) is ``p`` (float32) for every input."""
    logit = math.log(p / (1.0 - p))
    return Verifier(
        np.zeros(N),
        np.ones(N),
        [(np.zeros((1, N)), np.array([logit]))],
        threshold,
        record=record if record is not None else {"made_by": "test"},
    )


def name_verifier(threshold: float = 0.5) -> Verifier:
    """p(no answer) sigmoid(10 * q_names_missing_text - 5): 0.993 where a name of the question is
    missing from the text, 0.0067 where all are there."""
    w = np.zeros((1, N))
    w[0, FEATURES.index("q_names_missing_text")] = 10.0
    return Verifier(np.zeros(N), np.ones(N), [(w, np.array([-5.0]))], threshold)


def random_verifier(hidden: int = 4, threshold: float = 0.37, seed: int = 0) -> Verifier:
    """A verifier with one hidden layer of arbitrary weights: probabilities that differ input to input."""
    rng = np.random.default_rng(seed)
    layers = [
        (rng.normal(scale=0.2, size=(hidden, N)), rng.normal(size=hidden)),
        (rng.normal(size=(1, hidden)), rng.normal(size=1)),
    ]
    return Verifier(
        rng.normal(size=N),
        rng.uniform(0.5, 2.0, size=N),
        layers,
        threshold,
        record={"form": {"hidden": hidden}, "seed": seed},
    )


REJECTING_P = 0.99  # p(no answer) of the rejecting verifier, above its threshold 0.5


def with_verifier(source: Path, out: Path, verifier: Verifier | None) -> Path:
    """A copy of the exported model file ``source`` at ``out`` with ``verifier`` put into it."""
    shutil.copy(source, out)
    set_verifier(out, verifier)
    return out


@pytest.fixture(scope="module")
def rejecting_export(tiny_export, tmp_path_factory) -> Path:
    """conftest's tiny exported QANet with a verifier that always says "no answer" (p 0.99 > 0.5)."""
    return with_verifier(
        tiny_export, tmp_path_factory.mktemp("rejecting") / "rejecting.safetensors", constant_verifier(REJECTING_P)
    )


def sample_features(n: int, seed: int = 0) -> np.ndarray:
    """Feature rows of the right width, for comparing probabilities."""
    return np.random.default_rng(seed).normal(size=(n, N)).astype(np.float32)


def lexical(context: str, question: str, answer: str | None = None, occurrence: int = 0) -> dict[str, float]:
    """:data:`LEXICAL_FEATURES` by name, the answer the ``occurrence``-th ``answer`` in ``context``
    (None: no span)."""
    if answer is None:
        return dict(zip(LEXICAL_FEATURES, lexical_features(context, question, None, None)))
    start = -1
    for _ in range(occurrence + 1):
        start = context.index(answer, start + 1)
    return dict(zip(LEXICAL_FEATURES, lexical_features(context, question, start, start + len(answer))))


# ---------------------------------------------------------------- 1. the features, by hand

TOWER = "The tower was built in 1889. Its designer was Gustave Eiffel."


def test_the_features_are_named_once_and_computed_in_their_order():
    assert FEATURES == READER_FEATURES + LEXICAL_FEATURES and len(set(FEATURES)) == N
    assert len(lexical_features(TOWER, "Who designed it?", 0, 3)) == len(LEXICAL_FEATURES)
    x = features_of(TOWER, "Who designed it?", 0, 3, None)
    assert x.dtype == np.float32 and x.shape == (N,)


def test_a_name_or_number_of_the_question_missing_from_the_text_is_seen():
    there = lexical(TOWER, "When was the tower built by Gustave?", "1889")
    assert there["q_names_missing_text"] == 0.0 and there["q_any_name_missing_text"] == 0.0
    missing = lexical(TOWER, "When was the Louvre built by Gustave?", "1889")
    # One of the two names (louvre, gustave) is missing: half the names, and "any" says so.
    assert missing["q_names_missing_text"] == 0.5 and missing["q_any_name_missing_text"] == 1.0
    assert missing["q_numbers_missing_text"] == 0.0  # it names no number
    assert lexical(TOWER, "What was built in 1889?", "tower")["q_numbers_missing_text"] == 0.0
    number = lexical(TOWER, "What was built in 1900?", "tower")
    assert number["q_numbers_missing_text"] == 1.0 and number["q_any_name_missing_text"] == 1.0
    # The question's first word is not a name because it is capitalised; numbers count anywhere.
    assert names(words("Where was the Louvre built in 1900?")) == {"louvre", "1900"}
    assert names(words("Louvre: where is it?")) == set()


def test_the_collection_sees_how_many_passages_say_the_first_ranked_answer():
    read = [
        (9.0, "The tower is in Paris.", 0.6, 0.1, "Paris"),
        (6.0, "Many towers stand in paris .", 0.2, 0.4, "paris ."),  # the same words, other case and stops
        (3.0, "Lyon has a tower too.", 0.5, 0.3, "Lyon"),
        (1.0, "Nothing here.", None, 0.9, None),
    ]  # the passage verifier set it aside
    x = dict(zip(COLLECTION_FEATURES, collection_features("Where is the tower?", read, 0, "Paris")))
    assert len(x) == len(COLLECTION_FEATURES)
    assert x["answer_passages_share"] == pytest.approx(2 / 4)
    assert x["answer_span_mass"] == pytest.approx((0.6 + 0.2) / (0.6 + 0.2 + 0.5))
    assert x["best_bm25_of_top"] == 1.0 and x["second_bm25_of_top"] == pytest.approx(6 / 9)
    lone = dict(zip(COLLECTION_FEATURES, collection_features("Where is the tower?", read, 2, "Lyon")))
    assert lone["answer_passages_share"] == pytest.approx(1 / 4)
    assert lone["answer_span_mass"] == pytest.approx(0.5 / 1.3)
    none = dict(zip(COLLECTION_FEATURES, collection_features("Where is the tower?", read, None)))
    assert none["answer_passages_share"] == 0.0 and none["answer_span_mass"] == 0.0 and none["best_p"] == 1.0


def test_a_content_word_missing_from_the_answers_sentence_is_seen():
    # "designed" meets "designer" (stems of six letters): in the text, and in the second sentence only.
    in_sentence = lexical(TOWER, "Who designed it?", "Gustave Eiffel")
    elsewhere = lexical(TOWER, "Who designed it?", "1889")
    assert in_sentence["q_missing_text"] == elsewhere["q_missing_text"] == 0.0
    assert in_sentence["q_missing_sentence"] == 0.0 and elsewhere["q_missing_sentence"] == 1.0
    # No span: the answer's sentence is the whole text.
    assert lexical(TOWER, "Who designed it?")["q_missing_sentence"] == 0.0
    assert lexical(TOWER, "Who painted it?")["q_missing_text"] == 1.0


def test_sentence_around_picks_the_answers_sentence():
    text = "First one here. Second has Paris! Third? Yes it is."
    at = text.index("Paris")
    assert sentence_around(text, at, at + 5) == "Second has Paris!"
    at = text.index("here")
    assert sentence_around(text, at, at + 4) == "First one here."
    assert sentence_around(text, text.index("it is"), len(text)) == "Yes it is."  # the last, to the end
    # A span across a sentence end: both sentences.
    assert sentence_around(text, text.index("here"), text.index("Paris") + 5) == "First one here. Second has Paris!"
    # An abbreviation-like full stop before a lower-case word is no sentence end.
    text = "It cost 5 dollars approx. in total. Then it rose."
    assert sentence_around(text, text.index("total"), text.index("total") + 5) == "It cost 5 dollars approx. in total."


def test_sentence_around_a_span_that_starts_its_sentence():
    text = "First one here. Second has Paris! Third? Yes."
    at = text.index("Second")
    assert sentence_around(text, at, at + 6) == "Second has Paris!"
    assert sentence_around(text, text.index("Yes"), len(text)) == "Yes."
    at = TOWER.index("Its")
    assert sentence_around(TOWER, at, len(TOWER) - 1) == "Its designer was Gustave Eiffel."
    # What the verifier reads of it: "who designed it?" answered by the second sentence's first words.
    assert lexical(TOWER, "When was it built?", "Its designer")["q_missing_sentence"] == 1.0


def test_the_question_word_is_the_first_and_longest_found():
    assert question_word("How many people live there?") == "how many"
    assert question_word("How much did it cost?") == "how much"
    assert question_word("How did it start?") == "how"
    assert question_word("In which year did it open?") == "which"
    assert question_word("What was built, and when?") == "what"
    assert question_word("Name the capital of France.") == "other"
    assert question_word("However the tower stood.") == "other"  # a word, not a prefix
    f = lexical(TOWER, "How many towers were built?", "1889")
    assert f["q_how_many"] == 1.0 and f["q_how"] == 0.0 and f["how_many_not_number"] == 0.0
    assert lexical(TOWER, "How many towers were built?", "Gustave Eiffel")["how_many_not_number"] == 1.0


def test_a_when_question_answered_without_a_date_is_seen():
    when = "When was the tower built?"
    assert lexical(TOWER, when, "Gustave Eiffel")["when_not_date"] == 1.0
    assert lexical(TOWER, when, "1889")["when_not_date"] == 0.0
    assert lexical(TOWER, when, "1889")["a_year"] == 1.0
    summer = "The fair opened in the summer of that year."
    assert lexical(summer, when, "the summer")["when_not_date"] == 0.0  # a time word is a date enough
    assert lexical(TOWER, "Who designed it?", "1889")["who_not_name"] == 1.0
    assert lexical(TOWER, "Who designed it?", "Gustave Eiffel")["who_not_name"] == 0.0


def test_the_reader_evidence_is_clipped_and_a_missing_one_is_the_unsure_reader():
    e = ReaderEvidence(-1e9, -2.0, -3.0, 0.25, 0.5, 99, null_margin=100.0)
    assert e.features() == pytest.approx([-30.0, -2.0, -3.0, 0.25, 0.5, math.log(100), 30.0])
    none = features_of(TOWER, "Who designed it?", 0, 3, None)
    assert none[: len(READER_FEATURES)].tolist() == [-30.0, -30.0, -30.0, 1.0, 1.0, 0.0, 0.0]


# ---------------------------------------------------------------- 2. a tiny verifier learns to reject

PEOPLE = (
    "Anna Boris Carla Dmitri Elena Farid Greta Hugo Ines Jonas Karin Luis Mona Nils Olga Pavel Rosa Sven Tara "
    "Umar Vera Walid Xenia Yusuf Zora Arvid Bela Chiara Dario Emil"
).split()
PLACES = "Lisbon Oslo Turin Riga Porto Ghent Bergen Lyon Malmo Graz Split Cork".split()
JOBS = "baker teacher pilot nurse farmer painter miller sailor".split()


def generated(n: int, people: list[str], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` (features, unanswerable) of passages about three people, asked about one of them
    (answerable) or about someone else (unanswerable); the reader's best span is a place either way,
    its evidence a noisy log-probability a little lower where the text holds no answer."""
    rng = random.Random(seed)
    xs, ys = [], []
    for i in range(n):
        who = rng.sample(people, 3)
        facts = [(p, rng.choice(PLACES), rng.choice(JOBS)) for p in who]
        context = " ".join(f"{p} lived in {place} and worked as a {job}." for p, place, job in facts)
        unanswerable = i % 2 == 1
        asked = rng.choice([p for p in people if p not in who]) if unanswerable else who[0]
        question = rng.choice(["Where did {} live?", "In which city did {} live?", "Where was {} living?"]).format(
            asked
        )
        place = facts[rng.randrange(3) if unanswerable else 0][1]
        start = context.index(place)
        evidence = ReaderEvidence(
            rng.gauss(-2.5 if unanswerable else -1.5, 1.0),
            rng.gauss(-1.0, 0.5),
            rng.gauss(-1.0, 0.5),
            rng.random(),
            rng.random(),
            len(words(context)),
        )
        xs.append(features_of(context, question, start, start + len(place), evidence))
        ys.append(float(unanswerable))
    return np.stack(xs), np.asarray(ys, np.float32)


@pytest.mark.parametrize("hidden", [0, 8])
def test_a_tiny_verifier_learns_to_reject_on_a_generated_set(hidden):
    from rckit.training.verifier import fit

    x, y = generated(400, PEOPLE[:20], seed=1)
    x_test, y_test = generated(200, PEOPLE[20:] + PEOPLE[:5], seed=2)  # mostly people never seen in training
    v = fit(x, y, np.ones(len(y), np.float32), hidden, seed=0, record={"test": True})
    assert len(v.layers) == (1 if hidden == 0 else 2) and v.threshold == 0.5 and v.record == {"test": True}
    accuracy = float(((v.probability(x_test) > v.threshold) == (y_test == 1)).mean())
    assert accuracy > 0.9, accuracy
    # Not by chance: with the labels shuffled it learns nothing that holds out.
    shuffled = fit(x, np.random.default_rng(0).permutation(y), np.ones(len(y), np.float32), hidden, seed=0)
    assert float(((shuffled.probability(x_test) > 0.5) == (y_test == 1)).mean()) < 0.8


# ---------------------------------------------------------------- 3. the threshold, by hand


def _hand_case(questions):
    """(pairs, SQuAD v2.0 dict, best span texts) of [(qid, gold or None, reader's span)]."""
    from rckit.training.verifier import Pair

    context = "red green blue yellow purple orange"
    qas = [
        (qid, "which colour ?", [] if gold is None else [(gold, context.index(gold))], gold is None)
        for qid, gold, _ in questions
    ]
    raw = squad_json([(context, qas)], version="2.0")
    pairs = [Pair(context, "which colour ?", gold is None, "tune", qid) for qid, gold, _ in questions]
    return pairs, raw, [text for _, _, text in questions]


def test_keeping_is_the_lowest_threshold_that_keeps_the_answers_f1():
    from rckit.evaluation.squad_metrics import abstaining, score_predictions
    from rckit.training.verifier import keeping

    # Answerable questions' F1 when always answering: a 1, b 1, c 0.5 ("blue" of "blue yellow purple":
    # precision 1, recall 1/3), d 0;
    # the unanswerable e and f do not count. Their p(no answer): a .1, b .2, c .6, d .9.
    questions = [
        ("a", "red", "red"),
        ("b", "green", "green"),
        ("c", "blue yellow purple", "blue"),
        ("d", "purple", "orange"),
        ("e", None, "red"),
        ("f", None, "green"),
    ]
    pairs, raw, texts = _hand_case(questions)
    p = [0.1, 0.2, 0.6, 0.9, 0.05, 0.95]
    # Total 2.5. Keep 95%: lose at most .125; d (F1 0) may go, c (0.5) may not: abstain above .6.
    assert keeping(p, texts, pairs, raw) == 0.6
    # Keep 70%: lose at most .75; d and c (0.5) may go, b (1) may not: abstain above .2.
    assert keeping(p, texts, pairs, raw, keep=0.7) == 0.2
    # Keep nothing: every answer may go.
    assert keeping(p, texts, pairs, raw, keep=0.0) == 0.0
    # At the threshold found, the answers keep that share of their F1 (official HasAns F1).
    spans = {pair.qid: t for pair, t in zip(pairs, texts)}
    margins = {pair.qid: v for pair, v in zip(pairs, p)}
    always = score_predictions(raw, spans, "2.0")["HasAns_f1"]
    for keep in (0.95, 0.7):
        t = keeping(p, texts, pairs, raw, keep=keep)
        kept = score_predictions(raw, abstaining(spans, margins, t), "2.0")["HasAns_f1"]
        assert kept >= keep * always
        # and no lower threshold among the probabilities does
        lower = [v for v in p if v < t]
        if lower:
            assert score_predictions(raw, abstaining(spans, margins, max(lower)), "2.0")["HasAns_f1"] < keep * always


def test_tuned_picks_the_best_f1_threshold_and_scores_at_a_given_one():
    from rckit.training.verifier import tuned

    # a, b answered right; c unanswerable; d answered wrong; e unanswerable.
    questions = [
        ("a", "red", "red"),
        ("b", "green", "green"),
        ("c", None, "blue"),
        ("d", "purple", "orange"),
        ("e", None, "red"),
    ]
    pairs, raw, texts = _hand_case(questions)
    p = [0.1, 0.3, 0.5, 0.7, 0.9]
    # Abstaining above .3: a, b right, c and e abstain rightly, d abstains (0): 4 of 5.
    # (above .1: 3 of 5; above .5: 3; above .7: 3; never: 2; always: 2)
    got = tuned(p, texts, pairs, raw)
    assert got["threshold"] == pytest.approx(0.3)
    assert got["f1"] == pytest.approx(80.0) and got["exact_match"] == pytest.approx(80.0)
    assert got["HasAns_f1"] == pytest.approx(200 / 3) and got["NoAns_f1"] == pytest.approx(100.0)
    at = tuned(p, texts, pairs, raw, threshold=0.8)  # answers all but e: a, b, e right
    assert at["threshold"] == 0.8 and at["f1"] == pytest.approx(60.0) and at["NoAns_f1"] == pytest.approx(50.0)


# ---------------------------------------------------------------- 4. its JSON


def test_to_json_and_back_gives_the_same_probabilities():
    for v in (random_verifier(), constant_verifier(0.3, threshold=0.25), name_verifier()):
        d = json.loads(json.dumps(v.to_json()))  # as it travels in a model file
        back = Verifier.from_json(d)
        x = sample_features(50)
        assert np.array_equal(back.probability(x), v.probability(x))
        assert back.threshold == v.threshold and back.record == v.record and back.FEATURES == FEATURES
        assert back.to_json() == d
    p = random_verifier().probability(sample_features(200))
    assert p.shape == (200,) and ((0 < p) & (p < 1)).all() and p.std() > 0.01  # not a constant
    assert constant_verifier(0.3).probability(sample_features(3)) == pytest.approx([0.3] * 3)


def test_a_verifier_of_other_features_or_a_bad_threshold_is_refused():
    d = random_verifier().to_json()
    other = {**d, "features": ["span_log_p", "something_else", *d["features"][2:]]}
    with pytest.raises(ValueError, match="another version of rckit"):
        Verifier.from_json(other)
    with pytest.raises(ValueError, match="another version of rckit"):
        Verifier.from_json({**d, "features": d["features"][:-1]})
    for bad in (1.5, -0.1, float("nan")):
        with pytest.raises(ValueError, match="threshold is a probability"):
            Verifier.from_json({**d, "threshold": bad})
    for t in (0.0, 1.0):
        assert Verifier.from_json({**d, "threshold": t}).threshold == t
    with pytest.raises(ValueError, match="model.safetensors: damaged verifier"):
        Verifier.from_json({k: v for k, v in d.items() if k != "layers"}, "model.safetensors")
    with pytest.raises(ValueError, match="damaged verifier"):
        Verifier.from_json({**d, "layers": None})


def test_a_collection_verifier_travels_inside_the_verifier_and_is_checked_alike():
    n = len(COLLECTION_FEATURES)
    rng = np.random.default_rng(1)
    collection = CollectionVerifier(rng.normal(size=n), np.ones(n), [(rng.normal(size=(1, n)), np.zeros(1))], 0.4)
    v = random_verifier()
    v.collection = collection
    d = json.loads(json.dumps(v.to_json()))
    assert list(d) == ["features", "mean", "scale", "layers", "threshold", "record", "features_version", "collection"]
    back = Verifier.from_json(d).collection
    x = rng.normal(size=(20, n))
    assert back is not None and np.array_equal(back.probability(x), collection.probability(x))
    assert back.to_json() == d["collection"] and back.threshold == 0.4
    with pytest.raises(ValueError, match="model.safetensors: this collection verifier was made by another version"):
        Verifier.from_json(
            {**d, "collection": {**d["collection"], "features": d["collection"]["features"][:-1]}}, "model.safetensors"
        )
    with pytest.raises(ValueError, match="collection verifier's threshold is a probability"):
        Verifier.from_json({**d, "collection": {**d["collection"], "threshold": 1.5}})


# ---------------------------------------------------------------- 5. in exported files


@pytest.fixture(scope="module")
def onnx_file(tiny_run, tmp_path_factory) -> Path:
    from rckit.cli import main

    out = tmp_path_factory.mktemp("onnx-verifier") / "tiny.onnx"
    assert main(["export", str(tiny_run), "--out", str(out), "--check-questions", "2"]) == 0
    return out


def _meta(path: Path) -> dict:
    if path.suffix == ".onnx":
        import onnx

        proto = onnx.load(str(path))
        return json.loads(next(p.value for p in proto.metadata_props if p.key == "rckit"))
    return read_metadata(path)


@pytest.mark.parametrize("kind", ["safetensors", "onnx"])
def test_a_verifier_goes_into_an_exported_file_and_comes_out_again(kind, tiny_export, onnx_file, tmp_path):
    source = tiny_export if kind == "safetensors" else onnx_file
    path = tmp_path / f"model.{kind}"
    shutil.copy(source, path)
    before = _meta(path)
    plain = Reader.load(path, "cpu")
    assert plain.verifier is None and "verifier" not in before
    v = random_verifier()
    written = set_verifier(path, v)
    assert written["verifier"] == v.to_json()
    after = _meta(path)
    assert {k: x for k, x in after.items() if k != "verifier"} == before  # nothing else changed
    reader = Reader.load(path, "cpu")
    assert reader.verifier is not None and reader.verifier.threshold == v.threshold == reader.verifier_threshold
    x = sample_features(64)
    assert np.array_equal(reader.verifier.probability(x), v.probability(x))
    assert reader.info["verifier"] == {**v.record, "threshold": v.threshold}
    # The weights are untouched: always answering, it answers as the file without a verifier.
    pairs = [(CONTEXT, QUESTION), (CONTEXT, "what follows zeta ?")]
    always = Reader.load(path, "cpu", always_answer=True).answer_batch(pairs, top_k=2)
    assert [[{k: a[k] for k in ("answer", "score", "start", "end")} for a in got] for got in always] == [
        [{k: a[k] for k in ("answer", "score", "start", "end")} for a in got] for got in plain.answer_batch(pairs, 2)
    ]
    # Another verifier replaces it; None takes it out.
    set_verifier(path, constant_verifier(REJECTING_P))
    assert Reader.load(path, "cpu").verifier.threshold == 0.5
    removed = set_verifier(path, None)
    assert "verifier" not in removed and _meta(path) == before
    again = Reader.load(path, "cpu")
    assert again.verifier is None and again.info["verifier"] is None
    assert again.answer_batch(pairs, top_k=2) == plain.answer_batch(pairs, top_k=2)


def test_the_onnx_reader_with_a_verifier_abstains_where_torch_cannot_be_imported(onnx_file, tmp_path):
    from tests.export.test_onnx import run_without_torch

    path = with_verifier(onnx_file, tmp_path / "rejecting.onnx", constant_verifier(REJECTING_P))
    got = run_without_torch(f"""
        import json, sys
        import rckit
        reader = rckit.Reader.load({str(path)!r})
        print(json.dumps({{"threshold": reader.verifier_threshold,
                          "answers": reader.answer({CONTEXT!r}, {QUESTION!r}, top_k=2)}}))
        assert not any(m == "torch" or m.startswith("torch.") for m in sys.modules), "torch was imported"
    """)
    assert got.returncode == 0, got.stderr
    out = json.loads(got.stdout.splitlines()[0])
    assert out["threshold"] == 0.5
    answers = out["answers"]
    assert answers[0]["answer"] == "" and answers[0]["start"] is None
    assert answers[0]["no_answer_probability"] == pytest.approx(REJECTING_P)
    assert len(answers) == 3 and all(CONTEXT[a["start"] : a["end"]] == a["answer"] for a in answers[1:])
    assert answers == Reader.load(path).answer(CONTEXT, QUESTION, top_k=2)


# ---------------------------------------------------------------- 6. the Reader with a verifier


@pytest.fixture(scope="module")
def plain(tiny_export) -> Reader:
    return Reader.load(tiny_export, "cpu")


def reader_with(plain: Reader, verifier: Verifier | None, **kw) -> Reader:
    """A Reader on ``plain``'s very model, with ``verifier``."""
    return Reader(plain.model, plain.vocabs, plain.decode, plain.window, plain.info, verifier=verifier, **kw)


def spans_only(answers):
    return [(a["answer"], a["score"], a["start"], a["end"]) for a in answers]


def test_a_rejecting_verifier_abstains_first_with_the_best_spans_after(plain):
    reader = reader_with(plain, constant_verifier(REJECTING_P))
    answers = reader.answer(CONTEXT, QUESTION, top_k=2)
    assert len(answers) == 3
    first = answers[0]
    assert first["answer"] == "" and first["start"] is None and first["end"] is None
    assert first["no_answer_probability"] > reader.verifier_threshold == 0.5
    assert (
        first["no_answer_probability"] == pytest.approx(REJECTING_P)
        and first["score"] == first["no_answer_probability"]
    )
    assert spans_only(answers[1:]) == spans_only(plain.answer(CONTEXT, QUESTION, top_k=2))
    assert all(a["no_answer_probability"] == first["no_answer_probability"] for a in answers)
    said = shown(first, answers[1:])
    assert said.startswith("(no answer in the text") and said.endswith(f"best guess: {answers[1]['answer']})")
    # Several questions, one list each, each abstaining.
    for got in reader.answer(CONTEXT, [QUESTION, "what follows eta ?"]):
        assert got[0]["answer"] == "" and got[1]["start"] is not None


def test_always_answer_gives_exactly_the_answers_of_a_reader_without_a_verifier(plain):
    always = reader_with(plain, constant_verifier(REJECTING_P), always_answer=True)
    pairs = [(CONTEXT, QUESTION), (CONTEXT, "what follows alpha ?"), ("mu alpha kappa lambda.", "what follows mu ?")]
    got, want = always.answer_batch(pairs, top_k=3), plain.answer_batch(pairs, top_k=3)
    assert [spans_only(a) for a in got] == [spans_only(a) for a in want]
    # The probability of no answer is still said; a reader without a verifier says none.
    assert all(a["no_answer_probability"] == pytest.approx(REJECTING_P) for answers in got for a in answers)
    assert all(a["no_answer_probability"] is None for answers in want for a in answers)
    assert always.info["always_answer"] is True and always.info["verifier"]["threshold"] == 0.5


def test_the_threshold_decides_and_one_of_1_never_abstains(plain):
    unsure = constant_verifier(0.3, threshold=0.5)  # p 0.3: under the file's threshold
    assert reader_with(plain, unsure).answer(CONTEXT, QUESTION)[0]["start"] is not None
    lower = reader_with(plain, unsure, no_answer_threshold=0.2)  # the caller's threshold instead
    assert lower.verifier_threshold == 0.2 and lower.answer(CONTEXT, QUESTION)[0]["answer"] == ""
    assert lower.info["verifier"]["threshold"] == 0.2
    sure = constant_verifier(1 - 1e-12, threshold=0.5)  # p rounds to 1.0 in float32
    assert sure.probability(sample_features(1))[0] == 1.0
    never = reader_with(plain, sure, no_answer_threshold=1.0)
    answers = never.answer(CONTEXT, QUESTION, top_k=2)
    assert spans_only(answers) == spans_only(plain.answer(CONTEXT, QUESTION, top_k=2))
    assert reader_with(plain, sure, no_answer_threshold=0.0).answer(CONTEXT, QUESTION)[0]["answer"] == ""


def test_a_no_answer_threshold_needs_a_verifier_and_a_probability(tiny_export, plain):
    with pytest.raises(ValueError, match="has none"):
        Reader.load(tiny_export, "cpu", no_answer_threshold=0.5)
    with pytest.raises(ValueError, match="has none"):
        reader_with(plain, None, no_answer_threshold=0.5)
    for bad in (1.5, -0.5):
        with pytest.raises(ValueError, match="between 0 and 1"):
            reader_with(plain, constant_verifier(0.5), no_answer_threshold=bad)


def test_the_verifier_reads_the_question_the_text_and_the_best_span(plain):
    """The name verifier abstains where the question names someone the text never mentions, and
    the features the reader gives it are those of its best span, with the reader's evidence."""
    reader = reader_with(plain, name_verifier())
    context = "Alpha beta gamma delta epsilon zeta."
    named, unnamed = "what follows Beta ?", "what follows Omega ?"
    got = reader.answer(context, [named, unnamed], top_k=1)
    assert got[0][0]["start"] is not None and got[0][0]["no_answer_probability"] == pytest.approx(0.0067, abs=1e-4)
    assert got[1][0]["answer"] == "" and got[1][0]["no_answer_probability"] == pytest.approx(0.9933, abs=1e-4)
    job = reader.plan([(context, named), (context, unnamed)])
    reader.read_all(job)
    x = job.features()
    best = [a[0] for a in plain.answer(context, [named, unnamed], top_k=1)]
    for row, question, a in zip(x, (named, unnamed), best):
        lex = lexical_features(context, question, a["start"], a["end"])
        assert row[len(READER_FEATURES) :].tolist() == pytest.approx(lex)
        reader_part = dict(zip(READER_FEATURES, row[: len(READER_FEATURES)].tolist()))
        assert reader_part["span_log_p"] == pytest.approx(math.log(a["score"]), abs=1e-4)
        assert reader_part["start_log_p_max"] <= 0 and reader_part["end_log_p_max"] <= 0
        assert 0 <= reader_part["start_entropy"] <= 1 and 0 <= reader_part["end_entropy"] <= 1
        assert reader_part["window_tokens_log"] > math.log1p(1) and reader_part["null_margin"] == 0.0
    assert job.no_answer_probabilities() == pytest.approx(name_verifier().probability(x).tolist())


def test_a_file_without_a_verifier_answers_as_before(tiny_export, rejecting_export, plain):
    assert plain.verifier is None and plain.verifier_threshold is None and plain.info["verifier"] is None
    answers = plain.answer(CONTEXT, QUESTION, top_k=3)
    assert len(answers) == 3 and all(a["start"] is not None and a["no_answer_probability"] is None for a in answers)
    # The same file with the rejecting verifier abstains, answering the same spans after it.
    rejecting = Reader.load(rejecting_export, "cpu")
    got = rejecting.answer(CONTEXT, QUESTION, top_k=3)
    assert got[0]["answer"] == "" and spans_only(got[1:]) == spans_only(answers)
    assert Reader.load(tiny_export, "cpu").answer(CONTEXT, QUESTION, top_k=3) == answers


def test_the_abstention_of_a_verifier_can_be_explained(rejecting_export):
    """The answer explained is the abstention the Reader gives; the span explained is the reader's
    best guess, as the plain model explains it."""
    reader = Reader.load(rejecting_export, "cpu")
    explanation = reader.explain(CONTEXT, QUESTION, steps=1)
    assert explanation["answer"]["answer"] == "" and explanation["answer"]["start"] is None
    guess = reader.answer(CONTEXT, QUESTION)[1]
    tokens = explanation["answer_tokens"]
    assert tokens is not None
    offsets = explanation["context_offsets"]
    assert (offsets[tokens[0]][0], offsets[tokens[1]][1]) == (guess["start"], guess["end"])
    assert any("verifier says the text holds no answer" in n for n in explanation["notes"])
    plain = Reader.load(rejecting_export, "cpu", always_answer=True).explain(CONTEXT, QUESTION, steps=1)
    assert plain["answer_tokens"] == tokens and plain["start_probs"] == explanation["start_probs"]


# ---------------------------------------------------------------- 9. asking a collection


def test_a_rejecting_verifier_makes_a_collection_say_no_answer_in_these_documents(rejecting_export, tmp_path):
    from rckit.retrieval.collection import Collection
    from tests.retrieval.test_collection import DOCS

    folder = tmp_path / "docs"
    for name, text in DOCS.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    question = "When was the Eiffel Tower completed?"
    with Collection.open(tmp_path / "i.sqlite", Reader.load(rejecting_export, "cpu")) as collection:
        assert collection.add([folder])["added"] == 4
        answers = collection.ask(question, top_k=3, passages=3)
        assert len(answers) == 1
        a = answers[0]
        assert a["answer"] == "" and a["start"] is None and a["source"] is None and a["passage"] is None
        assert a["no_answer_probability"] == pytest.approx(REJECTING_P)
    # Always answering, the same reader finds a span in a document.
    always = Reader.load(rejecting_export, "cpu", always_answer=True)
    with Collection.open(tmp_path / "i.sqlite", always) as collection:
        a = collection.ask(question, top_k=1, passages=3)[0]
        assert a["answer"] and a["source"] is not None and a["no_answer_probability"] == pytest.approx(REJECTING_P)
        assert collection.store.document_text(a["source"], a["key"])[a["start"] : a["end"]] == a["answer"]


def test_a_verifier_whose_arrays_do_not_fit_its_features_is_refused_when_loaded():
    """A damaged verifier is refused at load with one line, not at the first answer with NumPy's."""
    n = len(FEATURES)
    good = Verifier(np.zeros(n), np.ones(n), [(np.zeros((4, n)), np.zeros(4)), (np.zeros((1, 4)), np.zeros(1))], 0.5)
    assert Verifier.from_json(good.to_json()).threshold == 0.5
    for damage in (
        lambda d: d.update(mean=[0.0] * 3),
        lambda d: d["layers"][0].update(weight=[[0.0] * 3] * 4),
        lambda d: d["layers"][1].update(weight=[[0.0] * 4] * 2, bias=[0.0, 0.0]),
        lambda d: d.update(layers=[]),
    ):
        d = good.to_json()
        damage(d)
        with pytest.raises(ValueError, match="model.safetensors: damaged verifier"):
            Verifier.from_json(d, "model.safetensors")
    old = good.to_json()
    old.pop("features_version")  # written before the features' computation changed
    with pytest.raises(ValueError, match="version 1 .* version 2: train it again"):
        Verifier.from_json(old)
