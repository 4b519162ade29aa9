"""``rckit bench`` for cloze models: the shared timing procedure on a slice of a cloze dev split."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from rckit.cli import main
from rckit.data.cloze.dataset import load_cloze_data
from rckit.data.cloze.synthetic import write_synthetic_cloze
from rckit.evaluation.split_answers import predict_cloze
from rckit.models import MODELS
from rckit.training.bench import bench
from rckit.training.config import TrainConfig
from rckit.training.tasks import ClozeTask, make_task
from tests.conftest import TINY

KEYS = (
    "train_examples_per_s",
    "train_first_pass_examples_per_s",
    "inference_examples_per_s",
    "latency_ms_median",
    "latency_ms_p90",
    "peak_rss_mb",
    "train_questions",
    "dtype",
    "device",
    "threads",
    "trainable_parameters",
    "heap_limit_mb",
)
TINY_CLOZE = {  # the cloze readers of the tests' one table, without dropout (a timed step is deterministic)
    name: {**{k: v for k, v in over.items() if k != "head"}, "dropout": 0.0}
    for (name, task), over in TINY.items()
    if task == "cloze"
}


@pytest.fixture(scope="module")
def synthetic_dir(tmp_path_factory):
    return write_synthetic_cloze(tmp_path_factory.mktemp("cloze") / "syn", 200, 100, seed=0)


@pytest.fixture(scope="module")
def synthetic_data(synthetic_dir):
    return load_cloze_data(synthetic_dir, embeddings=None)  # random vectors: no GloVe needed


def tiny_model(name, data):
    cfg_cls, model_cls = MODELS[name]
    torch.manual_seed(0)
    return model_cls(cfg_cls(head="cloze", **TINY_CLOZE[name]), data.embedding_info())


def test_bench_a_cloze_model_via_cli(synthetic_dir, tiny_glove, capsys):
    assert (
        main(
            [
                "bench",
                "attentive_reader",
                "--preset",
                "cloze-cpu",
                "--set",
                "model.hidden=8",
                "--set",
                "model.attention=8",
                "--cloze-data",
                str(synthetic_dir),
                "--embeddings",
                str(tiny_glove),
                "--steps",
                "2",
                "--questions",
                "64",
                "--json",
            ]
        )
        == 0
    )
    res = json.loads(capsys.readouterr().out)
    assert set(KEYS) <= set(res) and res["model"] == "attentive_reader" and res["preset"] == "cloze-cpu"
    for k in (
        "train_examples_per_s",
        "train_first_pass_examples_per_s",
        "inference_examples_per_s",
        "latency_ms_median",
        "latency_ms_p90",
        "peak_rss_mb",
        "threads",
        "trainable_parameters",
    ):
        assert res[k] > 0, k
    assert res["latency_ms_median"] <= res["latency_ms_p90"]
    assert res["train_questions"] == 64 and res["dtype"] == "fp32" and res["device"] == "cpu"


def test_bench_cloze_needs_its_data_and_span_models_refuse_it(synthetic_dir, capsys):
    assert main(["bench", "attentive_reader", "--preset", "cloze-cpu", "--steps", "0"]) == 2
    assert "--cloze-data" in capsys.readouterr().err
    assert main(["bench", "qanet", "--preset", "cpu-small", "--cloze-data", str(synthetic_dir)]) == 2
    assert "cloze models" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(TINY_CLOZE))
def test_bench_every_cloze_model_in_bf16(synthetic_data, name):
    model = tiny_model(name, synthetic_data)
    task = ClozeTask(synthetic_data, TrainConfig(max_c_len=12), train_split="dev")
    res = bench(
        model, task, "cpu", torch.bfloat16, batch_size=8, train_steps=2, n_questions=24, latency_questions=3, warmup=1
    )
    assert res["train_examples_per_s"] > 0 and res["train_first_pass_examples_per_s"] > 0
    assert res["inference_examples_per_s"] > 0 and 0 < res["latency_ms_median"] <= res["latency_ms_p90"]
    assert res["train_questions"] == 24 and res["dtype"] == "bf16"


def test_bench_cloze_with_no_training_steps_leaves_the_weights_untouched(synthetic_data):
    model = tiny_model("attentive_reader", synthetic_data)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    task = ClozeTask(synthetic_data, TrainConfig(), train_split="dev")
    res = bench(
        model, task, "cpu", None, batch_size=16, train_steps=0, n_questions=8, latency_questions=3, warmup=1
    )  # 8 questions, batch 16: nothing could train
    assert res["train_examples_per_s"] is None and res["train_first_pass_examples_per_s"] is None
    assert res["inference_examples_per_s"] > 0 and 0 < res["latency_ms_median"] <= res["latency_ms_p90"]
    assert not model.training
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    with pytest.raises(ValueError, match="batch"):
        bench(model, task, "cpu", None, batch_size=16, n_questions=8)
    with pytest.raises(ValueError, match="span or cloze"):
        make_task("entity", synthetic_data, TrainConfig(), train_split="dev")


def test_cloze_bench_decodes_and_trains_as_the_engine_does(synthetic_data):
    """The bench's decoding is ``predict_cloze``'s; its training batches cut documents as ``ClozeTask``."""
    model = tiny_model("impatient_reader", synthetic_data).eval()
    q = ClozeTask(synthetic_data, TrainConfig(max_c_len=5), train_split="dev")
    rows = q.first_rows(40)
    assert list(rows) == list(range(40))
    batch = q.eval_batch(rows)
    with torch.inference_mode():
        got = q.decode(model(batch), batch).numpy()
    assert np.array_equal(got, predict_cloze(model, synthetic_data.dev, rows, 64, "cpu", None))
    train_batch = q.collate(rows[:4])
    assert train_batch.c_words.shape[1] <= 5
    loss, _ = q.loss(model, model(train_batch), train_batch)
    assert loss.ndim == 0 and torch.isfinite(loss)
