"""What each CPU fast path of rckit.kernels is worth to QANet: `rckit bench` with and without it.

    python benchmarks/qanet_ablation.py --data-dir ../shared/data/squad-v1.1 [--amp bf16]

Each variant runs ``rckit bench qanet --preset paper --json`` in a fresh subprocess with
``RCKIT_KERNELS`` set (so each peak RSS is that variant's own): ``all`` (the default),
``none`` (the plain layers), and ``-name`` for each kernel (what leaving that one out costs).
The table gives training and inference examples/s, single-question latency and peak RSS;
BENCHMARKS.md, "CPU kernels", explains the figures. The machine may be shared: use
``--repeat`` and compare medians. The history of these optimisations is in docs/.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from rckit.kernels import NAMES

VARIANTS = ["all", "none"] + [f"-{name}" for name in NAMES]
COLUMNS = [
    ("train_examples_per_s", "train ex/s"),
    ("inference_examples_per_s", "infer ex/s"),
    ("latency_ms_median", "latency ms"),
    ("peak_rss_mb", "peak MB"),
]


def bench(spec: str, args) -> dict:
    """One ``rckit bench`` run with ``RCKIT_KERNELS=spec``; its JSON result."""
    cmd = [
        sys.executable,
        "-m",
        "rckit",
        "bench",
        "qanet",
        "--preset",
        "paper",
        "--amp",
        args.amp,
        "--json",
        "--data-dir",
        args.data_dir,
        "--steps",
        str(args.steps),
        "--questions",
        str(args.questions),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "RCKIT_KERNELS": spec})
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode != 0 or not lines:
        raise SystemExit(f"RCKIT_KERNELS={spec} failed:\n{p.stderr[-3000:]}")
    return json.loads(lines[-1])


def row(name: str, res: dict) -> str:
    return f"{name:14s} " + " ".join(f"{'-' if res[k] is None else round(res[k], 2):>11}" for k, _ in COLUMNS)


def median(values: list) -> float | None:
    values = [v for v in values if v is not None]  # train ex/s is None with --steps 0
    return statistics.median(values) if values else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default="../shared/data/squad-v1.1")
    ap.add_argument("--amp", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, from: {', '.join(VARIANTS)}")
    ap.add_argument("--steps", type=int, default=20, help="timed training steps (as rckit bench)")
    ap.add_argument("--questions", type=int, default=1024, help="size of the dev slice (as rckit bench)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each variant; the table then shows medians")
    ap.add_argument("--json", help="also write every run to this file")
    args = ap.parse_args()
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; choose from {VARIANTS}")

    print(f"{'RCKIT_KERNELS':14s} " + " ".join(f"{h:>11s}" for _, h in COLUMNS) + f"   ({args.amp})", flush=True)
    runs = []
    for _ in range(args.repeat):
        for name in names:
            runs.append({"variant": name, "amp": args.amp, **bench(name, args)})
            print(row(name, runs[-1]), flush=True)
    if args.repeat > 1:
        print(f"\nmedians of {args.repeat} runs")
        for name in names:
            mine = [r for r in runs if r["variant"] == name]
            print(row(name, {k: median([r[k] for r in mine]) for k, _ in COLUMNS}))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
