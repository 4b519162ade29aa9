"""Where a command's data comes from: :class:`DataSource`, the SQuAD files it names, and the
prepared cache built from them.

The SQuAD files given (``train``/``dev``) are used as they are; a split not given is found in
``data_dir`` (else ``$RCKIT_DATA``), the cache, or downloaded (:func:`rckit.data.download.resolve_squad_files`).
This module imports no PyTorch: ``rckit prepare squad`` does not need it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rckit.config import apply_overrides
from rckit.data.download import default_cache_dir, resolve_squad_files
from rckit.data.prepare import PrepareConfig, Prepared, prepare_squad


@dataclass(frozen=True)
class DataSource:
    """The data a command reads: SQuAD files (or where to find them), the cache, the pretrained
    vectors, and for a cloze model its directory."""

    train: str | Path | None = None  # SQuAD training file; None: the official one
    dev: str | Path | None = None  # SQuAD evaluation file; None: the official one
    data_dir: str | Path | None = None  # holds train-v1.1*/dev-v1.1*/dev-v2.0* files, used instead of downloading
    version: str = "1.1"  # SQuAD version of the official files
    cache_dir: str | Path | None = None  # downloads and prepared data (None: $RCKIT_CACHE or ~/.cache/rckit)
    embeddings: str | Path | None = None  # GloVe text file (None: the glove-6b-50d package)
    char_embeddings: str | Path | None = None  # GloVe-format character vectors
    cloze: str | Path | None = None  # a cloze model's data directory


def squad_files(source: DataSource, versions: tuple[str, str] | None = None) -> tuple[Path, Path]:
    """The (training, evaluation) SQuAD files of ``source``, absolute, so that a run records where
    its data is whatever directory it is later used from.

    ``versions``: the (training, evaluation) versions of the official files for a split not
    given (default: ``source.version`` for both). A file that is not there is a FileNotFoundError
    naming its flag.
    """
    versions = versions or (source.version, source.version)
    given = {"train": source.train, "dev": source.dev}
    for split, version in zip(given, versions):
        if given[split] is None:
            given[split] = resolve_squad_files(
                version, data_dir=source.data_dir, cache_dir=source.cache_dir, splits=(split,)
            )[split]
    for split, f in given.items():
        if not Path(f).is_file():
            raise FileNotFoundError(f"--{split} file not found: {f}")
    return Path(given["train"]).resolve(), Path(given["dev"]).resolve()


def prepare_data(
    source: DataSource, overrides: Sequence[str] = (), out: str | Path | None = None, rebuild: bool = False
) -> Prepared:
    """SQuAD of ``source`` tokenized, indexed and cached (:func:`rckit.data.prepare.prepare_squad`).

    ``overrides``: ``FIELD=VALUE`` settings of :class:`PrepareConfig`. ``out``: where the cache
    goes (default: ``<cache dir>/prepared``). ``rebuild``: even if a cached copy exists.
    """
    cfg = PrepareConfig()
    if source.embeddings:
        cfg.embeddings = str(Path(source.embeddings).resolve())
    if source.char_embeddings:
        cfg.char_embeddings = str(Path(source.char_embeddings).resolve())
    cfg = apply_overrides(cfg, list(overrides))
    train, dev = squad_files(source)
    out = Path(out) if out else default_cache_dir(source.cache_dir) / "prepared"
    prepared = prepare_squad(train, {"dev": dev}, out.resolve(), cfg, rebuild=rebuild)
    # A cached copy keeps the paths of the command that built it (maybe relative to another
    # directory); its key holds the files' digests, so the files given now are the same data.
    for name, f in (("train", train), ("dev", dev)):
        prepared.meta["splits"][name]["file"] = str(f)
    return prepared
