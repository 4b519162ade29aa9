"""Model names -> (config dataclass, model class): the one literal table of models.

Presets (a model's settings by name) are found and resolved in :mod:`rckit.presets`.
"""

from __future__ import annotations

from rckit.config import from_dict
from rckit.models.attentive_reader import AttentiveReader, AttentiveReaderConfig, ImpatientReader, ImpatientReaderConfig
from rckit.models.dcn import DCN, DCNConfig, DCNPlus, DCNPlusConfig
from rckit.models.deep_lstm_reader import DeepLSTMReader, DeepLSTMReaderConfig
from rckit.models.qanet import QANet, QANetConfig

MODELS = {
    "qanet": (QANetConfig, QANet),
    "deep_lstm_reader": (DeepLSTMReaderConfig, DeepLSTMReader),
    "attentive_reader": (AttentiveReaderConfig, AttentiveReader),
    "impatient_reader": (ImpatientReaderConfig, ImpatientReader),
    "dcn": (DCNConfig, DCN),
    "dcn_plus": (DCNPlusConfig, DCNPlus),
}

# Fields files written by older versions carry, with the one value they could hold; dropped on reading.
RETIRED = {"extra_dim": 0}  # DCN's, before `contextual` replaced it


def model_config(name: str, saved: dict) -> object:
    """Model ``name``'s config from the dict a model file or a run saved (:data:`RETIRED` fields dropped)."""
    kept = {k: v for k, v in saved.items() if not (k in RETIRED and v == RETIRED[k])}
    return from_dict(MODELS[name][0], kept)
