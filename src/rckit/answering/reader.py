"""One way to ask a trained span model questions: :class:`Reader`.

``Reader.load(source)`` takes a run directory (its best checkpoint, EMA weights), an exported
``.safetensors`` file (:mod:`rckit.model_files.safetensors`), an ONNX file
(``rckit export --format onnx``, answered on onnxruntime without importing PyTorch:
:mod:`rckit.answering.onnx_backend`) or nothing, which means the default model
(:func:`rckit.model_files.source.default_model_path`). ``reader.answer(context, question)`` gives the
``top_k`` best answers, each ``{"answer", "score", "start", "end", "no_answer_probability"}``: ``score``
is the span's probability ``p_start[s] * p_end[e]`` in the window it was read in, ``start``/``end``
half-open character offsets into the context as given, so ``context[start:end] == answer``. A model that
can abstain (SQuAD v2.0, ``no_answer``) scores the null beside the spans; where the text holds no answer
(the null beats the best span by more than ``decode.no_answer_threshold``) the first answer is ``""``
with ``start``/``end`` None, the best spans after it (``always_answer``: the best span first all the
same). A long context's null is its lowest over the windows: the document answers if any window does.
``answer_batch`` does the same for many (context, question) pairs in batched forwards; ``rckit predict``
and ``rckit serve`` both go through it. :meth:`Reader.read_chunks` is the one loop that plans and reads
many pairs a chunk (:data:`CHUNK`) at a time: answers, best spans (:meth:`Reader.best_spans`:
evaluation, ``--ray``'s actors) and a verifier's features are all read through it.

Long contexts are read in windows of ``window`` tokens (the run's ``train.max_c_len``, the
longest context it trained on), ``stride`` tokens apart (default ``window // 2``). With half a
window of overlap every token lies at least a quarter of a window from the edge of some window
(except near the document's own ends), so each answer is read with context on both sides, for
twice the work of windows that only touch. Any span of at most ``window - stride`` tokens lies
whole inside some window. Each window gives its ``top_k`` spans; they are merged by score, a
character span found in two windows counting once with its higher score. That merge is exact:
a span of the true top ``k`` is in the top ``k`` of the window where it scores best.

This module imports no PyTorch: the model is a callable from NumPy inputs
(:data:`rckit.data.padding.INPUTS`) to NumPy logits, :class:`rckit.answering.torch_backend.TorchModel`
or :class:`rckit.answering.onnx_backend.OnnxModel`, and tokenizing, windows, span decoding
(:mod:`rckit.answering.decoding`) and the no-answer rule are the same code for both.

Batches keep the questions on one context (and one window of it) together, so a model that
shares work between them (QANet on CPU: :func:`rckit.kernels.cpu.encode_shared_contexts`)
encodes each distinct window once; each distinct context is tokenized once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path

import numpy as np

from rckit.answering.answer import Answer
from rckit.answering.decoding import DecodeConfig, decode_config_of, null_scores, topk_spans
from rckit.answering.explanation import DEFAULT_STEPS, Explanation, needs_torch
from rckit.answering.job import Job
from rckit.answering.pointer_reader import PointerReader
from rckit.answering.texts import check_request
from rckit.answering.verifier import Verifier
from rckit.answering.verifier_features import ReaderEvidence, window_evidence
from rckit.data.padding import answer_inputs, merge_answer_inputs
from rckit.data.prepare import tokenize_texts
from rckit.data.vocab import FormIndex, Vocabularies
from rckit.model_files.metadata import contextual_of
from rckit.model_files.reader_file import is_reader_file
from rckit.model_files.source import ModelFile, open_model

Model = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]  # TorchModel, OnnxModel

DEFAULT_WINDOW = 400  # tokens; TrainConfig.max_c_len's default, for runs that do not record one
ENCODER_MEMO_MB = 32  # the contextual encoder keeps the states of the texts read last (about 60 paragraphs)
# Pairs planned and read together by Reader.read_chunks: evaluation's questions, a verifier's training
# pairs, a Ray block. Which pairs share a chunk decides which share a forward, so a run cut into the
# same chunks reads the same answers.
CHUNK = 256


def windows(n_tokens: int, window: int, stride: int) -> list[tuple[int, int]]:
    """Half-open token ranges ``[lo, hi)`` of ``window`` tokens, ``stride`` apart, the last one
    ending at ``n_tokens``; one range when the context fits."""
    if n_tokens <= window:
        return [(0, n_tokens)]
    starts = list(range(0, n_tokens - window, stride)) + [n_tokens - window]
    return [(lo, lo + window) for lo in starts]


class Reader:
    """A span model with its vocabularies and decode settings, answering questions about text.

    ``model``: NumPy inputs (:data:`rckit.data.padding.INPUTS`) to ``start_logits``/``end_logits``
    (and ``start_null``/``end_null`` for a model that can abstain), with ``backend`` (its name)
    and ``parameters`` (its count): :class:`~rckit.answering.torch_backend.TorchModel` or
    :class:`~rckit.answering.onnx_backend.OnnxModel`. ``window``: the most context tokens read at once.
    ``batch_size``: items (question, window) per forward. ``info``: a JSON-serialisable
    description (model name, source, backend, config, dev score, parameter count), what ``GET
    /v1/model`` returns.
    """

    def __init__(
        self,
        model: Model,
        vocabs: Vocabularies,
        decode: DecodeConfig | None = None,
        window: int = DEFAULT_WINDOW,
        info: dict | None = None,
        batch_size: int = 32,
        always_answer: bool = False,
        verifier: Verifier | None = None,
        no_answer_threshold: float | None = None,
        encoder=None,
    ):
        if window < 1:
            raise ValueError(f"window must be >= 1 token, got {window}")
        if no_answer_threshold is not None and verifier is None:
            raise ValueError(
                "a no-answer threshold is for a model with a verifier, and this one has none (rckit verifier adds one)"
            )
        if no_answer_threshold is not None and not 0.0 <= no_answer_threshold <= 1.0:
            raise ValueError(f"the no-answer threshold is a probability between 0 and 1, got {no_answer_threshold}")
        self.model = model
        # The contextual encoder whose states the model reads (rckit.contextual.states.ContextualEncoder), or None.
        self.encoder = encoder
        self.vocabs = vocabs
        self.forms = FormIndex(vocabs)  # word and character ids of each token string met, computed once
        self.decode = decode or DecodeConfig()
        self.window = int(window)
        self.batch_size = batch_size
        self.verifier = verifier
        # Abstain where the verifier's p(no answer) is above this (None: no verifier).
        self.verifier_threshold = (
            None
            if verifier is None
            else (verifier.answer_threshold if no_answer_threshold is None else float(no_answer_threshold))
        )
        self.info = {
            **(info or {}),
            "backend": model.backend,
            "always_answer": always_answer,
            "verifier": None
            if verifier is None
            else {
                **verifier.record,
                "threshold": self.verifier_threshold,
                **({"own_reader": verifier.own.meta.get("file")} if verifier.own is not None else {}),
            },
        }
        self.always_answer = always_answer

    @property
    def own_verifier(self):
        """``(own reader's verifier, threshold)`` where the verifier has rckit's own reader
        (:mod:`rckit.answering.own_verifier`) and the reader may abstain, else None: what a
        collection's best answers are checked by (its passages are judged by the features)."""
        if self.always_answer or self.verifier is None or self.verifier.own is None:
            return None
        return self.verifier.own, self.verifier_threshold

    @property
    def collection_verifier(self):
        """The decision over a collection's passages (:class:`rckit.answering.verifier.CollectionVerifier`),
        where the verifier has one and the reader may abstain; else None."""
        if self.always_answer or self.verifier is None:
            return None
        return self.verifier.collection

    # ------------------------------------------------------------------------------ loading

    @classmethod
    def load(
        cls,
        source: str | Path | ModelFile | None = None,
        device="cpu",
        always_answer: bool = False,
        threads: int | None = None,
        spin: bool = True,
        batch_size: int = 32,
        no_answer_threshold: float | None = None,
    ) -> Reader | PointerReader:
        """A run directory or checkpoint (``.pt``), an exported ``.safetensors`` file, an ONNX file
        (onnxruntime, no PyTorch), or None: the default model. ``device``: a name (``cpu``,
        ``cuda``, ``auto``) or a ``torch.device``. ``threads``: the cores the model may use (None:
        the backend's default); ``spin``: onnxruntime's threads spin waiting for work between
        operations (False: they sleep, for a server whose HTTP side shares the cores; PyTorch
        ignores it). ``always_answer``: a model that can abstain still answers with its best span
        first (its ``no_answer_probability`` still said), as a model trained on SQuAD v1.1 does.
        ``batch_size``: items (question, window) per forward. ``no_answer_threshold``: for a
        model with a verifier (:mod:`rckit.answering.verifier`), abstain where its p(no answer)
        is above this instead of the file's threshold (lower: more abstentions). A file of rckit's
        own reader (:mod:`rckit.model_files.reader_file`) is read by its own
        :class:`~rckit.answering.pointer_reader.PointerReader`, which answers (``answer``,
        ``answer_batch``, ``best_spans``) as this class does."""
        found = open_model(source)
        if found.kind == "safetensors" and is_reader_file(found.path):  # rckit's own reader: its own loop
            return PointerReader.load(
                found.path, device, always_answer, no_answer_threshold, batch_size, threads=threads
            )
        if found.kind == "onnx":
            from rckit.answering.onnx_backend import OnnxModel

            model = OnnxModel(found.path, device=str(device), threads=threads, spin=spin)
            return cls.from_parts(
                model,
                Vocabularies.from_json(model.meta["vocab"]),
                model.meta,
                found.path,
                always_answer,
                batch_size,
                no_answer_threshold,
                threads,
                spin,
            )
        # PyTorch only here: answering with an ONNX file imports none of it.
        from rckit.answering.torch_backend import TorchModel
        from rckit.device import pick_device
        from rckit.model_files.load import load_span_model

        device = pick_device(device) if isinstance(device, str) else device
        module, vocabs, meta = load_span_model(found, device)
        return cls.from_parts(
            TorchModel(module, device, threads),
            vocabs,
            meta,
            meta["file"],
            always_answer,
            batch_size,
            no_answer_threshold,
            threads,
            spin,
        )

    @classmethod
    def from_parts(
        cls,
        model: Model,
        vocabs: Vocabularies,
        meta: dict,
        file: str | Path,
        always_answer: bool = False,
        batch_size: int = 32,
        no_answer_threshold: float | None = None,
        threads: int | None = None,
        spin: bool = True,
    ) -> Reader:
        """A reader on ``model`` (a :class:`~rckit.answering.torch_backend.TorchModel` or
        :class:`~rckit.answering.onnx_backend.OnnxModel`) with what its file's metadata ``meta``
        says: its decode settings, its window (the longest context it trained on), its verifier
        (if it has one), its contextual encoder (if it reads one: on the model's backend, with
        ``threads`` and ``spin`` as :meth:`load` takes them), and ``info``, which names ``file``."""
        decode = decode_config_of(meta)
        window = int((meta.get("train_config") or {}).get("max_c_len") or DEFAULT_WINDOW)
        info = describe(
            meta["model"],
            str(Path(file).resolve()),
            meta["format"],
            meta["model_config"],
            decode,
            window,
            meta.get("dev_score"),
            model.parameters,
            step=meta.get("step"),
        )
        info["scores"] = meta.get("scores", [])  # `rckit evaluate FILE --record`: every question of a file
        verifier = Verifier.from_json(meta["verifier"], str(file), threads, spin) if meta.get("verifier") else None
        encoder = None
        contextual = contextual_of(meta)
        if contextual is not None:  # the encoder the model was trained with, refused if another is installed
            from rckit.contextual.states import ContextualEncoder
            from rckit.data.download import cache_root

            encoder = ContextualEncoder.load(
                contextual,
                runner=model.backend,
                graphs=cache_root() / "encoders",
                threads=threads,
                spin=spin,
                memo_mb=ENCODER_MEMO_MB,
            )
            info["contextual"] = contextual.to_json()
        return cls(
            model, vocabs, decode, window, info, batch_size, always_answer, verifier, no_answer_threshold, encoder
        )

    # ------------------------------------------------------------------------------ answering

    def answer(
        self,
        context: str,
        question: str | list[str],
        top_k: int = 1,
        max_answer_len: int | None = None,
        stride: int | None = None,
    ) -> list[Answer] | list[list[Answer]]:
        """The ``top_k`` best answers to ``question`` about ``context``, best first; for a list
        of questions, one such list each. See the module docstring for the answer dicts."""
        questions = [question] if isinstance(question, str) else list(question)
        got = self.answer_batch([(context, q) for q in questions], top_k, max_answer_len, stride)
        return got[0] if isinstance(question, str) else got

    def answer_batch(
        self,
        pairs: list[tuple[str, str]],
        top_k: int = 1,
        max_answer_len: int | None = None,
        stride: int | None = None,
        own: bool = True,
        chunk: int | None = None,
    ) -> list[list[Answer]]:
        """Answers to many ``(context, question)`` pairs, in their order, in batched forwards:
        :meth:`read_chunks`, :meth:`Job.answers`. ``own``: where the verifier has rckit's
        own reader, it judges each pair (False: the verifier's features do, as for the many
        passages of a collection, whose best answers the own reader checks afterwards).
        ``chunk``: pairs planned and read at once (None: all of them, one plan)."""
        chunks = self.read_chunks(pairs, top_k, max_answer_len, stride, own=own, chunk=chunk)
        return [answers for job in chunks for answers in job.answers()]

    def best_spans(
        self,
        pairs: list[tuple[str, str]],
        *,
        whole: bool = False,
        chunk: int | None = CHUNK,
        progress: Callable[[int], object] | None = None,
    ) -> list[tuple[str, float | None]]:
        """Each pair's best span and its no-answer score (:meth:`Job.best_spans`), read by
        :meth:`read_chunks`: what evaluation scores (``whole``: each context in one window), here
        or on a Ray actor."""
        return [
            best
            for job in self.read_chunks(pairs, whole=whole, chunk=chunk, progress=progress)
            for best in job.best_spans()
        ]

    def read_chunks(
        self,
        pairs: list[tuple[str, str]],
        top_k: int = 1,
        max_answer_len: int | None = None,
        stride: int | None = None,
        *,
        whole: bool = False,
        evidence: bool = False,
        own: bool = True,
        chunk: int | None = CHUNK,
        progress: Callable[[int], object] | None = None,
    ) -> Iterator[Job]:
        """The one loop that reads many pairs: ``chunk`` pairs at a time (None: all of them in one
        plan, even none) planned (:meth:`plan`, with ``top_k``, ``max_answer_len``, ``stride`` and
        ``whole``) and read (:meth:`read_all`), each chunk's job yielded once read, in order, and
        ``progress(n)`` called with its number of pairs after it. ``evidence``: the jobs collect
        the reader's evidence without a verifier, for the features a verifier is trained on
        (:meth:`Job.features`); ``own``: as :meth:`answer_batch` takes it. A chunk bounds the
        arrays held at once and decides which pairs share a forward."""
        if chunk is not None and chunk < 1:
            raise ValueError(f"chunk must be >= 1 pair, got {chunk}")
        parts = [pairs] if chunk is None else (pairs[lo : lo + chunk] for lo in range(0, len(pairs), chunk))
        for part in parts:
            job = self.plan(part, top_k, max_answer_len, stride, whole)
            job.own = own
            if evidence:
                job.wants_evidence = True
            self.read_all(job)
            yield job
            if progress is not None:
                progress(len(part))

    def explain(
        self,
        context: str,
        question: str,
        steps: int = DEFAULT_STEPS,
        max_answer_len: int | None = None,
        stride: int | None = None,
    ) -> Explanation:
        """Why the reader gives its answer to ``question`` about ``context``: the window, the start
        and end probabilities, the attention, the saliency of each word (``steps``: integrated
        gradients'); :mod:`rckit.answering.explanation`. PyTorch models only."""
        if self.model.backend != "torch":
            raise ValueError(needs_torch(self.info.get("source")))
        from rckit.answering.explain import explain  # PyTorch from here on

        return explain(self, context, question, steps, max_answer_len, stride)

    def plan(
        self,
        pairs: list[tuple[str, str]],
        top_k: int = 1,
        max_answer_len: int | None = None,
        stride: int | None = None,
        whole: bool = False,
    ) -> Job:
        """The work of answering ``pairs``: each distinct context tokenized once, and cut into
        windows, each window read with the questions on its context (no model call yet).
        ``whole``: each context in one window however long (as evaluation reads a PyTorch
        model's, :mod:`rckit.evaluation.evaluate`) instead of windows of ``window`` tokens."""
        job = self.plan_many([(pairs, top_k, max_answer_len)], stride, whole)[0]
        if isinstance(job, ValueError):
            raise job
        return job

    def plan_many(
        self,
        requests: list[tuple[list[tuple[str, str]], int, int | None]],
        stride: int | None = None,
        whole: bool = False,
    ) -> list[Job | ValueError]:
        """:meth:`plan` for several requests ``(pairs, top_k, max_answer_len)`` in one tokenizing
        pass (a context asked about in two requests is tokenized once); a request that cannot be
        answered gets its ``ValueError`` in its place, and the others their jobs."""
        stride = max(1, self.window // 2) if stride is None else int(stride)
        if not 1 <= stride <= self.window:
            raise ValueError(f"stride must be between 1 and the window ({self.window} tokens), got {stride}")
        checked: list[tuple | ValueError] = []
        for pairs, top_k, max_answer_len in requests:
            try:
                checked.append((list(pairs), *check_request(pairs, top_k, max_answer_len, self.decode.max_answer_len)))
            except ValueError as e:
                checked.append(e)
        all_pairs = [pair for r in checked if not isinstance(r, ValueError) for pair in r[0]]
        # Each distinct context once: tokenized once, and its windows shared by its questions.
        context_ids: dict[str, int] = {}
        for context, _ in all_pairs:
            context_ids.setdefault(context, len(context_ids))
        a: dict = {}
        if all_pairs:
            t = tokenize_texts(list(context_ids), (q for _, q in all_pairs))
            form_words, form_chars = self.forms.rows(t.forms)
            a = {"form_words": form_words, "form_chars": form_chars, **t.arrays()}
            if self.encoder is not None:  # each distinct context and each question read by the encoder once
                a.update(self.states(list(context_ids), [q for _, q in all_pairs], a))
        jobs: list[Job | ValueError] = []
        first = 0
        for r in checked:
            if isinstance(r, ValueError):
                jobs.append(r)
                continue
            pairs, top_k, max_answer_len = r
            by_context: dict[int, list[int]] = {}
            for i, (c, _) in enumerate(pairs, first):
                by_context.setdefault(context_ids[c], []).append(i)
            # (pair, context, lo, hi) items; longest contexts first so a batch's windows are alike.
            size = {c: int(a["ctx_ptr"][c + 1] - a["ctx_ptr"][c]) for c in by_context}  # context tokens
            order = sorted(by_context, key=lambda c: -size[c])
            groups = [
                [(i, c, lo, hi) for i in by_context[c]]
                for c in order
                for lo, hi in windows(size[c], size[c] if whole else self.window, stride)
            ]
            threshold = math.inf if self.always_answer else self.decode.no_answer_threshold
            verifier = (
                None
                if self.verifier is None
                else (self.verifier, math.inf if self.always_answer else self.verifier_threshold)
            )
            jobs.append(Job(pairs, top_k, max_answer_len, a, groups, first, threshold, verifier))
            first += len(pairs)
        return jobs

    def states(self, contexts: list[str], questions: list[str], a: dict) -> dict[str, np.ndarray]:
        """The encoder's states of ``contexts`` and ``questions``, rows aligned with their tokens
        in the arrays ``a``: ``ctx_state_rows`` (N, K, D) and ``q_state_rows`` (Nq, K, D), float32."""

        def read(texts, ptr, offsets):
            got = self.encoder.states(texts, [offsets[ptr[i] : ptr[i + 1]] for i in range(len(texts))])
            K, D = len(self.encoder.layers), self.encoder.dim
            return np.concatenate(got) if got else np.zeros((0, K, D), np.float32)

        return {
            "ctx_state_rows": read(contexts, a["ctx_ptr"], a["ctx_offsets"]),
            "q_state_rows": read(questions, a["q_ptr"], a["q_offsets"]),
        }

    def read(self, parts: list[tuple[Job, list[tuple]]]) -> None:
        """One forward over ``items`` (``(pair, context, lo, hi)``) of one or more jobs; each
        item's ``top_k`` spans, decoded with its job's settings, go into its job."""
        inputs = merge_answer_inputs([answer_inputs(job.arrays, items) for job, items in parts])
        out = self.model(inputs)
        row = 0
        for job, items in parts:
            rows = slice(row, row + len(items))
            row += len(items)
            mask = inputs["c_mask"][inputs["q_context"][rows]]  # (n, Tc) each item's window
            start, end = out["start_logits"][rows], out["end_logits"][rows]
            spans = topk_spans(start, end, mask, job.top_k, job.max_answer_len)
            nulls = None
            if "start_null" in out:  # scores over [null, tokens], so spans and the null compare
                null, shift = null_scores(start, end, mask, out["start_null"][rows], out["end_null"][rows])
                spans.score += shift[:, None]
                nulls = null.tolist()
            evidence = None
            if job.wants_evidence:  # what a verifier reads of each window
                evidence = [
                    ReaderEvidence(0.0, *stats, int(n))
                    for *stats, n in zip(*(x.tolist() for x in window_evidence(start, end, mask)), mask.sum(axis=1))
                ]
            job.record(items, spans.start.tolist(), spans.end.tolist(), spans.score.tolist(), nulls, evidence)

    def read_all(self, job: Job) -> None:
        """Read every window of ``job``, one of its :meth:`batches` at a time."""
        for items in self.batches(job):
            self.read([(job, items)])

    def batches(self, job: Job):
        """The items of ``job`` in batches of at most ``batch_size``; a group (the questions on one
        window) starts a new batch rather than straddle two, unless it is larger than a batch."""
        batch: list[tuple] = []
        for group in job.windows:
            if batch and len(batch) + len(group) > self.batch_size:
                yield batch
                batch = []
            while len(group) > self.batch_size:
                yield group[: self.batch_size]
                group = group[self.batch_size :]
            batch.extend(group)
        if batch:
            yield batch


def span_reader(reader: Reader | PointerReader, what: str) -> Reader:
    """``reader`` where it reads with a span model; rckit's own reader (a :class:`PointerReader`)
    refused in one line: ``what`` (a command, a feature) does not take it yet."""
    if isinstance(reader, PointerReader):
        raise ValueError(
            f"{reader.info.get('source')}: {what} does not take rckit's own reader yet "
            "(rckit predict, evaluate, ask and serve, and rckit.Reader, answer with it)"
        )
    return reader


def describe(
    name: str,
    source: str,
    kind: str,
    config: dict,
    decode: DecodeConfig,
    window: int,
    dev: dict | None,
    parameters: int,
    step: int | None = None,
) -> dict:
    """``Reader.info``: what a client may want to know about the model, JSON-serialisable."""
    return {
        "model": name,
        "source": source,
        "format": kind,
        "config": config,
        "decode": asdict(decode),
        "window": window,
        "dev_score": dev,
        "parameters": parameters,
        "step": step,
    }
