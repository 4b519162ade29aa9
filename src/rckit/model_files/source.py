"""What a model source is: the one place that tells a run, a checkpoint, an exported file and an
installed model's name apart. Everything else asks :func:`open_model`.

A source is one of:

- a run directory (``run``): its ``best.pt``, else ``last.pt`` (:mod:`rckit.model_files.runs`);
- a checkpoint, a ``.pt`` file (``checkpoint``);
- an exported ``.safetensors`` file (``safetensors``: PyTorch answers with it,
  :mod:`rckit.model_files.safetensors`);
- an ONNX file (``onnx``: onnxruntime answers with it, without PyTorch);
- an installed model's name (:data:`INSTALLED_NAMES`: ``minilm_reader``, ``qanet``, ``dcn``,
  ``dcn_plus``, ``deep_lstm_reader``, ``qanet_paper``, ``qanet_glove``, ``qanet_minilm_l2``), where
  no file or directory of that name is here: its ONNX file where onnxruntime is installed and the
  model has one, else its ``.safetensors`` file (:func:`installed_path`); ``"all"`` or
  ``"dcn,qanet"`` name several (:func:`model_names`);
- ``"bundled"``: the default installed model's ``.safetensors`` file (``minilm_reader``, rckit's own
  reader: docs/own-reader.md);
- None: the default model, ``$RCKIT_MODEL`` if set, else the installed ``minilm_reader``
  (:func:`default_model_path`).

rckit's own reader is one ``.safetensors`` file that both backends read: PyTorch, or onnxruntime
through a graph built from it on first use (:mod:`rckit.answering.pointer_graph`), so it has no
ONNX file of its own (:data:`OWN_READERS`).

This module imports neither PyTorch nor onnxruntime: deciding what a file is costs a ``stat``.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path

from rckit.model_files.errors import MissingPackage

INSTALLED = Path(__file__).resolve().parent.parent / "bundled"  # the models installed with rckit: NAME-squad.*
# Their names, the default first; docs/models.md has a card for each.
INSTALLED_NAMES = (
    "minilm_reader",
    "qanet",
    "dcn",
    "dcn_plus",
    "deep_lstm_reader",
    "qanet_paper",
    "qanet_glove",
    "qanet_minilm_l2",
)
OWN_READERS = ("minilm_reader",)  # installed readers whose .safetensors file onnxruntime answers with too
SUFFIXES = {"safetensors": ".safetensors", "onnx": ".onnx"}  # the exported formats and their files' suffixes
BUNDLED = INSTALLED / "minilm_reader-squad.safetensors"  # the default model, for both backends
NAME = re.compile(r"[A-Za-z0-9_]+")  # what could be a model's name rather than a path


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


def open_model(source: str | Path | ModelFile | None = None) -> ModelFile:
    """The :class:`ModelFile` of ``source`` (see the module docstring; one already told apart is
    given back as it is).

    A missing run or checkpoint is left to its loader, which says what a run directory should
    hold; any other missing path is a FileNotFoundError here.
    """
    if isinstance(source, ModelFile):
        return source
    if source is None:
        path = default_model_path()
    elif str(source) == "bundled":
        path = BUNDLED
    elif names_installed(source):
        path = installed_path(source)
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


def names_installed(source: str | Path | None) -> bool:
    """Whether ``source`` means an installed model: None (the default) or a name with no file or
    directory of that name here (:func:`open_model`), not a path given."""
    return source is None or (
        isinstance(source, str) and NAME.fullmatch(source) is not None and not Path(source).exists()
    )


def names_several(spec: str | None) -> bool:
    """Whether ``spec`` names several installed models (:func:`model_names`): ``all``, or names
    joined by commas, where no file or directory of that name is here."""
    return spec is not None and (spec == "all" or "," in spec) and not Path(spec).exists()


def pytorch_source(source: str | Path | None) -> Path:
    """What PyTorch reads for ``source``: its path, or for an ONNX file (an installed model's name
    can resolve to one, as the default's does) the ``.safetensors`` file beside it. An ONNX file
    without one is a ValueError: a graph holds no weights to train or explain from."""
    found = open_model(source)
    if found.kind != "onnx":
        return found.path
    beside = pytorch_beside(found.path)
    if beside is None:
        raise ValueError(f"{found.path}: an ONNX file, with no .safetensors file beside it for PyTorch to read")
    return beside


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


def reader_backend(device: object = "cpu") -> str:
    """What answers with rckit's own reader's file by default (``PointerReader.load``'s ``auto``):
    ``onnx`` where onnxruntime and ``onnx`` are installed and ``device`` is the CPU (a batch of
    windows in about half PyTorch's time, BENCHMARKS.md; the same answers), else ``torch`` where
    PyTorch is installed, else ``onnx`` (whose loader names what is missing)."""
    if str(device) in ("cpu", "auto") and installed("onnxruntime") and installed("onnx"):
        return "onnx"
    return "torch" if installed("torch") else "onnx"


def default_model_path() -> Path:
    """``$RCKIT_MODEL`` if set (a run directory or an exported file), else the installed default,
    ``minilm_reader`` (:func:`installed_path`).

    Raises FileNotFoundError, saying how to get a model, when there is none, and
    :class:`MissingPackage` when neither backend is installed.
    """
    env = os.environ.get("RCKIT_MODEL")
    if env:
        if not Path(env).exists():
            raise FileNotFoundError(f"RCKIT_MODEL={env}: no such file or directory")
        return Path(env)
    if BUNDLED.is_file():
        if installed("onnxruntime") or installed("torch"):
            return BUNDLED
        raise MissingPackage(
            "rckit answers with onnxruntime or PyTorch, and neither is installed: "
            "pip install 'rckit[onnx]' (answering) or 'rckit[torch]' (training too)"
        )
    raise FileNotFoundError(
        "no default model is installed: give a trained run or an exported file "
        "(`rckit predict RUN ...`, `rckit export RUN --out FILE`), or set RCKIT_MODEL=FILE"
    )


def installed_files(name: str) -> dict[str, Path]:
    """The files of installed model ``name`` that are here, by format (``safetensors``, ``onnx``)."""
    files = {fmt: INSTALLED / f"{name}-squad{suffix}" for fmt, suffix in SUFFIXES.items()}
    return {fmt: path for fmt, path in files.items() if path.is_file()}


def installed_models() -> list[str]:
    """The names of the installed models that have a file here, the default first."""
    return [name for name in INSTALLED_NAMES if installed_files(name)]


def installed_name(path: str | Path) -> str | None:
    """The name of the installed model whose file ``path`` is, else None."""
    path = Path(path).resolve()
    return next((name for name in INSTALLED_NAMES if path in installed_files(name).values()), None)


def installed_path(name: str) -> Path:
    """The file installed model ``name`` answers with: its ONNX file where onnxruntime is installed
    and it has one (the faster path), else its ``.safetensors`` file where PyTorch is, or for one of
    :data:`OWN_READERS` where either is.

    An unknown name is a :class:`FileNotFoundError` of one line listing the installed models; a
    model whose backend is missing is :class:`MissingPackage`, naming the install."""
    files = installed_files(name)
    if not files:
        raise FileNotFoundError(
            f"{name}: no such run directory, model file or installed model "
            f"(installed: {', '.join(installed_models()) or 'none'})"
        )
    if "onnx" in files and installed("onnxruntime"):
        return files["onnx"]
    if "safetensors" in files and (installed("torch") or (name in OWN_READERS and installed("onnxruntime"))):
        return files["safetensors"]
    if "onnx" in files or name in OWN_READERS or not installed("onnxruntime"):
        raise MissingPackage(
            f"the installed model {name} answers with onnxruntime or PyTorch, and neither is "
            "installed: pip install 'rckit[onnx]' (answering) or 'rckit[torch]' (training too)"
        )
    raise MissingPackage(
        f"the installed model {name} answers with PyTorch (it has no ONNX file): pip install 'rckit[torch]'"
    )


def model_names(spec: str) -> list[str]:
    """The installed models ``spec`` names: ``all`` (every installed one), or names joined by commas.
    An unknown name is a :class:`FileNotFoundError` listing the installed ones."""
    names = installed_models() if spec == "all" else [n.strip() for n in spec.split(",") if n.strip()]
    if not names:
        raise FileNotFoundError(f"--model {spec!r}: no installed model (installed: none)")
    for name in names:
        if not installed_files(name):
            installed_path(name)  # raises, listing the installed ones
    return list(dict.fromkeys(names))
