"""The CPU fast paths of rckit.kernels against the plain layers, and the state-dict layout they keep."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import torch

from rckit.data.embeddings import EmbeddingInfo
from rckit.models import MODELS

from test_attentive_reader import N_ENT, TINY as TINY_READER
from test_dcn import TINY_DCN, TINY_PLUS
from test_deep_lstm_reader import CLOZE, SPAN
from test_qanet import N_CHARS, N_TRAINABLE, TINY, V

LAYOUT = Path(__file__).parent / "fixtures" / "state_dict_layout.json"


def tiny_models() -> dict[str, torch.nn.Module]:
    """One tiny model of each kind in ``MODELS`` (both heads of the Deep LSTM Reader, both
    stochastic-depth readings of QANet), as the contract tests build them."""
    torch.manual_seed(0)
    span = EmbeddingInfo(word_vectors=torch.randn(V, 12), n_trainable_words=N_TRAINABLE, n_chars=N_CHARS)
    cloze = EmbeddingInfo(word_vectors=torch.randn(V, 10), n_trainable_words=4, n_chars=0, n_entities=N_ENT)
    build = {name: cls for name, (_, cls) in MODELS.items()}
    configs = {name: cfg for name, (cfg, _) in MODELS.items()}
    return {
        "qanet": build["qanet"](TINY, span),
        "qanet:layer_dropout=batch": build["qanet"](replace(TINY, layer_dropout="batch"), span),
        "deep_lstm_reader": build["deep_lstm_reader"](CLOZE, cloze),
        "deep_lstm_reader:span": build["deep_lstm_reader"](SPAN, cloze),
        "attentive_reader": build["attentive_reader"](configs["attentive_reader"](**TINY_READER), cloze),
        "impatient_reader": build["impatient_reader"](configs["impatient_reader"](**TINY_READER), cloze),
        "dcn": build["dcn"](TINY_DCN, span),
        "dcn_plus": build["dcn_plus"](TINY_PLUS, span),
    }


def state_dict_layout() -> dict[str, list[list]]:
    """``{model: [[key, shape], ...]}``; entries that are not tensors (extra state) have shape None."""
    return {name: [[k, list(v.shape) if isinstance(v, torch.Tensor) else None] for k, v in m.state_dict().items()]
            for name, m in tiny_models().items()}


def test_state_dict_layout_is_unchanged_so_old_checkpoints_load():
    expected = json.loads(LAYOUT.read_text())
    assert state_dict_layout() == expected  # same keys, same order, same shapes
    for name, model in tiny_models().items():  # a checkpoint of the fixture's layout is a plain load
        old = {k: torch.zeros(shape) for k, shape in expected[name] if shape is not None}
        extra = {k: v for k, v in model.state_dict().items() if not isinstance(v, torch.Tensor)}
        model.load_state_dict({**old, **extra})


if __name__ == "__main__":  # python tests/test_kernels.py: rewrite the fixture (only when a rename is intended)
    models = [f"  {json.dumps(name)}: [\n" + ",\n".join(f"    {json.dumps(entry)}" for entry in layout) + "\n  ]"
              for name, layout in state_dict_layout().items()]
    LAYOUT.write_text("{\n" + ",\n".join(models) + "\n}\n")
