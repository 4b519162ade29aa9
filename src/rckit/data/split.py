"""A prepared SQuAD split held as flat NumPy arrays (:mod:`rckit.data.prepare` writes them).

No PyTorch here: the answering path (:class:`rckit.answering.reader.Reader`) featurizes questions into a
split without it; :meth:`SquadSplit.collate` makes training and evaluation batches (tensors).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


class SquadSplit:
    """One prepared split held as flat numpy arrays (see ``rckit.data.prepare``)."""

    ARRAYS = (
        "form_words", "form_chars", "ctx_ptr", "ctx_forms", "ctx_offsets",
        "q_ptr", "q_forms", "q_offsets", "q_ctx", "y_start", "y_end", "answerable",
    )  # fmt: skip

    def __init__(
        self, arrays: dict[str, np.ndarray], qids: list[str], contexts: list[str], questions: list[str] | None = None
    ):
        missing = [k for k in self.ARRAYS if k not in arrays]
        if missing:
            raise ValueError(f"split is missing arrays: {missing}")
        self.a = arrays
        self.qids = qids
        self.contexts = contexts
        self.questions = questions
        ctx_len = np.diff(arrays["ctx_ptr"])
        self.c_len = ctx_len[arrays["q_ctx"]]  # (n_q,) context length of each question
        self.q_len = np.diff(arrays["q_ptr"])

    @classmethod
    def from_arrays(cls, arrays, qids, contexts, questions=None) -> SquadSplit:
        return cls(arrays, qids, contexts, questions)

    @classmethod
    def load(cls, root: str | Path, name: str) -> SquadSplit:
        root = Path(root)
        if not (root / f"{name}.text.json").exists():
            raise FileNotFoundError(f"{root}: no prepared split named {name!r}")
        arrays = {k: np.load(root / f"{name}.{k}.npy") for k in cls.ARRAYS}
        text = json.loads((root / f"{name}.text.json").read_text())
        return cls(arrays, text["qids"], text["contexts"], text["questions"])

    def __len__(self) -> int:
        return len(self.q_len)

    def texts(self):
        """The contexts and questions with their tokens' character spans: what contextual states
        are computed from (:class:`rckit.contextual.cache.SplitTexts`)."""
        from rckit.contextual.cache import SplitTexts

        if self.questions is None:
            raise ValueError("this split does not hold its questions' texts")
        a = self.a
        return SplitTexts(self.contexts, a["ctx_ptr"], a["ctx_offsets"], self.questions, a["q_ptr"], a["q_offsets"])

    def head(self, n: int) -> SquadSplit:
        """The first ``n`` questions, with the contexts up to the last they ask about (a split lists
        its questions context by context): what ``rckit evaluate --limit N`` reads, so a model
        reading contextual states pays the encoder for those texts only."""
        a = self.a
        n = min(int(n), len(self))
        n_ctx = int(a["q_ctx"][:n].max()) + 1 if n else 0
        c_end, q_end = int(a["ctx_ptr"][n_ctx]), int(a["q_ptr"][n])
        arrays = {
            "form_words": a["form_words"],
            "form_chars": a["form_chars"],
            "ctx_ptr": a["ctx_ptr"][: n_ctx + 1],
            "ctx_forms": a["ctx_forms"][:c_end],
            "ctx_offsets": a["ctx_offsets"][:c_end],
            "q_ptr": a["q_ptr"][: n + 1],
            "q_forms": a["q_forms"][:q_end],
            "q_offsets": a["q_offsets"][:q_end],
            **{k: a[k][:n] for k in ("q_ctx", "y_start", "y_end", "answerable")},
        }
        return SquadSplit(
            arrays, self.qids[:n], self.contexts[:n_ctx], None if self.questions is None else self.questions[:n]
        )

    def with_states(self, ctx_rows: np.ndarray, q_rows: np.ndarray) -> SquadSplit:
        """This split whose batches carry contextual states: ``ctx_rows`` (N, K, D) row ``j`` the
        state of context token ``j``, ``q_rows`` (Nq, K, D) of question token ``j``."""
        if len(ctx_rows) != len(self.a["ctx_forms"]) or len(q_rows) != len(self.a["q_forms"]):
            raise ValueError(
                f"contextual states for {len(ctx_rows)} context and {len(q_rows)} question tokens, "
                f"and the split has {len(self.a['ctx_forms'])} and {len(self.a['q_forms'])}"
            )
        return SquadSplit(
            {**self.a, "ctx_state_rows": ctx_rows, "q_state_rows": q_rows}, self.qids, self.contexts, self.questions
        )

    def with_encoder(self, root: str | Path, encoder, what: str = "", progress: bool = True) -> SquadSplit:
        """This split with the states of ``encoder`` (a :class:`rckit.contextual.states.ContextualEncoder`),
        from their cache under ``root``, built first where missing (:func:`rckit.contextual.cache.split_states`)."""
        from rckit.contextual.cache import split_states

        states = split_states(root, self.texts(), encoder, progress, what)
        return self.with_states(states.ctx, states.q)

    def context_of(self, i: int) -> tuple[str, np.ndarray]:
        """Context text and its (T, 2) token character offsets for question ``i``."""
        c = int(self.a["q_ctx"][i])
        lo, hi = self.a["ctx_ptr"][c], self.a["ctx_ptr"][c + 1]
        return self.contexts[c], self.a["ctx_offsets"][lo:hi]

    def collate(self, indices, max_c_len: int | None = None, max_q_len: int | None = None):
        """A :class:`rckit.data.batching.Batch` of the examples ``indices``, padded to the longest
        in the batch (after truncation).

        Answers that end beyond a truncated context get ``y = -1``; training code chooses
        which examples to feed, so nothing is dropped here.
        """
        a = self.a
        idx = np.asarray(indices, dtype=np.int64)
        c_len = self.c_len[idx]
        q_len = self.q_len[idx]
        if max_c_len is not None:
            c_len = np.minimum(c_len, max_c_len)
        if max_q_len is not None:
            q_len = np.minimum(q_len, max_q_len)
        c_lo = a["ctx_ptr"][a["q_ctx"][idx]]
        y_start = a["y_start"][idx].astype(np.int64)
        y_end = a["y_end"][idx].astype(np.int64)
        cut = y_end >= c_len
        y_start[cut] = -1
        y_end[cut] = -1
        from rckit.data.batching import assemble  # tensors: training and evaluation only

        return assemble(a, c_lo, c_len, a["q_ptr"][idx], q_len, y_start, y_end, idx, a["answerable"][idx])
