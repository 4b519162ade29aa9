import json
import subprocess
import sys

import pytest
import torch

from rckit.cli import COMMANDS, main
from tests.conftest import DEV_PARAS, squad_json, write_json


@pytest.mark.parametrize("cmd", list(COMMANDS))
def test_every_command_explains_itself(cmd, capsys):
    with pytest.raises(SystemExit) as e:
        main([cmd, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert f"usage: rckit {cmd}" in out and len(out) > 200


def test_console_entry_point_runs():
    r = subprocess.run([sys.executable, "-m", "rckit", "--help"], capture_output=True, text=True, check=True)
    overview = r.stdout.split("positional arguments")[0]  # the first screen a person reads
    assert all(f"  rckit {cmd} " in overview for cmd in COMMANDS), overview


def test_only_the_chosen_commands_module_is_imported_and_help_needs_no_torch():
    code = (
        "import sys\nfrom rckit.cli import main\n"
        "for argv in (['--help'], ['train', '--help']):\n"
        "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
        "    print(sorted(m for m in sys.modules if m.startswith('rckit.cli.')), 'torch' in sys.modules,\n"
        "          file=sys.stderr)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    top, train = r.stderr.splitlines()
    assert top == "['rckit.cli.errors'] False"  # the error rule is the command's own, not a command
    assert train == "['rckit.cli.arguments', 'rckit.cli.errors', 'rckit.cli.train'] False"


def test_prepare_from_data_dir_then_cached(tiny_squad, tiny_glove, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RCKIT_SQUAD_URL", "http://127.0.0.1:9/never")  # any download attempt fails
    data_dir = tiny_squad[0].parent
    args = [
        "prepare",
        "squad",
        "--data-dir",
        str(data_dir),
        "--embeddings",
        str(tiny_glove),
        "--out",
        str(tmp_path / "p"),
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "built" in out and "answers on token boundaries: 3/3 (100.00%)" in out
    assert main(args + ["--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["from_cache"] and summary["splits"]["dev"]["questions"] == 1
    assert main(args + ["--json", "--set", "max_word_len=4"]) == 0
    assert not json.loads(capsys.readouterr().out)["from_cache"]


def test_prepare_bad_setting_is_a_clear_error(tiny_squad, tiny_glove, tmp_path, capsys):
    train, dev = tiny_squad
    code = main(
        ["prepare", "squad", "--train", str(train), "--dev", str(dev), "--out", str(tmp_path), "--set", "nope=1"]
    )
    assert code == 2 and "unknown setting 'nope'" in capsys.readouterr().err


def test_score_prints_one_json_line(tmp_path, capsys):
    data = write_json(tmp_path / "dev.json.gz", squad_json(DEV_PARAS), gz=True)
    preds = tmp_path / "p.json"
    preds.write_text(json.dumps({"d1": "in 1889"}))
    assert main(["score", str(data), str(preds)]) == 0
    line = capsys.readouterr().out.strip().splitlines()
    assert len(line) == 1
    res = json.loads(line[0])
    assert (res["exact_match"], res["f1"], res["total"]) == (100.0, 100.0, 1)


def test_score_v2_breakdown(tmp_path, capsys):
    doc = squad_json([("A b c.", [("a", "q?", [("b", 2)]), ("n", "q2?", [], True)])], version="2.0")
    data = write_json(tmp_path / "dev2.json", doc)
    preds = tmp_path / "p.json"
    preds.write_text(json.dumps({"a": "b", "n": "c"}))
    assert main(["score", str(data), str(preds)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["exact_match"] == 50.0 and res["HasAns_exact_match"] == 100.0 and res["NoAns_exact_match"] == 0.0


def test_train_without_models_says_so(capsys):
    assert main(["train", "nosuchmodel", "--out", "x"]) == 2
    assert "nosuchmodel" in capsys.readouterr().err


def test_set_keys_route_to_model_train_and_data():
    from rckit.presets import model_configs

    m, t = model_configs(
        "qanet", "cpu-small", ["d_model=32", "train.lr=0.002", "eval_questions=10", "data.max_word_len=8"]
    )
    assert (m.d_model, t.lr, t.eval_questions) == (32, 0.002, 10)
    with pytest.raises(ValueError, match="unknown setting 'nope'"):
        model_configs("qanet", None, ["nope=1"])
    with pytest.raises(ValueError, match="no preset 'huge'"):
        model_configs("qanet", "huge", [])


def test_decode_settings_have_their_own_section():
    from rckit.answering.decoding import DecodeConfig
    from rckit.presets import run_configs

    _, t, d = run_configs("qanet", "cpu-small", [])
    assert d == DecodeConfig(max_answer_len=30) and not hasattr(t, "max_answer_len")  # the preset's decode section
    for over in (["decode.max_answer_len=15"], ["max_answer_len=15"]):  # a bare key finds its section
        assert run_configs("qanet", "cpu-small", over)[2].max_answer_len == 15
    with pytest.raises(ValueError, match="use decode.max_answer_len"):
        run_configs("qanet", None, ["train.max_answer_len=15"])
    with pytest.raises(ValueError, match="unknown setting 'top_p'"):
        run_configs("qanet", None, ["decode.top_p=0.9"])


def test_every_preset_reads_and_none_keeps_decoding_under_train():
    from rckit.config import load_preset
    from rckit.presets import models_and_presets, preset_path, run_configs

    for model, presets in models_and_presets().items():
        for preset in presets:
            assert "max_answer_len" not in load_preset(preset_path(model, preset)).get("train", {})
            run_configs(model, preset, [])


def test_an_old_preset_with_train_max_answer_len_says_where_it_went(tmp_path, capsys):
    preset = tmp_path / "old.json"
    preset.write_text(json.dumps({"model": {}, "train": {"max_answer_len": 15}}))
    assert main(["train", "qanet", "--preset", str(preset), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rckit train: preset") and "use decode.max_answer_len" in err and len(err.splitlines()) == 1


# ------------------------------------------------------------------ predict, export, models, serve


def _run(argv, capsys):
    capsys.readouterr()
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    return (code, *capsys.readouterr())


def test_predict_a_questions_file_in_order_with_ids(tiny_export, tmp_path, capsys):
    from rckit.answering.reader import Reader

    records = [
        {"id": "a", "context": "alpha beta gamma delta.", "question": "what follows alpha ?"},
        {"context": "mu alpha kappa lambda.", "question": "what follows mu ?"},
        {"id": 7, "context": "alpha beta gamma delta.", "question": "what follows gamma ?"},
    ]
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps(r) + "\n" for r in records) + "\n")
    want = Reader.load(tiny_export).answer_batch([(r["context"], r["question"]) for r in records], top_k=2)
    code, out, err = _run(
        ["predict", tiny_export, "--questions", questions, "--out", tmp_path / "a.jsonl", "--top-k", 2], capsys
    )
    assert code == 0 and out == "" and "3 questions answered" in err
    got = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert [g["id"] for g in got] == ["a", 1, 7] and [g["answers"] for g in got] == want
    # A JSON list in, a JSON list out; without --out, JSON lines on stdout.
    (tmp_path / "q.json").write_text(json.dumps(records))
    assert (
        _run(
            ["predict", tiny_export, "--questions", tmp_path / "q.json", "--out", tmp_path / "a.json", "--top-k", 2],
            capsys,
        )[0]
        == 0
    )
    assert json.loads((tmp_path / "a.json").read_text()) == got
    code, out, _ = _run(["predict", tiny_export, "--questions", questions, "--top-k", 2], capsys)
    assert code == 0 and [json.loads(line) for line in out.splitlines()] == got


@pytest.mark.parametrize(
    "name, content, wanted",
    [
        (
            "q.jsonl",
            '{"context": "alpha beta.", "question": "what ?"}\n{"context": "alpha beta."}\n',
            ["q.jsonl", "line 2", "missing field 'question'"],
        ),
        (
            "q.jsonl",
            '{"context": "alpha beta.", "question": "what ?"}\n{"context": "alp\n',
            ["q.jsonl", "line 2", "JSON"],
        ),
        (
            "q.json",
            '[{"context": "alpha beta.", "question": "what ?"}, {"context": "  ", "question": "what ?"}]',
            ["q.json", "record [1]", "the context is empty"],
        ),
        ("q.json", '[["alpha beta.", "what ?"]]', ["q.json", "record [0]", "expected an object"]),
        ("q.json", '{"context": "alpha beta.", "question": "what ?"}', ["q.json", "expected a list"]),
        ("q.json", '[{"id": [1], "context": "alpha beta.", "question": "what ?"}]', ["record [0]", "'id'"]),
    ],
)
def test_a_bad_questions_record_is_named_and_exits_2(name, content, wanted, tmp_path, capsys):
    (tmp_path / name).write_text(content)
    code, out, err = _run(["predict", "no-model-needed", "--questions", tmp_path / name], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and lines[0].startswith("rckit predict: "), err
    for text in wanted:
        assert text in lines[0], (text, lines[0])


def test_predict_arguments_go_together(tiny_export, tmp_path, capsys):
    for argv, text in (
        (["--context", "alpha beta."], "give --context and --question"),
        (["--questions", tmp_path / "q.jsonl", "--question", "what ?"], "not both"),
        (["--context", "alpha.", "--question", "what ?", "--out", tmp_path / "a.json"], "--out is for"),
    ):
        code, _, err = _run(["predict", tiny_export, *argv], capsys)
        assert code == 2 and text in err and len(err.strip().splitlines()) == 1


def test_predict_without_a_model_uses_rckit_model_or_says_how_to_get_one(tiny_export, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("RCKIT_MODEL", raising=False)
    monkeypatch.setattr("rckit.model_files.source.BUNDLED", tmp_path / "minilm_reader-squad.safetensors")
    ask = ["--context", "alpha beta gamma delta.", "--question", "what follows alpha ?"]
    code, out, err = _run(["predict", *ask], capsys)
    assert code == 2 and out == "" and err.startswith("rckit predict: no default model is installed")
    assert "RCKIT_MODEL" in err and len(err.strip().splitlines()) == 1
    monkeypatch.setenv("RCKIT_MODEL", str(tiny_export))
    code, out, err = _run(["predict", *ask, "--top-k", 3, "--json"], capsys)
    answers = json.loads(out)
    assert (
        code == 0
        and len(answers) == 3
        and all("alpha beta gamma delta."[a["start"] : a["end"]] == a["answer"] for a in answers)
    )
    code, out, _ = _run(["predict", *ask, "--json"], capsys)
    assert code == 0 and json.loads(out) == answers[0]
    code, out, _ = _run(["predict", *ask], capsys)
    assert code == 0 and out.strip() == answers[0]["answer"]
    code, out, _ = _run(["predict", *ask, "--top-k", 3], capsys)
    assert code == 0 and [line.split("\t", 1)[1] for line in out.splitlines()] == [a["answer"] for a in answers]


def test_models_lists_the_default_and_a_directory(tiny_export, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RCKIT_MODEL", str(tiny_export))
    (tmp_path / "broken.safetensors").write_bytes(b"nope")
    code, out, _ = _run(["models", tiny_export.parent], capsys)
    assert code == 0 and f"default model: {tiny_export} (RCKIT_MODEL)" in out
    line = next(ln for ln in out.splitlines()[2:] if tiny_export.name in ln)
    assert "qanet" in line and "MiB" in line and "dev_f1" in line
    code, out, _ = _run(["models", tmp_path], capsys)
    assert code == 0 and "1 exported models" in out and "broken.safetensors" in out and "unreadable" in out
    monkeypatch.delenv("RCKIT_MODEL")
    monkeypatch.setattr("rckit.model_files.source.BUNDLED", tmp_path / "minilm_reader-squad.safetensors")
    code, out, _ = _run(["models"], capsys)
    assert code == 0 and out.startswith("default model: none (no default model is installed")
    assert _run(["models", tmp_path / "nowhere"], capsys)[0] == 2


def test_evaluate_record_keeps_every_questions_figures_in_an_exported_file(tiny_run, tiny_export, tmp_path, capsys):
    import shutil

    from safetensors.torch import load_file

    from rckit.model_files.metadata import read_metadata

    model = tmp_path / "m.safetensors"
    shutil.copy(tiny_export, model)
    dev = tiny_run.parent / "dev.json"
    code, out, err = _run(["evaluate", model, "--data", dev, "--record"], capsys)
    assert code == 0 and f"recorded in {model}" in err
    result = json.loads(out)
    (entry,) = read_metadata(model)["scores"]
    assert entry["data"] == "dev.json" and entry["f1"] == result["f1"] and entry["total"] == result["total"]
    before, after = load_file(tiny_export), load_file(model)
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    line = next(ln for ln in _run(["models", tmp_path], capsys)[1].splitlines() if "m.safetensors" in ln)
    assert f"F1 {result['f1']:.2f} on dev.json ({result['total']:,} questions)" in line and "dev_f1" not in line
    assert _run(["evaluate", model, "--data", dev, "--record"], capsys)[0] == 0  # again: replaced, not added
    assert len(read_metadata(model)["scores"]) == 1
    code, _, err = _run(["evaluate", model, "--data", dev, "--record", "--limit", 2], capsys)
    assert code == 2 and "without --limit" in err
    # An ONNX file keeps its own figures, its graph unchanged, with no PyTorch needed to write them.
    import onnx

    from rckit.cli.models import onnx_metadata

    graph = tmp_path / "m.onnx"
    assert _run(["export", tiny_export, "--out", graph], capsys)[0] == 0
    weights = {t.name: t.raw_data for t in onnx.load(str(graph)).graph.initializer}
    code, out, err = _run(["evaluate", graph, "--data", dev, "--record"], capsys)
    assert code == 0 and f"recorded in {graph}" in err
    (entry,) = onnx_metadata(graph)["scores"]
    assert entry["f1"] == json.loads(out)["f1"] and entry["data"] == "dev.json"
    assert {t.name: t.raw_data for t in onnx.load(str(graph)).graph.initializer} == weights


def test_evaluate_reads_a_set_whose_version_field_says_1_0(tiny_export, tiny_run, tmp_path, capsys):
    """Public sets in SQuAD's layout often write "version": "1.0": evaluated by the v1.1 rules, the
    same figures as the file that says "1.1"."""
    doc = json.loads((tiny_run.parent / "dev.json").read_text())
    scores = []
    for declared in ("1.1", "1.0"):
        path = tmp_path / f"dev-{declared}.json"
        path.write_text(json.dumps({**doc, "version": declared}))
        code, out, err = _run(["evaluate", tiny_export, "--data", path], capsys)
        assert code == 0, err
        scores.append(json.loads(out))
    assert scores[0] == scores[1]


def test_serve_parses_and_delegates(monkeypatch, capsys):
    import types

    from rckit.serve.config import ServeConfig

    calls = []
    fake = types.ModuleType("rckit.serve.app")
    fake.serve = lambda source, config: calls.append((source, config))
    monkeypatch.setitem(sys.modules, "rckit.serve.app", fake)
    assert (
        main(["serve", "runs/x", "--port", "9000", "--max-batch", "8", "--threads", "2", "--model-workers", "3"]) == 0
    )
    assert calls == [
        (
            "runs/x",
            ServeConfig(
                host="127.0.0.1",
                port=9000,
                threads=2,
                model_workers=3,
                always_answer=False,
                index=None,
                max_batch=8,
                max_tokens=4096,
                batch_window_ms=2.0,
                policy="fair",
                max_body_bytes=4_000_000,
                max_questions=64,
                max_question_chars=1_000,
                max_context_chars=200_000,
                max_work=2_048,
                request_timeout=60.0,
            ),
        )
    ]
    assert main(["serve"]) == 0 and calls[-1][0] is None
