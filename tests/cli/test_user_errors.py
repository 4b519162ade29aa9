"""Every failure a user can cause ends in one line `rckit COMMAND: what, where` and exit status 2.

One tiny QANet run (and a tiny DCN run, to misplace its checkpoint) is trained once for the
module, from relative paths in the data directory; each case breaks a copy of one input and
runs the command in-process. A few cases run in a real process, where a traceback, a closed
pipe or ``kill -9`` can be seen as a user sees them.
"""

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from rckit.cli import main
from rckit.model_files.checkpoint import load_checkpoint, save_checkpoint
from tests.conftest import GLOVE_WORDS, squad_json, write_json
from tests.conftest import GREEK as WORDS
from tests.conftest import TINY_QANET as TINY_MODEL
from tests.conftest import TINY_QANET_TRAIN as TINY_TRAIN
from tests.conftest import greek_paragraphs as _paragraphs


@dataclass
class World:
    data: Path  # train.json, dev.json, glove.txt, tiny.json, cache/
    run: Path  # qanet, trained 2 steps from relative paths
    dcn_run: Path
    common: list  # absolute data arguments for `rckit train`


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    data = tmp_path_factory.mktemp("data")
    write_json(data / "train.json", squad_json(_paragraphs(4)))
    write_json(data / "dev.json", squad_json(_paragraphs(2)))
    lines = [
        f"{w} " + " ".join(f"{(i + 1) * 0.1 + k:.2f}" for k in range(4)) for i, w in enumerate(GLOVE_WORDS + WORDS)
    ]
    (data / "glove.txt").write_text("\n".join(lines) + "\n")
    (data / "tiny.json").write_text(json.dumps({"model": TINY_MODEL, "train": TINY_TRAIN}))
    relative = [
        "--train",
        "train.json",
        "--dev",
        "dev.json",
        "--embeddings",
        "glove.txt",
        "--cache-dir",
        "cache",
        "--no-progress",
    ]
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(data)  # the case: a run trained from relative paths
        assert main(["train", "qanet", "--preset", "tiny.json", "--out", "run", "--max-steps", "2", *relative]) == 0
        assert (
            main(
                [
                    "train",
                    "dcn",
                    "--preset",
                    "cpu-small",
                    "--set",
                    "hidden=8",
                    "--set",
                    "pool=2",
                    "--set",
                    "iterations=1",
                    "--set",
                    "batch_size=4",
                    "--set",
                    "eval_questions=0",
                    "--out",
                    "dcn-run",
                    "--max-steps",
                    "1",
                    *relative,
                ]
            )
            == 0
        )
    common = [
        "--preset",
        str(data / "tiny.json"),
        "--train",
        str(data / "train.json"),
        "--dev",
        str(data / "dev.json"),
        "--embeddings",
        str(data / "glove.txt"),
        "--cache-dir",
        str(data / "cache"),
        "--no-progress",
    ]
    return World(data, data / "run", data / "dcn-run", common)


def run_cli(argv, capsys):
    capsys.readouterr()
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:  # argparse's own errors
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def copy_run(world, tmp_path, name="run") -> Path:
    return Path(shutil.copytree(world.run, tmp_path / name))


# ------------------------------------------------------------------ broken inputs, one per case


def dev_doc():
    return squad_json(_paragraphs(2))


