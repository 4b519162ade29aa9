"""What the training engine trains on: a task bundles the data, the loss and the dev metric.

The loop in :mod:`rckit.training.loop` is the same for every model; what differs between
SQuAD span extraction and cloze questions is small and lives here, behind one shape:

- ``model_inputs()``: the :class:`EmbeddingInfo` the model is built from;
- ``train_rows`` / ``train_lengths``: which training examples are used, and their lengths
  for length bucketing;
- ``collate(ids)``: a training batch;
- ``loss(model, out, batch)``: the model's own ``loss(out, batch, reward_fn=...)`` if it has
  one (DCN's iterative decoder, DCN+'s mixed objective), else the task's default loss;
- ``evaluate(model, rows, device, dtype, decode)``: dev metrics for the given dev rows, from
  :func:`rckit.evaluation.predict.predict` with the run's :class:`DecodeConfig`, as a dict
  whose ``score_key`` entry picks the best checkpoint (``dev_f1`` for spans, ``dev_acc`` for
  cloze);
- ``checkpoint_fields()``: what a checkpoint must carry to rebuild the model and its inputs.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from rckit.data.cloze import copy_targets, renumber_entities, with_copy_positions
from rckit.data.squad import load_json
from rckit.evaluation.decoding import DecodeConfig
from rckit.evaluation.predict import predict
from rckit.evaluation.squad_metrics import per_question_scores
from rckit.training.checkpoint import CheckpointError
from rckit.training.losses import span_loss


def embedding_shapes(info) -> dict:
    """What a model needs to rebuild its embedding tables before loading a state dict."""
    cv = info.char_vectors
    return {"words": int(info.word_vectors.shape[0]), "word_dim": int(info.word_vectors.shape[1]),
            "n_trainable_words": int(info.n_trainable_words), "n_chars": int(info.n_chars),
            "char_vectors_dim": None if cv is None else int(cv.shape[1]),
            "n_entities": int(getattr(info, "n_entities", 0))}


def training_indices(split, cfg) -> np.ndarray:
    """SQuAD examples with a usable answer inside the training context limit."""
    a = split.a
    ok = a["y_start"] >= 0
    if cfg.long_contexts == "drop":
        ok &= split.c_len <= cfg.max_c_len
    elif cfg.long_contexts == "truncate":
        ok &= a["y_end"] < cfg.max_c_len
    else:
        raise ValueError(f"long_contexts must be truncate or drop, got {cfg.long_contexts!r}")
    return np.flatnonzero(ok)


class SpanTask:
    """SQuAD: start/end logits over context tokens, official EM/F1 on the dev file."""

    kind = "span"
    score_key = "dev_f1"
    metric_keys = ("dev_em", "dev_f1")

    def __init__(self, prepared, cfg):
        self.prepared, self.cfg = prepared, cfg
        self.train_split, self.dev_split = prepared.split("train"), prepared.split("dev")
        self.train_rows = training_indices(self.train_split, cfg)
        self.train_lengths = np.minimum(self.train_split.c_len[self.train_rows], cfg.max_c_len)
        self.n_dev = len(self.dev_split)
        self.dev_file = prepared.meta["splits"]["dev"]["file"]
        self.dev_version = prepared.meta["splits"]["dev"]["version"]
        self._dev_raw = None  # parsed on first evaluation (rank 0 only)
        self._reward = None

    def model_inputs(self):
        return self.prepared.embedding_info()

    def collate(self, ids):
        return self.train_split.collate(ids, self.cfg.max_c_len, self.cfg.max_q_len)

    def reward_fn(self):
        """Official F1 of token spans against the gold answers, for models that sample spans."""
        if self._reward is None:
            from rckit.training.rewards import SpanF1Reward

            self._reward = SpanF1Reward(self.train_split)
        return self._reward

    def loss(self, model, out, batch) -> torch.Tensor:
        if hasattr(model, "loss"):
            return model.loss(out, batch, reward_fn=self.reward_fn() if getattr(model, "uses_reward", False) else None)
        return span_loss(out.start_logits, out.end_logits, batch.y_start, batch.y_end)

    def evaluate(self, model, rows, device, dtype, decode: DecodeConfig | None = None) -> dict:
        if self._dev_raw is None:
            self._dev_raw = load_json(self.dev_file)
        preds = predict(model, self.dev_split, rows, 32, device, dtype, decode)
        per_q = per_question_scores(self._dev_raw, preds, self.dev_version)
        chosen = [per_q[self.dev_split.qids[i]] for i in rows]
        return {"dev_em": 100.0 * sum(e for e, _ in chosen) / len(chosen),
                "dev_f1": 100.0 * sum(f for _, f in chosen) / len(chosen), "dev_questions": len(chosen)}

    def checkpoint_fields(self) -> dict:
        return {"task": self.kind, "vocab": self.prepared.vocabs.to_json(),
                "embedding": embedding_shapes(self.prepared.embedding_info()),
                "data": {"key": self.prepared.meta["key"], "prepared": str(self.prepared.root),
                         "dev_file": self.dev_file, "dev_version": self.dev_version}}

    def check_resume(self, ckpt: dict, path) -> None:
        if ckpt["vocab"]["words"] != self.prepared.vocabs.words.itos:
            raise CheckpointError(f"{path}: vocabulary differs from the prepared data; refusing to load its weights")

    def describe(self) -> dict:
        return {"prepared": str(self.prepared.root), "key": self.prepared.meta["key"], "dev_file": self.dev_file}


def cloze_loss(logits: torch.Tensor, answer: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy over the entity classes, in float32 (non-candidates already at finfo.min).

    ``valid`` (B,) bool leaves out examples whose answer was cut out of the document (it is
    then no candidate and its logit sits at finfo.min); a batch with none left gives a zero
    that still has a gradient.
    """
    ce = F.cross_entropy(logits.float(), answer, reduction="none")  # (B,)
    if valid is None:
        return ce.mean()
    return torch.where(valid, ce, torch.zeros_like(ce)).sum() / valid.sum().clamp(min=1)


