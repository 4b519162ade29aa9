"""One loader for every PyTorch model file: a run, its checkpoint and its exported file give the
same model, the same vocabularies and metadata of one shape."""

import pytest
import torch

from rckit.model_files.checkpoint import load_checkpoint
from rckit.model_files.load import load_model, load_span_model
from rckit.model_files.metadata import FORMAT

KEYS = {
    "format",
    "task",
    "model",
    "model_config",
    "decode",
    "train_config",
    "vocab",
    "embedding",
    "dev_score",
    "step",
    "data",
    "file",
}


def test_a_run_its_checkpoint_and_its_export_load_alike(tiny_run, tiny_export):
    run = load_model(tiny_run)
    ckpt = load_model(tiny_run / "best.pt")
    export = load_model(tiny_export)
    for _, _, meta in (run, ckpt, export):
        assert KEYS <= set(meta) and meta["task"] == "span"
        assert meta["decode"] == {"max_answer_len": 30, "no_answer_threshold": 0.0}
    assert run[2] == ckpt[2] and run[2]["format"] == "run" and run[2]["file"] == str(tiny_run / "best.pt")
    assert run[2]["data"]["dev_file"] and export[2]["data"] == {}
    assert export[2]["format"] == FORMAT and export[2]["file"] == str(tiny_export)
    for key in ("model", "model_config", "train_config", "embedding", "dev_score", "step"):
        assert export[2][key] == run[2][key], key
    assert run[1] == ckpt[1] == export[1]
    for (name, a), b in zip(run[0].state_dict().items(), export[0].state_dict().values()):
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b, name
    assert not run[0].training and load_span_model(tiny_export)[2] == export[2]


def test_ema_or_raw_weights_of_a_checkpoint(tiny_run):
    saved = load_checkpoint(tiny_run / "last.pt")
    raw = load_model(tiny_run / "last.pt", ema=False)[0].state_dict()
    ema = load_model(tiny_run / "last.pt")[0].state_dict()
    assert any(not torch.equal(t, saved["model"][name]) for name, t in saved["ema"]["shadow"].items())
    for name, t in saved["model"].items():
        if isinstance(t, torch.Tensor):
            assert torch.equal(raw[name], t), name
            assert torch.equal(ema[name], saved["ema"]["shadow"].get(name, t)), name


def test_an_onnx_file_is_not_loaded_into_pytorch(tmp_path):
    f = tmp_path / "m.onnx"
    f.write_bytes(b"not read")
    with pytest.raises(ValueError, match="onnxruntime"):
        load_model(f)
