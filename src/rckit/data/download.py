"""Find the SQuAD JSON files: a local data directory first, then a verified cache, then a download.

Order of lookup for each split (see :func:`resolve_squad_files`):

1. ``data_dir`` (or ``$RCKIT_DATA``): any ``{split}-v{version}*.json`` / ``*.json.gz``, used as
   it is. Local files are not checksummed because they may legitimately differ from the
   official bytes (``train-v1.1.reconstructed.json.gz`` in ``../shared/data`` is one).
2. ``{cache_dir or $RCKIT_CACHE or ~/.cache/rckit}/squad/{split}-v{version}.json``, used only
   if its size and SHA-256 match the official file.
3. A download from ``base_url`` (or ``$RCKIT_SQUAD_URL``, default the official SQuAD explorer),
   streamed to a temporary file in the cache directory, verified, then renamed into place, so
   a cache entry is either absent or complete and correct.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import secrets
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from rckit.data.prepare import file_digest

log = logging.getLogger(__name__)

OFFICIAL_URL = "https://rajpurkar.github.io/SQuAD-explorer/dataset"
SPLITS = ("train", "dev")
VERSIONS = ("1.1", "2.0")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class SquadFile:
    name: str  # file name under OFFICIAL_URL and in the cache
    size: int  # bytes
    sha256: str


# Sizes and SHA-256 of the official files, keyed by (version, split).
# Each value was read from two independent records that agree:
#   [TFDS] tensorflow/datasets, tensorflow_datasets/datasets/squad/checksums.tsv
#          (commit 9a3caa6e17907b8987576f5a1bee4bac77e829d5); the v1.1 rows also appear in
#          tensorflow_datasets/url_checksums/squad.txt.
#   [HF]   huggingface/datasets, datasets/squad/dataset_infos.json and
#          datasets/squad_v2/dataset_infos.json (commit 040102f100964a33fd334e2695f1c493fa6b92db),
#          "download_checksums" of the same URLs.
# dev-v1.1 was also verified here by hashing ../shared/data/squad-v1.1/dev-v1.1.json.gz
# uncompressed (byte-identical official file, see ../shared/data/SOURCES.md). The other three
# are not on this machine, so their values rest on [TFDS] + [HF] only (ParlAI's squad/squad2
# build.py lists the same three digests).
SQUAD_FILES: dict[tuple[str, str], SquadFile] = {
    ("1.1", "train"): SquadFile(  # [TFDS] [HF]
        "train-v1.1.json", 30_288_272, "3527663986b8295af4f7fcdff1ba1ff3f72d07d61a20f487cb238a6ef92fd955"
    ),
    ("1.1", "dev"): SquadFile(  # [TFDS] [HF], and hashed locally
        "dev-v1.1.json", 4_854_279, "95aa6a52d5d6a735563366753ca50492a658031da74f301ac5238b03966972c9"
    ),
    ("2.0", "train"): SquadFile(  # [TFDS] [HF]
        "train-v2.0.json", 42_123_633, "68dcfbb971bd3e96d5b46c7177b16c1a4e7d4bdef19fb204502738552dede002"
    ),
    ("2.0", "dev"): SquadFile(  # [TFDS] [HF]
        "dev-v2.0.json", 4_370_528, "80a5225e94905956a6446d296ca1093975c4d3b3260f1d6c8f68bc2ab77182d8"
    ),
}


class DownloadError(RuntimeError):
    """A SQuAD file could not be fetched."""


class ChecksumError(DownloadError):
    """A downloaded file does not match the official size or SHA-256."""


def normalize_version(version: str) -> str:
    """``"1.1"``, ``"v1.1"``, ``"2.0"``, ``"v2.0"`` -> ``"1.1"`` / ``"2.0"``."""
    v = str(version).strip().lower().removeprefix("v")
    if v not in VERSIONS:
        raise ValueError(f"unknown SQuAD version {version!r}; expected one of 1.1, v1.1, 2.0, v2.0")
    return v


def find_local_file(data_dir: str | Path, split: str, version: str) -> Path | None:
    """The file in ``data_dir`` for ``split`` of SQuAD ``version``, or None.

    Candidates are files whose name starts with ``{split}-v{version}`` and ends in ``.json`` or
    ``.json.gz`` (so ``train-v1.1.reconstructed.ambiguous.tsv.gz`` is not one). If several
    match, the official name wins (``dev-v1.1.json``, then ``dev-v1.1.json.gz``); otherwise
    the lexicographically first name is taken, so the choice never depends on the file system.
    """
    data_dir = Path(data_dir)
    prefix = f"{split}-v{normalize_version(version)}"
    if not data_dir.is_dir():
        return None
    names = sorted(
        p.name
        for p in data_dir.iterdir()
        if p.is_file() and p.name.startswith(prefix) and p.name.endswith((".json", ".json.gz"))
    )
    for preferred in (f"{prefix}.json", f"{prefix}.json.gz"):
        if preferred in names:
            return data_dir / preferred
    return data_dir / names[0] if names else None


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """``cache_dir`` or ``$RCKIT_CACHE`` or ``~/.cache/rckit``: where rckit keeps what it computes once."""
    return Path(cache_dir or os.environ.get("RCKIT_CACHE") or Path.home() / ".cache" / "rckit").expanduser()


def default_cache_dir(cache_dir: str | Path | None = None) -> Path:
    """:func:`cache_root` with ``squad/`` appended: SQuAD's downloads and prepared data."""
    return cache_root(cache_dir) / "squad"


