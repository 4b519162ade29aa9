"""``rckit index``: cut documents into passages and keep them in one SQLite file for ``rckit ask``."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rckit.cli.arguments import ray_options
from rckit.retrieval.store import PassageStore


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Cut documents into passages and keep them in one SQLite file with a BM25 full-text index. "
        "Reads plain UTF-8 text (any name), Markdown (.md), reStructuredText (.rst), JSON Lines (.jsonl: "
        '{"id", "title", "text"} a line), SQuAD JSON (.json, .json.gz: its paragraphs), and with '
        "pip install 'rckit[documents]' HTML (.html, .htm, .xhtml: the main text), EPUB, Word (.docx) and PDF "
        "(its text layer; a scan needs OCR first); any of these gzip-compressed (.gz); folders recursively. "
        "Indexing again updates the index: new files added, changed ones re-read, removed ones dropped; an "
        "interrupted run leaves the index as it was."
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="files or folders")
    p.add_argument("--out", required=True, metavar="INDEX", help="the index file (created if missing)")
    p.add_argument("--max-words", type=int, default=200, help="passage size in words, for a new index (default 200)")
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="worker processes reading files while this one writes (default: one per core but one, "
        "up to 4, for 16 MiB of files or more; 0: read here)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    ray_options(p, "the files parsed and cut into passages (this process writes the index)")


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if not out.parent.is_dir():
        raise FileNotFoundError(f"{out.parent}: no such directory for the index")
    t0 = time.perf_counter()
    with PassageStore(out, max_words=args.max_words) as store:
        read_files = None
        if args.ray is not None:
            from rckit.cluster.indexing import ray_file_reader

            read_files = ray_file_reader(args.workers, args.cpus_per_worker, args.ray or None)
        report = store.add(args.paths, progress=not args.no_progress, jobs=args.jobs, read_files=read_files)
        stats = store.stats()
    print(
        f"{out}: {stats['documents']:,} documents, {stats['passages']:,} passages, "
        f"{stats['bytes'] / 2**20:.1f} MiB ({time.perf_counter() - t0:.1f}s: {report['added']} files added, "
        f"{report['updated']} updated, {report['unchanged']} unchanged, {report['removed']} removed, "
        f"{len(report['skipped'])} skipped)"
    )
    return 0
