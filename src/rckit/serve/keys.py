"""The keys of ``rckit serve``: which ones open it, each one's name, and checking one sent.

A server has a key (``--api-key`` or ``$RCKIT_API_KEY``), a file of keys (``--api-key-file``), or
both. The file holds one key a line, ``NAME KEY`` or ``KEY`` alone; blank lines and lines starting
with ``#`` are skipped. It is read again whenever it changes (its modification time, size or inode),
so a key deleted from it stops working on the next request, without a restart; a file that
cannot be read or holds a mistake accepts no key at all until it is mended (one line on stderr
says why), rather than the keys it held before.

A key is never kept, shown or logged: only its SHA-256 digest is, against which a key sent is
compared with :func:`hmac.compare_digest`, against every key every time (the time taken says
nothing about which key or how much of it matched). A key's *name* stands for it in the access
log and in the per-client limits: the file's NAME, else ``sha256:`` and the first 8 hex digits of
its digest. Standard library only: :mod:`rckit.serve.config` checks a key file with it before
the model loads.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

KEY = re.compile(r"[\x21-\x7e]+")  # printable ASCII without spaces: what an HTTP header carries as it is


@dataclass(frozen=True)
class Key:
    name: str
    digest: bytes  # SHA-256 of the key


def digest(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()


def key_name(key: str) -> str:
    """The name of a key that has none: a short digest, which identifies it without revealing it."""
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()[:8]


def key_problem(key: str) -> str | None:
    """What makes ``key`` unusable as a key, or None."""
    if not KEY.fullmatch(key):
        return "a key must be printable ASCII without spaces (it travels in an HTTP header)"
    return None


def read_key_file(path: str | os.PathLike) -> list[Key]:
    """The keys of a key file, or a ValueError naming the file (and the line) of the first mistake,
    or why it cannot be read."""
    keys: list[Key] = []
    seen: dict[bytes, int] = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"api_key_file {path}: not UTF-8 text") from None
    except OSError as e:
        raise ValueError(f"api_key_file {path}: {e.strerror or e}") from None
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) > 2:
            raise ValueError(f"api_key_file {path}, line {number}: {len(words)} words; a line is `NAME KEY` or `KEY`")
        key = words[-1]
        problem = key_problem(key)
        if problem:
            raise ValueError(f"api_key_file {path}, line {number}: {problem}")
        d = digest(key.encode())
        if d in seen:
            raise ValueError(f"api_key_file {path}, line {number}: the same key as line {seen[d]}")
        seen[d] = number
        keys.append(Key(words[0] if len(words) == 2 else key_name(key), d))
    if not keys:
        raise ValueError(f"api_key_file {path} holds no key: write one a line, `NAME KEY` or `KEY`")
    return keys


class Keys:
    """The keys a server takes: ``key`` (one key, or None) and those of ``file`` (a key file, or
    None), the file's read again when it changes. Raises as :func:`read_key_file` does for a bad
    file at the start."""

    def __init__(self, key: str | None = None, file: str | None = None):
        if key is not None and key_problem(key):
            raise ValueError(f"api_key: {key_problem(key)}")
        self.fixed = [Key(key_name(key), digest(key.encode()))] if key is not None else []
        self.file = file
        self.from_file: list[Key] = []
        self.seen: tuple | None = None  # the file's (inode, size, modification time) when last read
        if file is not None:
            self.seen = self.stamp()
            self.from_file = read_key_file(file)

    @property
    def required(self) -> bool:
        """Whether a request needs a key (a server with no key is open)."""
        return bool(self.fixed) or self.file is not None

    def stamp(self) -> tuple | None:
        try:
            st = os.stat(self.file)
        except OSError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def current(self) -> list[Key]:
        """Every key accepted now: the file is read again if it has changed since last read."""
        if self.file is not None:
            stamp = self.stamp()
            if stamp != self.seen:
                self.seen = stamp
                try:
                    self.from_file = read_key_file(self.file)
                except ValueError as e:
                    self.from_file = []
                    print(f"rckit serve: {e}; no key of it is accepted until it is mended", file=sys.stderr, flush=True)
        return self.fixed + self.from_file

    def match(self, sent: bytes | None) -> str | None:
        """The name of the key ``sent`` (the bytes after ``Bearer``), or None where it is no key of
        this server (or None was sent). Compared in constant time with every key."""
        d = digest(sent or b"")
        found = None
        for key in self.current():
            if hmac.compare_digest(d, key.digest) and found is None:
                found = key.name
        return found if sent else None
