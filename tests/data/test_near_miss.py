"""`rckit prepare squad-near-miss`: near-miss unanswerable questions (the answering sentence removed), mixed."""

import json
from dataclasses import replace

import pytest

from rckit.data.near_miss import (
    KEPT_SUFFIX,
    REPORT_FILE,
    SENTENCE_SUFFIX,
    TRAIN_FILE,
    NearMissConfig,
    Passage,
    build_near_miss,
    check_near_miss,
    mix,
    sentence_spans,
)
from rckit.data.squad import SquadFormatError, load_json, normalize_answer, read_squad
from rckit.data.unanswerable import holds_answer
from tests.conftest import write_json

SMITH = (
    "Dr. Ada Smith was born in London in 1901. She studied physics at the U.S. Naval Academy in "
    "Maryland. J. Smith, her brother, built a telescope in 1925. The telescope is now in a museum in Paris."
)
SMITH_SENTENCES = [
    "Dr. Ada Smith was born in London in 1901. ",
    "She studied physics at the U.S. Naval Academy in Maryland. ",
    "J. Smith, her brother, built a telescope in 1925. ",
    "The telescope is now in a museum in Paris.",
]
NILE = "The Nile is the longest river in Africa. It flows north through Egypt. Its delta lies on the Mediterranean Sea."
AMAZON = (
    "The Amazon carries more water than any other river. It flows east through Brazil. Its mouth is on the Atlantic."
)


def _qa(qid, question, context, answer):
    return {"id": qid, "question": question, "answers": [{"text": answer, "answer_start": context.index(answer)}]}


def _para(context, qas):
    return {"context": context, "qas": [_qa(qid, q, context, a) for qid, q, a in qas]}


V11 = {
    "version": "1.1",
    "data": [
        {
            "title": "Smith",
            "paragraphs": [
                _para(
                    SMITH,
                    [
                        ("s-born", "Where was Dr. Smith born?", "London"),
                        ("s-study", "What did she study?", "physics"),
                        ("s-built", "What did her brother build?", "a telescope"),  # "telescope" is met again
                        ("s-where", "Where is the telescope now?", "Paris"),
                    ],
                ),
                _para("The only sentence here says the answer is 42.", [("s-one", "What is the answer?", "42")]),
                _para(
                    "Tiny. The capital of Peru is Lima, a large city on the coast.", [("s-short", "Capital?", "Lima")]
                ),
            ],
        },
        {
            "title": "Rivers",
            "paragraphs": [
                _para(
                    NILE,
                    [
                        ("n-long", "Which river is the longest in Africa?", "The Nile"),
                        ("n-country", "Through which country does the Nile flow north?", "Egypt"),
                        ("n-sea", "On which sea does the delta of the river lie?", "Mediterranean Sea"),
                    ],
                ),
                _para(
                    AMAZON,
                    [
                        ("a-water", "Which river carries the most water?", "The Amazon"),
                        ("a-country", "Through which country does the Amazon flow east?", "Brazil"),
                    ],
                ),
            ],
        },
    ],
}


def _corpus(n_articles, n_paragraphs=4, n_sentences=4):
    """A v1.1 dict whose every question's answer is a word met once, in its own sentence."""
    data = []
    for a in range(n_articles):
        paragraphs = []
        for p in range(n_paragraphs):
            sentences = [f"Part {k} of item {a} {p} was made of stuff{a}x{p}x{k} long ago." for k in range(n_sentences)]
            context = " ".join(sentences)
            qas = [
                (f"c{a}-{p}-{k}", f"What was part {k} of item {a} {p} made of?", f"stuff{a}x{p}x{k}") for k in range(4)
            ]
            paragraphs.append(_para(context, qas))
        data.append({"title": f"Item {a}", "paragraphs": paragraphs})
    return {"version": "1.1", "data": data}


