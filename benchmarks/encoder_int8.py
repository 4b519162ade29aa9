"""The encoder's int8 graphs side by side: speed, error from fp32, and whether a text's states depend on its batch.

    python benchmarks/encoder_int8.py --dev ../shared/data/squad-v1.1/dev-v1.1.json.gz \
        [--encoder minilm] [--layers 4,6] [--texts 64] [--repeat 40] [--threads 2]

For each graph of the encoder (``--encoder``, a known name or a folder; ``--layers`` its states):
``fp32``; ``dynamic``, onnxruntime's dynamic quantization (the activations scaled by each call's
range; the weights by channel in 7 bits); ``rows``, the activations scaled by each piece's own
range (``build_graph(rows=True)``). Columns: one question as the Reader reads a new pair (the
paragraph of load_serve.py and a question, two calls; median ms of ``--repeat``), the first
``--texts`` contexts of the dev file read together (texts a second, as evaluation reads them), the
mean and largest difference of their states from fp32's, and the largest difference between a
text's states read alone and read in that batch (0: its states depend on the text only). The
graphs are built in a temporary folder.
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
from rckit.contextual.onnx_runner import ATTENTION, OnnxRunner, build_graph, quantize_weights  # noqa: E402
from rckit.contextual.states import ContextualEncoder  # noqa: E402
from rckit.data.squad import load_json  # noqa: E402
from rckit.data.tokenize import tokenize  # noqa: E402


class Graph(OnnxRunner):
    """An OnnxRunner on a graph file given (not the cache's)."""

    def __init__(self, path: Path, threads: int):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.inter_op_num_threads = 1
        options.intra_op_num_threads = threads
        options.log_severity_level = 3
        self.path = path
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def one_question_ms(encoder: ContextualEncoder, repeat: int) -> float:
    texts = [PARAGRAPH] + QUESTIONS
    offsets = [np.array(tokenize(t)[1]) for t in texts]
    times = []
    for i in range(repeat + 10):
        q = 1 + i % len(QUESTIONS)
        start = time.perf_counter()
        encoder.states([texts[0]], [offsets[0]])
        encoder.states([texts[q]], [offsets[q]])
        if i >= 10:
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    import onnx

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dev", required=True)
    ap.add_argument("--encoder", default="minilm")
    ap.add_argument("--layers", default="4,6")
    ap.add_argument("--texts", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    files = find_encoder(args.encoder)
    layers = tuple(int(x) for x in args.layers.split(","))
    contexts = [p["context"] for a in load_json(args.dev)["data"] for p in a["paragraphs"]][: args.texts]
    offsets = [np.array(tokenize(c)[1]) for c in contexts]
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = build_graph(files, layers, Path(tmp) / "fp32.onnx")
        products = [n.name for n in onnx.load(str(fp32)).graph.node if n.name.startswith(ATTENTION)]
        graphs = {
            "fp32": fp32,
            "dynamic": quantize_weights(fp32, Path(tmp) / "dynamic.onnx", products),
            "rows": build_graph(files, layers, Path(tmp) / "rows.onnx", rows=True),
        }
        read, rows = {}, []
        for name, path in graphs.items():
            encoder = ContextualEncoder(files, layers, Graph(path, args.threads))
            ms = one_question_ms(encoder, args.repeat)
            start = time.perf_counter()
            together = encoder.states(contexts, offsets)
            rate = len(contexts) / (time.perf_counter() - start)
            alone = [encoder.states([c], [o])[0] for c, o in zip(contexts, offsets)]
            read[name] = together
            variance = max(float(np.abs(a - t).max()) for a, t in zip(alone, together))
            rows.append((name, ms, rate, together, variance, path.stat().st_size / 2**20))
    print(f"encoder {args.encoder} ({files.digest}), layers {list(layers)}, {args.threads} threads")
    print("| graph | one question ms | contexts/s together | mean / largest diff from fp32 | alone vs batch | MiB |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, ms, rate, together, variance, size in rows:
        diff = np.concatenate([np.abs(a - b).ravel() for a, b in zip(together, read["fp32"])])
        errors = f"{diff.mean():.4f} / {diff.max():.3f}"
        print(f"| {name} | {ms:.1f} | {rate:.1f} | {errors} | {variance:.2g} | {size:.1f} |")


if __name__ == "__main__":
    main()
