"""The data card of a made set of unanswerable questions (issue 52): counts per rule, what the
adversarial filter kept, and examples of each rule beside the question they were made from.

    rckit prepare squad-unanswerable --data-dir ../shared/data/squad-v1.1 --articles 100 \
        --filter-with src/rckit/bundled/qanet-squad.safetensors --out runs/made/set
    python benchmarks/unanswerable_card.py runs/made/set > docs/unanswerable-card.md

Prints Markdown; the examples are drawn with a seed, the same each time.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from rckit.data.squad import load_json
from rckit.data.unanswerable import RULES

SHARES = {  # Rajpurkar, Jia & Liang 2018, Table 1: what SQuAD 2.0's writers did, per 100 questions
    "negation": 9,
    "antonym": 20,
    "entity_swap": 21,
    "mutual exclusion": 15,
    "impossible condition": 4,
    "other neutral": 24,
}


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("made", help="the folder rckit prepare squad-unanswerable wrote (made.json, report.json)")
    ap.add_argument("--examples", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    folder = Path(args.made)
    report = json.loads((folder / "report.json").read_text())
    made = load_json(folder / "made.json")
    sources = {
        qa["id"]: (qa["question"], p["context"])
        for a in load_json(report["source"])["data"]
        for p in a["paragraphs"]
        for qa in p["qas"]
    }
    rows: dict[str, list] = {}
    for a in made["data"]:
        for p in a["paragraphs"]:
            for qa in p["qas"]:
                rows.setdefault(qa["rule"], []).append((qa, p["context"]))
    filtered = report.get("filtered") or {}
    per_rule = filtered.get("per_rule", {})
    print("# Unanswerable questions made by rule: the data card\n")
    print(
        f"Made by `rckit prepare squad-unanswerable` (seed {report['seed']}) from "
        f"{report.get('articles', '?')} articles of `{Path(report['source']).name}` "
        f"({report['tried'].get('other_paragraph', max(report['tried'].values(), default=0)):,} answerable questions); "
        f"{report['seconds']} s on the 2-core CPU. "
        + (
            f"Kept: the questions `{filtered['reader']}` (always answering) still answers with a best span of "
            f"probability >= {filtered['min_confidence']} (adversarial filtering: SQuAD 2.0's writers aimed for a "
            "plausible answer; what the reader is not fooled by teaches the verifier little)."
            if filtered
            else "Not filtered."
        )
        + "\n"
    )
    print("| rule | questions tried | made | kept | reader's best-span probability on the made, quartiles |")
    print("| --- | ---: | ---: | ---: | --- |")
    for rule in RULES:
        if rule not in report["tried"]:
            print(f"| {rule} | - | - | - | skipped (below) |")
            continue
        q = per_rule.get(rule, {}).get("confidence_quartiles")
        print(
            f"| {rule} | {report['tried'][rule]:,} | {report['made'][rule]:,} | {report['kept'][rule]:,} | "
            f"{' / '.join(f'{v:.2f}' for v in q) if q else '-'} |"
        )
    total_made, total_kept = sum(report["made"].values()), sum(report["kept"].values())
    print(f"| all | | {total_made:,} | {total_kept:,} | |\n")
    for note in report["notes"]:
        print(f"- {note}")
    print(
        "- antonym is not offered: it needs WordNet's data, and no package carrying it installs without a "
        "download at run time (wn and nltk fetch theirs), which rckit does not do."
    )
    print(
        "- Not made: mutual exclusion, impossible condition and other neutral changes (SQuAD 2.0's writers: "
        + ", ".join(f"{k} {v} %" for k, v in SHARES.items())
        + "): each needs a judgement of the passage no rule here makes.\n"
    )
    rng = random.Random(args.seed)
    for rule in RULES:
        got = rows.get(rule, [])
        if not got:
            continue
        print(f"## {rule} ({len(got):,} kept)\n")
        print("| source question | made question | plausible answer | p(best span) |")
        print("| --- | --- | --- | ---: |")
        for qa, context in rng.sample(got, min(args.examples, len(got))):
            source_q, source_context = sources[qa["source"]]
            made_q = qa["question"]
            if rule == "other_paragraph":
                made_q = f"{made_q} *asked of:* {context[:90]}..."
            plausible = qa["plausible_answers"][0]["text"] if qa["plausible_answers"] else "-"
            conf = qa.get("reader_confidence")
            print(
                f"| {cell(source_q)} | {cell(made_q)} | {cell(plausible)} | {'-' if conf is None else f'{conf:.2f}'} |"
            )
        print()


if __name__ == "__main__":
    main()