def truncated_json(tmp):
    text = json.dumps(dev_doc())
    return _write(tmp / "cut.json", text[: len(text) // 2].encode())


def truncated_gzip(tmp):
    data = gzip.compress(json.dumps(dev_doc()).encode())
    return _write(tmp / "cut.json.gz", data[: len(data) // 2])


def latin1(tmp):
    text = json.dumps(dev_doc(), ensure_ascii=False).replace("alpha", "alphé")
    return _write(tmp / "latin1.json", text.encode("latin-1"))


def duplicate_ids(tmp):
    doc = dev_doc()
    qas = doc["data"][0]["paragraphs"][0]["qas"]
    qas[1]["id"] = qas[0]["id"]
    return write_json(tmp / "dup.json", doc)


def missing_answers(tmp):
    doc = dev_doc()
    del doc["data"][0]["paragraphs"][1]["qas"][2]["answers"]
    return write_json(tmp / "noanswers.json", doc)


def missing_context(tmp):
    doc = dev_doc()
    del doc["data"][0]["paragraphs"][1]["context"]
    return write_json(tmp / "nocontext.json", doc)


def v2_data(tmp):
    doc = dev_doc()
    del doc["version"]
    doc["data"][0]["paragraphs"][0]["qas"][0]["answers"] = []
    return write_json(tmp / "unanswerable.json", doc)


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


def _mkdir(path):
    path.mkdir()
    return path


def good_preds(tmp):
    return _write(tmp / "preds.json", json.dumps({"c0q0": "beta"}).encode())


def _checkpoint_in_run(world, tmp, content: bytes | None = None, *, last: bytes | None = None):
    run = copy_run(world, tmp)
    if content is not None:
        (run / "best.pt").write_bytes(content)
    if last is not None:
        (run / "last.pt").write_bytes(last)
    return run


def _cut(world):
    good = (world.run / "best.pt").read_bytes()
    return good[: len(good) // 2]


def code_running_pickle(world, tmp):
    marker = tmp / "payload-ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    run = copy_run(world, tmp)
    torch.save({"format": "rckit-checkpoint-1", "x": Payload()}, run / "best.pt")
    return run / "best.pt"


def foreign_checkpoint(world, tmp):
    run = copy_run(world, tmp)
    torch.save({"state_dict": {"w": torch.zeros(2)}}, run / "best.pt")
    return run / "best.pt"


def dcn_in_qanet_run(world, tmp):
    run = copy_run(world, tmp)
    shutil.copy(world.dcn_run / "best.pt", run / "best.pt")
    return run


def config_of_other_settings(world, tmp):
    run = copy_run(world, tmp)
    config = json.loads((run / "config.json").read_text())
    config["model_config"]["d_model"] = 32
    (run / "config.json").write_text(json.dumps(config))
    return run


def dev_file_gone(world, tmp):
    run = copy_run(world, tmp)
    for name in ("best.pt", "last.pt"):
        state = load_checkpoint(run / name)
        state["data"]["dev_file"] = str(tmp / "moved-away" / "dev.json")
        save_checkpoint({k: v for k, v in state.items() if k != "format"}, run / name)
    return run


# Command lines from (world, tmp_path) for each case, built from these pieces.
def score(dataset, preds):
    return lambda w, t: ["score", dataset(w, t), preds(w, t)]


def prepare(train, dev):
    return lambda w, t: ["prepare", "squad", "--train", train(w, t), "--dev", dev(w, t), "--out", t / "p"]


def given(name):
    return lambda w, t: w.data / name


def written(name, data: bytes):
    return lambda w, t: _write(t / name, data)


def broken(make):
    return lambda w, t: make(t)


ASK = ["--context", "alpha beta.", "--question", "what ?"]
PREDS = broken(good_preds)

# Each case: its command line, then the texts the one error line must hold.
CASES = {
    # score: the dataset
    "score-truncated-json": (score(broken(truncated_json), PREDS), ["cut.json", "not valid JSON"]),
    "score-truncated-gzip": (score(broken(truncated_gzip), PREDS), ["cut.json.gz", "truncated gzip"]),
    "score-non-utf8": (score(broken(latin1), PREDS), ["latin1.json", "not UTF-8"]),
    "score-duplicate-ids": (score(broken(duplicate_ids), PREDS), ["dup.json", "duplicate question id"]),
    "score-missing-field": (
        score(broken(missing_answers), PREDS),
        ["noanswers.json", "paragraph 1 question 2", "'answers'"],
    ),
    "score-v2-data-as-v1": (score(broken(v2_data), PREDS), ["unanswerable.json", "--version 2.0"]),
    "score-missing-dataset": (score(given("nope.json"), PREDS), ["nope.json"]),
    # score: the predictions
    "score-predictions-list": (
        score(given("dev.json"), written("p.json", b'["beta"]')),
        ["p.json", "expected an object"],
    ),
    "score-prediction-not-string": (
        score(given("dev.json"), written("p.json", b'{"c0q0": ["b"]}')),
        ["p.json", "'c0q0'", "should be a string"],
    ),
    "score-predictions-truncated": (
        score(given("dev.json"), written("p.json", b'{"c0q0": "be')),
        ["p.json", "not valid JSON"],
    ),
    "score-predictions-non-utf8": (
        score(given("dev.json"), written("p.json", '{"c0q0": "é"}'.encode("latin-1"))),
        ["p.json", "not UTF-8"],
    ),
    # prepare
    "prepare-truncated-json": (prepare(broken(truncated_json), given("dev.json")), ["cut.json", "not valid JSON"]),
    "prepare-truncated-gzip": (prepare(given("train.json"), broken(truncated_gzip)), ["cut.json.gz", "truncated gzip"]),
    "prepare-non-utf8": (prepare(broken(latin1), given("dev.json")), ["latin1.json", "not UTF-8"]),
    "prepare-duplicate-ids": (
        prepare(given("train.json"), broken(duplicate_ids)),
        ["dup.json", "duplicate question id"],
    ),
    "prepare-missing-field": (
        prepare(broken(missing_context), given("dev.json")),
        ["nocontext.json", "paragraph 1", "'context'"],
    ),
    "prepare-missing-file": (prepare(lambda w, t: t / "nope.json", given("dev.json")), ["nope.json", "--train"]),
    # evaluate: checkpoints and data
    "evaluate-truncated-checkpoints": (
        lambda w, t: ["evaluate", _checkpoint_in_run(w, t, _cut(w), last=_cut(w))],
        ["best.pt", "truncated"],
    ),
    "evaluate-empty-checkpoint": (
        lambda w, t: ["evaluate", _checkpoint_in_run(w, t, b"", last=b"")],
        ["best.pt", "empty"],
    ),
    "evaluate-code-running-pickle": (
        lambda w, t: ["evaluate", code_running_pickle(w, t)],
        ["best.pt", "refused", "open"],
    ),
    "evaluate-foreign-checkpoint": (
        lambda w, t: ["evaluate", foreign_checkpoint(w, t)],
        ["best.pt", "not an rckit checkpoint", "state_dict"],
    ),
    "evaluate-best-unreadable-last-fine": (
        lambda w, t: ["evaluate", _checkpoint_in_run(w, t, _cut(w))],
        ["best.pt", "truncated", "last.pt reads fine"],
    ),
    "evaluate-checkpoint-of-another-model": (
        lambda w, t: ["evaluate", dcn_in_qanet_run(w, t)],
        ["best.pt", "config.json", "dcn", "qanet", "does not belong"],
    ),
    "evaluate-checkpoint-of-other-settings": (
        lambda w, t: ["evaluate", config_of_other_settings(w, t)],
        ["best.pt", "config.json", "d_model: 32 -> 16", "does not belong"],
    ),
    "evaluate-not-a-run": (lambda w, t: ["evaluate", _mkdir(t / "not-a-run")], ["not-a-run", "no best.pt or last.pt"]),
    "evaluate-broken-data": (
        lambda w, t: ["evaluate", w.run, "--data", truncated_gzip(t)],
        ["cut.json.gz", "truncated"],
    ),
    "evaluate-dev-file-gone": (lambda w, t: ["evaluate", dev_file_gone(w, t)], ["moved-away", "--data"]),
    # predict
    "predict-truncated-checkpoint": (
        lambda w, t: ["predict", _checkpoint_in_run(w, t, _cut(w), last=_cut(w)), *ASK],
        ["best.pt", "truncated"],
    ),
    "predict-checkpoint-of-another-model": (
        lambda w, t: ["predict", dcn_in_qanet_run(w, t), *ASK],
        ["best.pt", "does not belong"],
    ),
    "predict-question-without-a-word": (
        lambda w, t: ["predict", w.run, "--context", "alpha beta.", "--question", " ?!. "],
        ["question", "no letter or digit"],
    ),
    "predict-truncated-export": (
        lambda w, t: ["predict", _write(t / "m.safetensors", b"\x40" + b"\0" * 20), *ASK],
        ["m.safetensors", "truncated"],
    ),
    "predict-no-such-model": (
        lambda w, t: ["predict", t / "nope", *ASK],
        ["nope", "no such run directory or model file"],
    ),
    "predict-questions-bad-record": (
        lambda w, t: ["predict", w.run, "--questions", _write(t / "q.jsonl", b'{"context": "alpha"}\n')],
        ["q.jsonl", "line 1", "'question'"],
    ),
    "predict-top-k-zero": (lambda w, t: ["predict", w.run, *ASK, "--top-k", "0"], ["top_k must be >= 1"]),
    "export-not-a-run": (
        lambda w, t: ["export", _mkdir(t / "not-a-run"), "--out", t / "m.safetensors"],
        ["not-a-run", "no best.pt or last.pt"],
    ),
    "export-truncated-checkpoint": (
        lambda w, t: ["export", _checkpoint_in_run(w, t, _cut(w), last=_cut(w)), "--out", t / "m.safetensors"],
        ["best.pt", "truncated"],
    ),
    # train
    "train-resume-other-settings": (
        lambda w, t: [
            "train",
            "qanet",
            "--out",
            copy_run(w, t),
            "--resume",
            "--max-steps",
            3,
            "--set",
            "d_model=32",
            "--set",
            "n_heads=4",
            *w.common,
        ],
        ["last.pt", "d_model: 16 -> 32", "n_heads: 2 -> 4"],
    ),
    "train-resume-truncated-checkpoint": (
        lambda w, t: [
            "train",
            "qanet",
            "--out",
            _checkpoint_in_run(w, t, last=_cut(w)),
            "--resume",
            "--max-steps",
            3,
            *w.common,
        ],
        ["last.pt", "truncated"],
    ),
    "train-resume-without-checkpoint": (
        lambda w, t: ["train", "qanet", "--out", t / "empty", "--resume", *w.common],
        ["last.pt", "--resume"],
    ),
    "train-into-a-finished-run": (lambda w, t: ["train", "qanet", "--out", copy_run(w, t), *w.common], ["--resume"]),
    "train-init-from-other-shape": (
        lambda w, t: [
            "train",
            "qanet",
            "--out",
            t / "r",
            "--init-from",
            w.run / "last.pt",
            "--max-steps",
            1,
            "--set",
            "d_model=32",
            "--set",
            "n_heads=4",
            *w.common,
        ],
        ["last.pt", "--init-from", "d_model: 16 -> 32"],
    ),
    "train-init-from-and-resume": (
        lambda w, t: [
            "train",
            "qanet",
            "--out",
            copy_run(w, t),
            "--resume",
            "--init-from",
            w.run / "last.pt",
            *w.common,
        ],
        ["--init-from", "--resume", "give one"],
    ),
    "train-init-from-the-own-reader": (
        lambda w, t: ["train", "qanet", "--out", t / "r", "--init-from", "bundled", *w.common],
        ["--init-from bundled", "rckit's own reader", "--init-from qanet"],
    ),
    "train-init-from-missing": (
        lambda w, t: ["train", "qanet", "--out", t / "r", "--init-from", t / "gone.pt", *w.common],
        ["gone.pt", "no checkpoint"],
    ),
    "train-broken-preset": (
        lambda w, t: ["train", "qanet", "--out", t / "r", "--preset", _write(t / "p.json", b"{mod")],
        ["p.json", "preset"],
    ),
    "train-unknown-model": (lambda w, t: ["train", "qanetx", "--out", t / "r"], ["qanetx", "qanet"]),
    "train-unknown-device": (
        lambda w, t: ["train", "qanet", "--out", t / "r", "--device", "gpu7", *w.common],
        ["gpu7"],
    ),
    "train-missing-out": (lambda w, t: ["train", "qanet"], ["--out"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_user_error_is_one_line_and_exit_2(case, world, tmp_path, capsys):
    make, wanted = CASES[case]
    argv = make(world, tmp_path)
    code, out, err = run_cli(argv, capsys)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith(f"rckit {argv[0]}: "), err
    assert "Traceback" not in err and out == ""
    for text in wanted:
        assert text in lines[0], (text, lines[0])
    assert not (tmp_path / "payload-ran").exists()  # a refused pickle ran nothing


@pytest.mark.parametrize("case", ["score-non-utf8", "evaluate-best-unreadable-last-fine"])
def test_in_a_real_process_no_traceback(case, world, tmp_path):
    argv = CASES[case][0](world, tmp_path)
    r = subprocess.run([sys.executable, "-m", "rckit", *map(str, argv)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith(f"rckit {argv[0]}: "), r.stderr


def test_closed_pipe_ends_quietly(world):
    """`rckit prepare ... | head -1`: the reader goes away; no BrokenPipeError traceback."""
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rckit",
            "prepare",
            "squad",
            "--train",
            "train.json",
            "--dev",
            "dev.json",
            "--embeddings",
            "glove.txt",
            "--cache-dir",
            "cache",
        ],
        cwd=world.data,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.close()  # before rckit writes anything
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141 and err == ""


# ------------------------------------------------------------------ answers that were wrong in silence


def test_run_directory_is_portable(world, tmp_path, capsys, monkeypatch):
    config = json.loads((world.run / "config.json").read_text())
    assert Path(config["data"]["dev_file"]).is_absolute() and Path(config["data"]["prepared"]).is_absolute()
    moved = Path(shutil.copytree(world.run, tmp_path / "elsewhere" / "run"))
    monkeypatch.chdir(tmp_path)  # neither the directory it was trained from nor its own
    code, out, err = run_cli(["evaluate", moved.relative_to(tmp_path)], capsys)
    assert code == 0, err
    assert json.loads(out)["total"] == 6


def test_chinese_context_answers_with_a_span_inside_it(world, capsys):
    context = "北京是中国的首都，也是政治和文化中心。北京有很多名胜古迹，比如故宫和长城。每年都有很多游客来北京旅游。"
    code, out, err = run_cli(
        ["predict", world.run, "--context", context, "--question", "中国的首都是哪里？", "--json"], capsys
    )
    assert code == 0, err
    ans = json.loads(out)
    assert ans["answer"] == context[ans["start"] : ans["end"]]
    assert 0 < len(ans["answer"]) <= 30 < len(context)  # at most max_answer_len tokens, one per character


def test_long_context_is_read_in_windows_without_a_warning(world, capsys):
    context = " ".join(WORDS[i % len(WORDS)] for i in range(900)) + "."
    code, out, err = run_cli(
        ["predict", world.run, "--context", context, "--question", "what follows alpha ?", "--json"], capsys
    )
    assert code == 0 and err == ""
    ans = json.loads(out)
    assert ans["answer"] and context[ans["start"] : ans["end"]] == ans["answer"]


def test_resume_says_which_step_it_goes_on_from(world, tmp_path, capsys):
    run = copy_run(world, tmp_path)
    code, out, err = run_cli(["train", "qanet", "--out", run, "--resume", "--max-steps", "3", *world.common], capsys)
    assert code == 0, err
    lines = [ln for ln in err.splitlines() if ln.startswith("resuming")]
    assert len(lines) == 1 and lines[0].startswith(f"resuming {run} from step 2 (")
    assert lines[0].endswith("s of training so far)")
    assert json.loads(out)["steps"] == 3


def test_train_help_lists_every_model_and_its_presets(capsys):
    from rckit.models import MODELS
    from rckit.presets import PRESET_DIR

    code, out, _ = run_cli(["train", "--help"], capsys)
    assert code == 0
    listing = out.split("models and their presets")[1].splitlines()
    for model in MODELS:
        line = next(ln for ln in listing if ln.strip().startswith(model + " "))
        for preset in PRESET_DIR.glob(f"{model}-*.json"):
            assert preset.stem.split("-", 1)[1] in line


# ------------------------------------------------------------------ kill -9 while a checkpoint is written

WRITER = """
import sys, torch
from rckit.model_files.checkpoint import load_checkpoint, save_checkpoint
state = load_checkpoint(sys.argv[1])
state.pop("format")
state["padding"] = torch.zeros(24_000_000)  # ~100 MB: most of the time goes to the write
print("ready", flush=True)
while True:
    save_checkpoint(state, sys.argv[1])
"""


def test_kill9_during_checkpoint_write_then_resume(world, tmp_path, capsys):
    run = copy_run(world, tmp_path)
    last = run / "last.pt"
    stale = []
    for _ in range(5):  # the kill may land between two writes: then try again
        p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(WRITER), str(last)], stdout=subprocess.PIPE)
        assert p.stdout.readline() == b"ready\n"
        deadline = time.time() + 60
        while not (stale := list(run.glob(".last.pt.*.tmp"))) and time.time() < deadline:
            time.sleep(0.01)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        stale = list(run.glob(".last.pt.*.tmp"))
        if stale:
            break
    assert stale, "no write was caught in the middle"
    assert load_checkpoint(last)["step"] == 2  # the old file or the new one, whole

    code, out, err = run_cli(["train", "qanet", "--out", run, "--resume", "--max-steps", "3", *world.common], capsys)
    assert code == 0, err
    assert json.loads(out)["steps"] == 3
    assert not list(run.glob(".*.tmp"))
    assert load_checkpoint(last)["step"] == 3
