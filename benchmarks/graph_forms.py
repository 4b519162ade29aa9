"""What each graph form of ``rckit.kernels.graph`` is worth in the exported model: the model
exported with all of them, and with each one left out in turn, timed side by side.

    python benchmarks/graph_forms.py [SOURCE] [--out-dir runs/graph-forms] [--data DEV.json]
        [--threads 1] [--repeat 600] [--rounds 3] [--batch-questions 512]

SOURCE: what ``rckit export`` takes (default: ``qanet``, the installed QANet). Each export is
checked against PyTorch as ``rckit export`` checks it; then ``benchmarks/onnx_reader.py`` times
the files in turns in one process (one question on load_serve.py's paragraph, median and p90 ms;
with ``--data``, batch-32 questions/s). Prints one JSON line per file, ``forms`` naming the graph
forms it was exported with.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from rckit import kernels
from rckit.export.onnx import export_onnx
from rckit.model_files.source import pytorch_source

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", nargs="?", default="qanet")
    ap.add_argument("--out-dir", default="runs/graph-forms")
    ap.add_argument("--data", help="SQuAD file for the checks and the batch-32 figure")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-questions", type=int, default=512)
    args = ap.parse_args()

    out = Path(args.out_dir)
    specs = {"all": ",".join(kernels.GRAPH)} | {
        f"without-{n}": ",".join(m for m in kernels.GRAPH if m != n) or "none" for n in kernels.GRAPH
    }
    files = {}
    for name, spec in specs.items():
        path = out / f"{name}.onnx"
        with kernels.use(spec):
            got = export_onnx(pytorch_source(args.source), path, check_data=args.data)
        files[str(path)] = {"forms": spec, "max_abs_logit_diff": got["check"]["max_abs_logit_diff"]}
    cmd = [
        sys.executable,
        str(HERE / "onnx_reader.py"),
        "--torch",
        "none",
        "--onnx",
        *files,
        "--threads",
        str(args.threads),
        "--repeat",
        str(args.repeat),
        "--rounds",
        str(args.rounds),
    ]
    if args.data:
        cmd += ["--data", args.data, "--batch-questions", str(args.batch_questions)]
    lines = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()
    for path, line in zip(files, lines):
        print(json.dumps({"file": path, **files[path], **json.loads(line)}), flush=True)


if __name__ == "__main__":
    main()
