"""What a model source is: the one place that tells a run, a checkpoint, an exported file and an
installed model's name apart. Everything else asks :func:`open_model`.

A source is one of:

- a run directory (``run``): its ``best.pt``, else ``last.pt`` (:mod:`rckit.model_files.runs`);
- a checkpoint, a ``.pt`` file (``checkpoint``);
- an exported ``.safetensors`` file (``safetensors``: PyTorch answers with it,
  :mod:`rckit.model_files.safetensors`);
- an ONNX file (``onnx``: onnxruntime answers with it, without PyTorch);
- ``"bundled"``: the model installed with rckit (its ``.safetensors`` file);
- None: the default model, ``$RCKIT_MODEL`` if set, else the installed model
  (:func:`default_model_path`).

This module imports neither PyTorch nor onnxruntime: deciding what a file is costs a ``stat``.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from rckit.model_files.errors import MissingPackage

BUNDLED = Path(__file__).resolve().parent.parent / "bundled" / "qanet-squad.safetensors"  # PyTorch
BUNDLED_ONNX = BUNDLED.with_suffix(".onnx")  # the same model for onnxruntime (`rckit export bundled --format onnx`)
SUFFIXES = {"safetensors": ".safetensors", "onnx": ".onnx"}  # the exported formats and their files' suffixes


@dataclass(frozen=True)
class ModelFile:
    """A model source, told apart: ``path`` and ``kind`` (``run``, ``checkpoint``,
    ``safetensors`` or ``onnx``)."""

    path: Path
    kind: str

    @property
    def exported(self) -> bool:
        """A file of ``rckit export``: one set of weights, no training state, no data paths."""
        return self.kind in SUFFIXES

    @property
    def backend(self) -> str:
        """What answers with it: ``onnxruntime`` for an ONNX file, else ``torch``."""
        return "onnxruntime" if self.kind == "onnx" else "torch"


def open_model(source: str | Path | None = None) -> ModelFile:
    """The :class:`ModelFile` of ``source`` (see the module docstring).

    A missing run or checkpoint is left to its loader, which says what a run directory should
    hold; any other missing path is a FileNotFoundError here.
    """
    if source is None:
        path = default_model_path()
    elif str(source) == "bundled":
        path = BUNDLED
    else:
        path = Path(source)
    if path.is_dir():
        return ModelFile(path, "run")
    if path.suffix == ".pt":
        return ModelFile(path, "checkpoint")
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such run directory or model file")
    return ModelFile(path, "onnx" if path.suffix == SUFFIXES["onnx"] else "safetensors")


def pytorch_beside(onnx: str | Path | None) -> Path | None:
    """The ``.safetensors`` file exported beside an ``.onnx`` one (as the installed model has), or
    None: what explaining an ONNX-served model reads, as the graph gives no gradients."""
    if onnx is None:
        return None
    beside = Path(onnx).with_suffix(SUFFIXES["safetensors"])
    return beside if beside.is_file() else None


def export_format(out: str | Path, fmt: str | None = None) -> str:
    """The format ``rckit export`` writes to ``out``: ``fmt`` if given, else by the file's suffix
    (``.onnx``: onnx), else ``safetensors``."""
    if fmt is not None:
        if fmt not in SUFFIXES:
            raise ValueError(f"format must be one of {', '.join(SUFFIXES)}, got {fmt!r}")
        return fmt
    return "onnx" if Path(out).suffix == SUFFIXES["onnx"] else "safetensors"


def exported_files(folder: str | Path) -> list[ModelFile]:
    """The exported model files in ``folder``, by name."""
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: not a directory")
    found = sorted(f for suffix in SUFFIXES.values() for f in root.glob(f"*{suffix}"))
    return [open_model(f) for f in found]


def installed(package: str) -> bool:
    """Whether ``package`` can be imported here, without importing it."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def default_model_path() -> Path:
    """``$RCKIT_MODEL`` if set (a run directory or an exported file), else the installed model:
    its ONNX file where onnxruntime is installed (the faster path, BENCHMARKS.md), else its
    ``.safetensors`` file where PyTorch is.

    Raises FileNotFoundError, saying how to get a model, when there is none, and
    :class:`MissingPackage` when neither backend is installed.
    """
    env = os.environ.get("RCKIT_MODEL")
    if env:
        if not Path(env).exists():
            raise FileNotFoundError(f"RCKIT_MODEL={env}: no such file or directory")
        return Path(env)
    for path, package in ((BUNDLED_ONNX, "onnxruntime"), (BUNDLED, "torch")):
        if path.is_file() and installed(package):
            return path
    if BUNDLED_ONNX.is_file() or BUNDLED.is_file():
        raise MissingPackage("rckit answers with onnxruntime or PyTorch, and neither is installed: "
                             "pip install 'rckit[onnx]' (answering) or 'rckit[torch]' (training too)")
    raise FileNotFoundError("no default model is installed: give a trained run or an exported file "
                            "(`rckit predict RUN ...`, `rckit export RUN --out FILE`), or set RCKIT_MODEL=FILE")
