"""The contextual encoder on ONNX Runtime, without PyTorch: its graph built from the package's weights.

:func:`build_graph` writes BERT's encoder (the equations of :mod:`rckit.contextual.bert`) as an
ONNX graph with the ``onnx`` package, the weights read from ``model.safetensors`` as NumPy arrays
(``safetensors.numpy``): inputs ``ids`` (B, P) int64 and ``mask`` (B, P) bool, output ``states``
(B, P, K, D) float32, the layers above the highest asked for left out. No weights are downloaded
or committed: the graph is built on first use and kept in ``$RCKIT_CACHE/encoders/`` under the
encoder's digest, its layers and whether it is quantized (:func:`encoder_graph`), so the next
start only loads it. ``int8``: each product of an activation by a weight in int8 (``build_graph(rows=True)``),
the weights by output channel in 7 bits, the activations by rows (each piece's vector by its own
largest magnitude), so that a text's states never depend on the texts that share its batch; the
attention's two products of activations (Q K^T and the weights times V) stay in fp32. onnxruntime's
dynamic quantization, which scales the activations by each call's range, made 41-43 of 529 answers
differ between asking one at a time and in batches (BENCHMARKS.md, "The encoder in int8").
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rckit.contextual.encoders import EncoderFiles, encoder_weights, int8_rows

OPSET = 17  # LayerNormalization
ATTENTION = "attention_"  # the names of the attention's products of two activations


def build_graph(files: EncoderFiles, layers: tuple[int, ...], out: str | Path, rows: bool = False) -> Path:
    """The encoder of ``files`` up to layer ``max(layers)``, its states of ``layers``, as an ONNX file.

    ``rows``: each MatMul of an activation by a weight in int8, the activation quantized by rows (each
    piece's vector by its own largest magnitude, symmetric, 8 bits) and the weight by output channels
    (7 bits: on a CPU without VNNI the u8 x s8 products of 8-bit weights saturate in pairs): a
    piece's states then depend on its own text only, never on which texts share its batch or how
    wide they are padded."""
    import onnx
    from onnx import TensorProto, helper

    weights = {k.removeprefix("bert."): v for k, v in encoder_weights(files.root).items()}
    cfg = files.config
    d = int(cfg["hidden_size"])
    g = Graph(weights, float(cfg.get("layer_norm_eps", 1e-12)), rows)
    states = layer_states(g, cfg, max(layers))
    axis2 = g.const("axis2", np.array([2], np.int64))
    stacked = [g.node("Unsqueeze", [states[layer], axis2]) for layer in layers]
    g.nodes.append(helper.make_node("Concat", stacked, ["states"], axis=2))  # (B, P, K, D)
    graph = helper.make_graph(
        g.nodes,
        "rckit_contextual_encoder",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["B", "P"]),
            helper.make_tensor_value_info("mask", TensorProto.BOOL, ["B", "P"]),
        ],
        [helper.make_tensor_value_info("states", TensorProto.FLOAT, ["B", "P", len(layers), d])],
        g.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="rckit")
    onnx.checker.check_model(model)
    out = Path(out)
    onnx.save(model, str(out))
    return out


def layer_states(g: Graph, cfg: dict, top: int, types: bool = False) -> dict[int, str]:
    """The names of the states of layers 0 (the embeddings' output) to ``top`` of the encoder whose
    ``config.json`` is ``cfg``, from the inputs ``ids`` and ``mask`` (and ``types``, the segments,
    where ``types``; else every piece is of segment 0)."""
    d, H = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    h = embeddings(g, types)
    bias = padding_bias(g)
    heads_shape = g.const("heads_shape", np.array([0, 0, H, d // H], np.int64))
    merged_shape = g.const("merged_shape", np.array([0, 0, d], np.int64))
    scale = g.const("scale", np.array(1.0 / math.sqrt(d // H), np.float32))
    states = {0: h}
    for n in range(top):
        h = encoder_layer(g, h, n, bias, heads_shape, merged_shape, scale)
        states[n + 1] = h
    return states


class Graph:
    """The graph :func:`build_graph` writes, as it grows: its nodes and initializers in the order
    made, each node named for its op and its place (``matmul_12``), and the encoder's weights.
    The ``onnx`` package is imported where it is used: it is an extra, and this module loads
    without it (:func:`encoder_graph` names the install)."""

    def __init__(self, weights: dict[str, np.ndarray], eps: float, rows: bool):
        self.weights, self.eps, self.rows = weights, eps, rows
        self.nodes: list = []
        self.inits: list = []
        self.count = 0
        self.quantized: dict[str, tuple[str, str]] = {}  # an activation's int8 rows, made once
        self.tiny, self.c127, self.c128 = (
            self.const(n, np.array(v, np.float32)) for n, v in (("tiny", 1e-12), ("c127", 127.0), ("c128", 128.0))
        )
        self.zero_u8 = self.const("zero_u8", np.array(128, np.uint8))
        self.zero_i8 = self.const("zero_i8", np.array(0, np.int8))

    def const(self, name: str, value) -> str:
        """An initializer ``name`` holding ``value``; returns its name."""
        from onnx import numpy_helper

        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, name: str, transpose: bool = False) -> str:
        """The encoder's weight ``name`` as an initializer (``transpose``: stored transposed)."""
        value = self.weights[name]
        return self.const(name, np.ascontiguousarray(value.T) if transpose else value)

    def node(self, op: str, inputs: list[str], prefix: str = "", **attrs) -> str:
        """A node ``op`` on ``inputs``; returns the name of its one output (the node's own)."""
        from onnx import helper

        self.count += 1
        out_name = f"{prefix}{op.lower()}_{self.count}"
        self.nodes.append(helper.make_node(op, inputs, [out_name], name=out_name, **attrs))
        return out_name

    def by_rows(self, x: str) -> tuple[str, str]:  # x (..., n) -> uint8 x / s + 128 and s (..., 1), s = max|x| / 127
        from onnx import TensorProto

        if x not in self.quantized:
            node = self.node
            s = node("Div", [node("Max", [node("ReduceMax", [node("Abs", [x])], axes=[-1]), self.tiny]), self.c127])
            q = node("Cast", [node("Add", [node("Round", [node("Div", [x, s])]), self.c128])], to=TensorProto.UINT8)
            self.quantized[x] = (q, s)
        return self.quantized[x]

    def linear(self, x: str, prefix: str) -> str:  # x W^T + b, W stored (out, in) as PyTorch's
        from onnx import TensorProto

        node = self.node
        if not self.rows:
            product = node("MatMul", [x, self.weight(prefix + ".weight", transpose=True)])
            return node("Add", [product, self.weight(prefix + ".bias")])
        q, s = self.by_rows(x)
        # 7 bits a weight: on a CPU without VNNI (AVX2) the u8 x s8 products of 8-bit weights saturate in pairs.
        w_q, w_scale = int8_rows(self.weights[prefix + ".weight"], 63)  # (out, in), (out,)
        product = node(
            "MatMulInteger", [q, self.const(prefix + ".q", np.ascontiguousarray(w_q.T)), self.zero_u8, self.zero_i8]
        )
        # The weight's scale first, then the rows': onnxruntime fuses MatMulInteger, Cast and a Mul by
        # the weight's scale into one op, and multiplying by both at once there gave wrong states.
        y = node(
            "Mul",
            [node("Cast", [product], to=TensorProto.FLOAT), self.const(prefix + ".s", w_scale.astype(np.float32))],
        )
        return node("Add", [node("Mul", [y, s]), self.weight(prefix + ".bias")])

    def norm(self, x: str, prefix: str) -> str:
        """LayerNorm over the last axis with the weights under ``prefix``."""
        return self.node(
            "LayerNormalization",
            [x, self.weight(prefix + ".weight"), self.weight(prefix + ".bias")],
            axis=-1,
            epsilon=self.eps,
        )


def embeddings(g: Graph, types: bool = False) -> str:
    """h0 = LayerNorm(E_word[ids] + E_position[0..P-1] + E_type[s]), (B, P, d): ``s`` the input
    ``types`` where ``types``, else 0 for every piece."""
    shape = g.node("Shape", ["ids"])
    P = g.node("Gather", [shape, g.const("one_i", np.array(1, np.int64))], axis=0)
    positions = g.node("Range", [g.const("zero_i", np.array(0, np.int64)), P, g.const("step_i", np.array(1, np.int64))])
    words = g.node("Gather", [g.const("embeddings_word", g.weights["embeddings.word_embeddings.weight"]), "ids"])
    places = g.node(
        "Gather", [g.const("embeddings_position", g.weights["embeddings.position_embeddings.weight"]), positions]
    )
    h = g.node("Add", [words, places])
    table = g.weights["embeddings.token_type_embeddings.weight"]
    segment = g.node("Gather", [g.const("embeddings_type", table), "types"]) if types else g.const("type0", table[0])
    h = g.node("Add", [h, segment])
    return g.norm(h, "embeddings.LayerNorm")


def padding_bias(g: Graph) -> str:
    """finfo(float32).min added to the scores of padded keys, (B, 1, 1, P)."""
    from onnx import TensorProto

    pad = g.node("Not", ["mask"])
    bias = g.node(
        "Mul",
        [g.node("Cast", [pad], to=TensorProto.FLOAT), g.const("fill", np.array(np.finfo(np.float32).min, np.float32))],
    )
    return g.node("Unsqueeze", [bias, g.const("axes_12", np.array([1, 2], np.int64))])


def encoder_layer(g: Graph, h: str, n: int, bias: str, heads_shape: str, merged_shape: str, scale: str) -> str:
    """Layer ``n`` on the states ``h`` (B, P, d): self-attention over the real pieces (``bias``), its
    residual and LayerNorm, then the GELU feed-forward, its residual and LayerNorm."""
    p = f"encoder.layer.{n}."

    def heads(x: str) -> str:  # (B, P, d) -> (B, H, P, d/H)
        return g.node("Transpose", [g.node("Reshape", [x, heads_shape])], perm=[0, 2, 1, 3])

    q, k, v = (heads(g.linear(h, p + f"attention.self.{part}")) for part in ("query", "key", "value"))
    # The two products of activations are named "attention_": int8 quantization leaves them in fp32.
    qk = g.node("MatMul", [q, g.node("Transpose", [k], perm=[0, 1, 3, 2])], prefix=ATTENTION)
    scores = g.node("Add", [g.node("Mul", [qk, scale]), bias])  # (B, H, P, P)
    ctx = g.node("MatMul", [g.node("Softmax", [scores], axis=-1), v], prefix=ATTENTION)  # (B, H, P, d/H)
    ctx = g.node("Reshape", [g.node("Transpose", [ctx], perm=[0, 2, 1, 3]), merged_shape])  # (B, P, d)
    a = g.norm(g.node("Add", [h, g.linear(ctx, p + "attention.output.dense")]), p + "attention.output.LayerNorm")
    f = _gelu(g, g.linear(a, p + "intermediate.dense"), n)
    return g.norm(g.node("Add", [a, g.linear(f, p + "output.dense")]), p + "output.LayerNorm")


def _gelu(g: Graph, f: str, n: int) -> str:
    """GELU with erf, as BERT's: f * (1 + erf(f / sqrt 2)) / 2 (layer ``n``'s constants)."""
    erf = g.node("Erf", [g.node("Div", [f, g.const(f"sqrt2_{n}", np.array(math.sqrt(2.0), np.float32))])])
    plus_one = g.node("Add", [erf, g.const(f"one_{n}", np.array(1.0, np.float32))])
    return g.node("Mul", [f, g.node("Mul", [plus_one, g.const(f"half_{n}", np.array(0.5, np.float32))])])


def encoder_graph(files: EncoderFiles, layers: tuple[int, ...], int8: bool, cache: str | Path) -> Path:
    """The encoder's ONNX file under ``cache``, built (and quantized) on first use, written
    atomically; the first use says so on stderr, in one line, rather than pausing silently."""
    cache = Path(cache)
    name = f"{files.digest}-L{'-'.join(map(str, layers))}{'-int8row' if int8 else ''}.onnx"
    path = cache / name
    if path.is_file():
        return path
    try:
        import onnx  # noqa: F401  (building the graph needs it; a missing one is named below)
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "the contextual encoder's ONNX graph is built on first use with the onnx package: "
            "pip install 'rckit[onnx]'",
            name="onnx",
        ) from None
    cache.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    print(
        f"rckit: building the {files.name} encoder's ONNX graph{' (int8)' if int8 else ''} once, kept in {cache} ...",
        end="",
        file=sys.stderr,
        flush=True,
    )
    try:
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            os.replace(build_graph(files, layers, Path(tmp) / "graph.onnx", rows=int8), path)
    except BaseException:
        print(" failed", file=sys.stderr, flush=True)
        raise
    print(f" {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return path


class OnnxRunner:
    """The encoder's graph on ONNX Runtime: ids (B, P), mask (B, P) -> states (B, P, K, D) float32."""

    def __init__(
        self,
        files: EncoderFiles,
        layers: tuple[int, ...],
        cache: str | Path,
        int8: bool = False,
        threads: int | None = None,
        spin: bool = True,
    ):
        import onnxruntime as ort

        self.path = encoder_graph(files, layers, int8, cache)
        options = ort.SessionOptions()
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # errors only
        if threads is not None:
            options.intra_op_num_threads = threads
        self.spin = spin  # the reader's own session sleeps between calls, so the encoder's threads may spin
        if not spin:  # a server's HTTP side shares the cores (as the reader's own session)
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])

    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return self.session.run(["states"], {"ids": ids.astype(np.int64), "mask": mask.astype(bool)})[0]
