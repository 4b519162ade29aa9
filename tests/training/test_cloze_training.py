"""The engine beyond QANet: cloze data, the Deep LSTM Reader's span head, DCN/DCN+ losses, sweeps."""

from __future__ import annotations

import json
import random

import pytest
import torch

from rckit.cli import main
from rckit.data.cloze.dataset import load_cloze_data
from rckit.data.cloze.examples import ClozeExample, write_cloze_jsonl
from rckit.model_files.checkpoint import load_checkpoint
from rckit.models.deep_lstm_reader import DeepLSTMReader, DeepLSTMReaderConfig
from rckit.training.loop import TrainConfig, train
from rckit.training.sweep import plan_trials
from rckit.training.tasks import ClozeTask
from tests.conftest import TINY

WORDS = "red green blue cyan pink gold grey teal lime navy plum rust sand snow".split()
TINY_READER = {**{k: v for k, v in TINY[("deep_lstm_reader", "cloze")].items() if k != "head"}, "dropout": 0.0}
TINY_TRAIN = {
    "optimizer": "rmsprop",
    "lr": 0.003,
    "batch_size": 4,
    "warmup_steps": 0,
    "log_every": 1,
    "eval_every": 3,
    "eval_questions": 0,
    "checkpoint_every": 2,
    "ema_decay": 0.9,
}


def cloze_examples(n: int, seed: int, prefix: str) -> list[ClozeExample]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        doc = rng.sample(WORDS, 8)
        ents = rng.sample(range(5), 3)
        for slot, e in zip((1, 4, 7), ents):
            doc[slot] = f"@entity{e}"
        k = rng.randrange(3)
        cue = doc[(1, 4, 7)[k] - 1]
        out.append(
            ClozeExample(
                f"{prefix}{i}",
                doc,
                ["@placeholder", "follows", cue],
                f"@entity{ents[k]}",
                [f"@entity{e}" for e in ents],
            )
        )
    return out


@pytest.fixture
def cloze_dir(tmp_path, tiny_glove):
    root = tmp_path / "cloze"
    root.mkdir()
    write_cloze_jsonl(root / "train.jsonl", cloze_examples(24, 0, "t"))
    write_cloze_jsonl(root / "dev.jsonl", cloze_examples(10, 1, "d"))
    preset = tmp_path / "reader.json"
    preset.write_text(json.dumps({"model": {"head": "cloze", **TINY_READER}, "train": TINY_TRAIN}))
    return root, ["--cloze-data", str(root), "--embeddings", str(tiny_glove), "--preset", str(preset), "--no-progress"]


def test_cloze_data_layout_and_vectors(cloze_dir, tiny_glove):
    root, _ = cloze_dir
    data = load_cloze_data(root, embeddings=str(tiny_glove))
    assert data.layout == "squad-cloze" and len(data.train) == 24 and len(data.dev) == 10
    info = data.embedding_info()
    assert info.n_entities == 5 and info.word_vectors.shape == (len(data.vocab), 4)
    assert info.n_trainable_words == len(data.vocab)  # every row is trained
    with pytest.raises(ValueError, match="not a cloze dataset"):
        load_cloze_data(root.parent)


