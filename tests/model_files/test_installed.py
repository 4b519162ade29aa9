"""Every model installed with rckit, asked by name as a person would: ``--model NAME`` through the
commands, ``Reader.load(NAME)``, ``rckit.answer(..., model=NAME)``, ``rckit models``, and each
file's recorded full-dev figure checked on a real-data subset (docs/models.md, RESULTS.md)."""

import json
import shutil

import pytest

import rckit
from rckit.answering.reader import Reader
from rckit.model_files.metadata import read_metadata
from rckit.model_files.reader_file import is_reader_file, reader_metadata
from rckit.model_files.source import (
    BUNDLED,
    INSTALLED_NAMES,
    installed_files,
    installed_models,
    installed_path,
    model_names,
    open_model,
    pytorch_source,
)
from tests.model_files.test_bundled import CASES, QANET, QANET_ONNX, rckit_cli

# What each installed file scores on the first 200 SQuAD v1.1 dev questions, always answering (`rckit
# evaluate --model NAME --data DEV --limit 200 --always-answer`; deep_lstm_reader and qanet_paper 2026-11-25,
# the QANets on ONNX 2026-11-27); the full-dev figures are recorded in the files. The default's own:
# test_bundled.py.
SUBSET_F1 = {
    "dcn": 68.43,
    "dcn_plus": 77.69,
    "deep_lstm_reader": 38.93,
    "qanet_paper": 75.26,
    "qanet": 90.04,  # ONNX, its encoder graph quantized by rows (2026-11-28)
    "qanet_glove": 70.92,
    "qanet_minilm_l2": 80.66,  # ONNX, 2026-11-28
}
SPAN_READERS = ("qanet", "dcn", "dcn_plus", "deep_lstm_reader")  # one per span reader of the seeds
EIFFEL = CASES[0]


def metadata(name: str) -> dict:
    """Installed model ``name``'s metadata: rckit's own reader's file, or a span model's."""
    path = installed_files(name)["safetensors"]
    return reader_metadata(path) if is_reader_file(path) else read_metadata(path)


def test_a_span_reader_of_every_seed_is_installed_with_its_full_dev_figure():
    assert set(SPAN_READERS) <= set(installed_models())
    assert installed_models()[0] == "minilm_reader" and installed_models() == [
        n for n in INSTALLED_NAMES if n in installed_models()
    ]
    assert installed_files("minilm_reader")["safetensors"].stat().st_size < 25 * 2**20  # issue 71: at most 25 MB
    for name in installed_models():
        meta = metadata(name)
        full = [s for s in meta["scores"] if s["total"] == 10570 and s["data"] == "dev-v1.1.json.gz"]
        settings = [bool(s.get("always_answer")) for s in full]  # one figure a way of answering, at most
        assert full and len(set(settings)) == len(settings), (name, meta["scores"])
        assert all(0 < s["f1"] <= 100 for s in full), (name, meta["scores"])
        if name == "minilm_reader":  # rckit's own reader: test_bundled.py checks its file
            continue
        assert meta["model"] == ("qanet" if name.startswith("qanet") else name)
        assert meta["dtype"] == ("fp16" if meta["model"] == "qanet" else "int8"), name  # the RNN readers: int8 rows
        assert installed_files(name)["safetensors"].stat().st_size < 16 * 2**20, (
            name
        )  # small enough to ship in the wheel
        assert not any(r["stored"] for r in meta["frozen_rows"].values() if r["rows"]), name  # GloVe rebuilt


def test_names_resolve_and_an_unknown_one_lists_the_installed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert open_model("dcn").path == installed_files("dcn")["safetensors"]
    assert installed_path("qanet").suffix == ".onnx"  # onnxruntime is installed here: the faster file
    assert installed_path("minilm_reader") == BUNDLED  # one file for both backends
    assert model_names("all") == installed_models() and model_names("dcn, qanet,dcn") == ["dcn", "qanet"]
    with pytest.raises(FileNotFoundError) as e:
        open_model("dcnn")
    assert (
        "dcnn" in str(e.value) and "installed: minilm_reader, qanet, dcn" in str(e.value) and "\n" not in str(e.value)
    )
    with pytest.raises(FileNotFoundError, match="nosuch"):
        model_names("dcn,nosuch")
    (tmp_path / "dcn").mkdir()  # a run directory of that name here: the path wins over the name
    assert open_model("dcn").kind == "run"


def test_reader_load_and_answer_by_name():
    reader = Reader.load("dcn")
    assert reader.info["model"] == "dcn"
    context, question, expected = EIFFEL
    assert reader.answer(context, question)[0]["answer"] in expected
    got = rckit.answer(context, question, model="dcn_plus")[0]
    assert got["answer"] in expected and context[got["start"] : got["end"]] == got["answer"]


