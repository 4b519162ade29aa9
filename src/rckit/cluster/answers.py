"""Answering a file of questions on a Ray cluster: ``rckit predict``, ``ask`` and ``evaluate`` with ``--ray``.

Ray Data's batch-inference pattern: the questions, read by this process (the driver) in file
order, go into a Ray Dataset a window at a time, cut into blocks of :data:`BLOCK` questions; a pool
of ``workers`` actors (:class:`Answerer`), each holding one :class:`~rckit.answering.reader.Reader`
loaded once, answers a block at a time (``map_batches``); the answers come back in input order
(``preserve_order``) and are written as they arrive. Ray retries the block of an actor that died
(its actor restarts): nothing is lost or answered twice.

The file is read as a stream: a line that is not a question record is reported with its line
number and skipped, the rest answered. A killed run resumes: the ids already in the output are
skipped (a last line cut short by the kill is dropped first), the rest appended in order.

Each block is what one local :meth:`Reader.answer_batch` call reads, so the answers are those of
the local run whose calls cut the file the same way (``rckit evaluate`` reads blocks of the local
:data:`rckit.evaluation.evaluate.CHUNK`: the same scores). Cut otherwise, a model whose
activations were quantized per batch answered a question differently beside other questions
(the encoder's int8 graph until it scaled each piece by its own range:
:mod:`rckit.contextual.onnx_runner`); ``rckit predict`` reads 2,048 at a time, ``--ray-block 2048``
reads as it does.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rckit.answering.questions import record_error

BLOCK = 256  # questions an actor answers in one call
WINDOW = 64  # blocks in one Ray Dataset: the driver holds at most this many blocks' records


@dataclass
class Job:
    """What each actor does with a block: ``kind`` ``answers`` (``rckit predict``: a record's
    answers about its context), ``ask`` (``rckit ask``: a question asked of the index ``index``)
    or ``spans`` (``rckit evaluate``: each question's best span and null margin, its context read
    whole); the reader ``source`` and its options."""

    kind: str
    source: str | None
    options: dict = field(default_factory=dict)  # Reader.load's, and the answering call's
    index: str | None = None
    threads: int | None = None


class Answerer:
    """A Ray actor's state: one Reader (and, for ``ask``, the open index), loaded once."""

    def __init__(self, job: Job):
        from rckit.answering.reader import Reader

        self.job = job
        load = job.options.get("load", {})
        self.reader = Reader.load(job.source, threads=job.threads, **load)
        self.local = threading.local()  # Ray may call from another thread than this one: SQLite may not follow

    def collection(self):
        """The index, opened in the calling thread (a SQLite connection stays in its thread)."""
        if getattr(self.local, "collection", None) is None:
            from rckit.retrieval.collection import Collection

            self.local.collection = Collection.open(self.job.index, self.reader, self.job.options["retriever_weight"])
        return self.local.collection

    def __call__(self, batch: dict) -> dict:
        import numpy as np

        out = [json.dumps(self.answer(json.loads(str(block))), ensure_ascii=False) for block in batch["block"]]
        return {"seq": batch["seq"], "block": np.asarray(out, dtype=object)}

    def answer(self, records: list[dict]) -> list[dict]:
        job, ask = self.job, self.job.options.get("ask", {})
        if job.kind == "answers":
            got = self.reader.answer_batch([(r["context"], r["question"]) for r in records], **ask)
            return [{"id": r["id"], "answers": a} for r, a in zip(records, got)]
        if job.kind == "ask":
            got = self.collection().ask_many([r["question"] for r in records], **ask)
            return [{"id": r["id"], "answers": a} for r, a in zip(records, got)]
        plan = self.reader.plan([(r["context"], r["question"]) for r in records], whole=True)
        self.reader.read_all(plan)
        spans = plan.best_spans()
        return [{"id": r["id"], "span": text, "margin": margin} for r, (text, margin) in zip(records, spans)]