def test_cloze_train_evaluate_via_cli(cloze_dir, tmp_path, capsys):
    _, common = cloze_dir
    run = tmp_path / "run"
    assert main(["train", "deep_lstm_reader", "--out", str(run), "--max-steps", "6", *common]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == 6 and 0.0 <= summary["best_dev_acc"] <= 100.0
    recs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs if "dev_acc" in r] == [3, 6]
    assert (run / "learning_curve.png").stat().st_size > 0
    ckpt = load_checkpoint(run / "best.pt")
    assert ckpt["task"] == "cloze" and ckpt["score_key"] == "dev_acc"
    preds = tmp_path / "preds.json"
    assert main(["evaluate", str(run), "--out", str(preds)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["examples"] == 10  # every dev example
    assert len(json.loads(preds.read_text())) == 10
    assert main(["predict", str(run), "--context", "a b", "--question", "c ?"]) == 2
    assert "cloze model" in capsys.readouterr().err


def test_cloze_model_without_data_is_a_clear_error(tmp_path, capsys):
    assert main(["train", "deep_lstm_reader", "--out", str(tmp_path / "r"), "--max-steps", "1"]) == 2
    assert "--cloze-data" in capsys.readouterr().err


def test_cloze_resume_equals_straight_run(cloze_dir, tmp_path, tiny_glove):
    root, _ = cloze_dir
    data = load_cloze_data(root, embeddings=str(tiny_glove))
    cfg = TrainConfig(**TINY_TRAIN)
    mcfg = DeepLSTMReaderConfig(head="cloze", **TINY_READER)

    def run(path, steps, resume=False):
        return train(
            "deep_lstm_reader",
            DeepLSTMReader,
            mcfg,
            cfg,
            ClozeTask(data, cfg),
            path,
            max_steps=steps,
            resume=resume,
            progress=False,
        )

    run(tmp_path / "a", 7)
    run(tmp_path / "b", 4)
    run(tmp_path / "b", 7, resume=True)
    a, b = load_checkpoint(tmp_path / "a" / "last.pt"), load_checkpoint(tmp_path / "b" / "last.pt")
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert a["optimizer"]["state"].keys() == b["optimizer"]["state"].keys()


def test_span_reader_trains_on_squad(tmp_path, tiny_squad, tiny_glove, capsys):
    train_f, dev_f = tiny_squad
    preset = tmp_path / "span.json"
    preset.write_text(json.dumps({"model": {"head": "span", **TINY_READER}, "train": TINY_TRAIN}))
    run = tmp_path / "span-run"
    assert (
        main(
            [
                "train",
                "deep_lstm_reader",
                "--train",
                str(train_f),
                "--dev",
                str(dev_f),
                "--embeddings",
                str(tiny_glove),
                "--cache-dir",
                str(tmp_path / "cache"),
                "--preset",
                str(preset),
                "--out",
                str(run),
                "--max-steps",
                "3",
                "--no-progress",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["evaluate", str(run)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["total"] == 1 and res["missing"] == 0


def test_sweep_plans_subsets_deterministically():
    grid = {"model.hidden": [4, 8, 16], "train.lr": [1e-3, 1e-4]}
    assert len(plan_trials(grid, None, 0)) == 6
    a, b = plan_trials(grid, 3, 7), plan_trials(grid, 3, 7)
    assert a == b and len(a) == 3 and len({json.dumps(p, sort_keys=True) for p in a}) == 3


def test_sweep_runs_resumes_and_reports(cloze_dir, tmp_path, capsys):
    _, common = cloze_dir
    out = tmp_path / "sweep"
    args = [
        "sweep",
        "deep_lstm_reader",
        "--out",
        str(out),
        "--only-grid",
        "--grid",
        "model.hidden=4,8",
        "--grid",
        "model.form=qca,cqa",
        "--trials",
        "3",
        "--max-steps",
        "2",
        "--budget",
        "10m",
        *common,
    ]
    assert main(args) == 0
    capsys.readouterr()
    rows = json.loads((out / "results.json").read_text())
    assert len(rows) == 3 and [r["score"] for r in rows] == sorted((r["score"] for r in rows), reverse=True)
    table = (out / "results.md").read_text().splitlines()
    assert len(table) == 2 + 3 and "model.hidden" in table[0]
    assert (out / "results.png").stat().st_size > 0
    # An interrupted trial (checkpoint, no summary) is resumed; finished ones are not rerun.
    (out / "trial-001" / "summary.json").unlink()
    finished = (out / "trial-000" / "summary.json").stat().st_mtime_ns
    assert main(args) == 0
    assert "trial 2/3" in capsys.readouterr().out
    assert (out / "trial-001" / "summary.json").exists()
    assert (out / "trial-000" / "summary.json").stat().st_mtime_ns == finished
    # A different grid in the same directory is refused.
    assert main([*args[:6], "model.hidden=4,16", *args[7:]]) == 2


@pytest.mark.parametrize("model,extra", [("dcn", {}), ("dcn_plus", {"n_experts": 3, "mixed_objective": True})])
def test_dcn_models_train_with_their_own_loss(model, extra, tmp_path, tiny_squad, tiny_glove, capsys):
    train_f, dev_f = tiny_squad
    preset = tmp_path / f"{model}.json"
    preset.write_text(
        json.dumps(
            {
                "model": {**TINY[("dcn", "span")], "dropout": 0.0, **extra},
                "train": {**TINY_TRAIN, "optimizer": "adam"},
            }
        )
    )
    run = tmp_path / model
    assert (
        main(
            [
                "train",
                model,
                "--train",
                str(train_f),
                "--dev",
                str(dev_f),
                "--embeddings",
                str(tiny_glove),
                "--cache-dir",
                str(tmp_path / "cache"),
                "--preset",
                str(preset),
                "--out",
                str(run),
                "--max-steps",
                "3",
                "--no-progress",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == 3
    losses = [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]
    assert len(losses) == 3 and all(loss == loss for loss in losses)  # finite, logged every step
    assert main(["evaluate", str(run)]) == 0
    assert json.loads(capsys.readouterr().out)["missing"] == 0


def test_copy_positions_are_entity_mentions_drawn_uniformly():
    from rckit.data.cloze.examples import ENTITY_OFFSET, ClozeSplit, ClozeVocab, copy_targets, with_copy_positions

    exs = cloze_examples(3, 5, "c") + [
        ClozeExample("none", ["red", "@entity1", "blue"], ["@placeholder"], "@entity1", ["@entity1"])
    ]
    split = ClozeSplit.from_examples(exs, ClozeVocab.build(exs, n_entities=5))
    batch = split.collate(range(4))
    batch.c_words[3, 1] = 0  # a row whose only entity is gone: no position to copy from
    batch.c_mask[3, 1] = False
    seen = torch.zeros_like(batch.c_mask)
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        b = with_copy_positions(batch, gen)
        seen[torch.arange(3), b.copy_at[:3]] = True
        assert b.copy_at[3] == -1
        target, valid = copy_targets(b)
        assert valid.tolist() == [True, True, True, False]
        assert (batch.c_words[torch.arange(3), b.copy_at[:3]] - ENTITY_OFFSET == target[:3]).all()
    mentions = (batch.c_words >= ENTITY_OFFSET) & (batch.c_words < ENTITY_OFFSET + 5) & batch.c_mask
    assert torch.equal(seen[:3], mentions[:3])  # every mention drawn, nothing else


def test_copy_steps_add_the_copy_task_then_stop(cloze_dir, tmp_path, tiny_glove):
    from rckit.models.attentive_reader import AttentiveReader, AttentiveReaderConfig

    root, _ = cloze_dir
    data = load_cloze_data(root, embeddings=str(tiny_glove))
    cfg = TrainConfig(**{**TINY_TRAIN, "copy_steps": 3})
    train(
        "attentive_reader",
        AttentiveReader,
        AttentiveReaderConfig(**TINY[("attentive_reader", "cloze")], dropout=0.0),
        cfg,
        ClozeTask(data, cfg),
        tmp_path / "ar",
        max_steps=5,
        progress=False,
    )
    logged = [json.loads(ln) for ln in (tmp_path / "ar" / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in logged if "loss" in r]
    assert [("loss_copy" in r) for r in logged] == [True, True, True, False, False]
    for r in logged[:3]:
        assert r["loss"] == pytest.approx(r["loss_answer"] + r["loss_copy"], rel=1e-4)
    with pytest.raises(ValueError, match="DeepLSTMReader has no copy task"):
        train(
            "deep_lstm_reader",
            DeepLSTMReader,
            DeepLSTMReaderConfig(head="cloze", **TINY_READER),
            cfg,
            ClozeTask(data, cfg),
            tmp_path / "dlr",
            max_steps=2,
            progress=False,
        )
