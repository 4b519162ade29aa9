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
and ``rckit serve`` both go through it.

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
import threading
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from rckit.answering.answer import Answer, no_answer, span
from rckit.answering.decoding import DecodeConfig, abstains, decode_config_of, null_scores, topk_spans
from rckit.answering.explanation import DEFAULT_STEPS, Explanation, needs_torch
from rckit.answering.verifier import FEATURES, ReaderEvidence, Verifier, features_of, window_evidence
from rckit.data.padding import answer_inputs, merge_answer_inputs
from rckit.data.prepare import tokenize_texts
from rckit.data.vocab import FormIndex, Vocabularies
from rckit.model_files.source import ModelFile, open_model

Model = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]  # TorchModel, OnnxModel

DEFAULT_WINDOW = 400  # tokens; TrainConfig.max_c_len's default, for runs that do not record one
ENCODER_MEMO_MB = 32  # the contextual encoder keeps the states of the texts read last (about 60 paragraphs)


def text_problem(text: str) -> str | None:
    """What leaves a context or question with nothing to read or ask, or None: ``is empty``,
    or ``has no letter or digit ...``. The one rule for ``Reader``, ``rckit predict`` and the API,
    each of which names the field in its own way."""
    if not text.strip():
        return "is empty"
    if not any(ch.isalnum() for ch in text):
        return f"has no letter or digit, only punctuation ({text.strip()[:20]!r})"
    return None


