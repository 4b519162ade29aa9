"""The table at the top of BENCHMARKS.md: today's ``rckit bench`` figures, one line per row below.

    python benchmarks/report.py --run [--rows PATTERN] [--repeat N]   # measure, merge into results.json
    python benchmarks/report.py                                       # rewrite the table from results.json

``--run`` runs ``python -m rckit bench MODEL --preset P [--amp bf16] --json ...`` for each
selected row in a fresh subprocess (from the repository root, so relative paths are relative to
it), with ``RCKIT_KERNELS=all`` (the CPU fast paths) or ``none`` (plain PyTorch layers), takes
the median of every figure over ``--repeat`` runs and merges the row into ``benchmarks/results.json``
with the date, the machine, the torch version, the load average before the run and the exact
command. Rows not selected keep their old entries. Without ``--run`` only the part of
BENCHMARKS.md between the two markers below is rewritten; a row with no entry shows "-".
``--rows`` takes comma-separated substrings or globs of the row keys (``qanet/paper``,
``*/bf16/*``, ``dcn/*``); ``--list`` prints the keys it selects without running anything.
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import importlib.metadata
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results.json"
BENCHMARKS = REPO / "BENCHMARKS.md"
START, END = "<!-- report:start -->", "<!-- report:end -->"
SQUAD_DIR = "../shared/data/squad-v1.1"
CLOZE_DIR = "runs/squad-cloze"


@dataclass(frozen=True)
class Row:
    model: str
    preset: str
    amp: str  # fp32 | bf16
    kernels: str  # all | none: RCKIT_KERNELS for the bench's process
    data: str = "squad"  # squad (--data-dir) | cloze (--cloze-data)
    extra: tuple[str, ...] = ()  # more `rckit bench` flags

    @property
    def key(self) -> str:
        return f"{self.model}/{self.preset}/{self.amp}/{self.kernels}"


def _both_amps(model, preset, kernels="all", data="squad", extra=()):
    return [Row(model, preset, amp, kernels, data, extra) for amp in ("fp32", "bf16")]


SMALL = ("--steps", "30", "--questions", "512")  # as every cpu-small QANet figure in docs/benchmark-history.md

ROWS = [
    *_both_amps("qanet", "paper", "all"),
    *_both_amps("qanet", "paper", "none"),
    *_both_amps("qanet", "cpu-small", extra=SMALL),
    *_both_amps("dcn", "cpu-small"),
    *_both_amps("dcn_plus", "cpu-small"),
    *_both_amps("deep_lstm_reader", "squad-cpu"),
    *_both_amps("deep_lstm_reader", "cloze-cpu", data="cloze"),
    *_both_amps("attentive_reader", "cloze-cpu", data="cloze"),
    *_both_amps("impatient_reader", "cloze-cpu", data="cloze"),
]


class ReportError(Exception):
    """A mistake in what the script was given (a pattern, a file, the markers): one line, exit 2."""


def select_rows(rows: list[Row], patterns: str | None) -> list[Row]:
    """The rows whose key matches any of the comma-separated ``patterns``: a glob when it holds
    ``*``, ``?`` or ``[``, else a substring. ``None`` or empty: every row. Keeps ``rows``' order."""
    if not patterns:
        return list(rows)
    wanted = [p.strip() for p in patterns.split(",") if p.strip()]
    picked = []
    for row in rows:
        for p in wanted:
            if fnmatch.fnmatchcase(row.key, p) if any(c in p for c in "*?[") else p in row.key:
                picked.append(row)
                break
    if not picked:
        raise ReportError(f"--rows {patterns!r} matches no row; rows: {', '.join(r.key for r in rows)}")
    return picked


def bench_command(row: Row, data_dir: str = SQUAD_DIR, cloze_dir: str = CLOZE_DIR) -> list[str]:
    cmd = ["python", "-m", "rckit", "bench", row.model, "--preset", row.preset]
    if row.amp == "bf16":
        cmd += ["--amp", "bf16"]
    cmd += ["--cloze-data", cloze_dir] if row.data == "cloze" else ["--data-dir", data_dir]
    return cmd + list(row.extra) + ["--json"]


# ---------------------------------------------------------------------------------------------
# Measuring


def machine() -> dict:
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "not installed"
    try:
        commit = (
            subprocess.run(
                ["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True, text=True
            ).stdout.strip()
            or None
        )
    except OSError:
        commit = None
    return {
        "uname": " ".join(platform.uname()),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch": torch_version,
        "python": platform.python_version(),
        "commit": commit,
    }


def median_result(runs: list[dict]) -> dict:
    """Field by field: the median of the runs' numbers (None where every run has None), else the first run's."""
    out = {}
    for k in runs[0]:
        vals = [r.get(k) for r in runs]
        nums = [v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(set(map(repr, vals))) == 1:
            out[k] = vals[0]
        elif nums and len(nums) == len(vals):
            out[k] = round(statistics.median(nums), 2)
        else:
            out[k] = vals[0]
    return out


def run_row(row: Row, repeat: int, data_dir: str, cloze_dir: str) -> dict:
    """``repeat`` fresh ``rckit bench`` processes for ``row``; the entry results.json keeps for it."""
    cmd = bench_command(row, data_dir, cloze_dir)
    env = {**os.environ, "RCKIT_KERNELS": row.kernels}
    runs, loads = [], []
    for i in range(repeat):
        loads.append([round(x, 2) for x in os.getloadavg()])
        print(f"{row.key} ({i + 1}/{repeat}): RCKIT_KERNELS={row.kernels} {shlex.join(cmd)}", file=sys.stderr)
        p = subprocess.run([sys.executable, *cmd[1:]], cwd=REPO, env=env, capture_output=True, text=True)
        if p.returncode != 0:
            tail = (p.stderr.strip() or p.stdout.strip()).splitlines()[-3:]
            raise RuntimeError(f"{row.key}: exit status {p.returncode}: {' | '.join(tail)}")
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    return {
        **median_result(runs),
        "kernels": row.kernels,
        "repeat": repeat,
        "runs": runs,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_before": loads[0],
        "load_before_each": loads,
        **machine(),
        "command": f"RCKIT_KERNELS={row.kernels} {shlex.join(cmd)}",
    }


def load_results(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not JSON ({e.msg}, line {e.lineno})") from None
    if not isinstance(results, dict):
        raise ReportError(f"{path}: expected an object of row key -> entry, got {type(results).__name__}")
    return results


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    os.replace(tmp, path)


def merge_results(path: Path, new: dict) -> dict:
    """``new`` entries replace those of the same key; entries in ROWS' order, then any others."""
    results = {**load_results(path), **new}
    order = [r.key for r in ROWS if r.key in results] + [k for k in results if k not in {r.key for r in ROWS}]
    results = {k: results[k] for k in order}
    write_atomic(path, json.dumps(results, indent=1) + "\n")
    return results


# ---------------------------------------------------------------------------------------------
# Rendering

HEADER = (
    "| model | preset | amp | kernels | training ex/s (batch 32) | inference ex/s (batch 32) "
    "| latency ms per question (median / p90) | peak RSS MiB | date |"
)


def _num(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def render_table(rows: list[Row], results: dict) -> str:
    lines = [HEADER, "| --- " * 9 + "|"]
    for row in rows:
        e = results.get(row.key)
        if e is None:
            figures = ["-"] * 5
        else:
            lat = e.get("latency_ms_median"), e.get("latency_ms_p90")
            figures = [
                _num(e.get("train_examples_per_s"), ".1f"),
                _num(e.get("inference_examples_per_s"), ".1f"),
                "-" if None in lat else f"{lat[0]:.1f} / {lat[1]:.1f}",
                _num(e.get("peak_rss_mb"), ",.0f"),
                str(e.get("date", "-")).split(" ")[0],
            ]
        lines.append("| " + " | ".join([row.model, row.preset, row.amp, row.kernels, *figures]) + " |")
    return "\n".join(lines) + "\n"


def replace_between_markers(text: str, block: str, where: str = "the file") -> str:
    """``text`` with what lies between START and END replaced by ``block``; all else byte for byte."""
    for marker in (START, END):
        n = text.count(marker)
        if n != 1:
            raise ReportError(
                f"{where}: expected the marker {marker} once, found it {n} times "
                f"(the table goes between {START} and {END})"
            )
    i, j = text.index(START) + len(START), text.index(END)
    if j < i:
        raise ReportError(f"{where}: {END} comes before {START}")
    return text[:i] + "\n" + block + text[j:]


def write_report(md_path: Path, results_path: Path, rows: list[Row] = ROWS) -> None:
    try:
        with open(md_path, encoding="utf-8", newline="") as f:  # newline="": line endings kept as they are
            text = f.read()
    except FileNotFoundError:
        raise ReportError(f"{md_path}: no such file") from None
    new = replace_between_markers(text, render_table(rows, load_results(results_path)), str(md_path))
    write_atomic(md_path, new)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--run", action="store_true", help="run the bench for the selected rows, merge into --results")
    ap.add_argument("--rows", help="comma-separated substrings or globs of row keys (default: every row)")
    ap.add_argument("--repeat", type=int, default=1, help="bench processes per row; the median is kept")
    ap.add_argument("--list", action="store_true", help="print the selected rows' keys and commands, run nothing")
    ap.add_argument("--data-dir", default=SQUAD_DIR, help="SQuAD v1.1 for span models (relative to the repo root)")
    ap.add_argument("--cloze-data", default=CLOZE_DIR, help="cloze data for cloze models (relative to the repo root)")
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--markdown", type=Path, default=BENCHMARKS)
    args = ap.parse_args(argv)
    try:
        if args.repeat < 1:
            raise ReportError(f"--repeat must be at least 1, got {args.repeat}")
        rows = select_rows(ROWS, args.rows)
        if args.list:
            for row in rows:
                print(
                    f"{row.key:40s} RCKIT_KERNELS={row.kernels} "
                    f"{shlex.join(bench_command(row, args.data_dir, args.cloze_data))}"
                )
            return 0
        if args.run:
            load_results(args.results)  # a broken results file stops us before an hour of benching
            failed = []
            for row in rows:
                try:
                    entry = run_row(row, args.repeat, args.data_dir, args.cloze_data)
                except (RuntimeError, json.JSONDecodeError) as e:
                    print(f"report.py: {e}", file=sys.stderr)
                    failed.append(row.key)
                    continue
                merge_results(args.results, {row.key: entry})  # after each row: a stopped run keeps what it got
            print(
                f"wrote {len(rows) - len(failed)} row(s) to {args.results}; "
                f"`python benchmarks/report.py` puts them in {args.markdown.name}"
            )
            if failed:
                print(f"report.py: failed: {', '.join(failed)}", file=sys.stderr)
                return 1
            return 0
        if args.rows:
            raise ReportError("--rows selects rows to --run (or --list); the table always shows every row")
        write_report(args.markdown, args.results)
        print(f"wrote the table of {len(ROWS)} rows between the report markers of {args.markdown}")
        return 0
    except ReportError as e:
        print(f"report.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