class ClozeTask:
    """Cloze questions over anonymised entities: softmax over candidates, accuracy on dev."""

    kind = "cloze"
    score_key = "dev_acc"
    metric_keys = ("dev_acc",)

    def __init__(self, data, cfg):
        self.data, self.cfg = data, cfg
        self.train_split, self.dev_split = data.train, data.dev
        self.train_rows = np.arange(len(self.train_split))
        self.train_lengths = np.minimum(np.asarray(self.train_split.lengths), cfg.max_c_len + cfg.max_q_len)
        self.n_dev = len(self.dev_split)
        self.copy_on = False  # the engine sets it for the steps before train.copy_steps

    def model_inputs(self):
        return self.data.embedding_info()

    def collate(self, ids):
        batch = self.train_split.collate(ids, self.cfg.max_c_len)
        # torch's generator: its state is in every checkpoint, so a resumed run draws the same numbers
        if self.cfg.renumber_entities:
            batch = renumber_entities(batch)
        return with_copy_positions(batch) if self.copy_on else batch

    def loss(self, model, out, batch) -> torch.Tensor:
        """Cross-entropy of the answer; while the copy task runs, plus ``copy_weight`` times its
        cross-entropy (the entity at ``batch.copy_at``), both logged as loss terms."""
        if hasattr(model, "loss"):
            return model.loss(out, batch, reward_fn=None)
        loss = cloze_loss(out.logits, batch.answer, ~batch.answer_cut)
        if batch.copy_at is None:
            model.loss_terms = {}
            return loss
        if out.copy_logits is None:
            raise ValueError(f"{type(model).__name__} has no copy task (train.copy_steps): it does not attend to "
                             "document positions; set train.copy_steps=0")
        target, valid = copy_targets(batch)
        copy = cloze_loss(out.copy_logits, target, valid)
        model.loss_terms = {"answer": loss.detach(), "copy": copy.detach()}
        return loss + self.cfg.copy_weight * copy

    def evaluate(self, model, rows, device, dtype, decode: DecodeConfig | None = None) -> dict:
        pred = predict(model, self.dev_split, rows, 64, device, dtype, decode)
        gold = self.dev_split.a["answer"][np.asarray(rows)]
        return {"dev_acc": 100.0 * float((pred == gold).mean()), "dev_questions": len(rows)}

    def checkpoint_fields(self) -> dict:
        return {"task": self.kind, "vocab": self.data.vocab_json(),
                "embedding": embedding_shapes(self.data.embedding_info()),
                "data": self.data.describe()}

    def check_resume(self, ckpt: dict, path) -> None:
        if ckpt["vocab"] != self.data.vocab_json():
            raise CheckpointError(f"{path}: vocabulary differs from the cloze data; refusing to load its weights")

    def describe(self) -> dict:
        return self.data.describe()
