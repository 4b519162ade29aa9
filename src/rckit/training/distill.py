"""Distilling rckit's small encoder (:mod:`rckit.contextual.student`) from a teacher's cached states.

**What it learns.** A reader reads the teacher's layers ``L`` (all-MiniLM-L6-v2's 4 and 6), each
word's state the mean of its pieces' (:func:`rckit.contextual.pieces.pool`). The student reads
the same text in the same window and its last ``K = len(L)`` layers, pooled onto the words alike,
are pulled towards the teacher's: per word and layer,

    mse:     ||s_k - t_k||^2 / D
    cosine:  1 - cos(s_k, t_k)

averaged over the words of a batch and the K layers. The targets are what ``rckit prepare squad
--contextual minilm`` caches (:mod:`rckit.contextual.cache`), the states a reader trains on, so the
teacher does not run again here. Texts longer than the encoder's window (the teacher read them in
overlapping windows) are left out of training; their words are counted in the log.

**The data.** The training split's contexts and questions (SQuAD v1.1 train), each text once an
epoch, in batches of like-length texts of at most ``batch_pieces`` padded pieces. The held-out
figures come from the first contexts of the evaluation split and their questions: per layer the
mean squared error and the share of the teacher's variance the student leaves unexplained
(``1 - R^2``).

**The run** (:func:`distill`) is resumable and time-budgeted (:mod:`rckit.training.steps`): ``DIR/last.pt``
holds the student, AdamW, the step and the data order's seed (each epoch's order drawn from
``seed + epoch``); ``DIR/encoder/`` the best student so far by held-out error, an encoder folder
that ``--contextual DIR/encoder`` reads; ``DIR/log.jsonl`` a line per evaluation. The word
embeddings stay the teacher's (frozen); every other weight trains.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from rckit.contextual.bert import BertEncoder
from rckit.contextual.encoders import DEFAULT_LAYERS, EncoderFiles
from rckit.contextual.pieces import PieceTokenizer, token_pieces
from rckit.contextual.student import new_student, save_student, student_config, student_layers
from rckit.data.split import SquadSplit
from rckit.training.steps import adamw_run, previous_run, run_steps

LOSSES = ("mse", "cosine")


@dataclass(frozen=True)
class DistillConfig:
    n_layers: int = 2  # the student's layers
    teacher_layers: tuple[int, ...] = DEFAULT_LAYERS  # the teacher's layers it stands for
    loss: str = "mse"
    lr: float = 2e-4
    warmup: float = 0.05  # share of the planned steps
    weight_decay: float = 0.01
    epochs: float = 3.0
    batch_pieces: int = 4096  # padded pieces a batch
    max_pieces: int = 256  # the window, [CLS] and [SEP] included
    eval_every: int = 200
    eval_contexts: int = 100  # held-out: the first contexts of the evaluation split and their questions
    seed: int = 0

    def __post_init__(self):
        if self.loss not in LOSSES:
            raise ValueError(f"loss {self.loss!r}: one of {', '.join(LOSSES)}")
        object.__setattr__(self, "teacher_layers", tuple(int(x) for x in self.teacher_layers))


@dataclass
class Text:
    """A text as the student reads it: its pieces, and for each of its words (rows ``rows`` of the
    teacher's states) the run of pieces ``[lo, hi)`` it pools."""

    ids: np.ndarray  # (P,) pieces, without [CLS] and [SEP]
    rows: np.ndarray  # (T,) rows of the teacher's states
    lo: np.ndarray  # (T,)
    hi: np.ndarray  # (T,)


def texts_of(
    split: SquadSplit, tokenizer: PieceTokenizer, max_pieces: int, n_contexts: int | None = None
) -> tuple[list[Text], list[Text], int]:
    """The split's contexts and questions (the first ``n_contexts`` contexts and their questions,
    where given) as :class:`Text`; the third value: words left out (their text overflows a window)."""
    a = split.a
    n_ctx = len(split.contexts) if n_contexts is None else min(n_contexts, len(split.contexts))
    n_q = len(split.questions) if n_contexts is None else int(np.searchsorted(a["q_ctx"], n_ctx))
    out, left_out = [], 0
    for strings, ptr, offsets, n in (
        (split.contexts, a["ctx_ptr"], a["ctx_offsets"], n_ctx),
        (split.questions, a["q_ptr"], a["q_offsets"], n_q),
    ):
        kept = []
        for i, (ids, piece_offsets) in enumerate(tokenizer.pieces(strings[:n])):
            rows = np.arange(ptr[i], ptr[i + 1])
            if len(ids) > max_pieces - 2:
                left_out += len(rows)
                continue
            lo, hi = token_pieces(piece_offsets, offsets[rows])
            kept.append(Text(ids, rows, lo, hi))
        out.append(kept)
    return out[0], out[1], left_out


def batches(texts: list[Text], batch_pieces: int, seed: int, kinds: list[int] | None = None) -> list[list[int]]:
    """The texts in batches of like length and one kind (``kinds[i]``: which states text ``i``'s rows
    index), at most ``batch_pieces`` padded pieces each, in an order drawn from ``seed``."""
    rng = random.Random(seed)
    kinds = kinds or [0] * len(texts)
    order = sorted(range(len(texts)), key=lambda i: (kinds[i], len(texts[i].ids), rng.random()))
    out, batch = [], []
    for i in order:
        width = len(texts[i].ids) + 2  # the longest so far: the order is by length
        if batch and ((len(batch) + 1) * width > batch_pieces or kinds[i] != kinds[batch[0]]):
            out.append(batch)
            batch = []
        batch.append(i)
    if batch:
        out.append(batch)
    rng.shuffle(out)
    return out


def student_states(
    model: BertEncoder, layers: tuple[int, ...], batch: list[Text], cls: int, sep: int
) -> tuple[torch.Tensor, np.ndarray]:
    """The student's states of ``layers`` pooled onto the words of ``batch``: (W, K, D) for the W
    words some piece touches, and their rows in the teacher's states (W,)."""
    P = max(len(t.ids) for t in batch) + 2
    ids = np.zeros((len(batch), P), np.int64)
    mask = np.zeros((len(batch), P), bool)
    pieces, words, weights, rows = [], [], [], []
    n_words = 0
    for b, t in enumerate(batch):
        n = len(t.ids)
        ids[b, 0], ids[b, 1 : n + 1], ids[b, n + 1] = cls, t.ids, sep
        mask[b, : n + 2] = True
        touched = t.hi > t.lo
        lo, hi = t.lo[touched], t.hi[touched]
        count = hi - lo
        word = np.repeat(np.arange(n_words, n_words + len(lo)), count)  # each word once per piece it pools
        piece = np.concatenate([np.arange(s, e) for s, e in zip(lo, hi)]) if len(lo) else np.zeros(0, np.int64)
        pieces.append(b * P + 1 + piece)  # 1: after [CLS]
        words.append(word)
        weights.append(np.repeat(1.0 / count, count))
        rows.append(t.rows[touched])
        n_words += len(lo)
    states = model(torch.from_numpy(ids), torch.from_numpy(mask), layers)  # (B, P, K, D)
    flat = states.reshape(-1, *states.shape[2:])  # (B*P, K, D)
    piece_t = torch.from_numpy(np.concatenate(pieces))
    weight_t = torch.from_numpy(np.concatenate(weights).astype(np.float32))[:, None, None]
    pooled = torch.zeros(n_words, *states.shape[2:], dtype=states.dtype)
    pooled = pooled.index_add(0, torch.from_numpy(np.concatenate(words)), flat[piece_t] * weight_t)  # (W, K, D)
    return pooled, np.concatenate(rows)


def layer_losses(student: torch.Tensor, teacher: torch.Tensor, loss: str) -> torch.Tensor:
    """(K,) the loss of each layer, averaged over the words: ``student``, ``teacher`` (W, K, D)."""
    if loss == "cosine":
        return (1 - torch.nn.functional.cosine_similarity(student, teacher, dim=-1)).mean(0)
    return ((student - teacher) ** 2).mean(dim=(0, 2))


def held_out(
    model: BertEncoder,
    layers: tuple[int, ...],
    texts: list[list[Text]],
    states: list[np.ndarray],
    tok: PieceTokenizer,
    config: DistillConfig,
) -> dict:
    """Per layer, the held-out mean squared error and the share of the teacher's variance left
    unexplained; ``texts[i]`` reads rows of ``states[i]``."""
    model.eval()
    err = sq = None
    n = 0
    means = []
    with torch.inference_mode():
        for kind_texts, kind_states in zip(texts, states):
            for idx in batches(kind_texts, config.batch_pieces, 0):
                batch = [kind_texts[i] for i in idx]
                pooled, rows = student_states(model, layers, batch, tok.cls, tok.sep)
                target = torch.from_numpy(np.asarray(kind_states[rows], np.float32))
                e = ((pooled - target) ** 2).sum(dim=(0, 2)).double()
                err = e if err is None else err + e
                sq_t = (target.double() ** 2).sum(dim=(0, 2))
                sq = sq_t if sq is None else sq + sq_t
                means.append(target.double().sum(0))  # (K, D)
                n += len(rows)
    model.train()
    D = means[0].shape[-1]
    mean = torch.stack(means).sum(0) / n  # (K, D)
    variance = sq / n - (mean**2).sum(-1)  # (K,) summed over dimensions
    mse = err / n
    return {
        "mse": [round(float(x) / D, 6) for x in mse],
        "unexplained": [round(float(x), 4) for x in mse / variance],
        "words": n,
    }


def distill(
    teacher: EncoderFiles,
    train: SquadSplit,
    dev: SquadSplit,
    out: str | Path,
    config: DistillConfig | None = None,
    minutes: float | None = None,
    max_steps: int | None = None,
    resume: bool = False,
    log: Callable[[str], object] = print,
    progress: bool = True,
) -> dict:
    """Distil a student of ``teacher`` into ``out`` (module docstring) for at most ``minutes`` of
    training (and ``max_steps`` steps) in this call. ``train`` and ``dev`` carry the teacher's
    states of ``config.teacher_layers`` (``ctx_state_rows``, ``q_state_rows``: :meth:`SquadSplit.with_encoder`).
    ``resume``: continue ``out/last.pt``. Returns the run's state: steps done, planned, the best
    held-out figures."""
    out = Path(out)
    state = previous_run(out, resume)
    config = _config_of(state, teacher, out) if state is not None else (config or DistillConfig())
    _check_states(train, dev, config, teacher)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(config.seed)
    model_config = student_config(teacher, config.n_layers, config.teacher_layers)
    layers = student_layers(config.n_layers, config.teacher_layers)
    model = new_student(teacher, model_config)
    model.word.weight.requires_grad_(False)
    tok = PieceTokenizer(teacher.root / "tokenizer.json")
    texts, kinds, held = _texts(train, dev, tok, config, log)
    train_states = (train.a["ctx_state_rows"], train.a["q_state_rows"])
    params = [p for p in model.parameters() if p.requires_grad]
    per_epoch = len(batches(texts, config.batch_pieces, config.seed, kinds))
    kept = {"config": asdict(config), "teacher_digest": teacher.digest}
    run = adamw_run(out, model, params, per_epoch, config, kept)
    step, best = run.restore(state)

    def figures() -> dict:
        return held_out(model, layers, held, [dev.a["ctx_state_rows"], dev.a["q_state_rows"]], tok, config)

    def loss_of(idx: list[int]) -> torch.Tensor:
        pooled, rows = student_states(model, layers, [texts[i] for i in idx], tok.cls, tok.sep)
        target = torch.from_numpy(np.asarray(train_states[kinds[idx[0]]][rows], np.float32))
        return layer_losses(pooled, target, config.loss).mean()

    def keep(line: dict, best: dict | None) -> dict | None:  # the lowest held-out error
        if best is not None and sum(line["mse"]) >= sum(best["mse"]):
            return None
        save_student(model, model_config, teacher, out / "encoder")
        return line

    if best is None:  # the start, to measure against
        best = {"step": 0, **figures()}
        run.log_line(best, log)
        save_student(model, model_config, teacher, out / "encoder")
    model.train()
    return run_steps(
        run,
        step,
        best,
        lambda epoch: batches(texts, config.batch_pieces, config.seed + epoch, kinds),
        loss_of,
        figures,
        keep,
        tqdm(total=run.planned, initial=step, desc="distilling", unit="step", disable=None if progress else True),
        minutes,
        max_steps,
        log,
    )


def _texts(
    train: SquadSplit, dev: SquadSplit, tok: PieceTokenizer, config: DistillConfig, log: Callable[[str], object]
) -> tuple[list[Text], list[int], list[list[Text]]]:
    """The training texts (contexts, then questions), each one's kind (0 a context, 1 a question:
    which array of teacher states its rows index), and the held-out contexts and questions."""
    contexts, questions, left_out = texts_of(train, tok, config.max_pieces)
    held = list(texts_of(dev, tok, config.max_pieces, config.eval_contexts)[:2])
    log(
        f"{len(contexts):,} contexts and {len(questions):,} questions to learn from "
        f"({left_out:,} words of texts longer than {config.max_pieces} pieces left out); "
        f"held out: {len(held[0])} contexts and {len(held[1])} questions of the evaluation split"
    )
    return [*contexts, *questions], [0] * len(contexts) + [1] * len(questions), held


def _config_of(state: dict, teacher: EncoderFiles, out: Path) -> DistillConfig:
    """A resumed run's config, refused where ``teacher`` is not the one it was distilled from."""
    if state.get("teacher_digest") != teacher.digest:
        raise ValueError(
            f"{out / 'last.pt'}: distilled from the teacher with digest {state.get('teacher_digest')}, "
            f"and {teacher.name!r} here is {teacher.digest}: resume with that teacher"
        )
    return DistillConfig(**state["config"])


def _check_states(train: SquadSplit, dev: SquadSplit, config: DistillConfig, teacher: EncoderFiles) -> None:
    """Refuse splits without the teacher's states of the layers the student stands for, or a window
    longer than the encoder reads."""
    for name, split in (("training", train), ("evaluation", dev)):
        if "ctx_state_rows" not in split.a:
            raise ValueError(f"the {name} split carries no teacher states (SquadSplit.with_encoder)")
        K = split.a["ctx_state_rows"].shape[1]
        if K != len(config.teacher_layers):
            raise ValueError(
                f"the {name} split carries {K} layers of teacher states, and the student stands for "
                f"{len(config.teacher_layers)} ({list(config.teacher_layers)})"
            )
    teacher.check_window(config.max_pieces)
