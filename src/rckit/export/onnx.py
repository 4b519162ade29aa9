"""``rckit export SOURCE --format onnx``: a span model as an ONNX file for onnxruntime.

The model's forward pass is traced by ``torch.export`` and written by ``torch.onnx.export``
(dynamo) with the plain layers (:mod:`rckit.kernels` switched off: the fast paths are CPU
PyTorch code, onnxruntime has its own), dynamic batch, context, question and word lengths, and
the metadata :mod:`rckit.answering.onnx_backend` reads. Before the file is written it is checked
against the PyTorch model it came from, on real questions: every question of ``check_data``
(a SQuAD file; default: the first ``check_questions`` of the run's dev file, where it is on
this machine; else a few passages written here), read as the Reader reads them, logits compared
at every real position and the answers compared. An fp32 file whose logits differ by more than
:data:`TOLERANCE` is refused (nothing written).

``int8="dynamic"``: onnxruntime's dynamic quantization of the MatMul weights to int8 (activations
quantized per call); its answers differ from the PyTorch model's, so the check reports how many
agree instead of refusing. What it costs and gains: BENCHMARKS.md.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import tempfile
import warnings
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch

from rckit import kernels
from rckit.answering.decoding import decode_config_of
from rckit.answering.onnx_backend import FORMAT, OnnxModel
from rckit.answering.reader import Reader
from rckit.answering.torch_backend import TorchModel
from rckit.contextual.encoders import portable
from rckit.data.padding import INPUTS, STATE_INPUTS, answer_inputs
from rckit.data.prepare import file_digest
from rckit.data.squad import read_squad
from rckit.export.metadata_edit import with_metadata
from rckit.export.safetensors import frozen_tables
from rckit.kernels import graph
from rckit.model_files.glove_rows import (
    PACKAGE,
    PACKAGE_DIM,
    encode_indices,
    package_indices,
    package_version,
    rows_at,
    rows_digest,
)
from rckit.model_files.load import load_span_model
from rckit.model_files.metadata import as_created, contextual_of

TOLERANCE = 1e-3  # largest |logit difference| an fp32 file may show against PyTorch
QUANTIZATIONS = ("dynamic",)
# Opset 23 has an Attention operator: with ``graph_attention`` each self-attention is one fused node.
# onnxruntime's Attention wants the mask spelled out, so the plain layer (a broadcast boolean mask)
# exports at opset 18, where SDPA becomes its decomposition.
OPSET, PLAIN_OPSET = 23, 18

# Passages written for the check where no dev data is at hand: (context, [questions]).
SAMPLES = [
    (
        "The lighthouse on Farrow Point was built in 1871 by the harbour board, after two ships ran aground on "
        "the reef in a single winter. Its lamp burned whale oil until 1902, when it was changed to paraffin, and "
        "it was automated in 1968. The keeper's cottage is now a small museum run by volunteers.",
        [
            "When was the lighthouse built?",
            "Who built the lighthouse?",
            "What did the lamp burn until 1902?",
            "What is the keeper's cottage now?",
        ],
    ),
    (
        "Maria Sibylla Merian was a naturalist and scientific illustrator who studied the metamorphosis of "
        "insects. In 1699 she travelled with her daughter to Suriname, where she spent two years drawing plants "
        "and animals, and in 1705 she published Metamorphosis insectorum Surinamensium in Amsterdam.",
        [
            "Where did Merian travel in 1699?",
            "What did she study?",
            "When was her book published?",
            "In which city was the book published?",
        ],
    ),
]

SAMPLES_PAIRS = [(c, q) for c, qs in SAMPLES for q in qs[:1]]


class _Forward(torch.nn.Module):
    """The model's answering pass (:meth:`ReadingModel.answer_pass`) on the input tensors, returning a
    tuple of its logits."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, words, chars, c_tokens, c_mask, q_tokens, q_mask, q_context, c_states=None, q_states=None):
        out = self.model.answer_pass(words, chars, c_tokens, c_mask, q_tokens, q_mask, q_context, c_states, q_states)
        if out.start_null is None:
            return out.start_logits, out.end_logits
        return out.start_logits, out.end_logits, out.start_null, out.end_null


