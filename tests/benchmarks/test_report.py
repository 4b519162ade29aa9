"""benchmarks/report.py: the BENCHMARKS.md table from results.json, row selection, markers.
No bench is run here."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_report():
    spec = importlib.util.spec_from_file_location("benchmarks_report", ROOT / "benchmarks" / "report.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)  # benchmarks/ is not a package
    return module


report = _load_report()

ENTRY = {  # the fields `rckit bench --json` prints, plus what report.py adds
    "model": "qanet",
    "preset": "paper",
    "train_examples_per_s": 23.41,
    "train_first_pass_examples_per_s": 24.32,
    "inference_examples_per_s": 94.98,
    "latency_ms_median": 29.14,
    "latency_ms_p90": 35.92,
    "peak_rss_mb": 3753.0,
    "train_questions": 1024,
    "dtype": "bf16",
    "device": "cpu",
    "threads": 2,
    "trainable_parameters": 1,
    "heap_limit_mb": 0.0,
    "kernels": "all",
    "repeat": 1,
    "date": "2026-11-24 10:00 UTC",
    "command": "RCKIT_KERNELS=all python -m rckit bench qanet --preset paper --amp bf16 --json",
}
DOC = (
    "# Benchmarks\r\n\nIntro with `code`, unicode – and trailing spaces   \n\n"
    f"{report.START}\nold table\n{report.END}\n\n## After\n\nmore text\n"
)


def write_results(tmp_path, results) -> Path:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    return path


def test_render_from_results_and_dash_for_missing_rows(tmp_path):
    steps0 = {**ENTRY, "train_examples_per_s": None, "date": "2026-11-25 09:00 UTC"}
    path = write_results(tmp_path, {"qanet/paper/bf16/all": ENTRY, "dcn/cpu-small/fp32/all": steps0})
    table = report.render_table(report.ROWS, report.load_results(path))
    lines = table.splitlines()
    assert lines[0] == report.HEADER and len(lines) == 2 + len(report.ROWS)
    by_key = dict(zip([r.key for r in report.ROWS], lines[2:]))
    assert by_key["qanet/paper/bf16/all"] == (
        "| qanet | paper | bf16 | all | 23.4 | 95.0 | 29.1 / 35.9 | 3,753 | 2026-11-24 |"
    )
    assert by_key["dcn/cpu-small/fp32/all"] == (
        "| dcn | cpu-small | fp32 | all | - | 95.0 | 29.1 / 35.9 | 3,753 | 2026-11-25 |"
    )
    assert by_key["qanet/paper/fp32/none"] == "| qanet | paper | fp32 | none | - | - | - | - | - |"
    assert all(line.count("|") == 10 for line in lines)


def test_write_report_changes_only_between_markers(tmp_path):
    md = tmp_path / "BENCHMARKS.md"
    md.write_bytes(DOC.encode())
    path = write_results(tmp_path, {"qanet/paper/bf16/all": ENTRY})
    report.write_report(md, path)
    out = md.read_bytes().decode()
    before, after = DOC.split(report.START)[0], DOC.split(report.END)[1]
    assert out.startswith(before + report.START + "\n") and out.endswith(report.END + after)
    assert "old table" not in out and "| qanet | paper | bf16 | all | 23.4 |" in out
    assert "\r\n" in out  # line endings outside the table kept as they were
    report.write_report(md, path)  # a second run changes nothing
    assert md.read_bytes().decode() == out


def test_missing_results_file_renders_every_row_as_dashes(tmp_path):
    table = report.render_table(report.ROWS, report.load_results(tmp_path / "absent.json"))
    assert all(line.endswith("| - | - | - | - | - |") for line in table.splitlines()[2:])


@pytest.mark.parametrize(
    "doc, message",
    [
        ("no markers here\n", "found it 0 times"),
        (f"{report.START}\n{report.START}\n{report.END}\n", "found it 2 times"),
        (f"{report.END}\n{report.START}\n", "comes before"),
        (f"{report.START}\nonly the start\n", f"expected the marker {report.END} once"),
    ],
)
def test_bad_markers_give_a_clear_error(tmp_path, doc, message):
    md = tmp_path / "BENCHMARKS.md"
    md.write_text(doc)
    with pytest.raises(report.ReportError, match=message):
        report.write_report(md, tmp_path / "absent.json")
    assert md.read_text() == doc  # untouched
    assert report.main(["--markdown", str(md), "--results", str(tmp_path / "absent.json")]) == 2


def test_missing_markdown_and_broken_results_are_errors(tmp_path):
    with pytest.raises(report.ReportError, match="no such file"):
        report.write_report(tmp_path / "nope.md", tmp_path / "absent.json")
    bad = tmp_path / "results.json"
    bad.write_text("{not json")
    with pytest.raises(report.ReportError, match="not JSON"):
        report.load_results(bad)


def keys(pattern):
    return [r.key for r in report.select_rows(report.ROWS, pattern)]


def test_select_rows():
    assert keys(None) == [r.key for r in report.ROWS]
    assert keys("qanet/paper") == [
        "qanet/paper/fp32/all",
        "qanet/paper/bf16/all",
        "qanet/paper/fp32/none",
        "qanet/paper/bf16/none",
    ]
    assert keys("dcn") == [
        "dcn/cpu-small/fp32/all",
        "dcn/cpu-small/bf16/all",
        "dcn_plus/cpu-small/fp32/all",
        "dcn_plus/cpu-small/bf16/all",
    ]  # a substring
    assert keys("dcn/*") == ["dcn/cpu-small/fp32/all", "dcn/cpu-small/bf16/all"]  # a glob matches the whole key
    assert keys("*/none") == ["qanet/paper/fp32/none", "qanet/paper/bf16/none"]
    assert keys("impatient_reader/cloze-cpu/bf16/all") == ["impatient_reader/cloze-cpu/bf16/all"]
    assert keys("attentive, */cpu-small/bf16/*") == [  # ROWS' order
        "qanet/cpu-small/bf16/all",
        "dcn/cpu-small/bf16/all",
        "dcn_plus/cpu-small/bf16/all",
        "attentive_reader/cloze-cpu/fp32/all",
        "attentive_reader/cloze-cpu/bf16/all",
    ]
    with pytest.raises(report.ReportError, match="matches no row"):
        keys("bert")


def test_rows_and_commands():
    assert len({r.key for r in report.ROWS}) == len(report.ROWS) == 18
    cmds = {r.key: report.bench_command(r, "D", "C") for r in report.ROWS}
    assert cmds["qanet/paper/bf16/none"] == [
        "python",
        "-m",
        "rckit",
        "bench",
        "qanet",
        "--preset",
        "paper",
        "--amp",
        "bf16",
        "--data-dir",
        "D",
        "--json",
    ]
    assert cmds["attentive_reader/cloze-cpu/fp32/all"][-4:] == ["cloze-cpu", "--cloze-data", "C", "--json"]
    assert all(("--amp" in c) == k.endswith(("/bf16/all", "/bf16/none")) for k, c in cmds.items())


def test_median_result_and_merge(tmp_path):
    runs = [{**ENTRY, "inference_examples_per_s": v, "train_examples_per_s": None} for v in (90.0, 120.0, 100.0)]
    med = report.median_result(runs)
    assert med["inference_examples_per_s"] == 100.0 and med["train_examples_per_s"] is None
    assert med["trainable_parameters"] == 1 and med["dtype"] == "bf16"
    path = write_results(tmp_path, {"dcn/cpu-small/fp32/all": {"date": "old"}, "someone/else": {"date": "x"}})
    merged = report.merge_results(path, {"qanet/paper/fp32/all": ENTRY, "dcn/cpu-small/fp32/all": ENTRY})
    assert list(merged) == ["qanet/paper/fp32/all", "dcn/cpu-small/fp32/all", "someone/else"]
    assert json.loads(path.read_text()) == merged and merged["dcn/cpu-small/fp32/all"] == ENTRY


def test_run_merges_medians_with_the_command_and_machine(tmp_path, monkeypatch):
    """--run's plumbing with ``subprocess.run`` faked: no bench is run."""
    calls, speeds, real_run = [], iter([100.0, 80.0, 120.0, 50.0, 50.0, 50.0]), report.subprocess.run

    def fake_run(cmd, *args, cwd=None, env=None, **kwargs):
        if cmd[0] == "git":
            return report.subprocess.CompletedProcess(cmd, 0, "abc1234\n", "")
        if cmd[0] != report.sys.executable:
            return real_run(cmd, *args, cwd=cwd, env=env, **kwargs)  # platform's own `uname -p`
        calls.append((cmd, cwd, env["RCKIT_KERNELS"]))
        if "dcn" in cmd:
            return report.subprocess.CompletedProcess(cmd, 2, "", "rckit bench: no such file\n")
        out = json.dumps({**ENTRY, "inference_examples_per_s": next(speeds)})
        return report.subprocess.CompletedProcess(cmd, 0, out, "")

    monkeypatch.setattr(report.subprocess, "run", fake_run)
    results = tmp_path / "results.json"
    assert report.main(["--run", "--rows", "qanet/paper/*/none", "--repeat", "3", "--results", str(results)]) == 0
    assert [c[2] for c in calls] == ["none"] * 6 and all(c[1] == report.REPO for c in calls)
    assert calls[0][0][1:] == [
        "-m",
        "rckit",
        "bench",
        "qanet",
        "--preset",
        "paper",
        "--data-dir",
        report.SQUAD_DIR,
        "--json",
    ]
    entry = json.loads(results.read_text())["qanet/paper/fp32/none"]
    assert entry["inference_examples_per_s"] == 100.0 and len(entry["runs"]) == 3 and entry["repeat"] == 3
    assert entry["command"] == (
        f"RCKIT_KERNELS=none python -m rckit bench qanet --preset paper --data-dir {report.SQUAD_DIR} --json"
    )
    assert entry["commit"] == "abc1234" and entry["date"].endswith("UTC") and len(entry["load_before"]) == 3
    assert {"uname", "cpu", "cores", "torch"} <= set(entry)
    before = results.read_text()
    assert report.main(["--run", "--rows", "dcn/cpu-small/fp32/all", "--results", str(results)]) == 1  # failed
    assert results.read_text() == before
