"""The verifier trained with questions made by rule (issue 52): the reader's features of each
pair read once and kept (:class:`FeatureCache`), the adversarial filter keeping what the reader
still answers with confidence, ``rckit prepare squad-unanswerable --filter-with``, the made set
as training pairs, and the threshold the verifier carries (98 % of the answers kept, or the best F1)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from rckit.answering.reader import Reader
from rckit.data import unanswerable as U
from rckit.training import made_filter
from rckit.training import verifier as tv
from tests.conftest import greek_paragraphs, squad_json, write_json


@pytest.fixture(scope="module")
def reader(tiny_export) -> Reader:
    return Reader.load(tiny_export, "cpu", always_answer=True)


def greek_pairs(n: int, seed: int = 0) -> list[tv.Pair]:
    rng = random.Random(seed)
    pairs = []
    for context, qas in greek_paragraphs(4):
        for qid, question, _ in qas:
            asked = f"{question} ({qid})"  # the contexts repeat their words: each pair its own
            pairs.append(tv.Pair(context, asked, rng.random() < 0.5, "answerable", qid))
    return pairs[:n]


def counting(monkeypatch) -> list[int]:
    """How many pairs each call of read_features reads."""
    calls: list[int] = []
    real = tv.read_features

    def read(reader, pairs, progress=None):
        calls.append(len(pairs))
        return real(reader, pairs, progress)

    monkeypatch.setattr(tv, "read_features", read)
    return calls


def test_the_feature_cache_reads_each_pair_once_and_gives_what_reading_gives(reader, tmp_path, monkeypatch):
    pairs = greek_pairs(12)
    want_x, want_texts = tv.read_features(reader, pairs)
    calls = counting(monkeypatch)
    x, texts = tv.cached_features(reader, pairs[:8], tmp_path)
    assert calls == [8] and np.allclose(x, want_x[:8]) and texts == want_texts[:8]
    # Another process, more pairs, some repeated and out of order: only the new ones are read.
    again = [pairs[10], pairs[3], pairs[11], pairs[3]]
    x, texts = tv.cached_features(reader, again, tmp_path)
    assert calls == [8, 2]
    assert np.allclose(x, want_x[[10, 3, 11, 3]]) and texts == [want_texts[i] for i in (10, 3, 11, 3)]
    tv.cached_features(reader, pairs, tmp_path)
    assert calls == [8, 2, 2]
    assert len(list(tmp_path.glob("verifier-features-*.npz"))) == 1  # one file per reader, grown


def test_a_damaged_feature_cache_is_refused_naming_it(reader, tmp_path):
    tv.cached_features(reader, greek_pairs(2), tmp_path)
    (path,) = tmp_path.glob("verifier-features-*.npz")
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ValueError, match=f"{path}: not a verifier feature cache"):
        tv.cached_features(reader, greek_pairs(2), tmp_path)


def test_the_cache_is_the_readers_not_its_files(tiny_export, tmp_path):
    """Putting a verifier into the file (rckit verifier --into) does not change what it reads."""
    import shutil

    from rckit.export.metadata_edit import set_verifier
    from tests.answering.test_verifier import random_verifier

    other = tmp_path / "other.safetensors"
    shutil.copy(tiny_export, other)
    set_verifier(other, random_verifier(), {})
    a = tv.reader_key(Reader.load(tiny_export, "cpu", always_answer=True))
    assert a == tv.reader_key(Reader.load(other, "cpu", always_answer=True))


def made_set(n_rules: dict[str, int]) -> U.MadeSet:
    out = U.MadeSet()
    for rule, n in n_rules.items():
        for i in range(n):
            out.made.append(U.Made(f"s{i}:{rule}", f"s{i}", rule, "T", f"context {i}", f"question {i} {rule}?", []))
    return out


def test_the_adversarial_filter_keeps_the_confident_and_reports_per_rule():
    made = made_set({"entity_swap": 4, "negation": 2})
    report = made_filter.adversarial_filter(made, np.array([0.9, 0.1, 0.3, 0.29, 0.5, 0.05]), 0.3, "r")
    assert [m.qid for m in made.made] == ["s0:entity_swap", "s2:entity_swap", "s0:negation"]
    assert [m.confidence for m in made.made] == [0.9, 0.3, 0.5]
    assert report["per_rule"]["entity_swap"]["made"] == 4 and report["per_rule"]["entity_swap"]["kept"] == 2
    assert report["per_rule"]["negation"] == {"made": 2, "kept": 1, "confidence_quartiles": [0.163, 0.275, 0.388]}
    assert all(qa["reader_confidence"] >= 0.3 for a in made.squad()["data"] for p in a["paragraphs"] for qa in p["qas"])
    with pytest.raises(ValueError, match="2 confidences for 3"):
        made_filter.adversarial_filter(made, np.array([0.5, 0.5]), 0.3, "r")


def greek_article(title: str, paragraphs) -> dict:
    return squad_json(paragraphs, title=title)["data"][0]


def test_prepare_filters_with_a_reader_and_says_what_it_kept(tiny_export, reader, tmp_path, capsys):
    from rckit.cli import main
    from tests.data.test_unanswerable import ARTICLE

    train = write_json(tmp_path / "train.json", {"version": "1.1", "data": [ARTICLE]})
    out = tmp_path / "made"
    base = ["prepare", "squad-unanswerable", "--train", str(train), "--rules", "other_paragraph", "--no-progress"]
    assert main([*base, "--out", str(out / "all")]) == 0
    everything = json.loads((out / "all" / "made.json").read_text())
    made = [qa for p in everything["data"][0]["paragraphs"] for qa in p["qas"]]
    assert made and all("reader_confidence" not in qa for qa in made)
    # The confidence the filter reads is the reader's own best span probability on that pair.
    probe = made[0]
    context = next(p["context"] for p in everything["data"][0]["paragraphs"] if probe in p["qas"])
    p_best = reader.answer(context, probe["question"])[0]["score"]
    threshold = round(p_best, 4)
    assert (
        main(
            [
                *base,
                "--out",
                str(out / "kept"),
                "--filter-with",
                str(tiny_export),
                "--min-confidence",
                str(threshold),
                "--features-cache",
                str(tmp_path / "fc"),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    report = json.loads((out / "kept" / "report.json").read_text())
    kept = [
        qa
        for a in json.loads((out / "kept" / "made.json").read_text())["data"]
        for p in a["paragraphs"]
        for qa in p["qas"]
    ]
    assert report["made"]["other_paragraph"] == len(made) and report["kept"]["other_paragraph"] == len(kept)
    assert report["filtered"]["per_rule"]["other_paragraph"]["kept"] == len(kept) >= 1
    assert all(qa["reader_confidence"] >= threshold for qa in kept)
    assert f"kept by {tiny_export.name}" in printed
    assert list((tmp_path / "fc").glob("verifier-features-*.npz"))  # rckit verifier --cache reads them from here
    assert main([*base, "--out", str(out / "x"), "--min-confidence", "1.5"]) == 2
    assert "--min-confidence 1.5" in capsys.readouterr().err


def test_made_pairs_take_up_to_per_kind_of_each_rule_and_refuse_an_answerable_one():
    made = made_set({"entity_swap": 5, "negation": 2}).squad()
    pairs = tv.made_pairs(made, 3, random.Random(0))
    kinds = [p.kind for p in pairs]
    assert kinds.count("made_entity_swap") == 3 and kinds.count("made_negation") == 2
    assert all(p.unanswerable for p in pairs)
    made["data"][0]["paragraphs"][0]["qas"][0]["is_impossible"] = False
    with pytest.raises(ValueError, match="not marked is_impossible"):
        tv.made_pairs(made, 3, random.Random(0))


def v2_dev() -> dict:
    """Four articles: the training quarter (0), the evaluation half (1, 3: never read) and the tuning quarter (2)."""
    articles = []
    for a in range(4):
        paras = []
        for context, qas in greek_paragraphs(3):
            answerable = [(f"d{a}{qid}", q, ans, False) for qid, q, ans in qas]
            unanswerable = [(f"d{a}{qid}x", q.replace("follows", "precedes omega"), [], True) for qid, q, _ in qas]
            paras.append((context, answerable + unanswerable))
        articles.append(squad_json(paras, version="2.0", title=f"D{a}")["data"][0])
    return {"version": "v2.0", "data": articles}


def test_train_verifier_reads_the_made_questions_and_carries_the_threshold_asked_for(reader, tmp_path):
    train = write_json(
        tmp_path / "train.json",
        {"version": "1.1", "data": [greek_article(f"G{i}", greek_paragraphs(3 + i)) for i in range(3)]},
    )
    dev = write_json(tmp_path / "dev-v2.0.json", v2_dev())
    made = made_set({"entity_swap": 3, "negation": 3})
    for m, (context, _) in zip(made.made, greek_paragraphs(6)):
        m.context = context
    made_file = write_json(tmp_path / "made.json", made.squad())
    forms = [(0, 1.0)]
    v, record = tv.train_verifier(
        reader, train, dev, 4, cache=tmp_path / "fc", forms=forms, log=lambda m: None, made=made_file
    )
    assert record["trained_on"]["made_entity_swap"] == 3 and record["trained_on"]["made_negation"] == 3
    assert record["made"] == "made.json"
    tuning = record["tuning"]
    assert v.threshold == pytest.approx(tuning["keeping"]["threshold"]) and tuning["default"]["rule"] == "keep"
    assert tuning["keeping"]["keeps"] == 0.98
    best, _ = tv.train_verifier(
        reader, train, dev, 4, cache=tmp_path / "fc", forms=forms, log=lambda m: None, made=made_file, default="best_f1"
    )
    assert best.threshold == pytest.approx(tuning["best_f1"]["threshold"])
    with pytest.raises(ValueError, match="best_f1 or keep"):
        tv.train_verifier(reader, train, dev, 4, forms=forms, log=lambda m: None, default="most")
