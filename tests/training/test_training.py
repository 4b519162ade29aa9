"""The shared training engine: resume equivalence, checkpoints, signals, torchrun, evaluation."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from rckit.cli import main
from rckit.data.prepare import PrepareConfig, prepare_squad
from rckit.model_files.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from rckit.models.qanet import QANet, QANetConfig
from rckit.training.loop import TrainConfig, train
from rckit.training.optim import lr_factor, warmup_factor
from tests.conftest import TINY, TINY_QANET, squad_json, write_json

TINY_TRAIN = dict(batch_size=4, warmup_steps=5, log_every=1, eval_every=3, eval_questions=0, checkpoint_every=2)


def _paragraphs(n_ctx=6, q_per=4):
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma".split()
    paras = []
    for c in range(n_ctx):
        toks = [words[(c * 7 + i * 3) % len(words)] for i in range(12 + c)]
        ctx = " ".join(toks) + "."
        qas = []
        for j in range(q_per):
            k = (j * 5 + c) % len(toks)
            start = len(" ".join(toks[:k])) + (1 if k else 0)
            qas.append((f"c{c}q{j}", f"what follows {toks[k - 1] if k else 'start'} ?", [(toks[k], start)]))
        paras.append((ctx, qas))
    return paras


@pytest.fixture
def prepared(tmp_path, tiny_glove):
    paras = _paragraphs()
    train_f = write_json(tmp_path / "train.json", squad_json(paras))
    dev_f = write_json(tmp_path / "dev.json", squad_json(paras[:2]))
    return prepare_squad(train_f, {"dev": dev_f}, tmp_path / "prep", PrepareConfig(embeddings=str(tiny_glove)))


def _train(prepared, run, steps, resume=False, **over):
    cfg = TrainConfig(**{**TINY_TRAIN, **over})
    return train(
        "qanet", QANet, QANetConfig(**TINY_QANET), cfg, prepared, run, max_steps=steps, resume=resume, progress=False
    )


def test_warmup_is_a_log_curve_to_one():
    vals = [warmup_factor(s, 1000) for s in (0, 9, 99, 998, 999, 5000)]
    assert vals[0] == 0.0 and vals[-1] == vals[-2] == 1.0
    assert vals[1] == pytest.approx(1 / 3) and vals[2] == pytest.approx(2 / 3)
    assert vals == sorted(vals)


def test_lr_decays_linearly_to_zero_after_decay_from():
    cfg = TrainConfig(warmup_steps=100, decay_from=1000, decay_steps=500)
    assert lr_factor(10, cfg) == warmup_factor(10, 100) < 1.0
    assert lr_factor(999, cfg) == 1.0 and lr_factor(1000, cfg) == 1.0
    assert lr_factor(1250, cfg) == pytest.approx(0.5) and lr_factor(1500, cfg) == 0.0 == lr_factor(2000, cfg)
    assert lr_factor(5000, TrainConfig(warmup_steps=100)) == 1.0  # decay_steps 0: constant


def test_the_decay_follows_the_time_budget_or_else_max_steps():
    cfg = TrainConfig(warmup_steps=0, decay_share=0.4)
    # 100 s of budget: constant for the first 60 s of training time, then a line to 0 at 100 s
    assert lr_factor(7, cfg, elapsed=59.0, time_budget=100.0) == 1.0
    assert lr_factor(7, cfg, elapsed=80.0, time_budget=100.0) == pytest.approx(0.5)
    assert lr_factor(7, cfg, elapsed=100.0, time_budget=100.0) == 0.0 == lr_factor(7, cfg, 130.0, 100.0)
    # the time budget wins over max_steps; without one the steps carry the decay
    assert lr_factor(900, cfg, elapsed=10.0, time_budget=100.0, max_steps=1000) == 1.0
    assert lr_factor(900, cfg, elapsed=10.0, max_steps=1000) == pytest.approx(0.25)
    assert lr_factor(900, cfg, elapsed=10.0) == 1.0  # no horizon: constant
    warm = TrainConfig(warmup_steps=100, decay_share=1.0)  # Li et al.'s linear schedule over the whole budget
    assert lr_factor(10, warm, 50.0, 100.0) == pytest.approx(warmup_factor(10, 100) * 0.5)
    steps = TrainConfig(warmup_steps=0, decay_share=0.4, decay_from=10, decay_steps=10)  # steps placed: as before
    assert lr_factor(15, steps, elapsed=99.0, time_budget=100.0) == pytest.approx(0.5)
    assert lr_factor(5, steps, elapsed=99.0, time_budget=100.0) == 1.0


def _ticking(start: float = 0.0):
    """A clock that moves one second each time training reads it: once a step."""
    t = [start]

    def clock() -> float:
        t[0] += 1.0
        return t[0]

    return clock


def _logged_lrs(run) -> dict[int, float]:
    return {r["step"]: r["lr"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "lr" in r}


def test_a_resumed_budgeted_run_continues_the_same_schedule(prepared, tmp_path):
    """Ten seconds of budget, one second a step, the decay over the last 40 %: a run stopped at
    step 5 and resumed with --resume alone logs the learning rates of an uninterrupted run."""
    cfg = TrainConfig(**{**TINY_TRAIN, "warmup_steps": 0, "decay_share": 0.4})
    model = ("qanet", QANet, QANetConfig(**TINY_QANET))
    whole = train(*model, cfg, prepared, tmp_path / "a", time_budget=10.0, progress=False, clock=_ticking())
    assert whole["stopped_by"] == "time_budget" and whole["steps"] == 10
    train(*model, cfg, prepared, tmp_path / "b", time_budget=10.0, max_steps=5, progress=False, clock=_ticking())
    config = json.loads((tmp_path / "b" / "config.json").read_text())
    assert config["limits"] == {"max_steps": 5, "time_budget": 10.0}
    # a new process: its clock reads something else entirely; the saved training time carries on
    again = train(*model, cfg, prepared, tmp_path / "b", resume=True, progress=False, clock=_ticking(1e6))
    assert again["stopped_by"] == "max_steps" and again["steps"] == 5  # --resume alone: the limits it had
    resumed = train(
        *model, cfg, prepared, tmp_path / "b", resume=True, time_budget=10.0, progress=False, clock=_ticking(5e6)
    )
    assert resumed["stopped_by"] == "time_budget" and resumed["steps"] == 10
    straight, split = _logged_lrs(tmp_path / "a"), _logged_lrs(tmp_path / "b")
    assert sorted(straight) == sorted(split) == list(range(1, 11))
    assert split == pytest.approx(straight)
    # constant for 6 s, then down by 0.25 of lr each second, to 0 at the budget
    assert [straight[k] / cfg.lr for k in range(5, 11)] == pytest.approx([1.0, 1.0, 0.75, 0.5, 0.25, 0.0])


def test_decay_share_is_checked_before_the_run_directory_is_made(prepared, tmp_path):
    with pytest.raises(ValueError, match="decay_share"):
        _train(prepared, tmp_path / "a", 1, decay_share=1.5)
    assert not (tmp_path / "a").exists()


def test_resume_keeps_the_decay_schedule(prepared, tmp_path):
    over = dict(warmup_steps=0, decay_from=3, decay_steps=6)
    straight = _train(prepared, tmp_path / "a", 8, **over)
    _train(prepared, tmp_path / "b", 5, **over)
    resumed = _train(prepared, tmp_path / "b", 8, resume=True, **over)
    cfg = TrainConfig(**{**TINY_TRAIN, **over})
    lrs = {
        r["step"]: r["lr"]
        for r in map(json.loads, (tmp_path / "b" / "metrics.jsonl").read_text().splitlines())
        if "lr" in r
    }
    assert sorted(lrs) == list(range(1, 9))
    for step, lr in lrs.items():  # the rate after ``step`` optimiser steps, across the resume at 5
        assert lr == pytest.approx(cfg.lr * lr_factor(step, cfg))
    assert lrs[8] == pytest.approx(cfg.lr / 6)
    a, b = load_checkpoint(tmp_path / "a" / "last.pt"), load_checkpoint(tmp_path / "b" / "last.pt")
    assert resumed["steps"] == straight["steps"] == 8
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k


def test_n_steps_equal_k_steps_resume_n_minus_k(prepared, tmp_path):
    straight = _train(prepared, tmp_path / "a", 9)
    assert straight["steps"] == 9
    _train(prepared, tmp_path / "b", 4)
    resumed = _train(prepared, tmp_path / "b", 9, resume=True)
    assert resumed["steps"] == 9
    a, b = load_checkpoint(tmp_path / "a" / "last.pt"), load_checkpoint(tmp_path / "b" / "last.pt")
    assert a["epoch"] == b["epoch"] and a["batch_in_epoch"] == b["batch_in_epoch"]
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    for k in a["ema"]["shadow"]:
        assert torch.equal(a["ema"]["shadow"][k], b["ema"]["shadow"][k]), k
    # The resumed run's log has no duplicated steps.
    steps = [json.loads(line)["step"] for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    train_steps = [
        s for s, line in zip(steps, (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()) if "loss" in line
    ]
    assert train_steps == list(range(1, 10))


def test_a_logged_loss_is_the_mean_of_its_steps_also_after_a_resume_between_two_lines(prepared, tmp_path, monkeypatch):
    """log_every 4, a run stopped at step 6 and resumed: the line at step 8 holds steps 7 and 8 only,
    and its loss is their mean (it was their sum over 4 before the fix)."""
    import rckit.training.loop as loop

    losses: dict[int, float] = {}
    real = loop.train_step

    def step(*args, **kw):
        loss, terms = real(*args, **kw)
        losses[len(losses) + 1] = loss.item()
        return loss, terms

    monkeypatch.setattr(loop, "train_step", step)
    _train(prepared, tmp_path / "r", 6, log_every=4)
    _train(prepared, tmp_path / "r", 8, resume=True, log_every=4)
    logged = {
        r["step"]: r["loss"]
        for r in map(json.loads, (tmp_path / "r" / "metrics.jsonl").read_text().splitlines())
        if "loss" in r
    }
    assert sorted(logged) == [4, 8]
    assert logged[4] == pytest.approx(sum(losses[k] for k in (1, 2, 3, 4)) / 4)
    assert logged[8] == pytest.approx((losses[7] + losses[8]) / 2)


def test_run_directory_contents(prepared, tmp_path):
    s = _train(prepared, tmp_path / "r", 6)
    run = tmp_path / "r"
    for name in ("config.json", "metrics.jsonl", "learning_curve.png", "last.pt", "best.pt", "summary.json"):
        assert (run / name).exists(), name
    recs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all(r["loss"] == r["loss"] and r["examples_per_s"] > 0 for r in recs if "loss" in r)
    dev = [r for r in recs if "dev_f1" in r]
    assert [r["step"] for r in dev] == [3, 6] and s["best_dev_f1"] == max(r["dev_f1"] for r in dev)
    with pytest.raises(FileExistsError, match="--resume"):
        _train(prepared, run, 6)


def test_resume_refuses_other_config(prepared, tmp_path):
    _train(prepared, tmp_path / "r", 2)
    with pytest.raises(CheckpointError, match="different model or config"):
        train(
            "qanet",
            QANet,
            QANetConfig(**{**TINY_QANET, "d_model": 32}),
            TrainConfig(**TINY_TRAIN),
            prepared,
            tmp_path / "r",
            max_steps=4,
            resume=True,
            progress=False,
        )


def test_corrupt_and_foreign_checkpoints_are_refused(prepared, tmp_path):
    _train(prepared, tmp_path / "r", 2)
    good = (tmp_path / "r" / "last.pt").read_bytes()
    cut = tmp_path / "cut.pt"
    cut.write_bytes(good[: len(good) // 2])
    with pytest.raises(CheckpointError, match="not a readable rckit checkpoint"):
        load_checkpoint(cut)
    foreign = tmp_path / "foreign.pt"
    torch.save({"state_dict": {"w": torch.zeros(2)}}, foreign)
    with pytest.raises(CheckpointError, match="not an rckit checkpoint"):
        load_checkpoint(foreign)

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    evil = tmp_path / "evil.pt"
    torch.save({"format": "rckit-checkpoint-1", "x": Evil()}, evil)
    with pytest.raises(CheckpointError):
        load_checkpoint(evil)
    # A checkpoint whose weights do not fit the model is refused by the loader, not half-loaded.
    state = load_checkpoint(tmp_path / "r" / "last.pt")
    state["model"] = {k: v[..., :1] if v.dim() else v for k, v in state["model"].items()}
    bad = tmp_path / "bad" / "best.pt"
    save_checkpoint({k: v for k, v in state.items() if k != "format"}, bad)
    from rckit.model_files.load import load_model

    with pytest.raises(CheckpointError, match="do not fit"):
        load_model(bad.parent)


def test_atomic_save_leaves_old_file_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "c.pt"
    save_checkpoint({"model_name": "m", "model_config": {}, "model": {}, "step": 1, "vocab": {}}, path)

    def broken(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken)
    with pytest.raises(OSError):
        save_checkpoint({"model_name": "m", "model_config": {}, "model": {}, "step": 2, "vocab": {}}, path)
    assert load_checkpoint(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]


# ----------------------------------------------------------------------- the CLI, end to end


@pytest.fixture
def cli_data(tmp_path, tiny_glove):
    paras = _paragraphs()
    train_f = write_json(tmp_path / "train.json", squad_json(paras))
    dev_f = write_json(tmp_path / "dev.json", squad_json(paras[:3]))
    preset = tmp_path / "tiny.json"
    preset.write_text(json.dumps({"model": TINY_QANET, "train": TINY_TRAIN}))
    common = [
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
        "--no-progress",
    ]
    return common, dev_f


def _cli(*args, **kw):
    return subprocess.Popen(
        [sys.executable, "-m", "rckit", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw
    )


def test_train_evaluate_predict_via_cli(cli_data, tmp_path, capsys):
    common, dev_f = cli_data
    run = tmp_path / "run"
    assert main(["train", "qanet", "--out", str(run), "--max-steps", "4", *common]) == 0
    capsys.readouterr()
    preds = tmp_path / "preds.json"
    assert main(["evaluate", str(run), "--out", str(preds)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["total"] == 12 and res["missing"] == 0  # every dev question scored
    assert len(json.loads(preds.read_text())) == 12
    assert main(["evaluate", str(run), "--limit", "5"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == 5
    ctx = "alpha beta gamma delta."
    assert main(["predict", str(run), "--context", ctx, "--question", "what follows alpha ?", "--json"]) == 0
    ans = json.loads(capsys.readouterr().out)
    assert ctx[ans["start"] : ans["end"]] == ans["answer"] and ans["answer"]


def test_resume_without_the_preset_continues_with_the_runs_own_settings(cli_data, tmp_path, capsys):
    """A person resuming gives the data and --resume; the model and training settings come from
    the run's config.json (a --set still overrides, and is then checked against the checkpoint)."""
    common, _ = cli_data
    run = tmp_path / "run"
    assert main(["train", "qanet", "--out", str(run), "--max-steps", "2", *common, "--set", "train.lr=0.002"]) == 0
    data = [a for a in common if a != "--preset" and not a.endswith("tiny.json")]
    assert main(["train", "qanet", "--out", str(run), "--max-steps", "3", "--resume", *data]) == 0
    ckpt = load_checkpoint(run / "last.pt")
    assert ckpt["step"] == 3 and ckpt["train_config"]["lr"] == 0.002
    assert ckpt["model_config"]["d_model"] == TINY_QANET["d_model"]
    capsys.readouterr()
    assert main(["train", "dcn", "--out", str(run), "--max-steps", "4", "--resume", *data]) == 2
    assert "this run trains 'qanet', not 'dcn'" in capsys.readouterr().err


