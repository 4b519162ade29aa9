"""Answering a file of questions on a Ray cluster: ``rckit predict``, ``ask`` and ``evaluate`` with ``--ray``.

Ray Data's batch-inference pattern: the questions, read by this process (the driver) in file
order, go into a Ray Dataset a window at a time, cut into blocks (of the Reader's
:data:`~rckit.answering.reader.CHUNK` questions unless told); a pool of ``workers`` actors
(:class:`Answerer`), each holding one :class:`~rckit.answering.reader.Reader` loaded once, answers a
block at a time (``map_batches``) as its command's :class:`AnswerTask` says; the answers come back
in input order (``preserve_order``) and are written as they arrive. Ray retries the block of an
actor that died (its actor restarts): nothing is lost or answered twice.

The file is read as a stream (:func:`rckit.answering.questions.stream_records`): a line that is not
a question record is reported with its line number and skipped, the rest answered. A killed run
resumes: the ids already in the output are skipped (a last line cut short by the kill is dropped
first), the rest appended in order.

An actor reads its block through the same loop and in the same chunks as the local command
(:meth:`Reader.read_chunks`), so where the blocks fall on the local run's chunks the answers are
the local run's: ``rckit evaluate``'s blocks are the Reader's chunk (the same scores); ``rckit
predict`` reads 2,048 records at a time (:func:`rckit.answering.questions.answer_records`), and
``--ray-block`` 2048 (or a multiple of it) reads as it does. Cut otherwise, a model whose
activations were quantized per batch answered a question differently beside other questions (the
encoder's int8 graph until it scaled each piece by its own range: :mod:`rckit.contextual.onnx_runner`).
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

import numpy as np

from rckit.answering.questions import answer_records, stream_records
from rckit.answering.reader import CHUNK, Reader

WINDOW = 64  # blocks in one Ray Dataset: the driver holds at most this many blocks' records


@dataclass
class AnswerTask:
    """What every actor of a run holds: the reader (``source``, and ``load``: the options of
    :meth:`Reader.load`) and the cores it reads with (``threads``; None: the actor's share).
    :meth:`answer` is what the run makes of a block of records, one subclass per command."""

    source: str | None
    load: dict = field(default_factory=dict)
    threads: int | None = None

    def answer(self, actor: Answerer, records: list[dict]) -> list[dict]:
        raise NotImplementedError


@dataclass
class PredictTask(AnswerTask):
    """``rckit predict --ray``: each record's answers about its context, ``{"id", "answers"}``."""

    top_k: int = 1
    max_answer_len: int | None = None
    stride: int | None = None

    def answer(self, actor: Answerer, records: list[dict]) -> list[dict]:
        return answer_records(actor.reader, records, self.top_k, self.max_answer_len, self.stride)


@dataclass(kw_only=True)
class AskTask(AnswerTask):
    """``rckit ask --ray``: each question asked of the index at ``index`` (the same path on every
    node), ``{"id", "answers"}``."""

    index: str
    retriever_weight: float
    top_k: int = 1
    passages: int = 20

    def answer(self, actor: Answerer, records: list[dict]) -> list[dict]:
        got = actor.collection(self.index, self.retriever_weight).ask_many(
            [r["question"] for r in records], self.top_k, self.passages
        )
        return [{"id": r["id"], "answers": a} for r, a in zip(records, got)]


@dataclass
class EvaluateTask(AnswerTask):
    """``rckit evaluate --ray``: each question's best span and no-answer score, its context read
    whole, ``{"id", "span", "margin"}`` (:func:`rckit.evaluation.evaluate.reader_spans` locally)."""

    def answer(self, actor: Answerer, records: list[dict]) -> list[dict]:
        spans = actor.reader.best_spans([(r["context"], r["question"]) for r in records], whole=True)
        return [{"id": r["id"], "span": text, "margin": margin} for r, (text, margin) in zip(records, spans)]


class Answerer:
    """A Ray actor's state: one Reader (and, for ``ask``, the open index), loaded once."""

    def __init__(self, task: AnswerTask):
        self.task = task
        self.reader = Reader.load(task.source, threads=task.threads, **task.load)
        self.local = threading.local()  # Ray may call from another thread than this one: SQLite may not follow

    def collection(self, index: str, retriever_weight: float):
        """The index, opened in the calling thread (a SQLite connection stays in its thread)."""
        if getattr(self.local, "collection", None) is None:
            from rckit.retrieval.collection import Collection

            self.local.collection = Collection.open(index, self.reader, retriever_weight)
        return self.local.collection

    def __call__(self, batch: dict) -> dict:
        out = [
            json.dumps(self.task.answer(self, json.loads(str(block))), ensure_ascii=False) for block in batch["block"]
        ]
        return {"seq": batch["seq"], "block": np.asarray(out, dtype=object)}


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
    task: AnswerTask,
    records: Iterable[dict],
    workers: int,
    cpus_per_worker: float,
    address: str | None = None,
    block: int = CHUNK,
    window: int = WINDOW,
    log: Callable[[str], object] | None = None,
) -> Iterator[dict]:
    """Each answer of ``records`` (dicts with an ``id``), in their order, answered as ``task`` says
    by ``workers`` actors of ``cpus_per_worker`` cores each on the cluster ``connect(address)``
    joins, ``block`` records to an actor's call."""
    if workers < 1:
        raise ValueError(f"--workers {workers}: at least 1")
    ray = connect(address, log)
    ray.data.DataContext.get_current().execution_options.preserve_order = True
    ray.data.DataContext.get_current().enable_progress_bars = False
    task.threads = task.threads or max(1, int(cpus_per_worker))
    seq = 0
    for blocks in _windows(records, block, window):
        ds = ray.data.from_items(
            [{"seq": seq + i, "block": json.dumps(b, ensure_ascii=False)} for i, b in enumerate(blocks)],
            override_num_blocks=min(len(blocks), 4 * workers),
        )
        seq += len(blocks)
        answered = ds.map_batches(
            Answerer,
            fn_constructor_kwargs={"task": task},
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
    task: AnswerTask,
    questions: str | Path,
    out: str | Path,
    fields: tuple[str, ...],
    workers: int,
    cpus_per_worker: float,
    address: str | None = None,
    block: int = CHUNK,
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

    records = (r for r in stream_records(questions, fields, skip) if json.dumps(r["id"]) not in done)
    answered = 0
    with open(out, "a", encoding="utf-8") as f:
        for rec in run_blocks(task, records, workers, cpus_per_worker, address, block, log=log):
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
