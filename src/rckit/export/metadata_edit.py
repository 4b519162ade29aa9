"""Changing what an exported model file says about itself, without touching its weights.

:func:`edit_metadata` rewrites the rckit metadata of a ``.safetensors`` or ``.onnx`` file by a
function of it, whole or not at all (a temporary file beside it, renamed over it). Two changes
use it: :func:`record_score` (``rckit evaluate FILE --data DATA --record``: the figures of every
question, which ``rckit models`` and ``GET /v1/model`` show) and
:func:`set_verifier` (``rckit verifier --into``). An ONNX file is edited
with the ``onnx`` package and needs no PyTorch; a ``.safetensors`` file is read and written back
with PyTorch's safetensors functions, as :mod:`rckit.export.safetensors` writes it.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rckit.model_files.metadata import as_created
from rckit.model_files.source import export_format

if TYPE_CHECKING:
    from rckit.answering.verifier import Verifier

SCORE_KEYS = (
    "exact_match",
    "f1",
    "total",
    "HasAns_exact_match",
    "HasAns_f1",
    "NoAns_exact_match",
    "NoAns_f1",
    "best_f1",
    "best_f1_thresh",
    "no_answer_threshold",
    "always_answer",
)


def edit_metadata(path: str | Path, change: Callable[[dict], None]) -> dict:
    """Apply ``change`` to the rckit metadata of the exported file at ``path`` (a span model's, or
    rckit's own reader's, :mod:`rckit.model_files.reader_file`) in place and write the file back
    with the same tensors; returns the metadata as written."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such model file")
    if export_format(str(path), None) == "onnx":
        return _edit_onnx(path, change)
    from safetensors.torch import load_file

    from rckit.model_files.metadata import read_metadata
    from rckit.model_files.reader_file import is_reader_file, reader_metadata

    meta = reader_metadata(path) if is_reader_file(path) else read_metadata(path)
    tensors = load_file(path)
    change(meta)
    write_safetensors(tensors, meta, path)
    return meta


def write_safetensors(tensors: dict, meta: dict, path: Path) -> None:
    """``tensors`` (PyTorch's) and the rckit metadata to ``path`` as a ``.safetensors`` file, whole or
    not at all (a temporary file, renamed)."""
    from safetensors.torch import save_file

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata={"rckit": json.dumps(meta, ensure_ascii=False)})
        as_created(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def record_score(path: str | Path, data: str | Path, result: dict) -> dict:
    """Keep ``rckit evaluate``'s figures of the exported file at ``path`` on the SQuAD file ``data``
    in the file's metadata (``scores``, one entry per data file name and always-answer setting,
    replacing an earlier one), so that ``rckit models`` and ``GET /v1/model`` show what the
    model scores on every question, not on the dev subset training watched. An ONNX file keeps
    its own figures (an int8 graph, or an int8 encoder, scores a little apart from its source).
    Returns the entry."""
    from rckit.data.prepare import file_digest

    entry = {
        "data": Path(data).name,
        "data_sha256": file_digest(Path(data)),
        **{k: result[k] for k in SCORE_KEYS if k in result},
    }

    def keep(meta: dict) -> None:
        def same(e: dict) -> bool:
            return (e.get("data"), bool(e.get("always_answer"))) == (entry["data"], bool(entry.get("always_answer")))

        meta["scores"] = [e for e in meta.get("scores", []) if not same(e)] + [entry]

    edit_metadata(path, keep)
    return entry


def set_verifier(path: str | Path, verifier: Verifier | None, rewritten: dict[str, str] | None = None) -> dict:
    """Write ``verifier`` (None: remove it) into the exported model file at ``path``; returns the
    file's metadata as written. ``rewritten``: ``{file name: new sha256}`` of ``.safetensors``
    files whose verifier was just changed the same way; an ONNX file exported from one of them
    (its ``source``) keeps pointing at it, since only the metadata changed, not the weights."""
    entry = None if verifier is None else verifier.to_json()
    rewritten = rewritten or {}

    def put(meta: dict) -> None:
        meta.pop("verifier", None)
        if entry is not None:
            meta["verifier"] = entry
        source = meta.get("source") or {}
        if source.get("file") in rewritten:
            meta["source"] = {**source, "sha256": rewritten[source["file"]]}

    return edit_metadata(path, put)


def _edit_onnx(path: Path, change: Callable[[dict], None]) -> dict:
    import onnx

    from rckit.answering.onnx_backend import FORMAT, REQUIRED
    from rckit.model_files.metadata import parse_metadata

    model = onnx.load(str(path))
    text = next((p.value for p in model.metadata_props if p.key == "rckit"), None)
    if text is None:
        raise ValueError(f"{path}: not an rckit ONNX model (no rckit metadata)")
    meta = parse_metadata(text, path, FORMAT, REQUIRED)
    change(meta)
    with_metadata(model, meta)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        onnx.save(model, tmp)
        as_created(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return meta


def with_metadata(proto, meta: dict) -> None:
    """Set an ONNX model's (protobuf) rckit metadata to ``meta``, as one JSON string under ``rckit``."""
    del proto.metadata_props[:]
    entry = proto.metadata_props.add()
    entry.key, entry.value = "rckit", json.dumps(meta, ensure_ascii=False)
