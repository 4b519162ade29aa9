"""`rckit prepare squad-no-answer`: unanswerable pairs made from v1.1, v2.0 dev split by article."""

import gzip
import json
import subprocess
import sys

import pytest

from rckit.data.no_answer import EVAL_FILE, TRAIN_FILE, TUNE_FILE, build_no_answer_data
from rckit.data.squad import SquadFormatError, normalize_answer, read_squad
from rckit.data.unanswerable import PAIR_SUFFIX, unanswerable_pairs


def _article(title, paragraphs):
    return {
        "title": title,
        "paragraphs": [
            {
                "context": c,
                "qas": [
                    {"id": f"{title}-{i}-{k}", "question": q, "answers": [{"text": a, "answer_start": c.index(a)}]}
                    for k, (q, a) in enumerate(qas)
                ],
            }
            for i, (c, qas) in enumerate(paragraphs)
        ],
    }


V11 = {
    "version": "1.1",
    "data": [
        _article(
            "tower",
            [
                (
                    "The tower was built in 1889 by Eiffel.",
                    [("When was the tower built?", "1889"), ("Who built it?", "Eiffel")],
                ),
                ("The tower is 330 metres tall.", [("How tall is it?", "330 metres")]),
                ("Eiffel also designed a bridge in 1889.", [("What else did he design?", "a bridge")]),
            ],
        ),
        _article("alone", [("Only one paragraph here.", [("How many paragraphs?", "one")])]),
    ],
}


def _v2_dev(n_articles):
    data = []
    for i in range(n_articles):
        art = _article(f"dev{i}", [(f"Article {i} says the answer is blue.", [("What colour?", "blue")])])
        art["paragraphs"][0]["qas"].append(
            {"id": f"dev{i}-na", "question": "Who?", "answers": [], "is_impossible": True}
        )
        data.append(art)
    return {"version": "v2.0", "data": data}


def _write(path, obj):
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        json.dump(obj, fh)
    return path


def _ids(path):
    return {ex.qid for ex in read_squad(path).examples}


def test_pairs_never_use_a_paragraph_holding_an_answer():
    articles, counts = unanswerable_pairs(V11["data"], rate=1.0, seed=0)
    assert counts["questions"] == 5 and counts["drawn"] == 5
    # "alone" has no other paragraph; in "tower", "Who built it?" (Eiffel) can only go to paragraph 1,
    # and "When was the tower built?" (1889) only to paragraph 1 too (paragraph 2 holds "1889").
    assert counts["no_paragraph_without_answer"] == 1 and counts["made"] == 4
    gold = {
        qa["id"]: [normalize_answer(a["text"]) for a in qa["answers"]]
        for a in V11["data"]
        for p in a["paragraphs"]
        for qa in p["qas"]
    }
    made = 0
    for art in articles:
        for p in art["paragraphs"]:
            for qa in p["qas"]:
                if qa.get("is_impossible"):
                    made += 1
                    assert qa["answers"] == [] and qa["id"].endswith(PAIR_SUFFIX)
                    original = qa["id"][: -len(PAIR_SUFFIX)]
                    assert all(a not in normalize_answer(p["context"]) for a in gold[original])
    assert made == 4
    paragraph_1 = {qa["id"] for qa in articles[0]["paragraphs"][1]["qas"]}
    assert {"tower-0-0" + PAIR_SUFFIX, "tower-0-1" + PAIR_SUFFIX} <= paragraph_1
    assert V11["data"][0]["paragraphs"][1]["qas"][-1]["id"] == "tower-1-0"  # the input is not changed


def test_pairs_are_seeded_and_follow_the_rate():
    a1, c1 = unanswerable_pairs(V11["data"], rate=0.5, seed=3)
    a2, c2 = unanswerable_pairs(V11["data"], rate=0.5, seed=3)
    assert a1 == a2 and c1 == c2
    assert unanswerable_pairs(V11["data"], rate=0.0, seed=3)[1]["made"] == 0
    with pytest.raises(ValueError, match="rate"):
        unanswerable_pairs(V11["data"], rate=1.5, seed=0)


