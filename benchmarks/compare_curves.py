"""Runs' learning curves side by side: dev score and training loss against step and against
wall-clock minutes, one line per run, from each run's ``metrics.jsonl``.

    python benchmarks/compare_curves.py runs/dcn_plus-mixed-40m runs/dcn_plus-ce-40m --out docs/results/x.png

Also prints, per run, the dev score at every evaluated step, so a table can be read off.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def load(run: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines() if ln.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--labels", nargs="*", help="one per run (default: the directory names)")
    args = ap.parse_args()
    labels = args.labels or [r.name for r in args.runs]

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    for run, label in zip(args.runs, labels):
        recs = load(run)
        train = [r for r in recs if "loss" in r]
        dev = [r for r in recs if any(k.startswith("dev_") for k in r)]
        key = next(k for k in ("dev_f1", "dev_acc") if any(k in r for r in dev))
        print(
            json.dumps({"run": str(run), key: [(r["step"], round(r[key], 2), round(r["time"] / 60, 1)) for r in dev]})
        )
        for col, x in enumerate(("step", "time")):
            scale = 60.0 if x == "time" else 1.0
            axes[0, col].plot([r[x] / scale for r in dev], [r[key] for r in dev], marker="o", label=label)
            axes[1, col].plot([r[x] / scale for r in train], [r["loss"] for r in train], lw=1, label=label)
    for col, x in enumerate(("step", "wall-clock minutes")):
        axes[0, col].set_ylabel("dev score (subset)")
        axes[1, col].set_ylabel("training loss (each run's own objective)")
        for row in range(2):
            axes[row, col].set_xlabel(x)
            axes[row, col].grid(alpha=0.3)
            axes[row, col].legend()
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
