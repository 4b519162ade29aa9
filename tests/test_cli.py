import json
import subprocess
import sys

import pytest

from conftest import DEV_PARAS, squad_json, write_json
from rckit.cli import main


@pytest.mark.parametrize("cmd", ["prepare", "train", "evaluate", "predict", "score", "bench"])
def test_every_command_explains_itself(cmd, capsys):
    with pytest.raises(SystemExit) as e:
        main([cmd, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert f"usage: rckit {cmd}" in out and len(out) > 200


def test_console_entry_point_runs():
    r = subprocess.run([sys.executable, "-m", "rckit", "--help"], capture_output=True, text=True, check=True)
    assert "prepare" in r.stdout and "score" in r.stdout


def test_prepare_from_data_dir_then_cached(tiny_squad, tiny_glove, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RCKIT_SQUAD_URL", "http://127.0.0.1:9/never")  # any download attempt fails
    data_dir = tiny_squad[0].parent
    args = ["prepare", "squad", "--data-dir", str(data_dir), "--embeddings", str(tiny_glove), "--out", str(tmp_path / "p")]
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
    code = main(["prepare", "squad", "--train", str(train), "--dev", str(dev), "--out", str(tmp_path), "--set", "nope=1"])
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
    from rckit.cli import model_configs

    m, t = model_configs("qanet", "cpu-small", ["d_model=32", "train.lr=0.002", "eval_questions=10", "data.max_word_len=8"])
    assert (m.d_model, t.lr, t.eval_questions) == (32, 0.002, 10)
    with pytest.raises(ValueError, match="unknown setting 'nope'"):
        model_configs("qanet", None, ["nope=1"])
    with pytest.raises(ValueError, match="no preset 'huge'"):
        model_configs("qanet", "huge", [])


def test_decode_settings_have_their_own_section():
    from rckit.cli import run_configs
    from rckit.evaluation.decoding import DecodeConfig

    _, t, d = run_configs("qanet", "cpu-small", [])
    assert d == DecodeConfig(max_answer_len=30) and not hasattr(t, "max_answer_len")  # the preset's decode section
    for over in (["decode.max_answer_len=15"], ["max_answer_len=15"]):  # a bare key finds its section
        assert run_configs("qanet", "cpu-small", over)[2].max_answer_len == 15
    with pytest.raises(ValueError, match="use decode.max_answer_len"):
        run_configs("qanet", None, ["train.max_answer_len=15"])
    with pytest.raises(ValueError, match="unknown setting 'top_p'"):
        run_configs("qanet", None, ["decode.top_p=0.9"])


def test_every_preset_reads_and_none_keeps_decoding_under_train():
    from rckit.cli import models_and_presets, run_configs
    from rckit.config import load_preset
    from rckit.models import preset_path

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
