import json

import pytest

from rckit.data.cloze.baselines import score_baselines
from rckit.data.cloze.examples import ENTITY_RE
from rckit.data.cloze.from_squad import build_squad_cloze, find_entity_runs, load_cloze_jsonl, write_squad_cloze
from rckit.data.squad import read_squad
from rckit.data.tokenize import tokenize
from tests.conftest import squad_json, write_json

CTX = (
    "Denver Broncos won Super Bowl 50 in 2016. The Broncos beat the Carolina Panthers at Levi's Stadium "
    "in Santa Clara. Peyton Manning led the Denver Broncos."
)
QAS = [
    ("q1", "Who won Super Bowl 50 for Colorado?", [("Denver Broncos", 0)]),
    ("q2", "Who led the Denver Broncos?", [("Peyton Manning", CTX.index("Peyton"))]),
    ("q3", "What did the Broncos do in 2016?", [("won Super Bowl 50", CTX.index("won"))]),  # overlaps
    ("q4", "Where is Levi's Stadium?", [("Santa Clara", CTX.index("Santa"))]),
    ("q5", "Whom did the Broncos beat?", [("the Carolina Panthers", CTX.index("the Carolina"))]),  # article trimmed
    ("q6", "What did the Broncos do?", [("won", CTX.index("won"))]),  # not an entity
    ("q7", "Who won?", [("Denver", 5)]),  # misaligned offset: the reader drops it
    ("q8", "Which city?", [("Clara", CTX.index("Clara"))]),  # part of an entity
    ("q9", "Which team?", [("enver", 1)]),  # starts inside a token
]
PARAGRAPH_ENTITIES = [
    "Denver Broncos", "Super Bowl 50", "2016", "Broncos", "Carolina Panthers", "Levi", "Stadium", "Santa Clara",
    "Peyton Manning",
]  # fmt: skip


@pytest.fixture
def tiny(tmp_path):
    return read_squad(write_json(tmp_path / "tiny.json", squad_json([(CTX, QAS)])))


def markers(ex):
    return {surface: marker for marker, surface in ex.entities.items()}


def test_entity_runs():
    text = (
        "He studied at the University of Notre Dame in the U.S. Army during the Franco-Prussian War. However, it ended."
    )
    tokens, offsets = tokenize(text)
    spans = find_entity_runs(tokens, offsets)
    assert [" ".join(tokens[s : e + 1]) for s, e in spans] == [
        "University of Notre Dame",
        "U . S . Army",
        "Franco - Prussian War",
    ]
    tokens, offsets = tokenize("Paris is big. He loves Paris. Chess is fun. He plays chess in 1990.")
    assert [" ".join(tokens[s : e + 1]) for s, e in find_entity_runs(tokens, offsets)] == ["Paris", "Paris", "1990"]


def test_anonymisation_consistent_within_example(tiny):
    examples, _ = build_squad_cloze(tiny)
    assert [ex.id for ex in examples] == ["q1", "q2", "q4", "q5"]
    for ex in examples:
        m = markers(ex)
        assert len(m) == len(ex.entities)  # one marker per surface and one surface per marker
        assert sorted(ex.entities) == sorted(f"@entity{k}" for k in range(len(m)))
        assert ex.candidates == [m[s] for s in PARAGRAPH_ENTITIES]
        assert ex.document == [
            m["Denver Broncos"], "won", m["Super Bowl 50"], "in", m["2016"], ".", "The", m["Broncos"], "beat", "the",
            m["Carolina Panthers"], "at", m["Levi"], "'s", m["Stadium"], "in", m["Santa Clara"], ".",
            m["Peyton Manning"], "led", "the", m["Denver Broncos"], ".",
        ]  # fmt: skip
        assert ENTITY_RE.match(ex.answer) and ex.answer in ex.candidates
    q1, q2, q4, q5 = examples
    m = markers(q1)
    assert q1.query == ["Who", "won", m["Super Bowl 50"], "for", m["Colorado"], "?"]
    assert m["Colorado"] not in q1.candidates and q1.answer == m["Denver Broncos"]
    assert q2.query == ["Who", "led", "the", markers(q2)["Denver Broncos"], "?"]
    assert q2.answer == markers(q2)["Peyton Manning"]
    assert q4.query == ["Where", "is", markers(q4)["Levi"], "'s", markers(q4)["Stadium"], "?"]
    assert q4.answer == markers(q4)["Santa Clara"]
    assert q5.answer == markers(q5)["Carolina Panthers"] and q5.query[3] == markers(q5)["Broncos"]


def test_numbering_permuted_across_examples_and_deterministic(tiny):
    a, _ = build_squad_cloze(tiny, seed=0)
    b, _ = build_squad_cloze(tiny, seed=0)
    c, _ = build_squad_cloze(tiny, seed=1)
    assert a == b
    numberings = {tuple(markers(ex)[s] for s in PARAGRAPH_ENTITIES) for ex in a}
    assert len(numberings) == len(a)  # same entities, a different numbering for each question
    assert any(x.document != y.document for x, y in zip(a, c))
    assert [markers(x)["Santa Clara"] for x in a] != [markers(y)["Santa Clara"] for y in c]


def test_dropped_questions_counted(tiny):
    examples, stats = build_squad_cloze(tiny)
    assert stats["questions_total"] == 9 and stats["questions_kept"] == 4 == len(examples)
    assert stats["dropped"] == {
        "answer_not_entity": 1,
        "answer_not_token_aligned": 1,
        "answer_offset_unknown": 1,
        "answer_overlaps_entity": 2,
    }
    assert stats["candidates_per_question"]["mean"] == 9
    assert stats["entities_per_paragraph"]["max"] == 9
    assert stats["max_entities_per_example"] == 10  # + Colorado, only in q1's question
    assert stats["answer_most_frequent_pct"] == 25.0  # only q1's answer is mentioned twice
    assert stats["answer_in_query"] == 0 and stats["single_candidate_questions"] == 0


def test_write_and_load(tiny, tmp_path):
    examples, stats = build_squad_cloze(tiny)
    out = write_squad_cloze(tmp_path / "squad-cloze", examples, examples[:1], {"train": stats})
    assert load_cloze_jsonl(out / "train.jsonl") == examples
    assert load_cloze_jsonl(out / "dev.jsonl") == examples[:1]
    assert json.loads((out / "stats.json").read_text())["train"]["questions_kept"] == 4
    scores = score_baselines(examples)
    assert scores["examples"] == 4
    assert scores["maximum_frequency"] == 25.0  # Denver Broncos, mentioned twice, is q1's answer only


@pytest.mark.realdata
def test_real_dev_set(shared_data):
    ds = read_squad(shared_data / "squad-v1.1" / "dev-v1.1.json.gz")
    examples, stats = build_squad_cloze(ds)
    assert stats["questions_total"] == 10570
    assert stats["questions_kept"] + sum(stats["dropped"].values()) == 10570
    assert 2000 < stats["questions_kept"] < 9000
    assert stats["candidates_per_question"]["mean"] > 3
    for ex in examples:
        assert ex.answer in ex.candidates and ex.answer in ex.document
        assert set(ex.candidates) <= set(ex.entities)
    scores = score_baselines(examples)
    assert 0 < scores["maximum_frequency"] < scores["word_distance"] < 100
