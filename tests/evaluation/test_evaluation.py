"""Evaluation: the run's decode settings (saved, used, read from old runs) and one entry for both tasks."""

import json
import shutil

import numpy as np
import pytest
import torch

from rckit.answering.decoding import DecodeConfig, decode_config_of
from rckit.cli import main
from rckit.data.cloze.dataset import load_cloze_data
from rckit.data.cloze.synthetic import write_synthetic_cloze
from rckit.data.prepare import featurize
from rckit.data.squad import read_squad
from rckit.evaluation.split_answers import predict, predict_cloze, predict_split
from rckit.model_files.checkpoint import load_checkpoint, save_checkpoint
from rckit.model_files.load import load_model
from rckit.models import MODELS
from tests.conftest import GLOVE_WORDS, TINY, squad_json, write_json
from tests.conftest import GREEK as WORDS
from tests.conftest import TINY_QANET as TINY_MODEL
from tests.conftest import TINY_QANET_TRAIN as TINY_TRAIN
from tests.conftest import greek_paragraphs as _paragraphs


@pytest.fixture(scope="module")
def one_token_run(tmp_path_factory):
    """A tiny QANet run trained with ``--set decode.max_answer_len=1``; its dev file."""
    root = tmp_path_factory.mktemp("decode")
    train_f = write_json(root / "train.json", squad_json(_paragraphs(4)))
    dev_f = write_json(root / "dev.json", squad_json(_paragraphs(3)))
    lines = [
        f"{w} " + " ".join(f"{(i + 1) * 0.1 + k:.2f}" for k in range(4)) for i, w in enumerate(GLOVE_WORDS + WORDS)
    ]
    (root / "glove.txt").write_text("\n".join(lines) + "\n")
    (root / "tiny.json").write_text(json.dumps({"model": TINY_MODEL, "train": TINY_TRAIN}))
    run = root / "run"
    assert (
        main(
            [
                "train",
                "qanet",
                "--preset",
                str(root / "tiny.json"),
                "--set",
                "decode.max_answer_len=1",
                "--out",
                str(run),
                "--max-steps",
                "2",
                "--train",
                str(train_f),
                "--dev",
                str(dev_f),
                "--embeddings",
                str(root / "glove.txt"),
                "--cache-dir",
                str(root / "cache"),
                "--no-progress",
            ]
        )
        == 0
    )
    return run, dev_f


def _evaluate(run, tmp_path, capsys, name="preds.json") -> dict:
    capsys.readouterr()
    preds = tmp_path / name
    assert main(["evaluate", str(run), "--out", str(preds)]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == 9
    return json.loads(preds.read_text())


def _as_old_run(run, dest, train_config_field):
    """A copy of ``run`` as rckit wrote it before decoding had its own section."""
    shutil.copytree(run, dest)
    for name in ("best.pt", "last.pt"):
        ckpt = load_checkpoint(dest / name)
        del ckpt["decode"]
        ckpt["train_config"].pop("max_answer_len", None)
        ckpt["train_config"].update(train_config_field)
        save_checkpoint({k: v for k, v in ckpt.items() if k != "format"}, dest / name)
    config = json.loads((dest / "config.json").read_text())
    del config["decode"]
    config["train_config"].update(train_config_field)
    (dest / "config.json").write_text(json.dumps(config))
    return dest


def test_decode_settings_are_saved_with_the_run_and_used_to_answer(one_token_run, tmp_path, capsys):
    run, _ = one_token_run
    config = json.loads((run / "config.json").read_text())
    ckpt = load_checkpoint(run / "best.pt")
    assert config["decode"] == ckpt["decode"] == {"max_answer_len": 1, "no_answer_threshold": 0.0}
    assert "max_answer_len" not in config["train_config"] and "max_answer_len" not in ckpt["train_config"]
    preds = _evaluate(run, tmp_path, capsys)
    assert len(preds) == 9 and all(text and " " not in text for text in preds.values())  # one word each
    capsys.readouterr()
    ctx = "alpha beta gamma delta epsilon zeta eta theta."
    assert main(["predict", str(run), "--context", ctx, "--question", "what follows alpha ?", "--json"]) == 0
    ans = json.loads(capsys.readouterr().out)
    assert ans["answer"] and " " not in ans["answer"] and ctx[ans["start"] : ans["end"]] == ans["answer"]


def test_old_runs_decode_with_their_train_config_setting_or_the_default(one_token_run, tmp_path, capsys):
    run, _ = one_token_run
    new = _evaluate(run, tmp_path, capsys, "new.json")
    old = _evaluate(_as_old_run(run, tmp_path / "old", {"max_answer_len": 1}), tmp_path, capsys, "old.json")
    assert old == new
    # Older still: no setting anywhere, the default (30) decodes, as with an explicit decode section of 30.
    neither = _evaluate(_as_old_run(run, tmp_path / "neither", {}), tmp_path, capsys, "neither.json")
    explicit = tmp_path / "explicit"
    shutil.copytree(run, explicit)
    for name in ("best.pt", "last.pt"):
        ckpt = load_checkpoint(explicit / name)
        ckpt["decode"] = {"max_answer_len": 30}
        save_checkpoint({k: v for k, v in ckpt.items() if k != "format"}, explicit / name)
    assert neither == _evaluate(explicit, tmp_path, capsys, "explicit.json")
    assert neither != new  # so the first comparison could have failed: this run answers longer at 30
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "old"), "--context", "alpha beta gamma.", "--question", "what ?"]) == 0
    assert " " not in capsys.readouterr().out.strip()


