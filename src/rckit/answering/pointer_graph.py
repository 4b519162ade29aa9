"""rckit's own reader on onnxruntime, without PyTorch: its graph built from its file on first use.

The reader file (:mod:`rckit.model_files.reader_file`) holds int8 weights and everything else
answering needs; :func:`build_reader_graph` writes the same computation as
:class:`rckit.models.encoder_reader.EncoderReader` with the ``onnx`` package (the encoder's
layers as :mod:`rckit.contextual.onnx_runner` builds them, with the segments as an input, then the
start/end head and the pointers' mask): inputs ``ids``, ``mask``, ``types``, ``allowed`` (B, P),
outputs ``start`` and ``end`` (B, P). The graph is kept in rckit's cache under the file's SHA-256
(:func:`reader_graph`), so the next start only loads it. ``int8``: every product of an activation
by a weight in int8, the activation quantized by rows (each piece's vector by its own largest
magnitude): a window's scores then never depend on what shares its batch; otherwise the weights
are the file's, as float32.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rckit.contextual.bert_names import ours_to_hf_names
from rckit.contextual.onnx_runner import OPSET, Graph, layer_states
from rckit.data.prepare import file_digest
from rckit.model_files.reader_file import read_reader_file

OUTPUTS = ("start", "end")


def build_reader_graph(state: dict[str, np.ndarray], config: dict, out: str | Path, int8: bool = False) -> Path:
    """The reader of ``state`` (its state dict, float32) and ``config`` (its encoder's
    ``config.json``) as an ONNX file at ``out`` (module docstring)."""
    import onnx
    from onnx import TensorProto, helper

    bert = {k.removeprefix("bert."): v for k, v in state.items() if k.startswith("bert.")}
    weights = {**ours_to_hf_names(bert), "head.weight": state["head.weight"], "head.bias": state["head.bias"]}
    g = Graph(weights, float(config.get("layer_norm_eps", 1e-12)), int8)
    top = int(config["num_hidden_layers"])
    h = layer_states(g, config, top, types=True)[top]  # (B, P, d)
    logits = g.linear(h, "head")  # (B, P, 2)
    fill = g.const("pointer_fill", np.array(np.finfo(np.float32).min, np.float32))
    for k, name in enumerate(OUTPUTS):
        score = g.node("Gather", [logits, g.const(f"which_{k}", np.array(k, np.int64))], axis=2)  # (B, P)
        g.nodes.append(helper.make_node("Where", ["allowed", score, fill], [name]))
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["B", "P"]) for n in ("ids", "types")]
    inputs += [helper.make_tensor_value_info(n, TensorProto.BOOL, ["B", "P"]) for n in ("mask", "allowed")]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["B", "P"]) for n in OUTPUTS]
    graph = helper.make_graph(g.nodes, "rckit_encoder_reader", inputs, outputs, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="rckit")
    onnx.checker.check_model(model)
    out = Path(out)
    onnx.save(model, str(out))
    return out


def reader_graph(path: str | Path, cache: str | Path, int8: bool = False) -> Path:
    """The graph of the reader file ``path`` under ``cache``, built on first use (said on stderr in
    one line) and written atomically."""
    digest = file_digest(path)
    cache = Path(cache)
    out = cache / f"reader-{digest[:16]}{'-int8row' if int8 else ''}.onnx"
    if out.is_file():
        return out
    try:
        import onnx  # noqa: F401  (building the graph needs it; a missing one is named below)
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "the reader's ONNX graph is built on first use with the onnx package: pip install 'rckit[onnx]'",
            name="onnx",
        ) from None
    cache.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    print(f"rckit: building the reader's ONNX graph once, kept in {cache} ...", end="", file=sys.stderr, flush=True)
    state, meta = read_reader_file(path)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        os.replace(build_reader_graph(state, meta["bert_config"], Path(tmp) / "graph.onnx", int8), out)
    print(f" {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return out


class OnnxPointer:
    """The reader's graph on onnxruntime, called as :class:`rckit.answering.pointer_reader.PointerReader`
    calls its model: NumPy ``ids``, ``mask``, ``types``, ``allowed`` in, start and end scores out."""

    backend = "onnxruntime"

    def __init__(self, graph: str | Path, threads: int | None = None, spin: bool = True):
        from rckit.answering.onnx_backend import onnxruntime

        ort = onnxruntime()
        options = ort.SessionOptions()
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # errors only
        if threads is not None:
            options.intra_op_num_threads = threads
        if not spin:  # a server's HTTP side shares the cores
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])

    def __call__(self, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        feed = {k: inputs[k] for k in ("ids", "mask", "types", "allowed")}
        start, end = self.session.run(list(OUTPUTS), feed)
        return start, end
