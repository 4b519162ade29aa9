"""Adapting a reader to one's own documents: the split by document, the SQuAD mix, the model's
vocabulary extended, the fine-tune's settings, and ``rckit adapt`` from a trained run to a file
that answers."""

import json
from collections import Counter

import numpy as np
import pytest

from rckit.data.adapt import adapt_files, split_documents, squad_sample
from rckit.data.prepare import PrepareConfig, prepare_squad
from rckit.data.squad import read_squad
from rckit.data.vocab import Pretrained, Vocab, Vocabularies, extend_word_vocab
from rckit.training.adapt import adapt_train_config
from tests.conftest import GREEK, greek_paragraphs, squad_json, write_json


def articles(n_docs: int, per_doc: int = 2) -> list[dict]:
    """``n_docs`` documents of Greek-letter paragraphs, ``per_doc`` paragraphs of 3 questions each."""
    out = []
    for d in range(n_docs):
        doc = squad_json(greek_paragraphs(per_doc), title=f"doc{d}")["data"][0]
        for p in doc["paragraphs"]:
            for qa in p["qas"]:
                qa["id"] = f"doc{d}-{qa['id']}"
        out.append(doc)
    return out


def test_split_keeps_each_document_whole_and_is_seeded():
    docs = articles(10)
    train, dev, unit = split_documents(docs, 0.2, seed=3)
    assert unit == "document"
    assert {a["title"] for a in train}.isdisjoint(a["title"] for a in dev)
    assert len(train) + len(dev) == 10
    n = lambda arts: sum(len(p["qas"]) for a in arts for p in a["paragraphs"])  # noqa: E731
    assert n(dev) >= 0.2 * n(docs) and len(dev) == 2  # 6 questions a document: 2 documents reach 20 %
    assert split_documents(docs, 0.2, seed=3) == (train, dev, unit)
    assert split_documents(docs, 0.2, seed=4)[1] != dev


def test_one_document_is_split_by_paragraph_and_one_paragraph_is_refused():
    train, dev, unit = split_documents(articles(1, per_doc=5), 0.2, seed=0)
    assert unit == "paragraph" and len(train) == 4 and len(dev) == 1
    with pytest.raises(ValueError, match="at least two paragraphs"):
        split_documents(articles(1, per_doc=1), 0.2, seed=0)
    with pytest.raises(ValueError, match="between 0 and 1"):
        split_documents(articles(3), 1.5, seed=0)


def test_squad_sample_takes_whole_paragraphs(tmp_path):
    squad = write_json(tmp_path / "train.json", {"version": "1.1", "data": articles(6)})
    sample = squad_sample(squad, 7, seed=1)
    paragraphs = [p for a in sample for p in a["paragraphs"]]
    assert sum(len(p["qas"]) for p in paragraphs) == 9  # three whole paragraphs of three: at least 7
    assert squad_sample(squad, 7, seed=1) == sample and squad_sample(squad, 0, seed=1) == []


def test_adapt_files_write_readable_squad_files(tmp_path):
    labels = write_json(tmp_path / "labels.json", {"version": "1.0", "data": articles(5)})
    squad = write_json(tmp_path / "squad.json", {"version": "1.1", "data": articles(8)})
    files = adapt_files(labels, tmp_path / "out", squad_train=squad, squad_mix=1.0, dev_share=0.2, seed=0)
    c = files.counts
    assert (c["train_documents"], c["dev_documents"], c["train_questions"], c["dev_questions"]) == (4, 1, 24, 6)
    assert c["squad_questions"] >= 24
    train, dev = read_squad(files.train), read_squad(files.dev)
    assert len(train.examples) == c["train_questions"] + c["squad_questions"] and len(dev.examples) == 6
    assert not {e.qid for e in dev.examples} & {e.qid for e in train.examples}
    fewer = adapt_files(labels, tmp_path / "fewer", squad_mix=0, seed=0, limit=5)
    assert fewer.counts["train_questions"] == 5 and fewer.counts["dev_questions"] == 6  # dev unchanged
    with pytest.raises(ValueError, match="--squad-mix 0"):
        adapt_files(labels, tmp_path / "none", squad_mix=1.0)


