"""rckit: neural machine reading comprehension (SQuAD, cloze) in PyTorch.

``rckit.answer(context, question)`` answers with the default model; ``rckit.Reader.load(RUN)``
with a trained run or an exported file (:mod:`rckit.answering.reader`); ``rckit.Index.open(PATH)`` asks a
collection of documents (:class:`rckit.retrieval.collection.Collection`). Importing ``rckit`` imports no
torch: ``Reader`` is loaded on first use, so ``rckit score`` stays light.
"""

from __future__ import annotations

import functools
import os

__version__ = "0.1.0"
__all__ = ["Index", "Reader", "answer"]


def __getattr__(name: str):
    if name == "Reader":
        from rckit.answering.reader import Reader

        return Reader
    if name == "Index":  # retrieve, then read: a folder of documents asked as one (rckit.retrieval.collection)
        from rckit.retrieval.collection import Collection

        return Collection
    raise AttributeError(f"module 'rckit' has no attribute {name!r}")


@functools.lru_cache(maxsize=4)
def _reader(source: str):
    from rckit.answering.reader import Reader

    return Reader.load(source)


def answer(context: str, question: str | list[str], top_k: int = 1, model=None) -> list[dict] | list[list[dict]]:
    """The ``top_k`` best answers to ``question`` about ``context`` (:meth:`Reader.answer`).

    ``model``: None (the default model: ``$RCKIT_MODEL`` or the installed ``minilm_reader``), an installed
    model's name (``"dcn"``; ``rckit models`` lists them), a run directory or exported file (loaded
    once and kept), or a :class:`Reader`.
    """
    if model is not None and not isinstance(model, (str, bytes)) and hasattr(model, "answer_batch"):
        reader = model
    else:
        from rckit.model_files.source import open_model

        # Keyed by the path, so a changed $RCKIT_MODEL loads its model rather than the cached one.
        reader = _reader(os.path.abspath(os.fspath(open_model(model).path)))
    return reader.answer(context, question, top_k=top_k)