def test_decode_config_of_reads_every_layout():
    both = {"decode": {"max_answer_len": 7}, "train_config": {"max_answer_len": 12}}
    assert decode_config_of(both) == DecodeConfig(7)  # the section wins
    assert decode_config_of({"train_config": {"max_answer_len": 12}}) == DecodeConfig(12)
    assert decode_config_of({"train_config": {}}) == decode_config_of({}) == DecodeConfig(30)
    with pytest.raises(ValueError, match="unknown fields"):
        decode_config_of({"decode": {"top_p": 0.9}})


def test_predict_on_a_squad_split_decodes_spans(one_token_run):
    run, dev_f = one_token_run
    model, vocabs, _ = load_model(run)
    split, _ = featurize(read_squad(dev_f), vocabs)
    got = predict(model, split)  # the default decode settings
    assert isinstance(got, dict) and len(got) == len(split)
    assert got == predict_split(model, split, None, 32, DecodeConfig(30))
    short = predict(model, split, [0, 2, 4], decode=DecodeConfig(max_answer_len=1))
    assert set(short) == {split.qids[i] for i in (0, 2, 4)}
    assert short == predict_split(model, split, [0, 2, 4], 32, DecodeConfig(1)) and all(
        " " not in t for t in short.values()
    )


def test_predict_on_a_cloze_split_picks_entities(tmp_path):
    data = load_cloze_data(write_synthetic_cloze(tmp_path / "syn", 40, 20, seed=0), embeddings=None)
    cfg_cls, model_cls = MODELS["deep_lstm_reader"]
    torch.manual_seed(0)
    config = cfg_cls(**{**TINY[("deep_lstm_reader", "cloze")], "depth": 1, "dropout": 0.0})
    model = model_cls(config, data.embedding_info())
    got = predict(model, data.dev)
    assert isinstance(got, np.ndarray) and got.dtype == np.int64 and got.shape == (len(data.dev),)
    assert np.array_equal(got, predict_cloze(model, data.dev, np.arange(len(data.dev))))
    rows = np.array([3, 1, 7])
    assert np.array_equal(predict(model, data.dev, rows, decode=DecodeConfig(1)), got[rows])  # decode: spans only


def test_every_kind_of_source_is_evaluated_through_the_reader_opened_once(one_token_run, tmp_path, monkeypatch):
    """One route from a model to SQuAD answers: a run, its checkpoint and its exported file give
    the answers the Reader gives, each source told apart once."""
    import rckit.model_files.source as source_module
    from rckit.answering.reader import Reader
    from rckit.evaluation.evaluate import evaluate

    run, dev_f = one_token_run
    exported = tmp_path / "run.safetensors"
    assert main(["export", str(run), "--out", str(exported)]) == 0
    reader = Reader.load(run, always_answer=True)
    expected = {}
    for ex in read_squad(dev_f).examples:
        expected[ex.qid] = reader.answer(ex.context, ex.question)[0]["answer"]

    opened = []
    real = source_module.open_model

    def counting(source=None):
        if not isinstance(source, source_module.ModelFile):
            opened.append(source)
        return real(source)

    for module in ("rckit.evaluation.evaluate", "rckit.answering.reader", "rckit.model_files.load"):
        monkeypatch.setattr(f"{module}.open_model", counting)
    for source in (run, run / "best.pt", exported):
        opened.clear()
        out = tmp_path / "preds.json"
        result = evaluate(source, dev_f, out=out, progress=False)
        assert result["total"] == 9 and opened == [source]
        assert json.loads(out.read_text()) == expected