def test_extended_vocabulary_keeps_every_word_in_its_part():
    pre = Pretrained(["the", "paris", "denver", "tower"], np.eye(4, dtype=np.float32), "tiny")
    base = Vocab(["<pad>", "<unk>", "zyx", "the", "paris"], n_trainable=3)  # "zyx": a trained row
    counts = Counter({"denver": 3, "the": 5, "qqq": 4, "rare": 1})
    v = extend_word_vocab(base, counts, pre, extra_words=["tower"], trainable_min_count=2)
    assert v.itos == ["<pad>", "<unk>", "zyx", "qqq", "the", "paris", "denver", "tower"] and v.n_trainable == 4
    with pytest.raises(ValueError, match="no vector in tiny"):
        extend_word_vocab(Vocab(["<pad>", "<unk>", "unseen"], 2), counts, pre)


def test_prepare_extends_the_model_vocabulary(tiny_squad, tiny_glove, tmp_path):
    train, dev = tiny_squad
    first = prepare_squad(train, {"dev": dev}, tmp_path / "a", PrepareConfig(embeddings=str(tiny_glove)))
    base = tmp_path / "base.json"
    base.write_text(json.dumps(first.vocabs.to_json()))
    new = write_json(tmp_path / "new.json", squad_json([("The tower of Paris.", [("n1", "What?", [("tower", 4)])])]))
    cfg = PrepareConfig(embeddings=str(tiny_glove), base_vocab=str(base))
    second = prepare_squad(new, {"dev": new}, tmp_path / "b", cfg)
    old, grown = first.vocabs.words, second.vocabs.words
    assert grown.itos[: old.n_trainable] == old.itos[: old.n_trainable]
    assert set(old.itos) <= set(grown.itos) and "denver" in grown.stoi  # not in the new text, kept
    assert set(second.vocabs.chars.itos) >= set(first.vocabs.chars.itos)
    assert Vocabularies.from_json(second.vocabs.to_json()).words.itos == grown.itos
    base.write_text(json.dumps({**first.vocabs.to_json(), "words": old.itos[:-1]}))  # another base: another cache
    assert prepare_squad(new, {"dev": new}, tmp_path / "b", cfg).root != second.root


def test_adapt_train_config_is_a_short_low_rate_run():
    cfg, steps = adapt_train_config(
        {
            "batch_size": 32,
            "lr": 0.002,
            "warmup_steps": 500,
            "ema_decay": 0.9999,
            "decay_from": 7500,
            "decay_steps": 4000,
            "reward_from": 3000,
        },
        600,
        epochs=4,
    )
    assert steps == 4 * 19 and cfg.eval_every == 19 and cfg.checkpoint_every == 19 and cfg.eval_questions == 0
    assert cfg.lr == pytest.approx(0.0002) and cfg.warmup_steps == 0 and cfg.ema_decay == 0.0
    assert cfg.decay_steps == 0 and cfg.decay_share == 1.0 and cfg.reward_from == 0 and cfg.batch_size == 32
    with pytest.raises(ValueError, match="epochs"):
        adapt_train_config({}, 10, epochs=0)


