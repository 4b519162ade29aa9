"""A verifier (:mod:`rckit.answering.verifier`) put into an exported model file, ``.safetensors``
or ``.onnx``, or taken out of it: the file's rckit metadata gets (or loses) its ``verifier``
entry and everything else is written back unchanged, whole or not at all
(:func:`rckit.export.metadata_edit.edit_metadata`)."""

from __future__ import annotations

from pathlib import Path

from rckit.answering.verifier import Verifier
from rckit.export.metadata_edit import edit_metadata


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