def test_sigterm_checkpoints_and_kill9_resumes(cli_data, tmp_path):
    common, _ = cli_data
    run = tmp_path / "run"
    p = _cli("train", "qanet", "--out", str(run), "--max-steps", "100000", *common)
    deadline = time.time() + 120
    while not (run / "metrics.jsonl").exists() and time.time() < deadline:
        time.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["stopped_by"] == "signal"
    stopped_at = load_checkpoint(run / "last.pt")["step"]
    assert stopped_at == summary["steps"]  # the checkpoint is the stopping step, not an older one

    p = _cli("train", "qanet", "--out", str(run), "--max-steps", "100000", "--resume", *common)
    deadline = time.time() + 120
    while time.time() < deadline:
        time.sleep(0.2)
        try:
            if load_checkpoint(run / "last.pt")["step"] >= stopped_at + 4:
                break
        except CheckpointError:  # never expected: writes are atomic
            raise
    p.kill()  # kill -9: no handler runs
    p.communicate()
    killed_at = load_checkpoint(run / "last.pt")["step"]
    assert killed_at >= stopped_at + 4
    p = _cli("train", "qanet", "--out", str(run), "--max-steps", str(killed_at + 3), "--resume", *common)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["steps"] == killed_at + 3


def test_torchrun_two_processes(cli_data, tmp_path):
    common, _ = cli_data
    run = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "rckit",
            "train",
            "qanet",
            "--out",
            str(run),
            "--max-steps",
            "6",
            *common,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = p.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the ranks too, not only the launcher
        out, err = p.communicate()
        pytest.fail(f"torchrun hung; stderr tail: {err[-3000:]}")
    assert p.returncode == 0, err[-3000:]
    summaries = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(summaries) == 1 and summaries[0]["steps"] == 6  # rank 0 alone reports and writes
    ckpt = load_checkpoint(run / "last.pt")
    assert ckpt["step"] == 6
    recs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs if "loss" in r] == list(range(1, 7))  # one writer, no duplicates


