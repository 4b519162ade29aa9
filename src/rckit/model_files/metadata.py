"""The header of an exported ``.safetensors`` model (:mod:`rckit.export.safetensors`), read without
PyTorch: what ``rckit models`` lists and what a light install (onnxruntime only) can say of a
model file it cannot run."""

from __future__ import annotations

import json
import os
from pathlib import Path

from rckit.contextual.spec import ContextualSpec
from rckit.model_files.errors import CheckpointError

FORMAT = "rckit-export-1"
_MAX_HEADER = 100 * 2**20  # safetensors' own limit


def contextual_of(meta: dict) -> ContextualSpec | None:
    """What a model file says of the contextual encoder its model reads (its ``embedding.contextual``
    record: :class:`rckit.contextual.spec.ContextualSpec`), or None for a model that reads none."""
    return ContextualSpec.from_json((meta.get("embedding") or {}).get("contextual"))


def read_metadata(
    path: str | Path,
    fmt: str = FORMAT,
    required: tuple[str, ...] = ("model", "model_config", "vocab", "embedding", "frozen_rows"),
) -> dict:
    """The rckit metadata of an exported file, after checking that the file is whole; ``fmt`` and
    ``required``: the format it must be and the keys it must hold (a span model's by default).

    Reads only the header (no tensors, no torch): what ``rckit models`` lists.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such model file")
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{path}: not an rckit model file ({size} bytes, too short for a safetensors header)")
        n = int.from_bytes(head, "little")
        if n > min(size - 8, _MAX_HEADER):
            what = (
                "a PyTorch checkpoint, not an exported model"
                if head[:2] == b"PK"
                else "truncated, or not a safetensors file"
            )
            raise CheckpointError(
                f"{path}: not a readable rckit model file ({what}: its header claims {n:,} "
                f"bytes of a {size:,}-byte file)"
            )
        try:
            header = json.loads(fh.read(n).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            header = None
    not_json = CheckpointError(f"{path}: not a readable rckit model file (its header is not safetensors JSON)")
    if not isinstance(header, dict):
        raise not_json
    try:
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    except (TypeError, KeyError, IndexError, ValueError):
        raise not_json from None
    if 8 + n + end != size:
        raise CheckpointError(
            f"{path}: truncated or damaged ({size:,} bytes where its header says {8 + n + end:,}, "
            "as after a copy cut short)"
        )
    text = (header.get("__metadata__") or {}).get("rckit")
    if text is None:
        raise CheckpointError(f"{path}: not an rckit model file (a safetensors file without rckit's metadata)")
    return parse_metadata(text, path, fmt, required)


def parse_metadata(text: str, path: Path, fmt: str, required: tuple[str, ...]) -> dict:
    """rckit's metadata JSON of a model file (``.safetensors`` or ``.onnx``), checked: JSON, the
    ``format`` ``fmt``, every key of ``required``; else a one-line :class:`CheckpointError`."""
    try:
        meta = json.loads(text)
    except json.JSONDecodeError:
        raise CheckpointError(f"{path}: damaged rckit metadata (not JSON)") from None
    if not isinstance(meta, dict) or meta.get("format") != fmt:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise CheckpointError(
            f"{path}: rckit model format {found!r}, expected {fmt!r} (written by another version of rckit)"
        )
    missing = [k for k in required if k not in meta]
    if missing:
        raise CheckpointError(f"{path}: rckit metadata is missing {missing}")
    return meta


def as_created(path: str | Path) -> None:
    """Give a file from ``tempfile.mkstemp`` or safetensors (private, 0600) the permissions ``open()`` would have
    given it (0666 less the umask): an exported model is an ordinary file others may read."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)