def connect(address: str | None, log: Callable[[str], object] | None = None) -> Any:
    """``ray.init`` by Ray's own convention: an address joins that cluster, ``auto`` (or
    ``RAY_ADDRESS`` in the environment) the one running here, none starts a local instance on
    this machine's cores. Ray missing: one line naming the install."""
    try:
        import ray
    except ImportError:
        from rckit.model_files.errors import MissingPackage

        raise MissingPackage("--ray needs Ray: pip install 'rckit[ray]'") from None
    if not ray.is_initialized():
        quiet = {"log_to_driver": False, "logging_level": logging.WARNING}
        if address or os.environ.get("RAY_ADDRESS"):
            ray.init(address=address or None, **quiet)
        else:  # a local instance, for this run only
            ray.init(include_dashboard=False, **quiet)
        logging.getLogger("ray.data").setLevel(logging.WARNING)
    _cluster_errors_to_stderr(ray)
    resources = ray.cluster_resources()
    (log or _stderr)(f"ray: {int(resources.get('CPU', 0))} CPUs on {len(ray.nodes())} node(s)")
    return ray


def _cluster_errors_to_stderr(ray: Any) -> None:
    """Send the cluster's error messages to stderr. Ray's driver prints what the raylet publishes
    (a worker that died, memory running low) to stdout, where ``rckit evaluate`` writes its scores
    and ``predict``/``ask`` may write answers: a reader of that output would get Ray's lines in its
    JSON. Ray has no setting for it; its listener looks ``print_to_stdstream`` up at each message,
    so a wrapper that marks each message as an error sends it to stderr. A Ray without that
    function is left as it is."""
    module = getattr(getattr(ray, "_private", None), "worker", None)
    original = getattr(module, "print_to_stdstream", None)
    if original is None or getattr(original, "rckit_stderr", False):
        return

    def to_stderr(data: dict, *args: Any, **kwargs: Any) -> None:
        original({**data, "is_err": True}, *args, **kwargs)

    to_stderr.rckit_stderr = True  # type: ignore[attr-defined]
    module.print_to_stdstream = to_stderr


def run_blocks(
    job: Job,
    records: Iterable[dict],
    workers: int,
    cpus_per_worker: float,
    address: str | None = None,
    block: int = BLOCK,
    window: int = WINDOW,
    log: Callable[[str], object] | None = None,
) -> Iterator[dict]:
    """Each answer of ``records`` (dicts with an ``id``), in their order, answered by ``workers``
    actors of ``cpus_per_worker`` cores each on the cluster ``connect(address)`` joins."""
    if workers < 1:
        raise ValueError(f"--workers {workers}: at least 1")
    ray = connect(address, log)
    ray.data.DataContext.get_current().execution_options.preserve_order = True
    ray.data.DataContext.get_current().enable_progress_bars = False
    job.threads = job.threads or max(1, int(cpus_per_worker))
    seq = 0
    for blocks in _windows(records, block, window):
        ds = ray.data.from_items(
            [{"seq": seq + i, "block": json.dumps(b, ensure_ascii=False)} for i, b in enumerate(blocks)],
            override_num_blocks=min(len(blocks), 4 * workers),
        )
        seq += len(blocks)
        answered = ds.map_batches(
            Answerer,
            fn_constructor_kwargs={"job": job},
            batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=workers),
            num_cpus=cpus_per_worker,  # Ray Data's defaults: an actor that dies is started again, its block retried
        )
        for batch in answered.iter_batches(batch_size=None, batch_format="numpy"):
            for text in batch["block"]:
                yield from json.loads(str(text))


def _windows(records: Iterable[dict], block: int, window: int) -> Iterator[list[list[dict]]]:
    """``records`` cut into blocks of ``block``, gathered ``window`` blocks at a time."""
    blocks: list[list[dict]] = []
    current: list[dict] = []
    for r in records:
        current.append(r)
        if len(current) == block:
            blocks.append(current)
            current = []
            if len(blocks) == window:
                yield blocks
                blocks = []
    if current:
        blocks.append(current)
    if blocks:
        yield blocks


