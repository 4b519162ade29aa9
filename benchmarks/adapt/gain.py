"""What adapting buys: dev F1 on documents of another domain before and after ``rckit adapt``, at
several numbers of labels, and SQuAD v1.1 dev F1 after (what forgetting costs).

For each size N the installed reader is adapted on N of ``data/train.json``'s questions (drawn at
random, seeded; a smaller draw is part of a larger one) with as many SQuAD v1.1 train questions
mixed in, and scored on all of ``data/dev.json`` (documents of other packages) with every question
answered, with a 95 % paired bootstrap interval of the F1 gain (110 questions leave a few points
of chance either way). The largest run's model is then scored on SQuAD v1.1 dev. Prints a Markdown table and
writes every figure to ``OUT/gain.json``; a size whose run finished is not run again.

    flock /tmp/cpu.lock python benchmarks/adapt/gain.py --data-dir ../shared/data/squad-v1.1 \\
        --out runs/adapt/gain
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def adapt(model: str, n: int | None, args) -> dict:
    out = args.out / (f"n{n}" if n else "all")
    report = out / "adapt.json"
    if not report.exists():
        cmd = [
            sys.executable,
            "-m",
            "rckit",
            "adapt",
            model,
            "--labels",
            str(args.labels),
            "--dev",
            str(args.dev),
            "--out",
            str(out),
            "--data-dir",
            str(args.data_dir),
            "--no-progress",
            "--seed",
            str(args.seed),
        ]
        if n:
            cmd += ["--limit", str(n)]
        if (out / "run" / "last.pt").exists():
            cmd.append("--resume")
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True)
        print(f"adapted on {n or 'all'} labels in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return json.loads(report.read_text())


def predictions(model_file: str, data: Path, out: Path) -> dict:
    """Every question of ``data`` answered by ``model_file``: ``out`` as ``rckit adapt`` wrote it (runs made before it
    wrote them: ``rckit evaluate --out``)."""
    if not out.exists():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "rckit",
                "evaluate",
                model_file,
                "--data",
                str(data),
                "--always-answer",
                "--out",
                str(out),
            ],
            check=True,
            capture_output=True,
        )
    return json.loads(out.read_text())


def gain_interval(before: dict, after: dict, data: Path, draws: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """The 95 % paired bootstrap interval of the F1 gain over ``data``'s questions: the questions
    drawn again with replacement, the gain of each draw, its 2.5th and 97.5th percentiles."""
    import numpy as np

    from rckit.data.squad import read_squad
    from rckit.evaluation.squad_metrics import f1_score

    def f1(pred: str, golds: list[str]) -> float:
        return max(f1_score(pred, g) for g in golds) * 100

    examples = read_squad(data).examples
    diff = np.array(
        [
            f1(after[e.qid], [a.text for a in e.answers]) - f1(before[e.qid], [a.text for a in e.answers])
            for e in examples
        ]
    )
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), (draws, len(diff)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def squad_dev(model_file: Path, args) -> dict:
    cmd = [sys.executable, "-m", "rckit", "evaluate", str(model_file), "--data", str(args.squad_dev), "--always-answer"]
    result = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qanet")
    ap.add_argument("--labels", type=Path, default=HERE / "data" / "train.json")
    ap.add_argument("--dev", type=Path, default=HERE / "data" / "dev.json")
    ap.add_argument("--sizes", default="50,100,200,0", help="numbers of labels, 0: all of them")
    ap.add_argument("--data-dir", type=Path, required=True, help="holds SQuAD v1.1 train (mixed in) and dev")
    ap.add_argument("--squad-dev", type=Path, help="SQuAD v1.1 dev (default: dev-v1.1.json in --data-dir)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.squad_dev = args.squad_dev or next(args.data_dir.glob("dev-v1.1.json*"))
    args.out.mkdir(parents=True, exist_ok=True)
    saved = args.out / "gain.json"
    old = json.loads(saved.read_text()) if saved.exists() else {}
    results = {"model": args.model, "runs": []}
    for n in (int(s) for s in args.sizes.split(",")):
        r = adapt(args.model, n or None, args)
        run = Path(r["model_file"]).parent  # rckit adapt keeps each question's answer before and after there
        before = predictions(r["model"], args.dev, run / "dev-before.json")
        after = predictions(r["model_file"], args.dev, run / "dev-predictions.json")
        results["runs"].append(
            {
                "gain_95": gain_interval(before, after, args.dev),
                "labels": r["train_questions"],
                "squad_questions": r["squad_questions"],
                "steps": r["steps"],
                "seconds": r["seconds"],
                "dev_before": r["dev_before"],
                "dev_after": r["dev_after"],
                "model_file": r["model_file"],
            }
        )
        saved.write_text(json.dumps({**old, **results}, indent=1))
    largest = max(results["runs"], key=lambda r: r["labels"])
    squad = old.get("squad_dev_after") if old.get("squad_dev_model") == largest["model_file"] else None
    results["squad_dev_model"] = largest["model_file"]
    results["squad_dev_after"] = squad or squad_dev(Path(largest["model_file"]), args)
    saved.write_text(json.dumps(results, indent=1))
    print(
        "| labels | SQuAD questions mixed in | steps | seconds | dev EM / F1 before | dev EM / F1 after | "
        "F1 gain, 95 % interval |"
    )
    print("| ---: | ---: | ---: | ---: | --- | --- | --- |")
    for r in results["runs"]:
        b, a, (lo, hi) = r["dev_before"], r["dev_after"], r["gain_95"]
        print(
            f"| {r['labels']} | {r['squad_questions']} | {r['steps']} | {r['seconds']:.0f} | "
            f"{b['exact_match']:.2f} / {b['f1']:.2f} | {a['exact_match']:.2f} / {a['f1']:.2f} | "
            f"{a['f1'] - b['f1']:+.2f} ({lo:+.2f} to {hi:+.2f}) |"
        )
    s = results["squad_dev_after"]
    print(
        f"\nSQuAD v1.1 dev after adapting on {largest['labels']} labels: EM {s['exact_match']:.2f} / F1 {s['f1']:.2f}"
    )


if __name__ == "__main__":
    main()
