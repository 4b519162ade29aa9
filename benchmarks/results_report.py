"""The table at the top of RESULTS.md: the best figure each model reached, one row per entry of
docs/results/results.json.

    python benchmarks/results_report.py           # rewrite the table between the markers of RESULTS.md
    python benchmarks/results_report.py --check   # exit 1 if RESULTS.md's table is not what the JSON gives

Only the part of RESULTS.md between ``<!-- results:start -->`` and ``<!-- results:end -->`` is
written; everything else stays byte for byte. To add or change a result, edit the JSON (figures
are strings, copied exactly from the run's write-up), run the script, and commit both files.
Each entry holds model, preset, data, metrics ({"EM": "..", "F1": ".."} or {"accuracy": ".."}),
budget ({"minutes": N, "steps": "..", "machine": ".."}, each optional, the strings shown as
written), date, commands (a list) and link (a path relative to the repository root, with an
anchor); note and reference (the paper's figure or the issue's target) are optional. Exit status:
0 done (or up to date with --check), 1 out of date (--check), 2 broken input. Standard library
only: no rckit, no torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
JSON_PATH = REPO / "docs" / "results" / "results.json"
MARKDOWN = REPO / "RESULTS.md"
START, END = "<!-- results:start -->", "<!-- results:end -->"
REQUIRED = ("model", "preset", "data", "metrics", "budget", "date", "commands", "link")
HEADER = "| model | preset | data | best figure | paper / target | budget | date | command and detail |"


class ReportError(Exception):
    """A broken input (JSON, markers): one line, exit 2."""


def load_entries(path: Path) -> list[dict]:
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))["entries"]
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file") from None
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ReportError(f"{path}: expected JSON with a list under 'entries' ({e})") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ReportError(f"{path}: 'entries' must be a list of objects")
    for i, entry in enumerate(entries):
        missing = [k for k in REQUIRED if not entry.get(k)]
        if missing:
            raise ReportError(f"{path}: entry {i} ({entry.get('id', '?')}) lacks {', '.join(missing)}")
    return entries


def cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_row(e: dict) -> str:
    figure = "**" + ", ".join(f"{k} {v}" for k, v in e["metrics"].items()) + "**"
    if e.get("note"):
        figure += f"<br>{e['note']}"
    b = e["budget"]
    budget = "; ".join(
        x for x in (f"{b['minutes']} min" if b.get("minutes") else "", b.get("steps", ""), b.get("machine", "")) if x
    )
    commands = "<br>".join(f"`{c}`" for c in e["commands"]) + f"<br>[detail]({e['link']})"
    cells = [e["model"], e["preset"], e["data"], figure, e.get("reference", "-"), budget, e["date"], commands]
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def render_table(entries: list[dict]) -> str:
    return "\n".join([HEADER, "| --- " * 8 + "|", *(render_row(e) for e in entries)]) + "\n"


def replace_between_markers(text: str, block: str, where: str) -> str:
    for marker in (START, END):
        if text.count(marker) != 1:
            raise ReportError(f"{where}: expected the marker {marker} once, found it {text.count(marker)} times")
    i, j = text.index(START) + len(START), text.index(END)
    if j < i:
        raise ReportError(f"{where}: {END} comes before {START}")
    return text[:i] + "\n" + block + text[j:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if the table is out of date")
    ap.add_argument("--json", type=Path, default=JSON_PATH, help="the results (default: docs/results/results.json)")
    ap.add_argument("--markdown", type=Path, default=MARKDOWN, help="the file to update (default: RESULTS.md)")
    args = ap.parse_args(argv)
    try:
        try:
            with open(args.markdown, encoding="utf-8", newline="") as f:  # line endings kept as they are
                text = f.read()
        except FileNotFoundError:
            raise ReportError(f"{args.markdown}: no such file") from None
        entries = load_entries(args.json)
        new = replace_between_markers(text, render_table(entries), str(args.markdown))
    except ReportError as e:
        print(f"results_report.py: {e}", file=sys.stderr)
        return 2
    if args.check:
        if new != text:
            print(
                f"results_report.py: the table in {args.markdown} differs from {args.json}; "
                f"run python benchmarks/results_report.py",
                file=sys.stderr,
            )
            return 1
        return 0
    if new != text:
        with open(args.markdown, "w", encoding="utf-8", newline="") as f:
            f.write(new)
    print(f"wrote the table of {len(entries)} rows between the results markers of {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