def export_onnx(
    source: str | Path,
    out_file: str | Path,
    check_data: str | Path | None = None,
    check_questions: int = 256,
    int8: str | None = None,
    encoder_int8: bool = False,
) -> dict:
    """Write the span model of ``source`` (a run, a checkpoint or an exported ``.safetensors``) to
    ``out_file`` as ONNX; returns what was written and how it compared with PyTorch. ``encoder_int8``:
    a model that reads contextual states answers with the encoder's graph in int8 (its metadata
    says so; the check then compares answers, as for ``int8``)."""
    import onnx

    if int8 is not None and int8 not in QUANTIZATIONS:
        raise ValueError(f"int8 quantization must be one of {', '.join(QUANTIZATIONS)}, got {int8!r}")
    source = Path(source)
    module, vocabs, meta = load_span_model(source, "cpu")
    name = meta["model"]
    torch_reader = Reader.from_parts(TorchModel(module), vocabs, meta, meta["file"])
    pairs, where = check_pairs(check_data, meta, check_questions)
    names, args, shapes = example_inputs(torch_reader, pairs)
    outputs = ["start_logits", "end_logits"] + (["start_null", "end_null"] if module.no_answer else [])
    out_file = Path(out_file)
    tmp = temporary_beside(out_file)
    try:
        program = traced(module, args, names, shapes, outputs, source, name)
        proto = compact(program.model_proto)
        frozen_rows = leave_out_package_rows(proto, module, vocabs)
        record = onnx_record(meta, torch_reader, vocabs, frozen_rows, int8, encoder_int8)
        with_metadata(proto, record)
        onnx.save(proto, str(tmp))
        if int8:
            _quantize(tmp)
            record["quantized"] = f"int8-{int8}"
            _set_metadata(tmp, record)
        onnx_reader = Reader.from_parts(OnnxModel(tmp), vocabs, record, tmp)
        check = checked(torch_reader, onnx_reader, pairs, where, source, name, exact=not int8 and not encoder_int8)
        record["check"] = check
        _set_metadata(tmp, record)
        as_created(tmp)
        os.replace(tmp, out_file)
    finally:
        tmp.unlink(missing_ok=True)
    return {
        "file": str(out_file),
        "bytes": out_file.stat().st_size,
        "sha256": file_digest(out_file),
        "model": name,
        "quantized": record["quantized"],
        "check": check,
    }


