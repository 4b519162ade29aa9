"""``rckit index PATH... --ray``: files parsed and cut into passages on a Ray cluster.

Parsing (a PDF above all) is what indexing spends its time on. Here this process (the driver)
walks the paths and reads each file's bytes, and a Ray task on any node of the cluster parses
them and cuts the passages (:func:`rckit.retrieval.store.read_data`): no node needs the files on
a shared disk. A few files per worker are in flight at a time, never all, so memory stays
bounded by the largest files; the results come back in the walk's order and the driver is the
one writer of the SQLite index, as without Ray (:meth:`rckit.retrieval.store.PassageStore.add`:
commits every few seconds, a killed run goes on from what it committed). A file unchanged since
it was indexed is hashed here and never sent.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

from rckit.cluster.answers import connect
from rckit.retrieval.store import FileRead, read_data


def ray_file_reader(
    workers: int, cpus_per_worker: float, address: str | None = None, log: Callable[[str], object] | None = None
) -> Callable[[list[Path], dict[str, str], int], Iterator[FileRead]]:
    """What :meth:`PassageStore.add` takes as ``read_files``: each file parsed by a Ray task of
    ``cpus_per_worker`` cores, at most ``2 * workers`` in flight, yielded in order."""
    if workers < 1:
        raise ValueError(f"--workers {workers}: at least 1")
    ray = connect(address, log)
    parse = ray.remote(num_cpus=cpus_per_worker, max_retries=3)(read_data)  # a worker lost: the file again

    def read_files(paths: list[Path], known: dict[str, str], max_words: int) -> Iterator[FileRead]:
        ahead: deque = deque()
        try:
            for path in paths:
                try:
                    data = path.read_bytes()
                except OSError as e:
                    ahead.append(FileRead(path, None, None, [], e))
                else:
                    digest = hashlib.sha256(data).hexdigest()
                    if digest == known.get(str(path)):
                        ahead.append(FileRead(path, digest, None, [], None))
                    else:
                        ahead.append(parse.remote(path, data, known.get(str(path)), max_words))
                while len(ahead) > 2 * workers or (ahead and isinstance(ahead[0], FileRead)):
                    yield _got(ray, ahead.popleft())
            while ahead:
                yield _got(ray, ahead.popleft())
        finally:
            for ref in ahead:
                if not isinstance(ref, FileRead):
                    ray.cancel(ref)

    return read_files


def _got(ray, item) -> FileRead:
    return item if isinstance(item, FileRead) else ray.get(item)