def check_text(name: str, text: str) -> None:
    """Refuse a context or question that is not a string or has nothing to read (:func:`text_problem`)."""
    if not isinstance(text, str):
        raise ValueError(f"the {name} should be a string, got {type(text).__name__}")
    problem = text_problem(text)
    if problem:
        raise ValueError(f"the {name} {problem}: nothing to answer")


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
                **({"cross_encoder": verifier.cross.meta.get("file")} if verifier.cross is not None else {}),
            },
        }
        self.always_answer = always_answer

    @property
    def cross_verifier(self):
        """``(cross-encoder, threshold)`` where the verifier has a cross-encoder
        (:mod:`rckit.answering.cross_verifier`) and the reader may abstain, else None: what a
        collection's best answers are checked by (its passages are judged by the features)."""
        if self.always_answer or self.verifier is None or self.verifier.cross is None:
            return None
        return self.verifier.cross, self.verifier_threshold

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
    ) -> Reader:
        """A run directory or checkpoint (``.pt``), an exported ``.safetensors`` file, an ONNX file
        (onnxruntime, no PyTorch), or None: the default model. ``device``: a name (``cpu``,
        ``cuda``, ``auto``) or a ``torch.device``. ``threads``: the cores the model may use (None:
        the backend's default); ``spin``: onnxruntime's threads spin waiting for work between
        operations (False: they sleep, for a server whose HTTP side shares the cores; PyTorch
        ignores it). ``always_answer``: a model that can abstain still answers with its best span
        first (its ``no_answer_probability`` still said), as a model trained on SQuAD v1.1 does.
        ``batch_size``: items (question, window) per forward. ``no_answer_threshold``: for a
        model with a verifier (:mod:`rckit.answering.verifier`), abstain where its p(no answer)
        is above this instead of the file's threshold (lower: more abstentions)."""
        found = open_model(source)
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
        contextual = (meta.get("embedding") or {}).get("contextual")
        if contextual is not None:  # the encoder the model was trained with, refused if another is installed
            from rckit.contextual.states import ContextualEncoder, ContextualSpec
            from rckit.data.download import cache_root

            encoder = ContextualEncoder.load(
                ContextualSpec.of_model(contextual),
                runner=model.backend,
                graphs=cache_root() / "encoders",
                threads=threads,
                spin=spin,
                memo_mb=ENCODER_MEMO_MB,
            )
            info["contextual"] = contextual
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
        cross: bool = True,
    ) -> list[list[Answer]]:
        """Answers to many ``(context, question)`` pairs, in their order, in batched forwards:
        :meth:`plan`, :meth:`read_all`, :meth:`Job.answers`. ``cross``: where the verifier has a
        cross-encoder, it judges each pair (False: the verifier's features do, as for the many
        passages of a collection, whose best answers the cross-encoder checks afterwards)."""
        job = self.plan(pairs, top_k, max_answer_len, stride)
        job.cross = cross
        self.read_all(job)
        return job.answers()

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
                checked.append((list(pairs), *self._settings(pairs, top_k, max_answer_len)))
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
        in the arrays ``a``: ``ctx_states`` (N, K, D) and ``q_states`` (Nq, K, D), float32."""

        def read(texts, ptr, offsets):
            got = self.encoder.states(texts, [offsets[ptr[i] : ptr[i + 1]] for i in range(len(texts))])
            K, D = len(self.encoder.layers), self.encoder.dim
            return np.concatenate(got) if got else np.zeros((0, K, D), np.float32)

        return {
            "ctx_states": read(contexts, a["ctx_ptr"], a["ctx_offsets"]),
            "q_states": read(questions, a["q_ptr"], a["q_offsets"]),
        }

    def _settings(self, pairs: list[tuple[str, str]], top_k: int, max_answer_len: int | None) -> tuple[int, int]:
        """``(top_k, max_answer_len)`` checked, the texts of ``pairs`` too (a ValueError names the pair)."""
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        max_answer_len = self.decode.max_answer_len if max_answer_len is None else int(max_answer_len)
        if max_answer_len < 1:
            raise ValueError(f"max_answer_len must be >= 1, got {max_answer_len}")
        for i, (context, question) in enumerate(pairs):
            where = "" if len(pairs) == 1 else f" (pair {i})"
            try:
                check_text("context", context)
                check_text("question", question)
            except ValueError as e:
                raise ValueError(f"{e}{where}") from None
        return top_k, max_answer_len

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


class Job:
    """Answering some ``(context, question)`` pairs: planned (tokenized, cut into windows) by
    :meth:`Reader.plan`, read a window at a time by :meth:`Reader.read` (a server interleaves
    the windows of many jobs, :mod:`rckit.serve.batcher`), merged by :meth:`answers`.

    ``windows``: the groups of items still to read, each the questions on one window of one
    context, an item ``(pair, context, lo, hi)`` indexing ``arrays``; ``work``: how many
    (question, window) items the job had in all.
    """

    def __init__(
        self,
        pairs: list[tuple[str, str]],
        top_k: int,
        max_answer_len: int,
        arrays: dict,
        windows: list[list[tuple]],
        first: int = 0,
        no_answer_threshold: float = 0.0,
        verifier: tuple[Verifier, float] | None = None,
    ):
        self.pairs, self.top_k, self.max_answer_len, self.arrays = pairs, top_k, max_answer_len, arrays
        self.windows = windows
        self.first = first  # the arrays' row of this job's first pair (jobs planned together share arrays)
        self.work = sum(len(w) for w in windows)
        self.found: list[dict[tuple[int, int], float]] = [{} for _ in pairs]
        self.no_answer_threshold = no_answer_threshold
        # The null score of each pair (a model that can abstain): the lowest over its windows, the
        # window most sure the text answers; None for a model that cannot abstain.
        self.null: list[float | None] = [None for _ in pairs]
        # (verifier, threshold on its p(no answer)), and what the reader said in the window of each
        # pair's best span: the verifier's reader evidence.
        self.verifier = None if verifier is None else verifier[0]
        self.verifier_threshold = None if verifier is None else verifier[1]
        self.evidence: list[ReaderEvidence | None] = [None for _ in pairs]
        self.wants_evidence = verifier is not None  # True: collected without a verifier, to train one
        # Whether a cross-encoder verifier (where the reader's has one) judges each pair; rckit ask
        # judges its passages by the features and its best answers by the cross-encoder.
        self.cross = True
        self.lock = threading.Lock()  # a server may read two of its windows in two calls at once

    @property
    def threshold_in_use(self) -> float | None:
        """The threshold on this job's p(no answer): the reader's, except where a cross-encoder
        verifier stands aside (:attr:`cross` False) and the network judges by its own."""
        if self.verifier is None or self.verifier.cross is None or self.cross or self.verifier_threshold == math.inf:
            return self.verifier_threshold
        return self.verifier.threshold

    @staticmethod
    def cost(items: list[tuple]) -> int:
        """Context tokens the model reads for ``items``."""
        return sum(hi - lo for _, _, lo, hi in items)

    def record(
        self,
        items: list[tuple],
        starts,
        ends,
        scores,
        nulls: list[float] | None = None,
        evidence: list[ReaderEvidence] | None = None,
    ) -> None:
        """The top spans of each item (token indices in its window), as character spans of its
        context; ``nulls``: each item's null score (a model that can abstain); ``evidence``: each
        item's window as the verifier reads it (a model with a verifier)."""
        with self.lock:
            self._record(items, starts, ends, scores, nulls, evidence)

    def _record(
        self, items: list[tuple], starts, ends, scores, nulls: list[float] | None, evidence: list[ReaderEvidence] | None
    ) -> None:
        a = self.arrays
        for b, (i, c, lo, _) in enumerate(items):
            k = i - self.first
            if nulls is not None:
                held = self.null[k]
                self.null[k] = nulls[b] if held is None else min(held, nulls[b])
            if evidence is not None and starts[b] and starts[b][0] >= 0:
                held = self.evidence[k]
                if held is None or scores[b][0] > held.span_log_p:  # the window of the best span
                    self.evidence[k] = replace(evidence[b], span_log_p=float(scores[b][0]))
            offsets = a["ctx_offsets"][a["ctx_ptr"][c] : a["ctx_ptr"][c + 1]]
            for s, e, score in zip(starts[b], ends[b], scores[b]):
                if s < 0:
                    continue
                span = (int(offsets[lo + s][0]), int(offsets[lo + e][1]))
                found = self.found[k]
                if score > found.get(span, -math.inf):  # a span two windows found counts once
                    found[span] = score

    def _ranked(self) -> list[list[tuple[tuple[int, int], float]]]:
        """Each pair's spans over all its windows, best first."""
        return [sorted(spans_of.items(), key=lambda kv: (-kv[1], kv[0])) for spans_of in self.found]

    def no_answer_probabilities(self, ranked=None) -> list[float | None]:
        """Each pair's probability that its text holds no answer: the verifier's, from its best
        span (a model with a verifier), else the null's (a model that can abstain), else None."""
        if self.verifier is None:
            return [None if null is None else math.exp(null) for null in self.null]
        ranked = self._ranked() if ranked is None else ranked
        if self.verifier.cross is not None and self.cross:
            triples = [
                (context, question, *(spans[0][0] if spans else (None, None)))
                for (context, question), spans in zip(self.pairs, ranked)
            ]
            return self.verifier.judge(triples, None).tolist()
        x = self.features(ranked)
        return self.verifier.probability(x).tolist() if len(x) else []

    def features(self, ranked=None) -> np.ndarray:
        """What a verifier reads of each pair, (pairs, :data:`rckit.answering.verifier.FEATURES`):
        its best span, and the reader's evidence where the job collected it (:attr:`wants_evidence`:
        a reader with a verifier, or one whose verifier is being trained)."""
        ranked = self._ranked() if ranked is None else ranked
        rows = []
        for (context, question), spans, null, evidence in zip(self.pairs, ranked, self.null, self.evidence):
            (s, e), score = spans[0] if spans else ((None, None), -math.inf)
            if evidence is not None and null is not None:
                evidence = replace(evidence, null_margin=null - score)
            rows.append(features_of(context, question, s, e, evidence))
        return np.stack(rows) if rows else np.zeros((0, len(FEATURES)), np.float32)

    def answers(self) -> list[list[Answer]]:
        """The ``top_k`` best answers of each pair, over all its windows, best first.

        Each answer carries ``no_answer_probability`` (None for a model that can neither abstain
        nor verify). Where the text holds no answer (the verifier's probability of that is above
        its threshold; for a model without a verifier, the null beats the best span by more than
        the threshold), the first answer is the abstention, ``{"answer": "", "score": p(no
        answer), "start": None, "end": None}``, and the ``top_k`` best spans follow it.
        """
        ranked = self._ranked()
        p_none = self.no_answer_probabilities(ranked)
        results = []
        for (context, _), spans, null, p_null in zip(self.pairs, ranked, self.null, p_none):
            best = spans[: self.top_k]
            answers = [span(context, s, e, math.exp(score), p_null) for (s, e), score in best]
            best_score = best[0][1] if best else -math.inf
            if self.verifier is not None:
                abstain = abstains(p_null, self.threshold_in_use)
            else:
                abstain = abstains(None if null is None else null - best_score, self.no_answer_threshold)
            if abstain:
                answers.insert(0, no_answer(p_null))
            results.append(answers)
        return results

    def best_spans(self) -> list[tuple[str, float | None]]:
        """Each pair's best span over all its windows (``""`` where none was found) and its
        no-answer score, compared with a threshold: the verifier's p(no answer) for a model with
        a verifier, else for a model that can abstain its null margin (the null's score less the
        best span's, in log-probability), else None. The abstention left to the caller is what
        official evaluation scores at any threshold (:mod:`rckit.evaluation.evaluate`)."""
        ranked = self._ranked()
        verified = self.no_answer_probabilities(ranked) if self.verifier is not None else None
        best = []
        for k, ((context, _), spans, null) in enumerate(zip(self.pairs, ranked, self.null)):
            top = spans[0] if spans else None
            text = "" if top is None else context[top[0][0] : top[0][1]]
            if verified is not None:
                best.append((text, verified[k]))
            else:
                best.append((text, None if null is None else null - (-math.inf if top is None else top[1])))
        return best


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
