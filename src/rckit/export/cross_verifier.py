"""The fine-tuned cross-encoder verifier as an ONNX graph beside the model files that name it.

``export_cross_verifier(run, encoder, folder)`` reads the run's ``best.pt``
(:mod:`rckit.training.cross_verifier`), writes :class:`rckit.models.cross_encoder.CrossEncoder`'s
forward (word vectors, mask, segments -> the logit) with ``torch.onnx.export`` (dynamo; dynamic
batch and length), and, with ``int8``, quantizes the weights of its MatMuls to int8 per output
channel (7 bits, :func:`rckit.contextual.onnx_runner.quantize_weights`; the attention's products
of two activations stay fp32). Before the file is kept it is checked against the PyTorch module on
``check`` inputs: an fp32 graph whose logits differ by more than :data:`TOLERANCE` is refused; an
int8 graph's largest difference is reported (its tuning-quarter AUC against fp32's decides whether
int8 ships: :func:`rckit.training.cross_verifier.install_cross_verifier`). The graph's name carries
the first characters of its SHA-256, so a new fine-tuning never overwrites a file an older model
file names.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

from rckit.answering.cross_verifier import CrossVerifier, Triple
from rckit.contextual.encoders import EncoderFiles
from rckit.contextual.onnx_runner import quantize_weights
from rckit.contextual.pieces import PieceTokenizer
from rckit.data.prepare import file_digest
from rckit.models.cross_encoder import CrossEncoder, CrossEncoderConfig

TOLERANCE = 1e-3  # largest |logit difference| an fp32 graph may show against PyTorch
OPSET = 18


def load_run(run: str | Path, encoder: EncoderFiles) -> tuple[CrossEncoder, dict]:
    """The best checkpoint of a fine-tuning run (``run/best.pt``, or a ``.pt`` file), in eval mode."""
    path = Path(run)
    path = path / "best.pt" if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no cross-encoder checkpoint (rckit verifier --cross-encoder DIR trains one)")
    state = torch.load(path, weights_only=True)
    model = CrossEncoder(encoder.config, CrossEncoderConfig(**state["config"]["model"]))
    model.load_state_dict(state["model"])
    return model.eval(), state


def write_graph(model: CrossEncoder, out: Path, int8: bool) -> Path:
    """``model``'s forward as ONNX at ``out`` (inputs ``vectors``, ``mask``, ``types``; output ``logit``)."""
    d = int(model.bert_config["hidden_size"])
    example = (torch.randn(2, 12, d), torch.ones(2, 12, dtype=torch.bool), torch.zeros(2, 12, dtype=torch.int64))
    B, P = torch.export.Dim("B"), torch.export.Dim("P", max=4096)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        fp32 = Path(tmp) / "fp32.onnx"
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                model,
                example,
                dynamo=True,
                input_names=["vectors", "mask", "types"],
                output_names=["logit"],
                dynamic_shapes=({0: B, 1: P}, {0: B, 1: P}, {0: B, 1: P}),
                opset_version=OPSET,
                optimize=True,
            )
        program.save(str(fp32), external_data=False)
        built = fp32
        if int8:
            import onnx

            graph = onnx.load(str(fp32))
            weights = {i.name for i in graph.graph.initializer}
            # Only the MatMuls with a weight: the attention's products of two activations stay fp32.
            products = [n.name for n in graph.graph.node if n.op_type == "MatMul" and not set(n.input) & weights]
            built = quantize_weights(fp32, Path(tmp) / "int8.onnx", products)
        os.replace(built, out)
    return out


def export_cross_verifier(
    run: str | Path,
    encoder: EncoderFiles,
    folder: str | Path,
    stem: str,
    check: list[Triple],
    int8: bool = True,
) -> tuple[dict, float]:
    """The run's graph written into ``folder`` as ``<stem>.verifier-<sha256[:12]>.onnx``, checked on
    the ``check`` triples; returns what a model file says of it (``CrossVerifier.from_json``'s
    fields) and the largest logit difference from PyTorch."""
    model, state = load_run(run, encoder)
    folder = Path(folder)
    tmp = folder / f".{stem}.verifier.tmp.onnx"
    write_graph(model, tmp, int8)
    try:
        import onnxruntime as ort

        session = ort.InferenceSession(str(tmp), providers=["CPUExecutionProvider"])
        tokenizer = PieceTokenizer(encoder.root / "tokenizer.json")
        table = model.bert.word.weight.detach().numpy()
        max_pieces = int(state["config"]["max_pieces"])

        def onnx_run(vectors, mask, types):
            return session.run(["logit"], {"vectors": vectors, "mask": mask, "types": types})[0]

        def torch_run(vectors, mask, types):
            with torch.no_grad():
                return model(torch.from_numpy(vectors), torch.from_numpy(mask), torch.from_numpy(types)).numpy()

        got = CrossVerifier(onnx_run, tokenizer, table, max_pieces).logits(check)
        want = CrossVerifier(torch_run, tokenizer, table, max_pieces).logits(check)
        diff = float(np.abs(got - want).max()) if len(check) else 0.0
        if not int8 and diff > TOLERANCE:
            raise ValueError(f"the exported graph's logits differ from PyTorch's by {diff:.2e} (> {TOLERANCE})")
        digest = file_digest(tmp)
        name = f"{stem}.verifier-{digest[:12]}.onnx"
        os.replace(tmp, folder / name)
    finally:
        tmp.unlink(missing_ok=True)
    meta = {
        "kind": "cross_encoder",
        "file": name,
        "sha256": digest,
        "encoder": encoder.name,
        "encoder_digest": encoder.digest,
        "max_pieces": max_pieces,
        "quantized": "int8" if int8 else None,
        "step": state.get("step"),
        "config": state["config"],
    }
    return meta, diff
