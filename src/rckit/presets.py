"""Presets: finding, listing and resolving them, with ``--set`` overrides.

A preset is a small JSON (or TOML) file ``preset_files/<model>-<name>.json`` of the form
``{"model": {config fields}, "train": {TrainConfig fields}, "decode": {DecodeConfig fields}}``
(``decode`` optional); ``--set model.x=..``, ``--set train.y=..``, ``--set decode.z=..`` or
``--set data.w=..`` (data preparation, :class:`rckit.data.prepare.PrepareConfig`) overrides
single fields after it.

Listing presets reads file names only: ``rckit --help`` lists them without importing PyTorch,
which the model configs (:data:`rckit.models.MODELS`) bring; the functions that build configs
import them when called.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

from rckit.answering.decoding import DecodeConfig
from rckit.config import apply_overrides, from_dict, load_preset
from rckit.training.config import TrainConfig

PRESET_DIR = Path(__file__).resolve().parent / "preset_files"
SECTIONS = ("model", "train", "decode")


def models_and_presets() -> dict[str, list[str]]:
    """{model name: preset names}, read from the preset files (``<model>-<preset>.json``)."""
    found: dict[str, list[str]] = {}
    for f in sorted(PRESET_DIR.glob("*-*.json")):
        model, preset = f.stem.split("-", 1)
        found.setdefault(model, []).append(preset)
    return found


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


def model_config_class(model: str) -> type:
    """The config dataclass of ``model``, or a ValueError naming the models there are."""
    from rckit.models import MODELS  # imports PyTorch: here, not at the top (see the module docstring)

    if model not in MODELS:
        raise ValueError(f"no model named {model!r}; available: {', '.join(sorted(MODELS))}")
    return MODELS[model][0]


def run_configs(model: str, preset: str | None, overrides: list[str]):
    """(model config, train config, decode config) from a preset and ``--set`` overrides.

    A preset has up to three sections, ``model``, ``train`` and ``decode``. Keys are
    ``model.FIELD``, ``train.FIELD``, ``decode.FIELD`` or ``data.FIELD`` (data preparation,
    left to :func:`data_overrides`); a bare ``FIELD`` goes to the model config if it has that
    field, else to the decode config if it has it, else to the training config.
    """
    mcfg, tcfg, dcfg = model_config_class(model)(), TrainConfig(), DecodeConfig()
    if preset:
        data = load_preset(preset_path(model, preset))
        unknown = set(data) - set(SECTIONS)
        if unknown:
            raise ValueError(f"preset {preset!r}: unknown sections {sorted(unknown)} (expected model, train, decode)")
        refuse_moved(data.get("train", {}), f"preset {preset!r}: train.")
        mcfg = apply_overrides(mcfg, data.get("model", {}))
        tcfg = apply_overrides(tcfg, data.get("train", {}))
        dcfg = apply_overrides(dcfg, data.get("decode", {}))
    over: dict[str, list[str]] = {section: [] for section in SECTIONS}
    for o in overrides:
        key = o.split("=", 1)[0].strip()
        section, _, field = key.partition(".")
        if section == "data":
            continue  # PrepareConfig: data_overrides
        if section in over and field:
            over[section].append(o[len(section) + 1 :])
        elif section in field_names(mcfg):
            over["model"].append(o)
        elif section in field_names(dcfg):
            over["decode"].append(o)
        else:
            over["train"].append(o)
    refuse_moved({o.split("=", 1)[0].strip(): None for o in over["train"]}, "--set train.")
    return (
        apply_overrides(mcfg, over["model"]),
        apply_overrides(tcfg, over["train"]),
        apply_overrides(dcfg, over["decode"]),
    )


def model_configs(model: str, preset: str | None, overrides: list[str]):
    """(model config, train config): :func:`run_configs` without the decode settings."""
    mcfg, tcfg, _ = run_configs(model, preset, overrides)
    return mcfg, tcfg


def data_overrides(overrides: list[str]) -> list[str]:
    """The ``data.FIELD=VALUE`` overrides among a run's ``--set`` keys, as PrepareConfig's ``FIELD=VALUE``."""
    return [o[len("data.") :] for o in overrides if o.startswith("data.")]


def refuse_moved(train_settings: dict, where: str) -> None:
    """``max_answer_len`` was a training setting; say where it went rather than 'unknown setting'."""
    if "max_answer_len" in train_settings:
        raise ValueError(f"{where}max_answer_len: answer decoding has its own section now: use decode.max_answer_len")


def field_names(cfg) -> set[str]:
    return {f.name for f in fields(cfg)}


def saved_configs(model: str, path: Path):
    """(model, train, decode configs) a run was started with, from its ``config.json``: what
    ``--resume`` without ``--preset``/``--set`` continues with."""
    saved = json.loads(path.read_text())
    if saved.get("model") != model:
        raise ValueError(f"{path}: this run trains {saved.get('model')!r}, not {model!r}")
    model_config_class(model)  # a known model, or the error naming them
    from rckit.models import model_config

    # A setting added since the run was written is absent from its file: the run had its default.
    return (
        model_config(model, saved["model_config"]),
        from_dict(TrainConfig, saved["train_config"]),
        from_dict(DecodeConfig, saved.get("decode") or {}),
    )