def _v2_dev(n_articles):
    """A v2.0 dev whose article i's ids start with ``devA{i}-``."""
    data = []
    for i in range(n_articles):
        context = f"Article {i} says the answer is blue."
        qas = [
            {**_qa(f"devA{i}-ok", "What colour?", context, "blue"), "is_impossible": False},
            {"id": f"devA{i}-na", "question": "Who?", "answers": [], "is_impossible": True},
        ]
        data.append({"title": f"dev{i}", "paragraphs": [{"context": context, "qas": qas}]})
    return {"version": "v2.0", "data": data}


def _questions(path):
    return [(p["context"], qa) for a in load_json(path)["data"] for p in a["paragraphs"] for qa in p["qas"]]


def _build(tmp_path, v11=V11, name="out", **config):
    train = write_json(tmp_path / "train-v1.1.json", v11)
    report = build_near_miss(train, tmp_path / name, config=NearMissConfig(**config))
    return report, _questions(tmp_path / name / TRAIN_FILE)


def test_sentence_spans_cover_the_text_and_keep_abbreviations_and_initials_whole():
    spans = sentence_spans(SMITH)
    assert [SMITH[s:e] for s, e in spans] == SMITH_SENTENCES
    text = 'He said "Stop." Then (in 1990.) 5 men left! Mr. J. R. Ewing, e.g. the heir, saw it?  "Yes."'
    spans = sentence_spans(text)
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))  # half-open, end to end
    assert [text[s:e] for s, e in spans] == [
        'He said "Stop." ',
        "Then (in 1990.) ",
        "5 men left! ",
        "Mr. J. R. Ewing, e.g. the heir, saw it?  ",
        '"Yes."',
    ]
    assert sentence_spans("") == [(0, 0)] and sentence_spans("no stop at all") == [(0, 14)]


def test_the_sentence_holding_the_answer_is_removed_and_the_rest_kept_exactly(tmp_path):
    report, questions = _build(tmp_path, unanswerable_share=0.99, other_rate=0.0)
    made = {qa["source"]: (c, qa) for c, qa in questions if qa.get("kind") == "sentence_removed"}
    for source, sentence in (("s-born", 0), ("s-study", 1), ("s-where", 3)):
        context, qa = made[source]
        assert context == "".join(SMITH_SENTENCES[:sentence] + SMITH_SENTENCES[sentence + 1 :]).rstrip()
        assert qa["id"] == source + SENTENCE_SUFFIX and qa["is_impossible"] and qa["answers"] == []
        assert qa["plausible_answers"][0]["text"] in SMITH_SENTENCES[sentence]
    skipped = report["kinds"]["sentence_removed"]["skipped"]
    assert skipped == {"one_sentence": 1, "too_short": 1, "answer_still_in_passage": 1}
    assert "s-built" not in made and "s-one" not in made and "s-short" not in made
    assert report["kinds"]["sentence_removed"]["made"] == report["kinds"]["sentence_removed"]["tried"] - 3


def test_no_made_unanswerable_passage_holds_its_answer(tmp_path):
    report, questions = _build(tmp_path, unanswerable_share=0.99, other_rate=1.0)
    gold = {qa["id"]: qa["answers"] for a in V11["data"] for p in a["paragraphs"] for qa in p["qas"]}
    made = [(c, qa) for c, qa in questions if qa.get("kind") in ("sentence_removed", "other_paragraph")]
    assert {qa["kind"] for _, qa in made} == {"sentence_removed", "other_paragraph"}
    for context, qa in made:
        answers = [normalize_answer(a["text"]) for a in gold[qa["source"]]]
        assert not holds_answer(normalize_answer(context), answers), qa["id"]
    assert report["check"]["made_unanswerable_holding_answer"] == 0
    assert report["check"]["made_unanswerable_checked"] == len(made)
    # "a telescope" is in two sentences: with one cut, "The telescope" still answers it
    assert "s-built" + SENTENCE_SUFFIX not in {qa["id"] for _, qa in questions}