def test_rckit_adapt_from_a_run_to_a_file_that_answers(tiny_run, tmp_path, capsys):
    from rckit.cli import main
    from rckit.model_files.metadata import read_metadata

    labels = articles(4)
    labels[0]["paragraphs"][0]["context"] += " denver broncos"  # words the model never read
    labels_f = write_json(tmp_path / "labels.json", {"version": "1.1", "data": labels})
    squad = write_json(tmp_path / "squad.json", {"version": "1.1", "data": articles(3)})
    out = tmp_path / "adapted"
    args = [
        "adapt",
        str(tiny_run),
        "--labels",
        str(labels_f),
        "--out",
        str(out),
        "--squad-train",
        str(squad),
        "--embeddings",
        str(tiny_run.parent / "glove.txt"),
        "--epochs",
        "2",
        "--cache-dir",
        str(tmp_path / "c"),
        "--no-progress",
        "--device",
        "cpu",
    ]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["train_questions"] == 18 and report["dev_questions"] == 6 and report["steps"] == 2 * 9
    assert set(report["dev_before"]) == {"exact_match", "f1"} and 0 <= report["dev_after"]["f1"] <= 100
    meta = read_metadata(out / "model.safetensors")
    assert "denver" in meta["vocab"]["words"] and set(GREEK) <= set(meta["vocab"]["words"])
    assert json.loads((out / "adapt.json").read_text())["dev_after"] == report["dev_after"]
    context = labels[1]["paragraphs"][0]["context"]
    assert (
        main(
            [
                "predict",
                "--model",
                str(out / "model.safetensors"),
                "--context",
                context,
                "--question",
                "what follows alpha ?",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.strip()
    assert main(args) == 2  # the run is there: go on with --resume, or another --out
    assert "--resume" in capsys.readouterr().err


def sentence_articles(n_docs: int) -> list[dict]:
    """``n_docs`` documents of two paragraphs, each three sentences of Greek letters with a
    question on each sentence (so a near miss can be cut from every paragraph)."""
    out = []
    for d in range(n_docs):
        paragraphs = []
        for p in range(2):
            words = [GREEK[(d * 7 + p * 5 + i) % len(GREEK)] for i in range(9)]
            sentences = [" ".join(words[k : k + 3]).capitalize() + "." for k in (0, 3, 6)]
            context = " ".join(sentences)
            qas = []
            for s, sentence in enumerate(sentences):
                first, second = sentence.rstrip(".").split()[:2]
                start = context.index(sentence) + len(first) + 1
                qas.append((f"doc{d}-p{p}-s{s}", f"what follows {first} ?", [(second, start)]))
            paragraphs.append((context, qas))
        out.append(squad_json(paragraphs, title=f"doc{d}")["data"][0])
    return out


def test_near_misses_are_cut_from_the_training_passages_and_never_hold_the_answer():
    from rckit.data.near_miss import NearMissConfig, with_near_misses
    from rckit.data.unanswerable import holds_answer

    given = sentence_articles(3)
    got, counts = with_near_misses(given, NearMissConfig(seed=1))
    questions = [(p["context"], qa) for a in got for p in a["paragraphs"] for qa in p["qas"]]
    unanswerable = [(c, qa) for c, qa in questions if qa.get("is_impossible")]
    assert counts["in_file"] == len(unanswerable) > 0 and counts["made"] >= counts["in_file"]
    assert abs(len(unanswerable) / len(questions) - 1 / 3) < 0.15  # about the target share
    for context, qa in unanswerable:
        assert qa["kind"] == "sentence_removed" and not holds_answer(
            context.lower(), {a["text"].lower() for a in qa["plausible_answers"]}
        )
    originals = [p["context"] for a in given for p in a["paragraphs"]]
    assert [p["context"] for a in got for p in a["paragraphs"] if p["context"] in originals] == originals


def test_rckit_adapt_from_rckits_own_reader_to_a_reader_file(tmp_path, capsys):
    from rckit.answering.pointer_reader import PointerReader
    from rckit.cli import main
    from rckit.model_files.reader_file import is_reader_file, reader_metadata
    from tests.conftest import write_tiny_reader_file

    source = write_tiny_reader_file(tmp_path / "reader", threshold=0.6)
    labels = write_json(tmp_path / "labels.json", {"version": "1.1", "data": sentence_articles(5)})
    squad = write_json(tmp_path / "squad.json", {"version": "1.1", "data": sentence_articles(2)})
    out = tmp_path / "adapted"
    args = ["adapt", str(source), "--labels", str(labels), "--out", str(out), "--squad-train", str(squad)]
    args += ["--epochs", "2", "--lr-scale", "5", "--no-progress"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["train_questions"] + report["dev_questions"] == 30 and report["near_misses"] > 0
    made = json.loads((out / "data" / "train-near-miss.json").read_text())["data"]
    assert (
        sum(qa.get("is_impossible", False) for a in made for p in a["paragraphs"] for qa in p["qas"])
        == report["near_misses"]
    )
    assert is_reader_file(out / "model.safetensors")
    meta, first = reader_metadata(out / "model.safetensors"), reader_metadata(source)
    assert meta["adapted_from"] == str(source) and meta["tokenizer"] == first["tokenizer"]
    assert (meta["calibration"], meta["threshold"]) == (first["calibration"], first["threshold"])
    assert meta["scores"][-1]["f1"] == pytest.approx(report["dev_after"]["f1"])
    lines = [json.loads(x) for x in (out / "run" / "log.jsonl").read_text().splitlines()]
    assert len(lines) == 2 and lines[-1]["step"] == report["steps"]  # one evaluation an epoch
    assert lines[-1]["loss"] < lines[0]["loss"]  # it learnt from the labels (a high rate, two epochs)
    adapted = PointerReader.load(out / "model.safetensors")
    context = json.loads(labels.read_text())["data"][0]["paragraphs"][0]["context"]
    question = "what follows " + context.split()[0] + " ?"
    assert adapted.answer(context, question) != PointerReader.load(source).answer(context, question)
    assert main(args) == 2  # the run is there: go on with --resume, or another --out
    assert "--resume" in capsys.readouterr().err
    assert main([*args, "--resume"]) == 0  # a finished run: the same file again
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["dev_after"] == report["dev_after"]
