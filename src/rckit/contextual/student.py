"""rckit's own small encoder: a student of a few BERT layers that reproduces a teacher's states.

A reader reads two of the teacher's layers (all-MiniLM-L6-v2's 4 and 6, pooled onto words). A
student of ``n`` layers at the teacher's width, with its vocabulary and embeddings, started from
its first ``n`` layers, is trained (:mod:`rckit.training.distill`) so that its last layers give
the states the reader read from the teacher's: student layer ``n - K + k`` stands for teacher
layer ``layers[k]`` (K = 2 of them). It is an encoder like any other: a folder with
``config.json``, ``model.safetensors`` in Hugging Face's BERT names (its matrices in int8, a scale a
row: :func:`packed`; a quarter of the size, what the int8 graph reads) and the teacher's
``tokenizer.json``, read by :func:`rckit.contextual.encoders.find_encoder`, cached and checked by
its digest. ``config.json`` records what it was distilled from (``rckit_student``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch

from rckit.contextual.bert import BertEncoder
from rckit.contextual.bert_names import hf_names_to_ours, ours_to_hf_names
from rckit.contextual.encoders import SCALE, EncoderFiles, encoder_weights, int8_rows


def student_layers(n_layers: int, teacher_layers: tuple[int, ...]) -> tuple[int, ...]:
    """The student's layers that stand for ``teacher_layers``: its last ``len(teacher_layers)``."""
    K = len(teacher_layers)
    if not 1 <= K <= n_layers:
        raise ValueError(
            f"a student of {n_layers} layers cannot stand for the teacher's {K} layers {list(teacher_layers)}"
        )
    return tuple(range(n_layers - K + 1, n_layers + 1))


def student_config(teacher: EncoderFiles, n_layers: int, teacher_layers: tuple[int, ...]) -> dict:
    """The teacher's configuration with ``n_layers`` layers, naming what the student stands for."""
    if not 1 <= n_layers <= teacher.n_layers:
        raise ValueError(f"a student of {n_layers} layers: between 1 and the teacher's {teacher.n_layers}")
    return {
        **{k: v for k, v in teacher.config.items() if k != "_name_or_path"},  # not the teacher's name
        "num_hidden_layers": n_layers,
        "rckit_student": {
            "teacher": teacher.name,
            "teacher_digest": teacher.digest,
            "teacher_layers": list(teacher_layers),
            "layers": list(student_layers(n_layers, teacher_layers)),
        },
    }


def new_student(teacher: EncoderFiles, config: dict) -> BertEncoder:
    """A student of ``config`` started from the teacher's embeddings and first layers."""
    ours = hf_names_to_ours({k: torch.from_numpy(v) for k, v in encoder_weights(teacher.root).items()})
    model = BertEncoder(config)
    model.load_state_dict({k: v for k, v in ours.items() if k in model.state_dict()})
    return model


def packed(state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A state in Hugging Face's names with every matrix in int8, a scale a row beside it
    (:func:`rckit.contextual.encoders.encoder_weights` reads it back): the embeddings' rows in 8 bits,
    the weights' output channels in 7 (what the encoder's int8 graph multiplies by:
    :func:`rckit.contextual.onnx_runner.build_graph`); vectors stay float32."""
    out = {}
    for name, value in state.items():
        if value.ndim == 2:
            out[name], out[name + SCALE] = int8_rows(value, 127 if name.startswith("embeddings.") else 63)
        else:
            out[name] = np.ascontiguousarray(value, np.float32)
    return out


def save_student(model: BertEncoder, config: dict, teacher: EncoderFiles, out: str | Path) -> Path:
    """The student as an encoder folder at ``out``, its weights :func:`packed` in int8 (its three
    files replaced whole, the weights last)."""
    from safetensors.numpy import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    state = packed({k: v.detach().float().numpy() for k, v in ours_to_hf_names(model.state_dict()).items()})
    for name, write in (
        ("tokenizer.json", lambda f: shutil.copyfile(teacher.root / "tokenizer.json", f)),
        ("config.json", lambda f: f.write_text(json.dumps(config, indent=1))),
        ("model.safetensors", lambda f: save_file(state, str(f))),
    ):
        tmp = out / (name + ".tmp")
        write(tmp)
        tmp.replace(out / name)
    return out