def test_kept_questions_are_asked_of_the_trimmed_passage_with_moved_offsets(tmp_path):
    report, questions = _build(tmp_path, unanswerable_share=0.99, other_rate=0.0, kept_per_passage=3)
    kept = [(c, qa) for c, qa in questions if qa.get("kind") == "kept_in_trimmed"]
    assert kept and report["kinds"]["kept_in_trimmed"]["in_file"] == len(kept)
    originals = {p["context"] for a in V11["data"] for p in a["paragraphs"]}
    for context, qa in kept:
        assert context not in originals and not qa["is_impossible"] and KEPT_SUFFIX in qa["id"]
        for a in qa["answers"]:
            assert context[a["answer_start"] : a["answer_start"] + len(a["text"])] == a["text"]
    smith_trimmed = {qa["source"]: c for c, qa in questions if qa.get("kind") == "sentence_removed"}["s-study"]
    asked = {qa["source"] for c, qa in kept if c == smith_trimmed}
    assert asked == {"s-born", "s-built", "s-where"}  # every other question, its answer outside the cut
    assert read_squad(tmp_path / "out" / TRAIN_FILE).report.misaligned == []


def test_mix_fills_the_file_to_the_target_share():
    passages = [Passage(0, i, (0, 0), (0, 1), "x", [{"id": f"u{i}"}], [{"id": f"k{i}"}]) for i in range(1000)]
    chosen = mix(passages, answerable=300, unanswerable=0, config=NearMissConfig())
    share = len(chosen) / (300 + 2 * len(chosen))
    assert abs(share - 1 / 3) < 0.01 and len(chosen) == 300
    assert [p.paragraph for p in chosen] == sorted(p.paragraph for p in chosen)  # file order kept
    capped = mix(passages, 300, 0, NearMissConfig(max_sentence_removed=50))
    assert len(capped) == 50
    assert mix(passages, 10, 10, NearMissConfig()) == []  # already over the target


def test_the_file_reaches_the_share_and_is_seeded(tmp_path):
    v11 = _corpus(6)
    report, questions = _build(tmp_path, v11, "a", seed=1)
    totals = report["totals"]
    assert abs(totals["unanswerable_share"] - 1 / 3) < 0.05
    assert totals["unanswerable"] == sum(bool(qa["is_impossible"]) for _, qa in questions)
    assert report["kinds"]["sentence_removed"]["made"] == 96  # every question: its answer is met once
    again = _build(tmp_path, v11, "b", seed=1)[1]
    other = _build(tmp_path, v11, "c", seed=2)[1]
    assert again == questions and other != questions
    assert json.loads((tmp_path / "a" / REPORT_FILE).read_text())["totals"] == totals


def test_only_the_training_quarter_of_v2_dev_enters(tmp_path):
    train = write_json(tmp_path / "train.json", V11)
    dev = write_json(tmp_path / "dev.json", _v2_dev(8), gz=True)
    v2_train = write_json(tmp_path / "v2train.json", json.loads(json.dumps(_v2_dev(1)).replace("devA0", "trainA0")))
    report = build_near_miss(train, tmp_path / "out", dev, v2_train)
    ids = {qa["id"] for _, qa in _questions(tmp_path / "out" / TRAIN_FILE)}
    from_dev = {i.split("-")[0] for i in ids if i.startswith("devA")}
    assert from_dev == {"devA0", "devA4"}  # positions 0 mod 4; never 2, 6 (tuning) or odd ones (evaluation)
    assert {"trainA0-ok", "trainA0-na"} <= ids
    kinds = report["kinds"]
    assert kinds["written_unanswerable"]["in_file"] == 3 and kinds["written_answerable"]["in_file"] == 3
    with pytest.raises(SquadFormatError, match=r"train\.json: not a SQuAD v2\.0 file"):
        build_near_miss(train, tmp_path / "bad", train)  # v1.1 given as v2.0 dev
    with pytest.raises(SquadFormatError, match=r"dev\.json: not a SQuAD v1\.1 file"):
        build_near_miss(dev, tmp_path / "bad")
    with pytest.raises(ValueError, match="unanswerable share"):
        build_near_miss(train, tmp_path / "bad", config=NearMissConfig(unanswerable_share=1.0))