def test_predict_and_evaluate_take_model_by_name(tmp_path):
    context, question, expected = EIFFEL
    res = rckit_cli(["predict", "--model", "dcn", "--context", context, "--question", question, "--json"], tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["answer"] in expected
    res = rckit_cli(["predict", "--model", "nosuch", "--context", context, "--question", question], tmp_path)
    assert res.returncode != 0 and "installed: minilm_reader, qanet, dcn, dcn_plus, deep_lstm_reader" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    res = rckit_cli(["predict", "dcn", "--model", "qanet", "--context", context, "--question", question], tmp_path)
    assert res.returncode != 0 and "not both" in res.stderr


def test_predict_model_all_answers_with_every_installed_model(tmp_path):
    context, question, expected = EIFFEL
    res = rckit_cli(["predict", "--model", "all", "--context", context, "--question", question, "--json"], tmp_path)
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [r["model"] for r in rows] == installed_models()
    for r in rows:
        best = r["answers"][0]
        assert r["ms"] > 0 and context[best["start"] : best["end"]] == best["answer"], r
    assert all(
        r["answers"][0]["answer"] in expected for r in rows if r["model"] in ("minilm_reader", "qanet", "dcn")
    ), rows
    table = rckit_cli(["predict", "--model", "qanet,dcn", "--context", context, "--question", question], tmp_path)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.strip().splitlines()
    assert lines[0].split() == ["model", "answer", "probability", "ms"]
    assert [line.split()[0] for line in lines[1:]] == ["qanet", "dcn"] and all("1889" in x for x in lines[1:])


def test_models_lists_every_installed_model_with_its_figures(tmp_path):
    res = rckit_cli(["models"], tmp_path)
    assert res.returncode == 0, res.stderr
    for name in installed_models():
        meta = metadata(name)
        f1 = next(s["f1"] for s in meta["scores"] if s["total"] == 10570)
        line = next(x for x in res.stdout.splitlines() if x.split() and x.split()[0] == name)
        assert f"{f1:.2f}" in line and "MiB" in line, line


@pytest.mark.realdata
@pytest.mark.parametrize("name", sorted(SUBSET_F1))
def test_each_installed_model_scores_its_figure(name, shared_data, tmp_path):
    """The first 200 dev questions through `rckit evaluate --model NAME`: the file's figure there
    within a point, so that a wrong vocabulary, GloVe rows or fp16 cast cannot pass."""
    res = rckit_cli(
        [
            "evaluate",
            "--model",
            name,
            "--data",
            str(shared_data / "squad-v1.1" / "dev-v1.1.json.gz"),
            "--limit",
            "200",
            "--always-answer",
        ],
        tmp_path,
    )
    assert res.returncode == 0, res.stderr
    score = json.loads(res.stdout.strip().splitlines()[-1])
    assert score["total"] == 200 and score["f1"] >= SUBSET_F1[name] - 1.0, score


def test_training_and_export_read_the_safetensors_file_of_a_name(tmp_path):
    """`--init-from qanet` and `rckit export --model qanet` want weights: the name's .safetensors
    file, though the name answers with its ONNX file here."""
    assert open_model("qanet").kind == "onnx" and pytorch_source("qanet") == QANET
    assert pytorch_source("dcn") == installed_files("dcn")["safetensors"]
    assert open_model("minilm_reader").kind == "safetensors" and pytorch_source(None) == BUNDLED
    lone = tmp_path / "lone.onnx"
    shutil.copy(QANET_ONNX, lone)
    with pytest.raises(ValueError, match="no .safetensors file beside it"):
        pytorch_source(lone)
    out = tmp_path / "dcn-copy.safetensors"
    res = rckit_cli(["export", "--model", "dcn", "--out", str(out)], tmp_path)
    assert res.returncode == 0, res.stderr
    assert read_metadata(out)["model"] == "dcn"


def test_explain_by_name_reads_the_pytorch_file_and_a_given_onnx_path_stays(monkeypatch):
    from rckit.cli.explain import torch_source

    assert torch_source("qanet") == QANET and torch_source("dcn") == installed_files("dcn")["safetensors"]
    assert torch_source(str(QANET_ONNX)) == str(QANET_ONNX)  # refused by the reader, naming the file beside it
    monkeypatch.delenv("RCKIT_MODEL", raising=False)
    assert torch_source(None) == QANET  # the default reader does not explain yet: the installed QANet does
    monkeypatch.setenv("RCKIT_MODEL", str(installed_files("dcn")["safetensors"]))
    assert torch_source(None) == installed_files("dcn")["safetensors"]  # $RCKIT_MODEL, as every command reads it


ROSETTA = (
    "The Rosetta Stone is a slab of dark granodiorite that French soldiers found in July 1799 while rebuilding "
    "a fort near the town of Rashid, in the Nile Delta. It carries one decree of King Ptolemy V written three "
    "times: in hieroglyphs, in Demotic script and in ancient Greek. Because scholars could still read the "
    "Greek, the stone became the key to the hieroglyphs, and Jean-François Champollion announced their "
    "decipherment in Paris in 1822. After the British defeated the French in Egypt, the stone was shipped to "
    "London, where it has been shown at the British Museum since 1802."
)  # the page's own example


@pytest.mark.parametrize("source", ["qanet", QANET], ids=["qanet-onnx", "qanet-safetensors"])
def test_qanet_names_who_deciphered_the_hieroglyphs(source):
    """The page's example, where the GloVe-only QANet (qanet_glove) marks "King Ptolemy V": QANet
    over the encoder's states reads each word in its context and answers it, on onnxruntime (the
    encoder in int8, its graph built from the package's weights) and on PyTorch alike. (The
    default's answers to the page's questions: test_bundled.py.)"""
    reader = Reader.load(source)
    assert reader.info["contextual"]["name"] == "minilm" and reader.encoder is not None
    assert reader.model.backend == ("onnxruntime" if source == "qanet" else "torch")
    got = reader.answer(ROSETTA, "Who deciphered the hieroglyphs?")[0]
    assert got["answer"] == "Jean-François Champollion" and ROSETTA[got["start"] : got["end"]] == got["answer"]
