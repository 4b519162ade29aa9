"""The contextual states of a split's contexts and questions, on disk: built once, read by every epoch.

A split's states are two fp16 arrays aligned with its token arrays: ``ctx`` (N, K, D) row ``j``
the state of context token ``j`` (``ctx_forms[j]``), ``q`` (Nq, K, D) likewise for question tokens,
K the layers a model mixes, D the encoder's width. They are ``.npy`` files opened memory-mapped, so
a batch gathers its rows from the page cache and an epoch never runs the encoder again.

Where: ``root/<encoder>-L<layers>-<texts>/`` with ``meta.json``, ``<texts>`` the digest of the
split's texts and token offsets (the same texts tokenized alike share a cache). ``meta.json``
names the encoder's digest: a cache built with another encoder under the same name is refused,
not used. Building is resumable: contexts and questions are written in chunks and ``meta.json``
records how far it got (written atomically after each chunk is flushed), so a killed build goes on
where it stopped; ``complete`` is set last.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from rckit.contextual.states import ContextualEncoder

STATES_VERSION = 1
CHUNK_CONTEXTS = 256
CHUNK_QUESTIONS = 2048


@dataclass
class SplitTexts:
    """What the states are computed from: contexts and questions with their tokens' character spans
    (pointers into flat (N, 2) offset arrays, as a prepared split holds them)."""

    contexts: list[str]
    ctx_ptr: np.ndarray  # (n_ctx + 1,)
    ctx_offsets: np.ndarray  # (N, 2)
    questions: list[str]
    q_ptr: np.ndarray  # (n_q + 1,)
    q_offsets: np.ndarray  # (Nq, 2)

    def digest(self) -> str:
        h = hashlib.sha256()
        for texts, ptr, offsets in (
            (self.contexts, self.ctx_ptr, self.ctx_offsets),
            (self.questions, self.q_ptr, self.q_offsets),
        ):
            h.update(json.dumps(texts).encode())
            h.update(np.ascontiguousarray(ptr, np.int64).tobytes())
            h.update(np.ascontiguousarray(offsets, np.int64).tobytes())
        return h.hexdigest()[:16]


@dataclass
class SplitStates:
    """(N, K, D) and (Nq, K, D) fp16 arrays, memory-mapped, aligned with a split's token arrays."""

    ctx: np.ndarray
    q: np.ndarray
    path: Path


class StatesError(ValueError):
    """A cache of states that cannot be used: another encoder's, another version's, or damaged."""


def cache_dir(root: str | Path, encoder: ContextualEncoder, texts: SplitTexts) -> Path:
    name = encoder.files.name
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):  # a folder given as the encoder: name it by its path
        name = "folder-" + hashlib.sha256(str(encoder.files.root).encode()).hexdigest()[:8]
    layers = "-".join(str(layer) for layer in encoder.layers)
    return Path(root) / f"{name}-L{layers}-p{encoder.max_pieces}-{texts.digest()}"


def split_states(
    root: str | Path, texts: SplitTexts, encoder: ContextualEncoder, progress: bool = True, what: str = ""
) -> SplitStates:
    """The states of ``texts`` under ``root``: read if built, else built (or finished, if a build
    was cut short) with a progress bar on stderr naming ``what``."""
    path = cache_dir(root, encoder, texts)
    meta = read_meta(path)
    K, D = len(encoder.layers), encoder.dim
    shapes = {"ctx": (len(texts.ctx_offsets), K, D), "q": (len(texts.q_offsets), K, D)}
    want = {
        "version": STATES_VERSION,
        "encoder": encoder.files.name,
        "encoder_digest": encoder.files.digest,
        "layers": list(encoder.layers),
        "max_pieces": encoder.max_pieces,
        "texts": texts.digest(),
        "shapes": {k: list(v) for k, v in shapes.items()},
    }
    if meta is not None:
        for k, v in want.items():
            if meta.get(k) != v:
                raise StatesError(
                    f"{path}: a cache of contextual states built with {k} {meta.get(k)!r}, and this "
                    f"reads {v!r}: not used (delete the folder, or rckit prepare ... --rebuild)"
                )
        if meta.get("complete"):
            return SplitStates(*(open_array(path / f"{k}.npy", shapes[k], "r") for k in ("ctx", "q")), path)
    else:
        path.mkdir(parents=True, exist_ok=True)
        for k, shape in shapes.items():
            np.lib.format.open_memmap(path / f"{k}.npy", mode="w+", dtype=np.float16, shape=shape).flush()
        meta = {**want, "done_contexts": 0, "done_questions": 0, "complete": False}
        write_meta(path, meta)
    ctx, q = (open_array(path / f"{k}.npy", shapes[k], "r+") for k in ("ctx", "q"))
    n_ctx, n_q = len(texts.contexts), len(texts.questions)
    with tqdm(
        total=n_ctx + n_q,
        initial=meta["done_contexts"] + meta["done_questions"],
        unit="text",
        desc=f"contextual states{' of ' + what if what else ''}",
        file=sys.stderr,
        disable=None if progress else True,
    ) as bar:
        for kind, n, chunk, ptr, offsets, strings, out in (
            ("contexts", n_ctx, CHUNK_CONTEXTS, texts.ctx_ptr, texts.ctx_offsets, texts.contexts, ctx),
            ("questions", n_q, CHUNK_QUESTIONS, texts.q_ptr, texts.q_offsets, texts.questions, q),
        ):
            while meta[f"done_{kind}"] < n:
                lo = meta[f"done_{kind}"]
                hi = min(n, lo + chunk)
                got = encoder.states(strings[lo:hi], [offsets[ptr[i] : ptr[i + 1]] for i in range(lo, hi)])
                if got:
                    out[ptr[lo] : ptr[hi]] = np.concatenate(got).astype(np.float16)
                out.flush()
                meta[f"done_{kind}"] = hi
                write_meta(path, meta)
                bar.update(hi - lo)
    meta["complete"] = True
    write_meta(path, meta)
    del ctx, q
    return SplitStates(*(open_array(path / f"{k}.npy", shapes[k], "r") for k in ("ctx", "q")), path)


def read_meta(path: Path) -> dict | None:
    f = path / "meta.json"
    if not f.exists():
        return None
    try:
        return json.loads(f.read_text())
    except ValueError:
        raise StatesError(f"{f}: damaged (not JSON); delete {path} to build it again") from None


def write_meta(path: Path, meta: dict) -> None:
    tmp = path / "meta.json.tmp"
    tmp.write_text(json.dumps(meta, indent=1))
    os.replace(tmp, path / "meta.json")


def open_array(f: Path, shape: tuple, mode: str) -> np.ndarray:
    try:
        a = np.load(f, mmap_mode=mode)
    except (OSError, ValueError) as e:
        raise StatesError(f"{f}: damaged ({e}); delete {f.parent} to build it again") from None
    if a.shape != tuple(shape) or a.dtype != np.float16:
        raise StatesError(
            f"{f}: holds {a.dtype} {a.shape}, expected float16 {tuple(shape)}; delete {f.parent} to build it again"
        )
    return a