def example_inputs(torch_reader: Reader, pairs: list[tuple[str, str]]) -> tuple[tuple[str, ...], tuple, dict]:
    """The inputs the model is traced on (their names, the tensors, their dynamic dimensions): three
    questions on two windows of different lengths, so that no size is traced as a constant and
    nothing as "no padding"."""
    (c1, q1), (c2, q2) = pairs[:2] if len(pairs) >= 2 and pairs[0][0] != pairs[1][0] else SAMPLES_PAIRS[:2]
    job = torch_reader.plan([(c1, q1), (c1, q2), (c2[: len(c2) // 2], q2)])
    example = answer_inputs(job.arrays, [item for group in job.windows for item in group])
    names = INPUTS + (STATE_INPUTS if "c_states" in example else ())  # a contextual model reads the states too
    args = tuple(torch.from_numpy(example[k]) for k in names)
    n, width, u, c_len, b, q_len = (
        torch.export.Dim(dim, min=1) for dim in ("tokens", "word", "windows", "context", "questions", "question")
    )
    shapes = {
        "words": {0: n},
        "chars": {0: n, 1: width},
        "c_tokens": {0: u, 1: c_len},
        "c_mask": {0: u, 1: c_len},
        "q_tokens": {0: b, 1: q_len},
        "q_mask": {0: b, 1: q_len},
        "q_context": {0: b},
    }
    if "c_states" in example:
        shapes.update(c_states={0: u, 1: c_len}, q_states={0: b, 1: q_len})
    return names, args, shapes


def temporary_beside(out_file: Path) -> Path:
    """An empty temporary file in ``out_file``'s folder (made where missing): the file is written and
    checked there, then renamed to ``out_file``."""
    out_file.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out_file.name}.", suffix=".tmp.onnx", dir=out_file.parent)
    os.close(fd)
    return Path(tmp)


def traced(
    module: torch.nn.Module,
    args: tuple,
    names: tuple[str, ...],
    shapes: dict,
    outputs: list[str],
    source: Path,
    name: str,
):
    """The model's answering pass traced by ``torch.export`` and written by ``torch.onnx.export``
    (dynamo), with the graph forms of :mod:`rckit.kernels` that are on and the exporter's chatter
    kept quiet; a model that does not trace is refused in one line."""
    graph_forms = ",".join(n for n in kernels.GRAPH if kernels.enabled(n)) or "none"  # RCKIT_KERNELS may drop them
    opset = OPSET if kernels.enabled("graph_attention") else PLAIN_OPSET
    chatter = io.StringIO()  # the exporter prints its steps and, on failure, the traced graph
    try:
        with (
            kernels.use(graph_forms),
            torch.no_grad(),
            warnings.catch_warnings(),
            contextlib.redirect_stdout(chatter),
            contextlib.redirect_stderr(chatter),
            _quiet("torch"),
        ):
            warnings.simplefilter("ignore")
            return torch.onnx.export(
                _Forward(module).eval(),
                args,
                dynamo=True,
                dynamic_shapes=shapes,
                input_names=list(names),
                output_names=outputs,
                opset_version=opset,
                custom_translation_table=graph.onnx_translations(),
                optimize=True,
                verbose=False,
            )
    except Exception as e:
        raise ValueError(
            f"{source}: the {name} model does not export to ONNX ({why_not(e)}); it answers "
            "through PyTorch (a run or a .safetensors export)"
        ) from e


def onnx_record(
    meta: dict, torch_reader: Reader, vocabs, frozen_rows: dict, int8: str | None, encoder_int8: bool
) -> dict:
    """The metadata the ONNX file carries (read by :mod:`rckit.answering.onnx_backend`), before it is
    quantized and checked: a quantized file keeps none of its source's scores."""
    return {
        "format": FORMAT,
        "model": meta["model"],
        "model_config": meta["model_config"],
        "decode": asdict(decode_config_of(meta)),
        "train_config": {"max_c_len": torch_reader.window},
        "vocab": vocabs.to_json(),
        "dev_score": meta.get("dev_score"),
        "scores": [] if int8 or encoder_int8 else meta.get("scores", []),
        "step": meta.get("step"),
        "parameters": torch_reader.model.parameters,
        "quantized": None,
        "frozen_rows": frozen_rows,
        "embedding": {"contextual": contextual_record(meta, encoder_int8)},
        "source": {"file": Path(meta["file"]).name, "sha256": file_digest(Path(meta["file"]))},
        **({"verifier": meta["verifier"]} if meta.get("verifier") else {}),  # rckit.answering.verifier
    }


def checked(
    torch_reader: Reader,
    onnx_reader: Reader,
    pairs: list[tuple[str, str]],
    where: str,
    source: Path,
    name: str,
    exact: bool,
) -> dict:
    """The written graph compared with the PyTorch model on ``pairs`` (:func:`compare`, ``where``
    noted): refused in one line where onnxruntime cannot run it, or, ``exact`` (an fp32 file), where
    its logits differ by more than :data:`TOLERANCE`."""
    try:
        check = compare(torch_reader, onnx_reader, pairs)
    except Exception as e:
        if not type(e).__module__.startswith("onnxruntime"):  # its Fail, InvalidGraph, ...: no common base
            raise
        raise ValueError(
            f"{source}: the {name} model's ONNX graph does not run on onnxruntime "
            f"({' '.join(str(e).split())[:200]}): not written"
        ) from e
    check["data"] = where
    if exact and check["max_abs_logit_diff"] > TOLERANCE:
        raise ValueError(
            f"{source}: the ONNX model's logits differ from PyTorch's by "
            f"{check['max_abs_logit_diff']:.3g} (more than {TOLERANCE}) on {where}: not written"
        )
    return check


def contextual_record(meta: dict, encoder_int8: bool) -> dict | None:
    """The encoder an ONNX file's model reads (as its source names it), and whether its graph runs in int8."""
    contextual = contextual_of(meta)
    if contextual is None:
        if encoder_int8:
            raise ValueError("--encoder-int8 is for a model that reads contextual states, and this one reads none")
        return None
    return replace(portable(contextual), int8=bool(encoder_int8)).to_json()


def why_not(e: Exception) -> str:
    """torch.export's reason in one line: the failing construct and where in rckit it is."""
    text = str(e.__cause__ or e)
    summary = re.search(r"<class '[\w.]*?(\w+)'>: ([^\n]*)", text)
    where = re.search(r'raised this error:\s*File "([^"]+)", line (\d+), in \w+\s*\n\s*(.+)', text)
    what = (
        f"{summary.group(1)}: {summary.group(2)[:120]}"
        if summary
        else next((ln.strip() for ln in text.splitlines() if ln.strip()), type(e).__name__)[:160]
    )
    if where:
        what += f" at {Path(where.group(1)).name}:{where.group(2)} `{where.group(3).strip()[:80]}`"
    return " ".join(what.split())


@contextlib.contextmanager
def _quiet(logger: str):
    """The named logger silenced below errors for the block."""
    log = logging.getLogger(logger)
    level, log.level = log.level, logging.ERROR
    try:
        yield
    finally:
        log.setLevel(level)


def check_pairs(check_data: str | Path | None, meta: dict, limit: int) -> tuple[list[tuple[str, str]], str]:
    """(context, question) pairs to check an export on, and where they came from."""
    path = Path(check_data) if check_data else None
    if path is None:
        dev = (meta.get("data") or {}).get("dev_file")
        path = Path(dev) if dev and Path(dev).is_file() else None
    if path is None:
        pairs = [(c, q) for c, qs in SAMPLES for q in qs]
        return pairs, f"{len(pairs)} questions on rckit's check passages (give --check-data DEV.json for real ones)"
    data = read_squad(path)
    pairs = [(ex.context, ex.question) for ex in data.examples[:limit]]
    if not pairs:
        raise ValueError(f"{path}: no questions to check the export on")
    return pairs, f"the first {len(pairs)} questions of {path.name}"


def compare(torch_reader: Reader, onnx_reader: Reader, pairs: list[tuple[str, str]]) -> dict:
    """How the two readers differ on ``pairs``: the largest logit difference at a real position,
    and how many best answers (text, or the abstention) are the same."""
    job = torch_reader.plan(pairs)
    worst = 0.0
    for items in torch_reader.batches(job):
        inputs = answer_inputs(job.arrays, items)
        a, b = torch_reader.model(inputs), onnx_reader.model(inputs)
        mask = inputs["c_mask"][inputs["q_context"]]
        for key in a:
            diff = np.abs(a[key] - b[key])
            worst = max(worst, float((diff[mask] if diff.ndim == 2 else diff).max(initial=0.0)))
    ours, theirs = torch_reader.answer_batch(pairs), onnx_reader.answer_batch(pairs)
    same = sum(x[0]["answer"] == y[0]["answer"] for x, y in zip(ours, theirs))
    return {"questions": len(pairs), "max_abs_logit_diff": worst, "same_answers": same}


def compact(proto):
    """The exported ``proto`` without what only debugging needs, each constant once: the exporter
    writes its trace (stack, module path) into every node, and keeps a weight both as itself and
    as the copies its folding made (a transposed weight folded back, a table used by two
    encoders). Returns ``proto``, changed in place."""
    from onnx import numpy_helper

    for sub in _graphs(proto.graph):
        for node in sub.node:
            del node.metadata_props[:]
            node.doc_string = ""
    first: dict[tuple, str] = {}
    renamed: dict[str, str] = {}
    for t in list(proto.graph.initializer):
        a = numpy_helper.to_array(t)
        key = (a.dtype.str, a.shape, a.tobytes())
        if key in first:
            renamed[t.name] = first[key]
            proto.graph.initializer.remove(t)
        else:
            first[key] = t.name
    for sub in _graphs(proto.graph):
        for node in sub.node:
            node.input[:] = [renamed.get(name, name) for name in node.input]
    return proto


def _graphs(graph):
    """``graph`` and every subgraph in it (the bodies of If and Loop nodes)."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _graphs(sub)


def leave_out_package_rows(proto, module: torch.nn.Module, vocabs) -> dict:
    """Take the fixed word rows that are the GloVe package's out of the ONNX model ``proto``: each
    such table becomes a graph input, and the metadata entry returned (by input name: rows, dim,
    the package's row of each word, sha256) lets :class:`~rckit.answering.onnx_backend.OnnxModel` read
    them from the package and check them, as an exported ``.safetensors`` file's are. Rows from a
    GloVe text file stay in the file."""
    import onnx

    initializers = {t.name: t for t in proto.graph.initializer}
    words = vocabs.words.itos
    entries = {}
    for key, table in frozen_tables(module).items():
        name = f"model.{key}"  # _Forward holds the model as `model`
        rows = table.frozen.detach().float().numpy()
        if name not in initializers or not rows.shape[0] or rows.shape[1] != PACKAGE_DIM:
            continue
        idx = package_indices(words[table.n_trainable :])
        digest = rows_digest(rows)
        if idx is None or rows_digest(rows_at(idx)) != digest:
            continue
        proto.graph.initializer.remove(initializers[name])
        proto.graph.input.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, list(rows.shape)))
        entries[name] = {
            "rows": int(rows.shape[0]),
            "dim": int(rows.shape[1]),
            "sha256": digest,
            "source": PACKAGE,
            "package_version": package_version(),
            "package_index": encode_indices(idx),
        }
    return entries


def _set_metadata(path: Path, record: dict) -> None:
    import onnx

    model = onnx.load(str(path))
    with_metadata(model, record)
    onnx.save(model, str(path))


def _quantize(path: Path) -> None:
    """The MatMul weights of ``path`` as int8, in place (onnxruntime's dynamic quantization)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    done = path.with_suffix(".int8.onnx")
    try:
        with warnings.catch_warnings(), _quiet(""):  # it advises pre-processing on the root logger
            warnings.simplefilter("ignore")
            quantize_dynamic(str(path), str(done), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm"])
        os.replace(done, path)
    finally:
        done.unlink(missing_ok=True)
