"""Tokenizer throughput and `prepare` cold/cached time and peak memory on SQuAD v1.1.

    python benchmarks/bench_prepare.py --data-dir ../shared/data/squad-v1.1

Each measurement runs in a fresh subprocess so peak RSS is that step's own.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile

STEP = r"""
import json, resource, sys, time
step, data_dir, out = sys.argv[1:4]
from pathlib import Path
from rckit.data.download import find_local_file
train = find_local_file(data_dir, "train", "1.1"); dev = find_local_file(data_dir, "dev", "1.1")
t0 = time.perf_counter()
if step == "tokenize":
    from rckit.data.squad import read_squad
    from rckit.data.tokenize import tokenize
    texts = []
    for f in (train, dev):
        ds = read_squad(f)
        texts += ds.contexts + [e.question for e in ds.examples]
    chars = sum(map(len, texts))
    t0 = time.perf_counter()
    n = sum(len(tokenize(t)[0]) for t in texts)
    dt = time.perf_counter() - t0
    res = {"tokens": n, "seconds": dt, "tokens_per_s": n / dt, "chars_per_s": chars / dt}
else:
    from rckit.data.prepare import prepare_squad
    p = prepare_squad(train, {"dev": dev}, out, rebuild=(step == "cold"))
    p.split("train"); p.split("dev")  # a cached run must also load the arrays
    res = {"seconds": time.perf_counter() - t0, "from_cache": p.from_cache}
res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(res))
"""


def run(step: str, data_dir: str, out: str) -> dict:
    r = subprocess.run([sys.executable, "-c", STEP, step, data_dir, out], capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as out:
        for step in ("tokenize", "cold", "cached"):
            runs = [run(step, args.data_dir, out) for _ in range(args.repeat)]
            best = min(runs, key=lambda r: r["seconds"])
            extra = f", {best['tokens_per_s']:,.0f} tokens/s ({best['tokens']:,} tokens)" if step == "tokenize" else ""
            print(
                f"{step:9s} best of {args.repeat}: {best['seconds']:.2f}s{extra}, "
                f"peak RSS {max(r['peak_rss_mb'] for r in runs):.0f} MB"
            )


if __name__ == "__main__":
    main()
