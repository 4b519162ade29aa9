"""The contextual setting, one shape from a model's config to its file and back.

A model that reads an encoder's states beside its word vectors names the encoder and the layers it
mixes in its config (``contextual``, ``contextual_layers``: ``ReadingModel.contextual_of``); the
task that attaches the encoder learns its digest, window and width; the model's file keeps all of
it as ``embedding.contextual`` (:meth:`ContextualSpec.to_json`), and an ONNX file adds whether the
encoder's graph runs in int8. Reading a file back (:meth:`ContextualSpec.from_json`) gives the same
spec, so the Reader loads the very encoder the model was trained with.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ContextualSpec:
    """What a model reads: encoder ``name`` (a known name or a folder) and which of its layers
    (0 = embeddings), mixed by the model. Known once the encoder is attached, and kept in the
    model's file: ``digest`` (the encoder a model was trained with; another is refused),
    ``max_pieces`` (the encoder's window; None: the default) and ``dim`` (the width of its
    states). ``int8``: in an ONNX file, whether the encoder runs quantized to int8 (None elsewhere)."""

    name: str
    layers: tuple[int, ...]
    digest: str | None = None
    max_pieces: int | None = None
    dim: int | None = None
    int8: bool | None = None

    def __post_init__(self):
        object.__setattr__(self, "layers", tuple(int(k) for k in self.layers))

    @classmethod
    def from_json(cls, record: dict | None) -> ContextualSpec | None:
        """The spec of a model file's ``embedding.contextual`` record, or None for a model that reads none."""
        if record is None:
            return None
        int8 = record.get("int8")
        return cls(
            record["name"],
            tuple(record["layers"]),
            record.get("digest"),
            record.get("max_pieces"),
            record.get("dim"),
            None if int8 is None else bool(int8),
        )

    def to_json(self) -> dict:
        """The record a model file keeps (key order as files have always had it; ``int8`` only where set)."""
        record = {
            "name": self.name,
            "layers": list(self.layers),
            "digest": self.digest,
            "max_pieces": self.max_pieces,
            "dim": self.dim,
        }
        if self.int8 is not None:
            record["int8"] = self.int8
        return record

    def reads_same(self, other: ContextualSpec | None) -> bool:
        """Whether ``other`` names the same encoder and layers (what a task's attached states are checked by)."""
        return other is not None and (other.name, other.layers) == (self.name, self.layers)
