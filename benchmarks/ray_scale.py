"""Questions a second and passages indexed a second: the local path against Ray with 1 and 2
workers on this machine (issue 54) -- the engine's overhead, honestly, where there is no second
machine to gain from.

    python benchmarks/ray_scale.py [--model qanet] [--questions 2000] [--files 400] [--json]

Each setting is a real command in its own process (``rckit predict --questions``, ``rckit index``),
timed from start to exit, Ray's start-up included (a local instance started by ``--ray``; with
``--address`` a running cluster is joined instead, and its start-up is not counted). The questions
are SQuAD-like paragraphs with a question each (``benchmarks/load_serve.py``'s paragraph, its last
sentence numbered so that no two share a context); the files are Markdown notes of about 600 words.
Prints one row per setting: seconds, items a second, and the answers' agreement with the local run.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PARAGRAPH = (
    "The Rosetta Stone is a slab of dark granodiorite that French soldiers found in July 1799 while rebuilding a "
    "fort near the town of Rashid, in the Nile Delta. It carries one decree of King Ptolemy V written three times: "
    "in hieroglyphs, in Demotic script and in ancient Greek. Because scholars could still read the Greek, the stone "
    "became the key to the hieroglyphs, and Jean-Francois Champollion announced their decipherment in Paris in 1822."
)
QUESTIONS = ("Who deciphered the hieroglyphs?", "When was the stone found?", "What is the stone made of?")
WORDS = "river stone paper light winter garden signal copper harbour engine letter market forest".split()


def timed(args: list[str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "rckit", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"rckit {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qanet")
    ap.add_argument("--questions", type=int, default=2000)
    ap.add_argument("--files", type=int, default=400)
    ap.add_argument("--address", help="a running Ray cluster to join (default: a local instance per run)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    ray = ["--ray"] + ([args.address] if args.address else [])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        q = root / "q.jsonl"
        q.write_text(
            "".join(
                json.dumps({"id": i, "context": f"{PARAGRAPH} This is paragraph {i}.", "question": QUESTIONS[i % 3]})
                + "\n"
                for i in range(args.questions)
            )
        )
        local_out = root / "local.jsonl"
        base = ["predict", "--model", args.model, "--questions", str(q), "--device", "cpu"]
        seconds = timed([*base, "--out", str(local_out)])
        local = [json.loads(line)["answers"][0]["answer"] for line in local_out.read_text().splitlines()]
        rows.append({"work": "questions", "setting": "local", "seconds": seconds, "agree": 1.0})
        for workers in (1, 2):
            out = root / f"ray{workers}.jsonl"
            seconds = timed([*base, "--out", str(out), *ray, "--workers", str(workers)])
            got = [json.loads(line)["answers"][0]["answer"] for line in out.read_text().splitlines()]
            agree = sum(a == b for a, b in zip(got, local)) / len(local) if len(got) == len(local) else 0.0
            rows.append(
                {"work": "questions", "setting": f"ray, {workers} worker(s)", "seconds": seconds, "agree": agree}
            )
        for r in rows:
            r["per_s"] = args.questions / r["seconds"]
        docs = root / "docs"
        docs.mkdir()
        for i in range(args.files):
            text = " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(600))
            (docs / f"note{i:04}.md").write_text(f"# Note {i}\n\n{text}\n")
        index_rows = []
        for name, extra in (("local", []), *((f"ray, {w} worker(s)", [*ray, "--workers", str(w)]) for w in (1, 2))):
            index = root / f"{name.split(',')[0]}-{len(index_rows)}.sqlite"
            seconds = timed(["index", str(docs), "--out", str(index), "--no-progress", *extra])
            with sqlite3.connect(index) as db:
                passages = db.execute("SELECT count(*) FROM passages").fetchone()[0]
            index_rows.append({"work": "passages", "setting": name, "seconds": seconds, "per_s": passages / seconds})
        rows += index_rows
    if args.json:
        print(json.dumps(rows))
        return
    print("| work | setting | seconds | a second | answers as the local run's |")
    print("| --- | --- | ---: | ---: | ---: |")
    for r in rows:
        agree = f"{100 * r['agree']:.1f} %" if "agree" in r else "-"
        print(f"| {r['work']} | {r['setting']} | {r['seconds']:.1f} | {r['per_s']:.1f} | {agree} |")


if __name__ == "__main__":
    main()