def stream_records(
    path: str | Path, fields: tuple[str, ...], skip: Callable[[str], object], skip_ids: set[str] = frozenset()
) -> Iterator[dict]:
    """The question records of a JSON-lines file, read as a stream: ``{"id", **fields}``; a line
    that is not one is reported to ``skip`` with its line number and passed over; ids in
    ``skip_ids`` (their JSON text: a run resumed) are passed over silently. A JSON list is read
    whole (it has no lines), each bad record reported by its index."""
    path = Path(path)
    shape = "{" + ", ".join(f'"{f}"' for f in ("id", *fields)) + "}"
    if path.suffix == ".jsonl":
        numbered: Iterable[tuple[str, Any]] = _json_lines(path, skip)
    else:
        from rckit.data.squad import load_json

        data = load_json(path)
        if not isinstance(data, list):
            raise ValueError(f"{path}: expected a list of {shape} records, got a JSON {type(data).__name__}")
        numbered = ((f"record [{i}]", r) for i, r in enumerate(data))
    for n, (where, rec) in enumerate(numbered):
        why = record_error(rec, fields)
        if why:
            skip(f"{path}: {where}: {why}")
            continue
        qid = rec.get("id", n)
        if json.dumps(qid) in skip_ids:
            continue
        yield {"id": qid, **{f: rec[f] for f in fields}}


def _json_lines(path: Path, skip: Callable[[str], object]) -> Iterator[tuple[str, Any]]:
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                skip(f"{path}: line {lineno}: not UTF-8 text (byte 0x{raw[e.start : e.start + 1].hex()})")
                continue
            if not line.strip():
                continue
            try:
                yield f"line {lineno}", json.loads(line)
            except json.JSONDecodeError as e:
                skip(f"{path}: line {lineno}: not valid JSON ({e.msg}, column {e.colno})")


def resume_output(out: Path) -> set[str]:
    """The ids (as JSON text) already answered in ``out`` (JSON lines), after dropping a last line
    that a killed run left cut short; an empty set where there is no file."""
    if not out.is_file():
        return set()
    data = out.read_bytes()
    keep = data.rfind(b"\n") + 1  # everything up to the last whole line
    if keep < len(data):
        with open(out, "r+b") as f:
            f.truncate(keep)
    done = set()
    for lineno, line in enumerate(data[:keep].decode("utf-8").splitlines(), 1):
        try:
            done.add(json.dumps(json.loads(line)["id"]))
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ValueError(f"{out}: line {lineno}: not an answer record; resume into another file") from None
    return done


def answer_file(
    job: Job,
    questions: str | Path,
    out: str | Path,
    fields: tuple[str, ...],
    workers: int,
    cpus_per_worker: float,
    address: str | None = None,
    block: int = BLOCK,
    log: Callable[[str], object] | None = None,
) -> dict:
    """``rckit predict|ask --questions Q --out A.jsonl --ray``: every record of ``questions``
    answered on the cluster and appended to ``out`` in input order (flushed block by block).
    Returns ``{"answered", "skipped", "resumed"}``: the bad lines are named in ``log`` as met."""
    log = log or _stderr
    out = Path(out)
    if out.suffix != ".jsonl":
        raise ValueError(f"{out}: --ray writes JSON lines as they come; name the output .jsonl")
    done = resume_output(out)
    if done:
        log(f"{out}: {len(done):,} questions answered before; going on")
    skipped: list[str] = []

    def skip(why: str) -> None:
        skipped.append(why)
        log(f"skipped {why}")

    records = stream_records(questions, fields, skip, done)
    answered = 0
    with open(out, "a", encoding="utf-8") as f:
        for rec in run_blocks(job, records, workers, cpus_per_worker, address, block, log=log):
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            answered += 1
            if answered % block == 0:
                f.flush()
                os.fsync(f.fileno())
    return {"answered": answered, "skipped": len(skipped), "resumed": len(done)}


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def summary(got: dict, verb: str, out: str | Path) -> str:
    """The line a command prints after :func:`answer_file`."""
    return f"{got['answered']} questions {verb} on Ray ({got['resumed']} before, {got['skipped']} lines skipped): {out}"
