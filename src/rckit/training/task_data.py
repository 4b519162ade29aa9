"""What a model reads, by its task: prepared SQuAD for a span model, a cloze directory for a
cloze model (``task_of`` of its contract, :class:`rckit.models.contract.ReadingModel`)."""

from __future__ import annotations

from collections.abc import Sequence

from rckit.data.cloze.dataset import ClozeData, load_cloze_data
from rckit.data.prepare import Prepared
from rckit.data.sources import DataSource, prepare_data
from rckit.data.vocab import DEFAULT_EMBEDDINGS


def cloze_data(source: DataSource, seed: int) -> ClozeData:
    """The cloze directory of ``source``, its vectors drawn with ``seed`` where GloVe lacks a word."""
    if not source.cloze:
        raise ValueError("a cloze model needs --cloze-data DIR (e.g. from `rckit prepare squad-cloze --out DIR`)")
    return load_cloze_data(source.cloze, embeddings=source.embeddings or DEFAULT_EMBEDDINGS, seed=seed)


def task_data(kind: str, source: DataSource, seed: int = 0, overrides: Sequence[str] = ()) -> Prepared | ClozeData:
    """What a model of task ``kind`` (``span`` or ``cloze``) reads from ``source``; ``overrides``:
    the data preparation's ``FIELD=VALUE`` settings (span), ``seed``: the cloze vectors' (cloze)."""
    return cloze_data(source, seed) if kind == "cloze" else prepare_data(source, overrides)
