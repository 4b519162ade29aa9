"""Model names -> (config dataclass, model class): the one literal table of models.

Presets (a model's settings by name) are found and resolved in :mod:`rckit.presets`.
"""

from __future__ import annotations

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