@pytest.mark.parametrize("heap_limit_mb", [0.0, 2.0])
def test_bench_reports_every_figure_with_and_without_the_heap_limit(prepared, heap_limit_mb):
    from rckit.training.bench import SPAN_LENGTHS, bench
    from rckit.training.tasks import SpanTask

    torch.manual_seed(0)
    model = QANet(QANetConfig(**TINY_QANET), prepared.embedding_info())
    task = SpanTask(prepared, TrainConfig(**SPAN_LENGTHS), train_split="dev")
    res = bench(
        model,
        task,
        "cpu",
        torch.bfloat16,
        batch_size=2,
        train_steps=2,
        n_questions=8,
        latency_questions=3,
        warmup=1,
        heap_limit_mb=heap_limit_mb,
    )
    assert res["train_examples_per_s"] > 0 and res["inference_examples_per_s"] > 0
    assert res["train_first_pass_examples_per_s"] > 0
    assert 0 < res["latency_ms_median"] <= res["latency_ms_p90"]
    assert res["peak_rss_mb"] > 0 and res["heap_limit_mb"] == heap_limit_mb and res["dtype"] == "bf16"
    with pytest.raises(ValueError, match="batch"):  # fewer questions than one training batch
        bench(model, task, "cpu", None, batch_size=16, n_questions=8)


