"""A verifier (:mod:`rckit.answering.verifier`) put into an exported model file, ``.safetensors``
or ``.onnx``, or taken out of it: the file's rckit metadata gets (or loses) its ``verifier``
entry and everything else is written back unchanged, whole or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from safetensors.torch import load_file

from rckit.answering.verifier import Verifier
from rckit.export.safetensors import _write, as_created
from rckit.model_files.metadata import read_metadata
from rckit.model_files.source import export_format


def set_verifier(path: str | Path, verifier: Verifier | None, rewritten: dict[str, str] | None = None) -> dict:
    """Write ``verifier`` (None: remove it) into the exported model file at ``path``; returns the
    file's metadata as written. ``rewritten``: ``{file name: new sha256}`` of ``.safetensors``
    files whose verifier was just changed the same way; an ONNX file exported from one of them
    (its ``source``) keeps pointing at it, since only the metadata changed, not the weights."""
    path = Path(path)
    entry = None if verifier is None else verifier.to_json()
    if export_format(str(path), None) == "onnx":
        return _set_onnx(path, entry, rewritten or {})
    meta = read_metadata(path)
    tensors = load_file(path)
    _put(meta, entry)
    _write(tensors, meta, path)
    return meta


def _put(meta: dict, entry: dict | None) -> None:
    meta.pop("verifier", None)
    if entry is not None:
        meta["verifier"] = entry


def _set_onnx(path: Path, entry: dict | None, rewritten: dict[str, str]) -> dict:
    import onnx

    from rckit.answering.onnx_backend import FORMAT, REQUIRED
    from rckit.export.onnx import _with_metadata
    from rckit.model_files.metadata import parse_metadata

    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such model file")
    model = onnx.load(str(path))
    text = next((p.value for p in model.metadata_props if p.key == "rckit"), None)
    if text is None:
        raise ValueError(f"{path}: not an rckit ONNX model (no rckit metadata)")
    meta = parse_metadata(text, path, FORMAT, REQUIRED)
    _put(meta, entry)
    source = meta.get("source") or {}
    if source.get("file") in rewritten:
        meta["source"] = {**source, "sha256": rewritten[source["file"]]}
    _with_metadata(model, meta)
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
