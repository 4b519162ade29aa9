"""The contextual setting's one shape: a model file's record read into a ContextualSpec and written
back unchanged, for every installed model file and for an ONNX file's record with its int8 flag."""

from __future__ import annotations

import pytest

from rckit.contextual.spec import ContextualSpec
from rckit.model_files.metadata import contextual_of, read_metadata
from rckit.model_files.reader_file import is_reader_file
from rckit.model_files.source import INSTALLED

# Every installed span model's file (rckit's own reader reads no states beside words: it is the encoder)
SPAN_FILES = sorted(p for p in INSTALLED.glob("*.safetensors") if not is_reader_file(p))


@pytest.mark.parametrize("path", SPAN_FILES, ids=lambda p: p.name)
def test_every_installed_file_s_record_reads_and_writes_back_unchanged(path):
    meta = read_metadata(path)
    record = meta["embedding"].get("contextual")
    spec = contextual_of(meta)
    if record is None:
        assert spec is None
        return
    assert spec.to_json() == record and list(spec.to_json()) == list(record)  # the same keys, in the same order
    assert spec.int8 is None and "int8" not in spec.to_json()  # a .safetensors file runs no encoder graph


@pytest.mark.parametrize("int8", [False, True])
def test_an_onnx_record_keeps_its_int8_flag(int8):
    record = {"name": "minilm", "layers": [4, 6], "digest": "0f1e8d9e8ca86cc7", "max_pieces": 256, "dim": 384}
    spec = ContextualSpec.from_json({**record, "int8": int8})
    assert spec.int8 is int8 and spec.to_json() == {**record, "int8": int8}
    assert ContextualSpec.from_json(None) is None


def test_layers_are_ints_in_a_tuple_and_same_reading_ignores_what_attaching_learns():
    spec = ContextualSpec("minilm", [4, 6])
    assert spec.layers == (4, 6) and hash(spec) == hash(ContextualSpec("minilm", (4, 6)))
    attached = ContextualSpec("minilm", (4, 6), "0f1e8d9e8ca86cc7", 256, 384)
    assert spec.reads_same(attached) and not spec.reads_same(ContextualSpec("minilm", (6,)))
    assert not spec.reads_same(ContextualSpec("minilm-l2", (4, 6))) and not spec.reads_same(None)