def test_bench_with_no_training_steps_times_inference_on_untouched_weights(prepared):
    from rckit.training.bench import bench
    from rckit.training.tasks import SpanTask

    torch.manual_seed(0)
    model = QANet(QANetConfig(**TINY_QANET), prepared.embedding_info())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    res = bench(
        model,
        SpanTask(prepared, TrainConfig(), train_split="dev"),
        "cpu",
        None,
        batch_size=16,
        train_steps=0,
        n_questions=8,
        latency_questions=3,
        warmup=1,
    )  # 8 questions: too few to train at batch 16, so nothing trains
    assert res["train_examples_per_s"] is None and res["train_first_pass_examples_per_s"] is None
    assert res["inference_examples_per_s"] > 0 and 0 < res["latency_ms_median"] <= res["latency_ms_p90"]
    assert not model.training
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_a_models_loss_terms_reach_metrics_and_the_learning_curve(prepared, tmp_path):
    """DCN+'s mixed objective leaves its two terms and learned weights; the log averages them per window."""
    from rckit.models.dcn import DCNPlus, DCNPlusConfig

    model_cfg = DCNPlusConfig(**{**TINY[("dcn_plus", "span")], "dropout": 0.0, "word_dropout": 0.0})
    cfg = TrainConfig(**{**TINY_TRAIN, "log_every": 2, "warmup_steps": 0})
    train("dcn_plus", DCNPlus, model_cfg, cfg, prepared, tmp_path / "r", max_steps=4, progress=False)
    recs = [json.loads(ln) for ln in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in recs if "loss" in r]
    assert [r["step"] for r in logged] == [2, 4]
    for r in logged:
        assert {"loss_ce", "loss_rl", "loss_w_ce", "loss_w_rl"} <= set(r)
        assert 0 <= r["loss_rl"] <= 1 and r["loss_ce"] > 0 and r["loss_w_ce"] > 0 and r["loss_w_rl"] > 0
    assert (tmp_path / "r" / "learning_curve.png").stat().st_size > 0