def test_the_check_raises_on_a_passage_holding_the_answer_or_a_wrong_offset():
    gold = {"q": ["london"]}
    made = {"id": "q-nm-sent", "question": "?", "answers": [], "is_impossible": True, "kind": "sentence_removed"}
    good = [{"paragraphs": [{"context": "Born in Paris.", "qas": [{**made, "source": "q"}]}]}]
    assert check_near_miss(good, gold)["made_unanswerable_checked"] == 1
    with pytest.raises(RuntimeError, match="made_unanswerable_holding_answer"):
        check_near_miss([{"paragraphs": [{"context": "Born in London.", "qas": [{**made, "source": "q"}]}]}], gold)
    wrong = {"id": "a", "question": "?", "answers": [{"text": "Paris", "answer_start": 0}], "is_impossible": False}
    with pytest.raises(RuntimeError, match="answerable_offsets_wrong"):
        check_near_miss([{"paragraphs": [{"context": "Born in Paris.", "qas": [wrong]}]}], gold)
    written = {"id": "w", "question": "?", "answers": [], "is_impossible": True, "kind": "written_unanswerable"}
    assert check_near_miss([{"paragraphs": [{"context": "London", "qas": [written]}]}], gold)["duplicate_ids"] == 0


def test_config_is_checked():
    for bad in (
        {"unanswerable_share": 0.0},
        {"other_rate": 1.5},
        {"kept_per_passage": -1},
        {"articles": 0},
    ):
        with pytest.raises(ValueError):
            replace(NearMissConfig(), **bad).check()


def test_rckit_prepare_squad_near_miss_writes_the_files_and_refuses_a_bad_one(tmp_path, capsys):
    from rckit.cli import main

    train = write_json(tmp_path / "train-v1.1.json", V11)
    dev = write_json(tmp_path / "dev-v2.0.json", _v2_dev(8))
    out = tmp_path / "nm"
    args = ["prepare", "squad-near-miss", "--train", str(train), "--out", str(out), "--seed", "3"]
    assert main([*args, "--dev", str(dev), "--unanswerable-share", "0.4"]) == 0
    printed = capsys.readouterr().out
    assert f"written to {out / TRAIN_FILE}" in printed
    for kind in ("squad_answerable", "sentence_removed", "kept_in_trimmed", "other_paragraph", "written_unanswerable"):
        assert f"  {kind}: " in printed
    report = json.loads((out / REPORT_FILE).read_text())
    assert report["seed"] == 3 and report["config"]["unanswerable_share"] == 0.4
    assert read_squad(out / TRAIN_FILE).report.version == "2.0"
    not_squad = write_json(tmp_path / "list.json", [1, 2])
    for bad, named in (([*args[:3], str(not_squad), *args[4:]], "list.json"), ([*args, "--dev", str(train)], "train")):
        assert main(bad) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("rckit prepare: ") and named in err
    assert "v2.0" in err  # the v1.1 file given as --dev: named, and why
    assert main(args[:-4] + ["--seed", "3"]) == 2 and "needs --out" in capsys.readouterr().err


@pytest.mark.realdata
def test_real_v11_train_first_20_articles(shared_data, tmp_path):
    train = shared_data / "squad-v1.1" / "train-v1.1.reconstructed.json.gz"
    report = build_near_miss(train, tmp_path / "nm", config=NearMissConfig(articles=20))
    removed = report["kinds"]["sentence_removed"]
    assert report["check"]["made_unanswerable_holding_answer"] == 0
    assert report["check"]["answerable_offsets_wrong"] == 0
    assert removed["made"] >= 0.6 * removed["tried"]
    assert removed["tried"] == report["kinds"]["squad_answerable"]["in_file"]
