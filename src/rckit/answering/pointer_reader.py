"""Asking rckit's own reader (:mod:`rckit.models.encoder_reader`) questions: :class:`PointerReader`.

The reader reads each (passage, question) pair in its windows (:mod:`rckit.data.pair_windows`),
windows of like length batched together, and :func:`rckit.answering.pointer.point` turns each
pair's scores into its best spans and its no-answer margin; the margin, calibrated
(``p(no answer) = sigmoid(a m + b)``, fitted on held-out questions), decides: where it passes the
threshold the first answer is ``""`` (the reader's best spans after it, as guesses), as SQuAD
v2.0 prediction files and :class:`rckit.answering.reader.Reader` have it.

``model`` is a plain callable from NumPy inputs (``ids``, ``mask``, ``types``, ``allowed``: (B, P)
each) to the start and end scores ((B, P) each): the PyTorch module
(:class:`rckit.answering.torch_backend.TorchPointer`), so this module imports no PyTorch.

**The same answer alone or batched.** A window's scores should not depend on what it is read
beside: each window is padded to a multiple of :data:`PAD_TO` pieces and only windows of one
padded length share a forward, so a question read alone meets the same sequence length as in a
batch; padding is masked out of attention (its weights are exactly 0), and the rows of a batch
never mix.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from rckit.answering.answer import Answer
from rckit.answering.pointer import MAX_ANSWER, Pointed
from rckit.answering.pointer_job import Item, PointerJob
from rckit.answering.texts import check_request
from rckit.contextual.pieces import PieceTokenizer
from rckit.data.pair_windows import padded, pair_windows
from rckit.model_files.reader_file import read_reader_file, reader_metadata
from rckit.model_files.source import reader_backend

PointerModel = Callable[[dict[str, np.ndarray]], tuple[np.ndarray, np.ndarray]]
PAD_TO = 32  # pieces: a window's padded length is the next multiple
CHUNK = 256  # pairs read at once by best_spans


class PointerReader:
    """The encoder reader with its tokenizer, windows and no-answer rule."""

    def __init__(
        self,
        model: PointerModel,
        tokenizer: PieceTokenizer,
        max_pieces: int,
        stride: int,
        calibration: tuple[float, float] = (1.0, 0.0),
        threshold: float | None = None,
        always_answer: bool = False,
        batch_size: int = 32,
        info: dict | None = None,
    ):
        if threshold is not None and not 0.0 <= threshold <= 1.0:
            raise ValueError(f"the no-answer threshold is a probability between 0 and 1, got {threshold}")
        self.model, self.tokenizer = model, tokenizer
        self.max_pieces, self.stride = int(max_pieces), int(stride)
        self.calibration = (float(calibration[0]), float(calibration[1]))
        self.threshold = threshold
        self.always_answer = always_answer or threshold is None
        self.batch_size = batch_size
        self.info = info or {}

    @classmethod
    def load(
        cls,
        path: str | Path,
        device="cpu",
        always_answer: bool = False,
        no_answer_threshold: float | None = None,
        batch_size: int = 32,
        backend: str = "auto",
        int8: bool = False,
        threads: int | None = None,
    ) -> PointerReader:
        """The reader of a file of :mod:`rckit.model_files.reader_file`; its threshold unless
        ``no_answer_threshold`` is given. ``backend``: ``torch``, ``onnx`` (onnxruntime on a graph
        built from the file on first use, :mod:`rckit.answering.pointer_graph`; ``int8``: its
        products in int8 by rows) or ``auto`` (:func:`~rckit.model_files.source.reader_backend`)."""
        if backend == "auto":
            backend = reader_backend(device)
        if backend not in ("torch", "onnx"):
            raise ValueError(f"backend: torch, onnx or auto, got {backend!r}")
        meta = reader_metadata(path)
        model = _onnx_model(path, int8, threads) if backend == "onnx" else _torch_model(path, device, threads)
        threshold = meta.get("threshold") if no_answer_threshold is None else no_answer_threshold
        info = {
            "model": meta["model"],
            "source": str(Path(path).resolve()),
            "format": meta["format"],
            "backend": model.backend,
            "encoder": meta.get("encoder"),
            "step": meta.get("step"),
            "parameters": meta.get("parameters"),
            "window": meta["max_pieces"],
            "threshold": threshold,
            "always_answer": always_answer,
            "scores": meta.get("scores", []),
        }
        return cls(
            model,
            PieceTokenizer(meta["tokenizer"]),
            meta["max_pieces"],
            meta["stride"],
            tuple(meta["calibration"]),
            threshold,
            always_answer,
            batch_size,
            info,
        )

    # The span readers' verifiers (rckit.answering.reader.Reader): this reader judges "no answer" itself.
    own_verifier = None
    collection_verifier = None

    @property
    def window(self) -> int:
        """The most pieces read at once (question and passage): what a server sizes requests by."""
        return self.max_pieces

    def plan(
        self, pairs: list[tuple[str, str]], top_k: int = 1, max_answer_len: int | None = None, stride: int | None = None
    ) -> PointerJob:
        """The work of answering ``pairs``: each pair's windows (no model call yet)."""
        job = self.plan_many([(pairs, top_k, max_answer_len)], stride)[0]
        if isinstance(job, ValueError):
            raise job
        return job

    def plan_many(
        self, requests: list[tuple[list[tuple[str, str]], int, int | None]], stride: int | None = None
    ) -> list[PointerJob | ValueError]:
        """:meth:`plan` for several requests ``(pairs, top_k, max_answer_len)`` in one tokenizing
        pass, each distinct passage cut into pieces once (``stride``: passage pieces between two
        windows, None: the file's); a request that cannot be answered gets its ``ValueError`` in
        its place, and the others their jobs."""
        stride = self.stride if stride is None else int(stride)
        if stride < 1:
            raise ValueError(f"stride must be at least 1 piece, got {stride}")
        checked: list[tuple | ValueError] = []
        for pairs, top_k, max_answer_len in requests:
            try:
                checked.append((list(pairs), *check_request(pairs, top_k, max_answer_len, MAX_ANSWER)))
            except ValueError as e:
                checked.append(e)
        all_pairs = [pair for r in checked if not isinstance(r, ValueError) for pair in r[0]]
        texts = list(dict.fromkeys(c for c, _ in all_pairs))
        passages = dict(zip(texts, self.tokenizer.pieces(texts)))
        questions = iter(self.tokenizer.pieces([q for _, q in all_pairs]))
        cls, sep = self.tokenizer.cls, self.tokenizer.sep
        threshold = None if self.always_answer else self.threshold
        jobs: list[PointerJob | ValueError] = []
        for r in checked:
            if isinstance(r, ValueError):
                jobs.append(r)
                continue
            pairs, top_k, max_answer = r
            windows = [
                pair_windows(next(questions)[0], passages[c], cls, sep, self.max_pieces, stride) for c, _ in pairs
            ]
            jobs.append(
                PointerJob(pairs, top_k, max_answer, windows, self.tokenizer.continues, self.calibration, threshold)
            )
        return jobs

    def read(self, parts: list[tuple[PointerJob, list[Item]]]) -> None:
        """The scores of ``items`` (``(pair, window)``) of one or more jobs, into their jobs:
        windows of one padded length per forward, at most ``batch_size`` at a time."""
        groups: dict[int, list[tuple[PointerJob, Item]]] = {}
        for job, items in parts:
            for p, w in items:
                size = -(-len(job.pair_windows[p].ids[w]) // PAD_TO) * PAD_TO
                groups.setdefault(size, []).append((job, (p, w)))
        for size, members in sorted(groups.items()):
            for lo in range(0, len(members), self.batch_size):
                part = members[lo : lo + self.batch_size]
                rows = [job.pair_windows[p] for job, (p, _) in part]
                x = padded([win.ids[w] for win, (_, (_, w)) in zip(rows, part)], [win.q_len for win in rows], size)
                start, end = self.model(x)
                for b, (job, item) in enumerate(part):
                    job.record([item], [start[b]], [end[b]])

    def read_all(self, job: PointerJob) -> PointerJob:
        """Every window of ``job`` read (the batcher's groups left to it)."""
        self.read([(job, [item for group in job.windows for item in group])])
        job.windows = []
        return job

    def pointed(
        self, pairs: list[tuple[str, str]], top_k: int = 1, max_answer: int = MAX_ANSWER, stride: int | None = None
    ) -> list[Pointed]:
        """Each pair's best ``top_k`` spans (of at most ``max_answer`` pieces) and its no-answer
        margin: what training's evaluation reads (:func:`rckit.training.encoder_reader.read`)."""
        return self.read_all(self.plan(pairs, top_k, max_answer, stride)).pointed()

    def answer_batch(
        self,
        pairs: list[tuple[str, str]],
        top_k: int = 1,
        max_answer_len: int | None = None,
        stride: int | None = None,
        own: bool = True,
        chunk: int | None = None,
    ) -> list[list[Answer]]:
        """The ``top_k`` best answers to each ``(context, question)`` pair, best first; ``""``
        first where the reader abstains (:meth:`PointerJob.answers`). ``max_answer_len``: pieces
        in an answer at most (default :data:`~rckit.answering.pointer.MAX_ANSWER`); ``stride``:
        passage pieces between two windows (default: the file's); ``chunk``: pairs read at once
        (None: all). ``own`` is the span readers' (their verifier's own reader) and means nothing
        here."""
        out = []
        step = chunk or max(1, len(pairs))
        for lo in range(0, len(pairs), step):
            out.extend(self.read_all(self.plan(pairs[lo : lo + step], top_k, max_answer_len, stride)).answers())
        return out

    def answer(
        self,
        context: str,
        question: str | list[str],
        top_k: int = 1,
        max_answer_len: int | None = None,
        stride: int | None = None,
    ) -> list[Answer] | list[list[Answer]]:
        """The ``top_k`` best answers to ``question`` about ``context``; a list of questions, one list each."""
        questions = [question] if isinstance(question, str) else list(question)
        got = self.answer_batch([(context, q) for q in questions], top_k, max_answer_len, stride)
        return got[0] if isinstance(question, str) else got

    def best_spans(
        self,
        pairs: list[tuple[str, str]],
        *,
        whole: bool = False,
        chunk: int | None = CHUNK,
        progress: Callable[[int], object] | None = None,
    ) -> list[tuple[str, float]]:
        """Each pair's best span as text and its ``p(no answer)``: what evaluation scores, read
        ``chunk`` pairs at a time (``progress(n)`` after each). ``whole`` is
        :meth:`rckit.answering.reader.Reader.best_spans`' and means nothing here: a passage is
        always read in windows, each piece answering from the one where it has most context."""
        out = []
        step = chunk or max(1, len(pairs))
        for lo in range(0, len(pairs), step):
            part = pairs[lo : lo + step]
            out.extend(self.read_all(self.plan(part)).best_spans())
            if progress is not None:
                progress(len(part))
        return out


def _torch_model(path: str | Path, device: str, threads: int | None):
    import torch

    from rckit.answering.torch_backend import TorchPointer
    from rckit.device import pick_device
    from rckit.models.encoder_reader import EncoderReader, EncoderReaderConfig

    device = pick_device(device) if isinstance(device, str) else device
    if threads is not None:
        torch.set_num_threads(threads)
    state, meta = read_reader_file(path)
    model = EncoderReader(meta["bert_config"], EncoderReaderConfig(dropout=0.0))
    model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    return TorchPointer(model, device)


def _onnx_model(path: str | Path, int8: bool, threads: int | None):
    from rckit.answering.pointer_graph import OnnxPointer, reader_graph
    from rckit.data.download import cache_root

    return OnnxPointer(reader_graph(path, cache_root() / "readers", int8), threads)
