"""What the training engine and ``rckit bench`` train on: a task bundles the data, the loss and the dev metric.

The loop in :mod:`rckit.training.loop` is the same for every model; what differs between
SQuAD span extraction and cloze questions is small and lives here, behind one shape:

- ``attach_encoder(contextual)``: a step of training's set-up, before the model is built: for a
  span model that reads an encoder's states (``ReadingModel.contextual_of(config)``), the states
  of both splits, from their cache, built first where missing (:mod:`rckit.contextual.cache`);
- ``model_inputs()``: the :class:`EmbeddingInfo` a model is built from (with the attached
  encoder's record);
- ``train_rows`` / ``train_lengths``: which training examples are used, and their lengths
  for length bucketing (``lengths_for_training(rows)`` for any rows);
- ``collate(ids)``: a training batch (contexts cut at ``train.max_c_len``);
- ``loss(model, out, batch)``: the model's ``loss()`` (:class:`rckit.models.contract.ReadingModel`),
  given the F1 reward when the model ``uses_reward``, plus the cloze copy task while it runs;
  returns the loss and its named parts for the log;
- ``evaluate(model, rows, device, dtype, decode)``: dev metrics for the given dev rows, from
  :func:`rckit.evaluation.split_answers.predict` with the run's :class:`DecodeConfig`, as a dict
  whose ``score_key`` entry picks the best checkpoint (``dev_f1`` for spans, ``dev_acc`` for
  cloze); ``eval_batch``/``eval_lengths``/``decode`` are the same reading, a batch at a time,
  for ``rckit bench``'s timings;
- ``checkpoint_fields()``: what a checkpoint must carry to rebuild the model and its inputs.

``train_split`` names the split trained on: ``"train"`` for training, ``"dev"`` for
``rckit bench``, which times training steps on a slice of the dev split.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import torch

from rckit.answering.decoding import DecodeConfig, best_spans
from rckit.data.cloze.examples import copy_targets, renumber_entities, with_copy_positions
from rckit.data.squad import load_json
from rckit.evaluation.split_answers import predict, predict_split
from rckit.evaluation.squad_metrics import abstaining, best_thresholds, only_questions, per_question_scores
from rckit.layers.embedding import CharCNN, PartiallyFrozenEmbedding
from rckit.model_files.checkpoint import CheckpointError
from rckit.models.losses import cloze_loss
from rckit.training.rewards import SpanF1Reward

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from rckit.answering.decoding import SpanPrediction
    from rckit.contextual.spec import ContextualSpec
    from rckit.data.batching import Batch
    from rckit.data.cloze.dataset import ClozeData
    from rckit.data.cloze.examples import ClozeBatch
    from rckit.data.embeddings import EmbeddingInfo
    from rckit.data.prepare import Prepared
    from rckit.data.split import SquadSplit
    from rckit.models.contract import ClozeOutput, ReadingModel, SpanOutput
    from rckit.training.config import TrainConfig


def embedding_shapes(info: EmbeddingInfo) -> dict:
    """What a model needs to rebuild its embedding tables before loading a state dict."""
    cv = info.char_vectors
    return {
        "words": int(info.word_vectors.shape[0]),
        "word_dim": int(info.word_vectors.shape[1]),
        "n_trainable_words": int(info.n_trainable_words),
        "n_chars": int(info.n_chars),
        "char_vectors_dim": None if cv is None else int(cv.shape[1]),
        "n_entities": int(info.n_entities),
        "contextual": None if info.contextual is None else info.contextual.to_json(),
    }


def training_indices(split: SquadSplit, cfg: TrainConfig) -> np.ndarray:
    """SQuAD examples with a usable answer inside the training context limit, and the
    unanswerable questions of SQuAD v2.0 data (nothing to cut off; a v1.1 split has none)."""
    a = split.a
    ok = a["y_start"] >= 0
    if cfg.long_contexts == "drop":
        ok &= split.c_len <= cfg.max_c_len
    elif cfg.long_contexts == "truncate":
        ok &= a["y_end"] < cfg.max_c_len
    else:
        raise ValueError(f"long_contexts must be truncate or drop, got {cfg.long_contexts!r}")
    return np.flatnonzero(ok | ~a["answerable"])


def dev_metrics(scores: list[tuple[float, float]]) -> dict:
    """``dev_em``/``dev_f1`` (percent) and ``dev_questions`` of per-question (EM, F1) pairs."""
    return {
        "dev_em": 100.0 * sum(e for e, _ in scores) / len(scores),
        "dev_f1": 100.0 * sum(f for _, f in scores) / len(scores),
        "dev_questions": len(scores),
    }


class SpanTask:
    """SQuAD: start/end logits over context tokens, official EM/F1 on the dev file."""

    kind = "span"
    score_key = "dev_f1"
    metric_keys = ("dev_em", "dev_f1")

    def __init__(self, prepared: Prepared, cfg: TrainConfig, train_split: str = "train"):
        self.prepared, self.cfg = prepared, cfg
        self.train_split, self.dev_split = prepared.split(train_split), prepared.split("dev")
        self.split_names = (train_split, "dev")
        self.contextual: ContextualSpec | None = None  # the encoder whose states the splits carry, once attached
        self.train_rows = training_indices(self.train_split, cfg)
        self.train_lengths = self.lengths_for_training(self.train_rows)
        self.n_dev = len(self.dev_split)
        self.dev_file = prepared.meta["splits"]["dev"]["file"]
        self.dev_version = prepared.meta["splits"]["dev"]["version"]
        self.copy_on = False  # span data has no copy task
        self._dev_raw = None  # parsed on first evaluation (rank 0 only)
        self._reward = None

    def attach_encoder(self, contextual: ContextualSpec | None) -> None:
        """Bring the states of encoder ``contextual`` (its name and layers: ``ReadingModel.contextual_of``)
        to both splits, from their cache (:mod:`rckit.contextual.cache`), computed first where
        missing: an hour and more for SQuAD v1.1 train on a CPU. None: a model that reads none.
        Afterwards ``self.contextual`` is the attached encoder's whole spec (digest, window, width)."""
        if contextual is None:
            self.contextual = None
            return
        if contextual.reads_same(self.contextual):
            return
        from rckit.contextual.states import ContextualEncoder

        encoder = ContextualEncoder.load(contextual)
        root = self.prepared.states_root
        self.train_split = self.train_split.with_encoder(root, encoder, self.split_names[0])
        self.dev_split = self.dev_split.with_encoder(root, encoder, self.split_names[1])
        self.contextual = encoder.spec

    def model_inputs(self) -> EmbeddingInfo:
        """The tables a model is built from, with the attached encoder's record (:meth:`attach_encoder`)."""
        return replace(self.prepared.embedding_info(), contextual=self.contextual)

    def check_model(self, model: ReadingModel) -> None:
        """Refuse to train a model that cannot abstain on data with unanswerable questions
        (their loss would be left out and the reader never learn to say "no answer")."""
        n = int((~self.train_split.a["answerable"]).sum())
        if n and not model.no_answer:
            raise ValueError(
                f"the training data holds {n} unanswerable questions (SQuAD v2.0) but this "
                f"model has no no-answer score: add --set model.no_answer=true"
            )

    def first_rows(self, n: int) -> np.ndarray:
        """The first ``n`` rows of the training split that can train (a question with an answer)."""
        idx = np.arange(min(n, len(self.train_split)))
        return idx[self.train_split.a["y_start"][idx] >= 0]

    def lengths_for_training(self, rows: np.ndarray | Sequence[int]) -> np.ndarray:
        return np.minimum(self.train_split.c_len[rows], self.cfg.max_c_len)

    def collate(self, ids: np.ndarray | Sequence[int]) -> Batch:
        return self.train_split.collate(ids, self.cfg.max_c_len, self.cfg.max_q_len)

    def reward_fn(self) -> SpanF1Reward:
        """Official F1 of token spans against the gold answers, for models that sample spans."""
        if self._reward is None:
            self._reward = SpanF1Reward(self.train_split)
        return self._reward

    def loss(self, model: ReadingModel, out: SpanOutput, batch: Batch) -> tuple[torch.Tensor, dict]:
        loss = model.loss(out, batch, reward_fn=self.reward_fn() if model.uses_reward else None)
        return loss, model.loss_terms

    def eval_lengths(self, rows: np.ndarray | Sequence[int]) -> np.ndarray:
        return self.dev_split.c_len[rows]

    def eval_batch(self, rows: np.ndarray | Sequence[int]) -> Batch:
        return self.dev_split.collate(rows)  # whole contexts

    def decode(self, out: SpanOutput, batch: Batch, decode: DecodeConfig) -> SpanPrediction:
        return best_spans(
            out.start_logits.float().cpu().numpy(),
            out.end_logits.float().cpu().numpy(),
            batch.c_mask.cpu().numpy(),
            decode.max_answer_len,
        )

    def evaluate(
        self,
        model: ReadingModel,
        rows: np.ndarray | Sequence[int],
        device: torch.device | str,
        dtype: torch.dtype | None,
        decode: DecodeConfig | None = None,
    ) -> dict:
        """Official EM/F1 on ``rows`` of the dev file. A model that can abstain, evaluated on a
        v2.0 file (the tuning slice), is scored at the no-answer threshold that maximises F1 on
        those rows, returned as ``no_answer_threshold`` (the loop saves it with ``best.pt``)."""
        if self._dev_raw is None:
            self._dev_raw = load_json(self.dev_file)
        decode = decode or DecodeConfig()
        if model.no_answer and str(self.dev_version).startswith("2"):
            return self.evaluate_with_threshold(model, rows, device, dtype, decode)
        preds = predict(model, self.dev_split, rows, 32, device, dtype, decode)
        per_q = per_question_scores(self._dev_raw, preds, self.dev_version)
        return dev_metrics([per_q[self.dev_split.qids[i]] for i in rows])

    def evaluate_with_threshold(
        self,
        model: ReadingModel,
        rows: np.ndarray | Sequence[int],
        device: torch.device | str,
        dtype: torch.dtype | None,
        decode: DecodeConfig,
    ) -> dict:
        margins: dict[str, float] = {}
        spans = predict_split(
            model, self.dev_split, rows, 32, replace(decode, no_answer_threshold=math.inf), device, dtype, None, margins
        )
        raw = only_questions(self._dev_raw, set(spans))
        threshold = best_thresholds(raw, spans, margins)["best_f1_thresh"]
        per_q = per_question_scores(raw, abstaining(spans, margins, threshold), "2.0")
        return {**dev_metrics(list(per_q.values())), "no_answer_threshold": threshold}

    def checkpoint_fields(self) -> dict:
        return {
            "task": self.kind,
            "vocab": self.prepared.vocabs.to_json(),
            "embedding": embedding_shapes(replace(self.prepared.embedding_info(), contextual=self.contextual)),
            "data": {
                "key": self.prepared.meta["key"],
                "prepared": str(self.prepared.root),
                "dev_file": self.dev_file,
                "dev_version": self.dev_version,
            },
        }

    def check_resume(self, ckpt: dict, path: str | Path) -> None:
        if ckpt["vocab"]["words"] != self.prepared.vocabs.words.itos:
            raise CheckpointError(f"{path}: vocabulary differs from the prepared data; refusing to load its weights")

    def weights_from(self, state: dict, vocab: dict, model: torch.nn.Module, path: str | Path) -> tuple[dict, dict]:
        """Another run's model weights ``state``, over its vocabularies ``vocab`` (as
        :meth:`Vocabularies.to_json`), fitted to this data's: each row of a word table
        (:class:`PartiallyFrozenEmbedding`, trained and fixed rows alike) or character table
        (:class:`CharCNN`) is taken by the word or character it stands for. Rows of words or
        characters the other run lacks keep ``model``'s initialisation (for a word with a
        pretrained vector, that vector). Returns the fitted state and, per table, how many of its
        rows came from ``state``."""
        words, chars = self.prepared.vocabs.words.itos, self.prepared.vocabs.chars.itos
        if vocab["words"] == words and vocab["chars"] == chars:
            return state, {}
        state, own, taken = dict(state), model.state_dict(), {}
        for name, m in model.named_modules():
            if isinstance(m, PartiallyFrozenEmbedding):
                keys, theirs, ours = (f"{name}.trainable", f"{name}.frozen"), vocab["words"], words
            elif isinstance(m, CharCNN):
                keys, theirs, ours = (f"{name}.embed.weight",), vocab["chars"], chars
            else:
                continue
            if not all(k in state for k in keys):
                continue
            src = torch.cat([state[k] for k in keys])  # (their rows, D)
            dst = torch.cat([own[k] for k in keys]).clone()  # (our rows, D)
            if src.shape[0] != len(theirs) or src.shape[1] != dst.shape[1]:
                continue  # another width: the shape check names it
            row = {w: i for i, w in enumerate(theirs)}
            pairs = [(i, row[w]) for i, w in enumerate(ours) if w in row]
            if pairs:
                to, fro = torch.tensor(pairs).T
                dst[to] = src[fro].to(dst.dtype)
            sizes = [own[k].shape[0] for k in keys]
            state.update(zip(keys, dst.split(sizes)))
            taken[name] = {"rows": len(ours), "taken": len(pairs)}
        return state, taken

    def describe(self) -> dict:
        return {"prepared": str(self.prepared.root), "key": self.prepared.meta["key"], "dev_file": self.dev_file}


