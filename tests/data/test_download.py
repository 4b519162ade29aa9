"""Locating and downloading SQuAD files, against a local HTTP server only (never the internet)."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import re
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from rckit.data import download
from rckit.data.download import (
    ChecksumError,
    DownloadError,
    SquadFile,
    find_local_file,
    resolve_squad_files,
)
from rckit.data.prepare import file_digest

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
OFFICIAL_TABLE = download.SQUAD_FILES  # kept before the autouse fixture swaps it

FAKE = {
    ("1.1", "train"): b'{"data": [], "version": "1.1", "split": "train"}',
    ("1.1", "dev"): b'{"data": [], "version": "1.1", "split": "dev"}',
    ("2.0", "train"): b'{"data": [], "version": "v2.0", "split": "train"}',
    ("2.0", "dev"): b'{"data": [], "version": "v2.0", "split": "dev"}',
}


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """No test sees the user's environment, home cache or the real SQuAD URL.

    The checksum table is swapped for the small fake files above, and RCKIT_SQUAD_URL points at
    a closed local port, so a test that forgets ``base_url`` fails fast instead of going online.
    """
    for var in ("RCKIT_DATA", "RCKIT_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RCKIT_SQUAD_URL", "http://127.0.0.1:1/no-network-in-tests")
    table = {
        key: SquadFile(f"{key[1]}-v{key[0]}.json", len(body), hashlib.sha256(body).hexdigest())
        for key, body in FAKE.items()
    }
    monkeypatch.setattr(download, "SQUAD_FILES", table)
    return table


@pytest.fixture
def server(tmp_path):
    """A ThreadingHTTPServer on 127.0.0.1 serving tmp_path/www, recording every request path."""
    root = tmp_path / "www"
    root.mkdir()
    requests: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def do_GET(self):
            requests.append(self.path)
            super().do_GET()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield SimpleNamespace(root=root, url=f"http://127.0.0.1:{httpd.server_address[1]}", requests=requests)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def serve(server, version="1.1", splits=("train", "dev")):
    for split in splits:
        (server.root / f"{split}-v{version}.json").write_bytes(FAKE[(version, split)])


def touch(directory: Path, *names: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_bytes(b"{}")


def test_official_table_is_complete():
    real = OFFICIAL_TABLE
    assert set(real) == {(v, s) for v in ("1.1", "2.0") for s in ("train", "dev")}
    for (version, split), entry in real.items():
        assert entry.name == f"{split}-v{version}.json"
        assert entry.size > 1_000_000
        assert re.fullmatch("[0-9a-f]{64}", entry.sha256), entry  # a SHA-256 in lower-case hex
    assert real[("1.1", "dev")] == SquadFile(
        "dev-v1.1.json", 4_854_279, "95aa6a52d5d6a735563366753ca50492a658031da74f301ac5238b03966972c9"
    )
    assert download.OFFICIAL_URL == "https://rajpurkar.github.io/SQuAD-explorer/dataset"


def test_file_digest(tmp_path):
    path = tmp_path / "x.bin"
    body = bytes(range(256)) * 10_000  # spans several read chunks
    path.write_bytes(body)
    assert file_digest(path) == hashlib.sha256(body).hexdigest()


@pytest.mark.parametrize("given, expected", [("1.1", "1.1"), ("v1.1", "1.1"), ("2.0", "2.0"), ("V2.0", "2.0")])
def test_version_spellings(given, expected):
    assert download.normalize_version(given) == expected


def test_unknown_version_or_split(tmp_path):
    with pytest.raises(ValueError, match="version"):
        resolve_squad_files("3.0", download=False)
    with pytest.raises(ValueError, match="split"):
        resolve_squad_files("1.1", splits=("test",), download=False)


def test_download_verifies_and_caches(server, tmp_path):
    serve(server)
    cache = tmp_path / "cache"
    paths = resolve_squad_files("1.1", cache_dir=cache, base_url=server.url)
    assert paths == {"train": cache / "squad" / "train-v1.1.json", "dev": cache / "squad" / "dev-v1.1.json"}
    assert paths["train"].read_bytes() == FAKE[("1.1", "train")]
    assert paths["dev"].read_bytes() == FAKE[("1.1", "dev")]
    assert sorted(server.requests) == ["/dev-v1.1.json", "/train-v1.1.json"]
    assert sorted(p.name for p in (cache / "squad").iterdir()) == ["dev-v1.1.json", "train-v1.1.json"]

    again = resolve_squad_files("v1.1", cache_dir=cache, base_url=server.url)
    assert again == paths
    assert len(server.requests) == 2  # served from the cache, no new request


def test_base_url_from_environment_and_default_cache(server, tmp_path, monkeypatch):
    serve(server, "2.0", ("dev",))
    monkeypatch.setenv("RCKIT_SQUAD_URL", server.url + "/")
    paths = resolve_squad_files("2.0", splits=("dev",))
    assert paths["dev"] == tmp_path / "home" / ".cache" / "rckit" / "squad" / "dev-v2.0.json"
    assert server.requests == ["/dev-v2.0.json"]

    monkeypatch.setenv("RCKIT_CACHE", str(tmp_path / "envcache"))
    paths = resolve_squad_files("2.0", splits=("dev",))
    assert paths["dev"] == tmp_path / "envcache" / "squad" / "dev-v2.0.json"
    assert len(server.requests) == 2


def test_checksum_mismatch_leaves_nothing(server, tmp_path):
    (server.root / "dev-v1.1.json").write_bytes(b'{"data": [], "version": "tampered"}')
    cache = tmp_path / "cache"
    with pytest.raises(ChecksumError) as info:
        resolve_squad_files("1.1", cache_dir=cache, base_url=server.url, splits=("dev",))
    message = str(info.value)
    assert f"{server.url}/dev-v1.1.json" in message
    assert download.SQUAD_FILES[("1.1", "dev")].sha256 in message
    assert hashlib.sha256(b'{"data": [], "version": "tampered"}').hexdigest() in message
    assert list((cache / "squad").iterdir()) == []


def test_corrupt_cache_entry_is_downloaded_again(server, tmp_path):
    serve(server, splits=("dev",))
    cached = tmp_path / "cache" / "squad" / "dev-v1.1.json"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"x" * len(FAKE[("1.1", "dev")]))  # right size, wrong content
    paths = resolve_squad_files("1.1", cache_dir=tmp_path / "cache", base_url=server.url, splits=("dev",))
    assert paths["dev"].read_bytes() == FAKE[("1.1", "dev")]
    assert server.requests == ["/dev-v1.1.json"]


def test_http_404_is_a_clear_error(server, tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(DownloadError) as info:
        resolve_squad_files("1.1", cache_dir=cache, base_url=server.url, splits=("train",))
    message = str(info.value)
    assert f"{server.url}/train-v1.1.json" in message
    assert "404" in message
    assert "--data-dir" in message and "RCKIT_DATA" in message
    assert not isinstance(info.value, ChecksumError)
    assert list((cache / "squad").iterdir()) == []


def test_unreachable_host_names_url_and_suggests_data_dir(tmp_path):
    # The autouse fixture points RCKIT_SQUAD_URL at a closed local port.
    with pytest.raises(DownloadError, match=r"127\.0\.0\.1:1/no-network-in-tests/dev-v1\.1\.json.*RCKIT_DATA"):
        resolve_squad_files("1.1", cache_dir=tmp_path / "cache", splits=("dev",))


def test_find_local_file_preference(tmp_path):
    d = tmp_path / "data"
    touch(d, "dev-v1.1.json", "dev-v1.1.json.gz", "dev-v1.1.aaa.json", "dev-v1.1.txt", "dev-v2.0.json")
    assert find_local_file(d, "dev", "1.1") == d / "dev-v1.1.json"
    (d / "dev-v1.1.json").unlink()
    assert find_local_file(d, "dev", "v1.1") == d / "dev-v1.1.json.gz"
    (d / "dev-v1.1.json.gz").unlink()
    assert find_local_file(d, "dev", "1.1") == d / "dev-v1.1.aaa.json"
    assert find_local_file(d, "train", "1.1") is None
    assert find_local_file(tmp_path / "missing", "dev", "1.1") is None


def test_data_dir_reconstructed_and_gz_names(tmp_path):
    d = tmp_path / "data"
    touch(
        d,
        "train-v1.1.reconstructed.json.gz",
        "train-v1.1.reconstructed.ambiguous.tsv.gz",  # a sidecar, not a SQuAD file
        "train-v1.1.zz.json",
        "dev-v1.1.json.gz",
    )
    paths = resolve_squad_files("1.1", data_dir=d, download=False)
    # Local files are used as they are: their bytes match no checksum.
    assert paths == {"train": d / "train-v1.1.reconstructed.json.gz", "dev": d / "dev-v1.1.json.gz"}


def test_rckit_data_environment_variable(tmp_path, monkeypatch):
    env_dir = tmp_path / "envdata"
    touch(env_dir, "train-v2.0.json", "dev-v2.0.reconstructed.json.gz")
    monkeypatch.setenv("RCKIT_DATA", str(env_dir))
    paths = resolve_squad_files("v2.0", download=False)
    assert paths == {"train": env_dir / "train-v2.0.json", "dev": env_dir / "dev-v2.0.reconstructed.json.gz"}

    explicit = tmp_path / "explicit"
    touch(explicit, "train-v2.0.json", "dev-v2.0.json")
    assert resolve_squad_files("2.0", data_dir=explicit, download=False)["dev"] == explicit / "dev-v2.0.json"


def test_missing_split_without_download_names_the_directory(tmp_path):
    d = tmp_path / "data"
    touch(d, "dev-v2.0.json")
    with pytest.raises(FileNotFoundError) as info:
        resolve_squad_files("2.0", data_dir=d, download=False)
    assert str(d) in str(info.value)
    assert "train-v2.0" in str(info.value)


def test_missing_split_falls_through_to_download(server, tmp_path):
    serve(server, splits=("train",))
    d = tmp_path / "data"
    touch(d, "dev-v1.1.json.gz")
    paths = resolve_squad_files("1.1", data_dir=d, cache_dir=tmp_path / "cache", base_url=server.url)
    assert paths == {"train": tmp_path / "cache" / "squad" / "train-v1.1.json", "dev": d / "dev-v1.1.json.gz"}
    assert server.requests == ["/train-v1.1.json"]


def test_empty_cache_without_download(tmp_path):
    with pytest.raises(FileNotFoundError, match="RCKIT_DATA"):
        resolve_squad_files("1.1", cache_dir=tmp_path / "cache", download=False, splits=("dev",))


@pytest.mark.realdata
def test_real_shared_squad_directories(monkeypatch):
    v11 = SHARED_DATA / "squad-v1.1"
    assert v11.is_dir(), f"real SQuAD data missing: {v11}"
    monkeypatch.setattr(download, "SQUAD_FILES", {})  # nothing may be looked up in the table
    paths = resolve_squad_files("1.1", data_dir=v11, download=False)
    assert paths == {"train": v11 / "train-v1.1.reconstructed.json.gz", "dev": v11 / "dev-v1.1.json.gz"}
    # The shared dev file is the byte-identical official one.
    assert (
        hashlib.sha256(gzip.decompress(paths["dev"].read_bytes())).hexdigest()
        == "95aa6a52d5d6a735563366753ca50492a658031da74f301ac5238b03966972c9"
    )

    v20 = SHARED_DATA / "squad-v2.0"
    assert resolve_squad_files("2.0", data_dir=v20, download=False, splits=("dev",)) == {
        "dev": v20 / "dev-v2.0.reconstructed.json.gz"
    }