def resolve_squad_files(
    version: str = "1.1",
    data_dir: str | Path | None = None,
    cache_dir: str | Path | None = None,
    download: bool = True,
    base_url: str | None = None,
    splits=SPLITS,
) -> dict[str, Path]:
    """Map each of ``splits`` to a SQuAD JSON file (``.json`` or ``.json.gz``) on disk.

    ``data_dir`` (else ``$RCKIT_DATA``) is searched first with :func:`find_local_file`; a file
    found there is returned unverified. A split it lacks falls through to the cache and then a
    download, unless ``download=False``, which raises :class:`FileNotFoundError` naming the
    directory and the expected name prefix. Without a data directory, the cache is used if it
    holds the official file with the right SHA-256; otherwise, with ``download=True``, the file
    is fetched from ``base_url`` (else ``$RCKIT_SQUAD_URL``, else :data:`OFFICIAL_URL`) and
    verified. A cached file with the wrong digest is replaced by a fresh download.

    Raises :class:`ChecksumError` if a download does not match, :class:`DownloadError` on a
    network or HTTP error, :class:`FileNotFoundError` when ``download=False`` and no file is
    found, and :class:`ValueError` for an unknown version or split.
    """
    version = normalize_version(version)
    for split in splits:
        if split not in SPLITS:
            raise ValueError(f"unknown SQuAD split {split!r}; expected one of {SPLITS}")
    if data_dir is None and os.environ.get("RCKIT_DATA"):
        data_dir = os.environ["RCKIT_DATA"]
    cache = default_cache_dir(cache_dir)
    base = (base_url or os.environ.get("RCKIT_SQUAD_URL") or OFFICIAL_URL).rstrip("/")

    paths: dict[str, Path] = {}
    for split in splits:
        if data_dir is not None:
            local = find_local_file(data_dir, split, version)
            if local is not None:
                log.info("SQuAD v%s %s: using local file %s", version, split, local)
                paths[split] = local
                continue
            if not download:
                raise FileNotFoundError(
                    f"no SQuAD v{version} {split} file in {Path(data_dir)}: expected a file named "
                    f"{split}-v{version}*.json or {split}-v{version}*.json.gz"
                )
            log.warning("no SQuAD v%s %s file in %s; trying the cache %s", version, split, data_dir, cache)
        paths[split] = _cached_or_download(SQUAD_FILES[(version, split)], cache, base, download)
    return paths


def _cached_or_download(official: SquadFile, cache: Path, base_url: str, download: bool) -> Path:
    dest = cache / official.name
    if dest.is_file():
        if dest.stat().st_size == official.size and file_digest(dest) == official.sha256:
            return dest
        # A stale or hand-edited cache entry must not be mistaken for the official file.
        log.warning("cached %s does not match the official SHA-256; fetching it again", dest)
    if not download:
        raise FileNotFoundError(
            f"no verified {official.name} in the cache {cache} and download=False; put the SQuAD files "
            "in a directory and pass --data-dir DIR or set RCKIT_DATA=DIR"
        )
    _download(f"{base_url}/{official.name}", dest, official)
    return dest


def _download(url: str, dest: Path, official: SquadFile) -> None:
    """Stream ``url`` into ``dest`` via a temporary file in the same directory.

    Verifying before ``os.replace`` means a crash or a bad download never leaves a file at
    ``dest``; the rename is atomic because both paths are on one file system.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{secrets.token_hex(4)}.part")
    digest = hashlib.sha256()
    n_bytes = 0
    log.info("downloading %s to %s", url, dest)
    try:
        with open(tmp, "xb") as out:
            try:
                with urllib.request.urlopen(url, timeout=60) as response:
                    total = int(response.headers.get("Content-Length") or official.size)
                    # disable=None turns the bar off when stderr is not a terminal (CI, logs).
                    with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name, disable=None) as bar:
                        while chunk := response.read(_CHUNK):
                            out.write(chunk)
                            digest.update(chunk)
                            n_bytes += len(chunk)
                            bar.update(len(chunk))
            except (urllib.error.URLError, http.client.HTTPException, TimeoutError, ConnectionError) as e:
                if isinstance(e, urllib.error.HTTPError):
                    reason = f"HTTP {e.code} {e.reason}"
                else:
                    reason = e.reason if isinstance(e, urllib.error.URLError) else e
                raise DownloadError(
                    f"could not download {url}: {reason}. If this machine is offline or the URL is "
                    "unreachable, put the SQuAD files in a directory and pass --data-dir DIR or set "
                    "RCKIT_DATA=DIR (or point RCKIT_SQUAD_URL at a mirror)"
                ) from e
        actual = digest.hexdigest()
        if n_bytes != official.size or actual != official.sha256:
            raise ChecksumError(
                f"{url} does not match the official {official.name}: expected {official.size} bytes "
                f"with sha256 {official.sha256}, got {n_bytes} bytes with sha256 {actual}"
            )
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