class ClozeTask:
    """Cloze questions over anonymised entities: softmax over candidates, accuracy on dev."""

    kind = "cloze"
    score_key = "dev_acc"
    metric_keys = ("dev_acc",)

    def __init__(self, data: ClozeData, cfg: TrainConfig, train_split: str = "train"):
        self.data, self.cfg = data, cfg
        self.train_split = data.dev if train_split == "dev" else data.train
        self.dev_split = data.dev
        self.train_rows = np.arange(len(self.train_split))
        self.train_lengths = self.lengths_for_training(self.train_rows)
        self.n_dev = len(self.dev_split)
        self.copy_on = False  # the engine sets it for the steps before train.copy_steps

    def attach_encoder(self, contextual: tuple[str, tuple[int, ...]] | None) -> None:
        if contextual is not None:
            raise ValueError("contextual states are for span models on SQuAD; cloze documents are anonymised")

    def model_inputs(self) -> EmbeddingInfo:
        return self.data.embedding_info()

    def first_rows(self, n: int) -> np.ndarray:
        """The first ``n`` rows of the training split (every answer is an entity of its document)."""
        return np.arange(min(n, len(self.train_split)))

    def lengths_for_training(self, rows: np.ndarray | Sequence[int]) -> np.ndarray:
        return np.minimum(np.asarray(self.train_split.lengths)[rows], self.cfg.max_c_len + self.cfg.max_q_len)

    def check_model(self, model: ReadingModel) -> None:
        """Cloze data always has an answer among the candidates: nothing to check."""

    def collate(self, ids: np.ndarray | Sequence[int]) -> ClozeBatch:
        batch = self.train_split.collate(ids, self.cfg.max_c_len)
        # torch's generator: its state is in every checkpoint, so a resumed run draws the same numbers
        if self.cfg.renumber_entities:
            batch = renumber_entities(batch)
        return with_copy_positions(batch) if self.copy_on else batch

    def loss(self, model: ReadingModel, out: ClozeOutput, batch: ClozeBatch) -> tuple[torch.Tensor, dict]:
        """The model's loss (cross-entropy of the answer); while the copy task runs, plus
        ``copy_weight`` times its cross-entropy (the entity at ``batch.copy_at``), both logged."""
        loss = model.loss(out, batch)
        if batch.copy_at is None:
            return loss, model.loss_terms
        if out.copy_logits is None:
            raise ValueError(
                f"{type(model).__name__} has no copy task (train.copy_steps): it does not attend to "
                "document positions; set train.copy_steps=0"
            )
        target, valid = copy_targets(batch)
        copy = cloze_loss(out.copy_logits, target, valid)
        return loss + self.cfg.copy_weight * copy, {"answer": loss.detach(), "copy": copy.detach()}

    def eval_lengths(self, rows: np.ndarray | Sequence[int]) -> np.ndarray:
        return np.asarray(self.dev_split.lengths)[rows]

    def eval_batch(self, rows: np.ndarray | Sequence[int]) -> ClozeBatch:
        return self.dev_split.collate(rows)  # whole documents

    def decode(self, out: ClozeOutput, batch: ClozeBatch, decode: DecodeConfig | None = None) -> torch.Tensor:
        return out.logits.float().argmax(-1)  # (B,) entity numbers; non-candidates sit at the bottom

    def evaluate(
        self,
        model: ReadingModel,
        rows: np.ndarray | Sequence[int],
        device: torch.device | str,
        dtype: torch.dtype | None,
        decode: DecodeConfig | None = None,
    ) -> dict:
        pred = predict(model, self.dev_split, rows, 64, device, dtype, decode)
        gold = self.dev_split.a["answer"][np.asarray(rows)]
        return {"dev_acc": 100.0 * float((pred == gold).mean()), "dev_questions": len(rows)}

    def checkpoint_fields(self) -> dict:
        return {
            "task": self.kind,
            "vocab": self.data.vocab_json(),
            "embedding": embedding_shapes(self.data.embedding_info()),
            "data": self.data.describe(),
        }

    def check_resume(self, ckpt: dict, path: str | Path) -> None:
        if ckpt["vocab"] != self.data.vocab_json():
            raise CheckpointError(f"{path}: vocabulary differs from the cloze data; refusing to load its weights")

    def weights_from(self, state: dict, vocab: dict, model: torch.nn.Module, path: str | Path) -> tuple[dict, dict]:
        """Another run's weights, refused unless its vocabulary is this data's."""
        self.check_resume({"vocab": vocab}, path)
        return state, {}

    def describe(self) -> dict:
        return self.data.describe()


def make_task(
    kind: str, data: Prepared | ClozeData, cfg: TrainConfig, train_split: str = "train"
) -> SpanTask | ClozeTask:
    """The task of a model's ``task_of(config)``: ``data`` is prepared SQuAD or ``ClozeData``."""
    tasks = {"span": SpanTask, "cloze": ClozeTask}
    if kind not in tasks:
        raise ValueError(f"a task is span or cloze, got {kind!r}")
    return tasks[kind](data, cfg, train_split)
