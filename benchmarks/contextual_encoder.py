"""What the contextual encoder costs a question: the encoder alone, by runner and by depth.

    python benchmarks/contextual_encoder.py [--repeat 100] [--threads 2] [--encoder minilm] [--depths 4,6/2,4/2/1]

On load_serve.py's ~150-token paragraph and its questions (a question on a paragraph: the paragraph
and the question each read once, in two calls, as the Reader reads a new pair), ``ContextualEncoder.states``
timed for each runner (PyTorch fp32, onnxruntime fp32, onnxruntime int8) and each depth the
reader may mix up to (layers (4, 6): all six layers run; (2, 4): four; (2,): two; (1,): one;
``--depths`` the mixes to time, ``/`` between them), ``--repeat``
calls after 10 warm-up calls; median and p90 ms. The int8 rows also give the largest difference
of their states from fp32's on that paragraph. Prints a Markdown table; the graphs are built in a
temporary folder.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load_serve import PARAGRAPH, QUESTIONS  # noqa: E402

from rckit.contextual.encoders import find_encoder  # noqa: E402
from rckit.contextual.onnx_runner import OnnxRunner  # noqa: E402
from rckit.contextual.states import ContextualEncoder, TorchRunner  # noqa: E402
from rckit.data.tokenize import tokenize  # noqa: E402

DEPTHS = "4,6/2,4/2/1"


def timed(encoder: ContextualEncoder, repeat: int) -> tuple[float, float]:
    texts = [PARAGRAPH] + QUESTIONS
    offsets = [np.array(tokenize(t)[1]) for t in texts]

    def one(i: int) -> None:  # as the Reader reads a pair: the contexts, then the questions
        q = 1 + i % len(QUESTIONS)
        encoder.states([texts[0]], [offsets[0]])
        encoder.states([texts[q]], [offsets[q]])

    for i in range(10):
        one(i)
    times = []
    for i in range(repeat):
        start = time.perf_counter()
        one(i)
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return statistics.median(times), times[int(0.9 * (len(times) - 1))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--encoder", default="minilm")
    ap.add_argument("--depths", default=DEPTHS, help="the layer mixes to time, '/' between them (default %(default)s)")
    args = ap.parse_args()
    depths = [tuple(int(k) for k in mix.split(",")) for mix in args.depths.split("/")]
    import torch

    torch.set_num_threads(args.threads)
    files = find_encoder(args.encoder)
    pieces = len(ContextualEncoder(files, (1,)).tokenizer.pieces([PARAGRAPH])[0][0])
    print(
        f"encoder {args.encoder} ({files.digest}), paragraph of {pieces} pieces, {args.threads} threads, "
        f"{args.repeat} calls\n"
    )
    print("| layers | runner | median ms | p90 ms | largest state difference from fp32 |")
    print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as graphs:
        for layers in depths:
            runners = {
                "PyTorch fp32": TorchRunner(files, layers),
                "onnxruntime fp32": OnnxRunner(files, layers, graphs, int8=False, threads=args.threads),
                "onnxruntime int8": OnnxRunner(files, layers, graphs, int8=True, threads=args.threads),
            }
            ids, _ = ContextualEncoder(files, layers).tokenizer.pieces([PARAGRAPH])[0]
            ids = np.concatenate([[101], ids, [102]])[None]
            mask = np.ones_like(ids, bool)
            reference = runners["onnxruntime fp32"](ids, mask)
            for name, runner in runners.items():
                encoder = ContextualEncoder(files, layers, runner)
                p50, p90 = timed(encoder, args.repeat)
                diff = float(np.abs(runner(ids, mask) - reference).max())
                print(f"| {','.join(map(str, layers))} | {name} | {p50:.1f} | {p90:.1f} | {diff:.3g} |", flush=True)


if __name__ == "__main__":
    main()
