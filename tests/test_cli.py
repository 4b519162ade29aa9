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