def test_reward_from_trains_on_cross_entropy_alone_until_that_step(prepared, tmp_path):
    """Before train.reward_from DCN+ is exactly its cross-entropy-only twin; from it on, the reward term is in."""
    from rckit.models.dcn import DCNPlus, DCNPlusConfig

    small = {**TINY[("dcn_plus", "span")], "dropout": 0.0, "word_dropout": 0.0}
    cfg = TrainConfig(**{**TINY_TRAIN, "log_every": 1, "warmup_steps": 0, "reward_from": 3})
    train("dcn_plus", DCNPlus, DCNPlusConfig(**small), cfg, prepared, tmp_path / "mixed", max_steps=5, progress=False)
    logged = [json.loads(ln) for ln in (tmp_path / "mixed" / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in logged if "loss" in r]
    assert [("loss_rl" in r) for r in logged] == [False, False, False, True, True]  # steps 1-3: state.step 0-2 < 3

    torch.manual_seed(0)
    cfg = TrainConfig(**{**TINY_TRAIN, "warmup_steps": 0, "reward_from": 100})
    train("dcn_plus", DCNPlus, DCNPlusConfig(**small), cfg, prepared, tmp_path / "warm", max_steps=3, progress=False)
    train(
        "dcn_plus",
        DCNPlus,
        DCNPlusConfig(**small, mixed_objective=False),
        cfg,
        prepared,
        tmp_path / "ce",
        max_steps=3,
        progress=False,
    )
    warm = load_checkpoint(tmp_path / "warm" / "last.pt")["model"]
    ce = load_checkpoint(tmp_path / "ce" / "last.pt")["model"]
    assert set(warm) - set(ce) == {"log_sigma2_raw"}
    for k, v in ce.items():
        assert torch.equal(warm[k], v), k
    fresh = DCNPlus(DCNPlusConfig(**small), prepared.embedding_info())
    assert torch.equal(warm["log_sigma2_raw"], fresh.log_sigma2_raw.detach())  # the weights rest until reward_from


def test_train_saves_its_decode_settings_beside_the_train_config(prepared, tmp_path):
    from rckit.answering.decoding import DecodeConfig

    train(
        "qanet",
        QANet,
        QANetConfig(**TINY_QANET),
        TrainConfig(**TINY_TRAIN),
        prepared,
        tmp_path / "r",
        max_steps=3,
        progress=False,
        decode=DecodeConfig(max_answer_len=3),
    )
    config = json.loads((tmp_path / "r" / "config.json").read_text())
    for ckpt in (load_checkpoint(tmp_path / "r" / "last.pt"), load_checkpoint(tmp_path / "r" / "best.pt"), config):
        assert (
            ckpt["decode"] == {"max_answer_len": 3, "no_answer_threshold": 0.0}
            and "max_answer_len" not in ckpt["train_config"]
        )


def test_bench_decodes_spans_with_the_decode_settings(prepared):
    from rckit.answering.decoding import DecodeConfig
    from rckit.training.tasks import SpanTask

    torch.manual_seed(0)
    model = QANet(QANetConfig(**TINY_QANET), prepared.embedding_info()).eval()
    task = SpanTask(prepared, TrainConfig(), train_split="dev")
    one = DecodeConfig(max_answer_len=1)
    batch = task.eval_batch(task.first_rows(8))
    with torch.no_grad():
        out = model(batch)
    assert (task.decode(out, batch, one).end == task.decode(out, batch, one).start).all()
    spans = task.decode(out, batch, DecodeConfig())  # the default settings: answers of up to 30 tokens
    assert (spans.end - spans.start < 30).all() and (spans.end >= spans.start).all()


def test_amp_auto_on_cpu_is_bf16_only_for_models_that_train_faster_in_it(monkeypatch):
    from rckit.models import MODELS
    from rckit.training import loop
    from rckit.training.loop import TrainConfig, amp_dtype

    cpu, auto = torch.device("cpu"), TrainConfig(amp="auto")
    monkeypatch.setattr(loop, "cpu_has_bf16", lambda: True)
    picked = {name: amp_dtype(auto, cpu, cls) for name, (_, cls) in MODELS.items()}
    assert picked["qanet"] == torch.bfloat16 and picked["attentive_reader"] == torch.bfloat16
    assert picked["dcn"] is None and picked["dcn_plus"] is None  # slower in bf16 on CPU (BENCHMARKS.md)
    # A CPU that only emulates bf16 (AVX2) trains every model in fp32: oneDNN has no bf16 LSTM there.
    monkeypatch.setattr(loop, "cpu_has_bf16", lambda: False)
    assert all(amp_dtype(auto, cpu, cls) is None for _, cls in MODELS.values())
    assert amp_dtype(TrainConfig(amp="fp32"), cpu, MODELS["qanet"][1]) is None
    assert amp_dtype(TrainConfig(amp="bf16"), cpu, MODELS["dcn"][1]) == torch.bfloat16


def test_init_from_starts_a_new_run_from_another_runs_weights(prepared, tmp_path):
    _train(prepared, tmp_path / "a", 3)
    src = load_checkpoint(tmp_path / "a" / "last.pt")
    cfg = TrainConfig(**{**TINY_TRAIN, "lr": 0.0})  # no step moves the weights: what is saved is what was loaded
    s = train(
        "qanet",
        QANet,
        QANetConfig(**TINY_QANET),
        cfg,
        prepared,
        tmp_path / "b",
        max_steps=2,
        progress=False,
        init_from=tmp_path / "a" / "last.pt",
    )
    assert s["steps"] == 2  # the step count starts afresh
    b = load_checkpoint(tmp_path / "b" / "last.pt")
    for k in src["model"]:
        assert torch.equal(src["model"][k], b["model"][k]), k
    for k in b["ema"]["shadow"]:  # the average starts from the loaded weights, not the random ones
        assert torch.equal(b["ema"]["shadow"][k], src["model"][k]), k
    assert json.loads((tmp_path / "b" / "config.json").read_text())["init_from"]["step"] == 3
    train(
        "qanet",
        QANet,
        QANetConfig(**TINY_QANET),
        cfg,
        prepared,
        tmp_path / "b",
        max_steps=3,
        progress=False,
        resume=True,
    )
    assert json.loads((tmp_path / "b" / "config.json").read_text())["init_from"]["step"] == 3  # kept across a resume


def test_init_from_refuses_a_checkpoint_of_another_shape(prepared, tmp_path):
    _train(prepared, tmp_path / "a", 2)
    with pytest.raises(CheckpointError, match="--init-from: .* in this model .*d_model"):
        train(
            "qanet",
            QANet,
            QANetConfig(**{**TINY_QANET, "d_model": 32}),
            TrainConfig(**TINY_TRAIN),
            prepared,
            tmp_path / "b",
            max_steps=2,
            progress=False,
            init_from=tmp_path / "a" / "last.pt",
        )
    with pytest.raises(ValueError, match="give one of them"):
        train(
            "qanet",
            QANet,
            QANetConfig(**TINY_QANET),
            TrainConfig(**TINY_TRAIN),
            prepared,
            tmp_path / "a",
            max_steps=4,
            resume=True,
            progress=False,
            init_from=tmp_path / "a" / "last.pt",
        )


def test_init_from_starts_dcn_plus_mixed_objective_from_a_cross_entropy_run(prepared, tmp_path, capsys):
    """Self-critical training started from a cross-entropy model: sigma, absent there, keeps its start."""
    from rckit.models.dcn import DCNPlus, DCNPlusConfig

    small = {**TINY[("dcn_plus", "span")], "dropout": 0.0, "word_dropout": 0.0}
    cfg = TrainConfig(**{**TINY_TRAIN, "warmup_steps": 0})
    train(
        "dcn_plus",
        DCNPlus,
        DCNPlusConfig(**small, mixed_objective=False),
        cfg,
        prepared,
        tmp_path / "ce",
        max_steps=2,
        progress=False,
    )
    s = train(
        "dcn_plus",
        DCNPlus,
        DCNPlusConfig(**small),
        cfg,
        prepared,
        tmp_path / "mixed",
        max_steps=2,
        progress=False,
        init_from=tmp_path / "ce" / "last.pt",
    )
    assert "kept at their initialisation: log_sigma2_raw" in capsys.readouterr().err
    logged = [json.loads(ln) for ln in (tmp_path / "mixed" / "metrics.jsonl").read_text().splitlines()]
    assert s["steps"] == 2 and any("loss_rl" in r for r in logged)
    config = json.loads((tmp_path / "mixed" / "config.json").read_text())
    assert config["init_from"]["initialised"] == ["log_sigma2_raw"] and config["init_from"]["model"] == "dcn_plus"


def test_init_from_an_exported_file_takes_word_and_char_rows_by_word(tmp_path, tiny_glove, capsys):
    """A model that learns to abstain, started from an exported v1.1 model over another vocabulary:
    every row of a word or character both have is that word's row there, new ones keep their start,
    and every other weight is the export's (the null is named as kept at its initialisation)."""
    from rckit.export.safetensors import export_run
    from rckit.model_files.load import load_model

    def prepare(name, paras):  # every training word gets a trained row: word rows to take by word
        return prepare_squad(
            write_json(tmp_path / f"{name}-train.json", squad_json(paras)),
            {"dev": write_json(tmp_path / f"{name}-dev.json", squad_json(paras[:1]))},
            tmp_path / f"prep-{name}",
            PrepareConfig(embeddings=str(tiny_glove), trainable_min_count=1),
        )

    _train(prepare("a", _paragraphs()), tmp_path / "a", 3)
    export_run(tmp_path / "a", tmp_path / "a.safetensors", dtype="fp32")
    src, src_vocabs, _ = load_model(tmp_path / "a.safetensors")
    # Fewer contexts (other word counts, so another order), new words and a new character.
    other = prepare("b", [(ctx.replace("alpha", "omega") + " Zürich.", qas) for ctx, qas in _paragraphs(3)])
    words, chars = other.vocabs.words.itos, other.vocabs.chars.itos
    assert words != src_vocabs.words.itos and chars != src_vocabs.chars.itos
    cfg = TrainConfig(**{**TINY_TRAIN, "lr": 0.0})
    train(
        "qanet",
        QANet,
        QANetConfig(**TINY_QANET, no_answer=True),
        cfg,
        other,
        tmp_path / "b",
        max_steps=1,
        progress=False,
        init_from=tmp_path / "a.safetensors",
    )
    b = load_checkpoint(tmp_path / "b" / "last.pt")["model"]
    torch.manual_seed(cfg.seed)  # as the run does before it builds the model
    fresh = QANet(QANetConfig(**TINY_QANET, no_answer=True), other.embedding_info()).state_dict()
    theirs = src.state_dict()
    table = lambda st, key: torch.cat([st[f"{key}.trainable"], st[f"{key}.frozen"]])  # noqa: E731
    for vocab, src_itos, key, rows in (
        (words, src_vocabs.words.itos, "embed.word", table),
        (chars, src_vocabs.chars.itos, "embed.char.embed", lambda st, k: st[f"{k}.weight"]),
    ):
        row = {w: i for i, w in enumerate(src_itos)}
        mine, there, start = rows(b, key), rows(theirs, key), rows(fresh, key)
        assert any(w not in row for w in vocab)
        for i, w in enumerate(vocab):
            assert torch.equal(mine[i], there[row[w]] if w in row else start[i]), (key, w)
    for k, t in theirs.items():
        if not k.startswith("embed.word") and k != "embed.char.embed.weight":
            assert torch.equal(b[k], t), k
    assert "null" in b and "kept at their initialisation: null" in capsys.readouterr().err
    config = json.loads((tmp_path / "b" / "config.json").read_text())["init_from"]
    assert config["initialised"] == ["null"] and config["rows_taken"]["embed.word"]["rows"] == len(words)


def test_resume_reads_a_setting_added_since_the_checkpoint_as_its_default(prepared, tmp_path):
    """A run written before a model setting existed resumes when the setting is at its default, not otherwise."""
    from rckit.model_files.checkpoint import save_checkpoint

    _train(prepared, tmp_path / "r", 2)
    path = tmp_path / "r" / "last.pt"
    ckpt = load_checkpoint(path)
    del ckpt["model_config"]["layer_dropout"]  # as if written before layer_dropout existed
    save_checkpoint(ckpt, path)
    assert _train(prepared, tmp_path / "r", 3, resume=True)["steps"] == 3
    ckpt = load_checkpoint(path)
    del ckpt["model_config"]["layer_dropout"]
    save_checkpoint(ckpt, path)
    with pytest.raises(CheckpointError, match='layer_dropout: "example" -> "batch"'):
        train(
            "qanet",
            QANet,
            QANetConfig(**TINY_QANET, layer_dropout="batch"),
            TrainConfig(**TINY_TRAIN),
            prepared,
            tmp_path / "r",
            max_steps=4,
            resume=True,
            progress=False,
        )
