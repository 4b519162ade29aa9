"""Model names -> (config dataclass, model class), and presets.

A preset is a small JSON file ``presets/<model>-<name>.json`` of the form
``{"model": {config fields}, "train": {TrainConfig fields}, "decode": {DecodeConfig fields}}``
(``decode`` optional); ``--set model.x=..``, ``--set train.y=..`` or ``--set decode.z=..``
overrides single fields after it.
"""

from __future__ import annotations

from pathlib import Path

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

PRESET_DIR = Path(__file__).resolve().parent.parent / "presets"


def preset_path(model: str, preset: str) -> Path:
    """A preset by name (``paper``) or by file path."""
    p = Path(preset)
    if p.suffix in (".json", ".toml") and p.exists():
        return p
    p = PRESET_DIR / f"{model}-{preset}.json"
    if not p.exists():
        names = sorted(q.stem.split("-", 1)[1] for q in PRESET_DIR.glob(f"{model}-*.json"))
        raise ValueError(f"no preset {preset!r} for {model}; available: {', '.join(names) or 'none'}")
    return p
