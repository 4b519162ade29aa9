"""How training went, drawn: a run's learning curves (written beside its checkpoints as training
goes) and a sweep's scores against each setting swept. Figures without pyplot: drawn to a file, no
global figure state."""

from __future__ import annotations

import json
from pathlib import Path

from matplotlib.figure import Figure


def plot_learning_curve(metrics_path: Path, out: Path) -> None:
    """Loss and dev scores (EM/F1 or accuracy) against step and against wall-clock time."""
    recs = [json.loads(ln) for ln in metrics_path.read_text().splitlines() if ln.strip()]
    train = [r for r in recs if "loss" in r]
    dev = [r for r in recs if any(k.startswith("dev_") for k in r)]
    # dev_em/dev_f1 for spans, dev_acc for cloze: whichever the run logged.
    keys = [k for k in ("dev_f1", "dev_em", "dev_acc") if any(k in r for r in dev)]
    # A model that logs the weights of its loss terms (DCN+'s mixed objective) gets a third row.
    weights = sorted({k for r in train for k in r if k.startswith("loss_w_")})
    terms = sorted({k for r in train for k in r if k.startswith("loss_")} - set(weights))
    rows = 3 if weights else 2
    fig = Figure(figsize=(11, 3.5 * rows))  # no pyplot: drawn to a file, no global figure state
    axes = fig.subplots(rows, 2, squeeze=False)
    for col, x in enumerate(("step", "time")):
        scale = 60.0 if x == "time" else 1.0
        label = "wall-clock minutes" if x == "time" else "step"
        ax = axes[0, col]
        ax.plot([r[x] / scale for r in train], [r["loss"] for r in train], lw=1, label="loss")
        for key in terms:  # its parts (DCN+: ce, rl; the cloze copy task: answer, copy), where logged
            pts = [(r[x] / scale, r[key]) for r in train if key in r]
            ax.plot(*zip(*pts), lw=1, label=key[len("loss_") :])
        ax.set_xlabel(label)
        ax.set_ylabel("training loss")
        ax.grid(alpha=0.3)
        if terms:
            ax.legend()
        ax = axes[1, col]
        for key, marker in zip(keys, "os^"):
            ax.plot([r[x] / scale for r in dev], [r[key] for r in dev], marker=marker, label=key[4:].upper())
        ax.set_xlabel(label)
        ax.set_ylabel("dev score (subset)")
        ax.grid(alpha=0.3)
        ax.legend()
        if weights:
            ax = axes[2, col]
            for key in weights:
                pts = [(r[x] / scale, r[key]) for r in train if key in r]
                ax.plot(*zip(*pts), lw=1, label=key[len("loss_") :])
            ax.set_xlabel(label)
            ax.set_ylabel("loss-term weight 1/(2 sigma^2)")
            ax.set_yscale("log")
            ax.grid(alpha=0.3)
            ax.legend()
    fig.suptitle(str(metrics_path.parent.name))
    fig.tight_layout()
    tmp = out.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=90)
    tmp.replace(out)


def plot_sweep(rows: list[dict], keys: list[str], metric: str, path: Path) -> None:
    """The score of every trial against each swept setting, one panel per setting."""
    fig = Figure(figsize=(3.2 * len(keys), 3.2))
    axes = fig.subplots(1, len(keys), squeeze=False)
    for ax, key in zip(axes[0], keys):
        values = sorted({str(r[key]) for r in rows}, key=lambda v: (len(v), v))
        xs = [values.index(str(r[key])) for r in rows]
        ax.scatter(xs, [r["score"] for r in rows], alpha=0.7)
        ax.set_xticks(range(len(values)))
        ax.set_xticklabels(values, rotation=30)
        ax.set_title(key, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"best {metric}")
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=90)
    tmp.replace(path)
