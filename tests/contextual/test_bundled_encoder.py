"""rckit's own encoder, ``minilm-l2``: shipped inside rckit, found by name with no weights package,
distilled (its states stand nearer the teacher's than the teacher's own first layers do), and named
by that name in a model file trained on a folder copy of it."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
from safetensors import safe_open

from rckit.contextual.encoders import ENCODERS, encoder_weights, find_encoder, portable
from rckit.contextual.spec import ContextualSpec
from rckit.contextual.states import ContextualEncoder
from rckit.data.tokenize import tokenize

TEXTS = [
    "Jean-Francois Champollion deciphered the Egyptian hieroglyphs in 1822, reading the Rosetta Stone.",
    "Which river flows through the city of Warsaw before it reaches the Baltic Sea?",
    "The committee approved the budget after a long debate that lasted until midnight.",
]


def test_the_student_ships_inside_rckit_and_is_found_by_name_without_a_package():
    files = find_encoder("minilm-l2")
    assert ENCODERS["minilm-l2"].install == "rckit"
    assert files.root.parts[-3:] == ("bundled", "encoders", "minilm-l2")
    assert files.n_layers == 2 and files.dim == 384
    student = files.config["rckit_student"]
    assert student["teacher"] == "minilm" and student["teacher_layers"] == [4, 6]
    weights = encoder_weights(files.root)
    with safe_open(files.root / "model.safetensors", "np") as f:
        stored = {k: f.get_slice(k).get_dtype() for k in f.keys()}
    assert stored["encoder.layer.0.attention.self.query.weight"] == "I8"  # int8 on disk
    assert all(w.dtype == np.float32 for w in weights.values())  # read back as float
    assert sum(p.stat().st_size for p in files.root.iterdir()) < 20 * 2**20
    assert (files.root / "LICENSE").is_file() and "Apache" in (files.root / "NOTICE").read_text()


def states(name: str, layers: tuple[int, ...]) -> list[np.ndarray]:
    encoder = ContextualEncoder.load(ContextualSpec(name, layers))
    offsets = [np.array(tokenize(text)[1]) for text in TEXTS]
    return encoder.states(TEXTS, offsets)


def test_the_students_states_are_nearer_the_teachers_than_the_teachers_own_first_layers():
    teacher = np.concatenate(states("minilm", (4, 6)))
    student = np.concatenate(states("minilm-l2", (1, 2)))
    cut = np.concatenate(states("minilm", (1, 2)))  # what the student started from
    for k in range(2):
        distilled = float(((student[:, k] - teacher[:, k]) ** 2).mean())
        undistilled = float(((cut[:, k] - teacher[:, k]) ** 2).mean())
        assert distilled < 0.6 * undistilled, (k, distilled, undistilled)


def test_a_model_file_names_a_folder_copy_of_a_known_encoder_by_its_name(tmp_path):
    files = find_encoder("minilm-l2")
    copy = tmp_path / "my-student"
    shutil.copytree(files.root, copy)
    spec = ContextualSpec(str(copy), (1, 2), find_encoder(str(copy)).digest, 256, 384)
    assert portable(spec) == replace(spec, name="minilm-l2")
    (copy / "config.json").write_text(json.dumps({**files.config, "note": "changed"}))
    other = replace(spec, digest=find_encoder(str(copy)).digest)
    assert portable(other) == other  # another encoder's files keep their folder's name
    assert portable(None) is None