def test_overlap_pairing_takes_the_paragraph_sharing_most_words_with_the_question():
    paragraphs = [
        {
            "context": "The castle was built in 1200 by the duke.",
            "qas": [
                {
                    "id": "q",
                    "question": "Who built the castle on the hill by the river?",
                    "answers": [{"text": "the duke", "answer_start": 33}],
                }
            ],
        },
        {"context": "Sheep graze in the fields.", "qas": []},
        {"context": "The castle on the hill overlooks the river and the old bridge.", "qas": []},
        {"context": "Rain falls in spring.", "qas": []},
    ]
    articles = [{"title": "Castle", "paragraphs": paragraphs}]
    made, counts = unanswerable_pairs(articles, rate=1.0, seed=0, pairing="overlap")
    assert counts["made"] == 1
    assert [qa["id"] for qa in made[0]["paragraphs"][2]["qas"]] == ["q" + PAIR_SUFFIX]
    for seed in range(5):  # whatever the seed: the draw is among the paragraphs sharing the most words
        got = unanswerable_pairs(articles, rate=1.0, seed=seed, pairing="overlap")[0]
        assert got[0]["paragraphs"][2]["qas"]
    with pytest.raises(ValueError, match="pairing"):
        unanswerable_pairs(articles, rate=1.0, seed=0, pairing="nearest")


def test_build_splits_v2_dev_by_article_position(tmp_path):
    train, dev = _write(tmp_path / "train.json.gz", V11), _write(tmp_path / "dev.json.gz", _v2_dev(8))
    report = build_no_answer_data(train, dev, tmp_path / "out", rate=1.0, seed=0)
    out = tmp_path / "out"
    tune_ids, eval_ids, train_ids = _ids(out / TUNE_FILE), _ids(out / EVAL_FILE), _ids(out / TRAIN_FILE)
    assert {i.split("-")[0] for i in eval_ids} == {"dev1", "dev3", "dev5", "dev7"}
    assert {i.split("-")[0] for i in tune_ids} == {"dev2", "dev6"}
    assert {i.split("-")[0] for i in train_ids if i.startswith("dev")} == {"dev0", "dev4"}
    assert not (eval_ids & train_ids) and not (eval_ids & tune_ids) and not (tune_ids & train_ids)
    assert report["eval"] == {
        "file": EVAL_FILE,
        "articles": 4,
        "paragraphs": 4,
        "questions": 8,
        "unanswerable": 4,
        "answerable": 4,
    }
    assert report["train"]["unanswerable"] == 4 + 2  # made pairs + the dev quarter's
    assert read_squad(out / TRAIN_FILE).report.version == "2.0"
    assert json.loads((out / "report.json").read_text())["pairs"]["made"] == 4


def test_repeat_writes_the_v2_training_quarter_again_with_unique_ids(tmp_path):
    train, dev = _write(tmp_path / "train.json.gz", V11), _write(tmp_path / "dev.json.gz", _v2_dev(8))
    once = build_no_answer_data(train, dev, tmp_path / "once", rate=1.0, seed=0)
    thrice = build_no_answer_data(train, dev, tmp_path / "thrice", rate=1.0, seed=0, repeat=3)
    ids = _ids(tmp_path / "thrice" / TRAIN_FILE)
    quarter = {i for i in _ids(tmp_path / "once" / TRAIN_FILE) if i.startswith("dev")}
    assert {i for i in ids if i.startswith("dev")} == quarter | {f"{i}-copy{k}" for i in quarter for k in (1, 2)}
    assert thrice["train"]["unanswerable"] == 4 + 3 * 2 and thrice["repeat"] == 3 and once["repeat"] == 1
    assert read_squad(tmp_path / "thrice" / TRAIN_FILE).report.questions == len(ids)  # every id read, none a duplicate
    assert _ids(tmp_path / "thrice" / EVAL_FILE) == _ids(tmp_path / "once" / EVAL_FILE)
    with pytest.raises(ValueError, match="at least 1"):
        build_no_answer_data(train, dev, tmp_path / "none", repeat=0)


def test_build_refuses_a_v1_file_as_the_v2_dev(tmp_path):
    train = _write(tmp_path / "train.json.gz", V11)
    with pytest.raises(SquadFormatError, match="not a SQuAD v2.0 file"):
        build_no_answer_data(train, train, tmp_path / "out")


def test_cli_on_the_shared_files(shared_data, tmp_path):
    out = tmp_path / "na"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rckit",
            "prepare",
            "squad-no-answer",
            "--json",
            "--data-dir",
            str(shared_data / "squad-v1.1"),
            "--dev",
            str(shared_data / "squad-v2.0" / "dev-v2.0.reconstructed.json.gz"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    # The evaluation half: the articles at odd positions of v2.0 dev (the 5,952 / 3,070).
    assert (report["eval"]["questions"], report["eval"]["unanswerable"]) == (5952, 3070)
    assert report["pairs"]["made"] > 40000
    assert not (_ids(out / EVAL_FILE) & (_ids(out / TRAIN_FILE) | _ids(out / TUNE_FILE)))
