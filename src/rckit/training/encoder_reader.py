"""Fine-tuning rckit's own reader (:mod:`rckit.models.encoder_reader`) end to end, for answers and "no answer".

**What it learns from**: a SQuAD v2.0 file (``rckit prepare squad-near-miss``: SQuAD v1.1 train's
questions, near misses made from them, the written questions rckit may train on), every question
read in its windows (:mod:`rckit.data.pair_windows`), each window an example whose target is the
answer's first and last pieces, or [CLS] for both where the window holds no answer. The windows
are cut once and kept in the run's folder (``items.npz``).

**What it is judged on** every ``eval_every`` steps, written to ``DIR/log.jsonl`` (the learning
curve): SQuAD v1.1 dev's first ``dev_questions`` questions outside v2.0 dev's training quarter
(EM/F1, always answering), and v2.0 dev's **tuning quarter** (articles 2, 6, 10, ...: written
unanswerable questions, never trained on): the ROC AUC of the no-answer margin for the
unanswerable questions, the official v2.0 F1 at the margin's best threshold, the answerable
questions' F1 always answering, and the margin's calibration (:func:`calibrate`). The evaluation
half (odd articles) is never read here. ``DIR/best.pt`` keeps the model of the best tuning F1.

**The run** is planned (``epochs`` over the windows: AdamW, BERT's linear warm-up and decay),
time-budgeted (``minutes`` a call), resumable (``DIR/last.pt``, :mod:`rckit.training.steps`) and,
where the folder does not outlive the machine, continued from its carry (:mod:`rckit.model_files.carry`),
written at every save when a path is given. Batches are drawn from chunks of like-length windows.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from rckit.answering.pointer import Pointed
from rckit.answering.pointer_reader import PointerReader
from rckit.answering.torch_backend import TorchPointer
from rckit.contextual.encoders import EncoderFiles
from rckit.contextual.pieces import PieceTokenizer
from rckit.data.no_answer import split_v2_dev
from rckit.data.pair_windows import padded, pair_windows
from rckit.data.squad import load_json
from rckit.evaluation.auc import auc
from rckit.evaluation.squad_metrics import best_thresholds, only_questions, score_predictions
from rckit.model_files.carry import load_carry, save_carry
from rckit.models.encoder_reader import EncoderReader, EncoderReaderConfig, pretrained_weights
from rckit.models.losses import span_loss
from rckit.training.steps import PlannedRun, adamw_run, previous_run, run_steps, save_atomic

REWARM = 100  # steps over which the learning rate comes back after a resume from a carry
Pair = tuple[str, str, int | None, int | None]  # (passage, question, answer start, end): characters, None for none


@dataclass
class ReaderTrainConfig:
    max_pieces: int = 256  # a window, special pieces included
    stride: int = 128  # passage pieces between two windows' starts
    batch_size: int = 16
    lr: float = 8e-5
    weight_decay: float = 0.01
    warmup: float = 0.06  # share of the planned steps
    epochs: float = 1.0
    eval_every: int = 1000  # steps
    seed: int = 0
    dev_questions: int = 1000
    model: EncoderReaderConfig = None  # type: ignore[assignment]

    def __post_init__(self):
        if self.model is None:
            self.model = EncoderReaderConfig()
        elif isinstance(self.model, dict):
            self.model = EncoderReaderConfig(**self.model)


def config_dict(config: ReaderTrainConfig) -> dict:
    return {**asdict(config), "model": asdict(config.model)}


def pairs_of(raw: dict) -> tuple[list[Pair], list[str], list[str]]:
    """Every question of a SQuAD file (v1.1 or v2.0) as a pair (its first answer), with its id and
    its kind (the ``kind`` field of a made file; ``squad`` elsewhere)."""
    pairs, ids, kinds = [], [], []
    for article in raw["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                answers = [] if qa.get("is_impossible") else qa.get("answers", [])
                if answers:
                    start = int(answers[0]["answer_start"])
                    pairs.append((para["context"], qa["question"], start, start + len(answers[0]["text"])))
                else:
                    pairs.append((para["context"], qa["question"], None, None))
                ids.append(qa["id"])
                kinds.append(str(qa.get("kind", "squad")))
    return pairs, ids, kinds


@dataclass
class Items:
    """The training windows, flat: window ``k``'s pieces are ``ids[bounds[k]:bounds[k + 1]]``."""

    ids: np.ndarray  # int32
    bounds: np.ndarray  # (n + 1,) int64
    q_len: np.ndarray  # (n,) the question's pieces in each window
    target: np.ndarray  # (n, 2) the start and end positions (0, 0: no answer in the window)
    kind: np.ndarray  # (n,) index into kinds
    kinds: list[str]

    def __len__(self) -> int:
        return len(self.q_len)

    def rows(self, idx: list[int]) -> list[np.ndarray]:
        return [self.ids[self.bounds[k] : self.bounds[k + 1]].astype(np.int64) for k in idx]

    def counts(self) -> dict[str, dict[str, int]]:
        """Windows of each kind, and how many of them point at [CLS]."""
        out = {}
        for i, name in enumerate(self.kinds):
            mine = self.kind == i
            out[name] = {"windows": int(mine.sum()), "no_answer": int((mine & (self.target[:, 0] == 0)).sum())}
        return out

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez(
            tmp,
            ids=self.ids,
            bounds=self.bounds,
            q_len=self.q_len,
            target=self.target,
            kind=self.kind,
            kinds=np.asarray(self.kinds),
        )
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Items:
        with np.load(path) as f:
            return cls(f["ids"], f["bounds"], f["q_len"], f["target"], f["kind"], [str(k) for k in f["kinds"]])


def make_items(
    tokenizer: PieceTokenizer, pairs: list[Pair], kinds: list[str], max_pieces: int, stride: int, progress: bool = True
) -> Items:
    """Every pair's windows and targets (module docstring); each passage cut into pieces once."""
    passages: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    names = sorted(set(kinds))
    rows, q_lens, targets, kind = [], [], [], []
    for (context, question, start, end), k in tqdm(
        list(zip(pairs, kinds)), desc="windows", unit="question", disable=not progress
    ):
        if context not in passages:
            passages[context] = tokenizer.pieces([context])[0]
        q = tokenizer.pieces([question])[0][0]
        windows = pair_windows(q, passages[context], tokenizer.cls, tokenizer.sep, max_pieces, stride)
        rows += windows.ids
        q_lens += [windows.q_len] * len(windows.ids)
        targets.append(windows.targets(start, end))
        kind += [names.index(k)] * len(windows.ids)
    bounds = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    ids = np.concatenate(rows).astype(np.int32) if rows else np.zeros(0, np.int32)
    target = np.concatenate(targets).astype(np.int16) if targets else np.zeros((0, 2), np.int16)
    return Items(ids, bounds, np.asarray(q_lens, np.int16), target, np.asarray(kind, np.int8), names)


def length_batches(lengths: np.ndarray, size: int, seed: int) -> list[list[int]]:
    """One epoch's batches: a seeded order cut into chunks of 50 batches, each chunk sorted by
    length and cut into batches, the batches shuffled (less padding, the same mix)."""
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    out = []
    for lo in range(0, len(order), 50 * size):
        chunk = sorted(order[lo : lo + 50 * size], key=lambda i: lengths[i])
        out += [chunk[k : k + size] for k in range(0, len(chunk), size)]
    rng.shuffle(out)
    return out


def tensors(rows: list[np.ndarray], q_lens: list[int]) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(v) for k, v in padded(rows, q_lens).items()}


def read(
    model: EncoderReader, tokenizer: PieceTokenizer, pairs: list[Pair], max_pieces: int, stride: int, top_k: int = 1
) -> list[Pointed]:
    """The model's best spans and no-answer margin on each pair, read as answering reads them
    (:meth:`rckit.answering.pointer_reader.PointerReader.pointed`), in eval mode."""
    was = model.training
    reader = PointerReader(TorchPointer(model), tokenizer, max_pieces, stride)
    got = reader.pointed([(c, q) for c, q, *_ in pairs], top_k)
    model.train(was)
    return got


def answer_texts(pairs: list[Pair], pointed: list[Pointed]) -> list[str]:
    """Each pair's best span as text (always answering; "" where the passage has no piece)."""
    return [c[r.spans[0].start : r.spans[0].end] if r.spans else "" for (c, *_), r in zip(pairs, pointed)]


def calibrate(margins: np.ndarray, unanswerable: np.ndarray, steps: int = 50) -> tuple[float, float]:
    """``(a, b)`` of ``p(no answer) = sigmoid(a m + b)`` fitted to ``unanswerable`` by maximum
    likelihood (Newton's method on the logistic regression of one feature, Platt's scaling)."""
    m = np.asarray(margins, np.float64)
    y = np.asarray(unanswerable, np.float64)
    finite = np.isfinite(m)
    m, y = m[finite], y[finite]
    if not len(m) or y.min() == y.max():
        return 1.0, 0.0
    center, spread = m.mean(), m.std() or 1.0
    x = np.stack([(m - center) / spread, np.ones_like(m)], 1)  # (n, 2)
    w = np.zeros(2)
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ w, -60, 60)))
        hessian = x.T @ (x * (p * (1 - p))[:, None]) + 1e-6 * np.eye(2)
        w -= np.linalg.solve(hessian, x.T @ (p - y))
    a = w[0] / spread
    return float(a), float(w[1] - a * center)


@dataclass
class Judge:
    """The held-out questions a run is judged on (module docstring) and how."""

    dev: list[Pair]
    dev_raw: dict  # SQuAD v1.1 JSON of those questions
    dev_ids: list[str]
    tune: list[Pair]
    tune_raw: dict  # SQuAD v2.0 JSON of the tuning quarter
    tune_ids: list[str]

    @classmethod
    def of(cls, v11_dev: str | Path, v2_dev: str | Path, dev_questions: int) -> Judge:
        v2 = load_json(v2_dev)
        trained_on = {qa["id"] for a in split_v2_dev(v2)[0] for p in a["paragraphs"] for qa in p["qas"]}
        dev_raw = load_json(v11_dev)
        pairs, ids, _ = pairs_of(dev_raw)
        kept = [k for k, qid in enumerate(ids) if qid not in trained_on][:dev_questions]
        dev_ids = [ids[k] for k in kept]
        tune_raw = {"version": "v2.0", "data": split_v2_dev(v2)[1]}
        tune, tune_ids, _ = pairs_of(tune_raw)
        return cls([pairs[k] for k in kept], only_questions(dev_raw, set(dev_ids)), dev_ids, tune, tune_raw, tune_ids)

    def figures(self, read_pairs: Callable[[list[Pair]], list[Pointed]]) -> dict:
        """The learning curve's figures of a model (``read_pairs``: its readings of pairs)."""
        dev = score_predictions(self.dev_raw, dict(zip(self.dev_ids, answer_texts(self.dev, read_pairs(self.dev)))))
        pointed = read_pairs(self.tune)
        return {"dev_em": dev["exact_match"], "dev_f1": dev["f1"], **self.no_answer(pointed)}

    def no_answer(self, pointed: list[Pointed]) -> dict:
        """The tuning quarter's no-answer figures of the readings ``pointed``."""
        spans = dict(zip(self.tune_ids, answer_texts(self.tune, pointed)))
        margins = np.asarray([r.margin for r in pointed], np.float64)
        margins = np.where(np.isfinite(margins), margins, np.nanmax(margins[np.isfinite(margins)], initial=0.0) + 1)
        unanswerable = np.asarray([s is None for _, _, s, _ in self.tune])
        always = score_predictions(self.tune_raw, spans, "2.0")
        best = best_thresholds(self.tune_raw, spans, dict(zip(self.tune_ids, margins.tolist())))
        a, b = calibrate(margins, unanswerable)
        return {
            "tune_auc": auc(margins, unanswerable),
            "tune_f1": best["best_f1"],
            "tune_margin_threshold": best["best_f1_thresh"],
            "tune_hasans_f1": always.get("HasAns_f1"),
            "calibration": [a, b],
        }


def content_digest(path: Path) -> str:
    """SHA-256 (16 hex characters) of a file's content, after gzip where it is compressed: the same
    training file written again (a new gzip header) has the same digest."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        opener = gzip.open if fh.read(2) == b"\x1f\x8b" else open
    with opener(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def _items(out: Path, tokenizer: PieceTokenizer, digest: str, train: Path, encoder, config, log, progress) -> Items:
    """The training windows, cut once and kept in ``out/items.npz`` (cut again where the file's
    content, the encoder or the window differs)."""
    key = f"{digest}|{encoder.digest}|{config.max_pieces}|{config.stride}"
    path, key_file = out / "items.npz", out / "items.key"
    if path.is_file() and key_file.is_file() and key_file.read_text() == key:
        return Items.load(path)
    pairs, _, kinds = pairs_of(load_json(train))
    log(f"cutting {len(pairs):,} questions of {train} into windows of {config.max_pieces} pieces")
    items = make_items(tokenizer, pairs, kinds, config.max_pieces, config.stride, progress)
    items.save(path)
    key_file.write_text(key)
    return items


class CarriedRun(PlannedRun):
    """A planned run that also writes its carry (:mod:`rckit.model_files.carry`) at every save."""

    carry: Path | None = None
    start: dict[str, torch.Tensor] | None = None

    def save(self, step: int, best: dict | None, seconds: float) -> None:
        super().save(step, best, seconds)
        if self.carry is None:
            return
        trained = {n: p for n, p in self.model.named_parameters() if p.requires_grad}
        log_file = self.out / "log.jsonl"
        lines = [json.loads(x) for x in log_file.read_text().splitlines() if x.strip()] if log_file.is_file() else []
        meta = {**self.kept, "step": step, "seconds": seconds, "best": best, "planned": self.planned, "log": lines}
        save_carry(self.carry, trained, self.start or {}, meta)


def _restore(run: CarriedRun, state: dict | None, carried: dict | None) -> tuple[int, dict | None]:
    """The run's step and best figures from ``last.pt`` (exactly) or a carry (weights, step, the
    schedule ramped back over :data:`REWARM` steps); 0 and None for a new run."""
    if state is not None:
        return run.restore(state)
    if carried is None:
        return 0, None
    tensors, meta = carried["tensors"], carried["meta"]
    missing = set(n for n, p in run.model.named_parameters() if p.requires_grad) - set(tensors)
    if missing:
        raise ValueError(f"{run.carry}: the carry lacks {sorted(missing)[:3]} ...: another model's")
    run.model.load_state_dict(tensors, strict=False)
    run.seconds = float(meta["seconds"])
    step, schedule = int(meta["step"]), run.lr_at
    run.lr_at = lambda s: schedule(s) * min(1.0, (s - step + 1) / REWARM)
    log_file = run.out / "log.jsonl"
    if not log_file.is_file():
        log_file.write_text("".join(json.dumps(line) + "\n" for line in meta.get("log", [])))
    return step, meta.get("best")


def fine_tune(
    encoder: EncoderFiles,
    train: str | Path,
    v11_dev: str | Path,
    v2_dev: str | Path,
    out: str | Path,
    config: ReaderTrainConfig | None = None,
    minutes: float | None = None,
    max_steps: int | None = None,
    resume: bool = False,
    carry: str | Path | None = None,
    log: Callable[[str], object] = print,
    progress: bool = True,
) -> dict:
    """Fine-tune the encoder reader in ``out`` (module docstring) for at most ``minutes`` of training
    (and ``max_steps`` steps in all) in this call; ``resume``: continue ``out/last.pt``, or the carry
    at ``carry`` where there is no last.pt. Returns the steps done, planned and the best figures."""
    out, carry = Path(out), Path(carry) if carry is not None else None
    start = pretrained_weights(encoder.root / "model.safetensors")
    state = previous_run(out, resume)
    carried = None
    if state is None and carry is not None and carry.is_file():
        if not resume:
            raise ValueError(f"{carry} already holds a run's carry: --resume to continue it, or another path")
        tensors, meta = load_carry(carry, start)
        carried = {"tensors": tensors, "meta": meta}
    saved = state or (carried and carried["meta"])
    config = ReaderTrainConfig(**saved["config"]) if saved else (config or ReaderTrainConfig())
    encoder.check_window(config.max_pieces)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(config.seed)
    tokenizer = PieceTokenizer(encoder.root / "tokenizer.json")
    digest = content_digest(Path(train))
    if carried is not None and carried["meta"].get("train_digest", digest) != digest:
        raise ValueError(f"{carry}: the run was trained on another file than {train} (its content differs)")
    items = _items(out, tokenizer, digest, Path(train), encoder, config, log, progress)
    judge = Judge.of(v11_dev, v2_dev, config.dev_questions)
    log(f"{len(items):,} training windows {items.counts()}")
    log(f"judged on {len(judge.dev):,} dev and {len(judge.tune):,} tuning questions")
    model = EncoderReader.from_encoder(start, encoder.config, config.model)
    params = model.trainable()
    kept = {"config": config_dict(config), "encoder": encoder.digest, "train_digest": digest, "windows": items.counts()}
    plain = adamw_run(out, model, params, -(-len(items) // config.batch_size), config, kept)
    run = CarriedRun(**vars(plain))
    run.carry, run.start = carry, start
    step, best = _restore(run, state, carried)
    return _train(run, step, best, items, judge, tokenizer, config, minutes, max_steps, log, progress)


def _train(
    run: CarriedRun,
    step: int,
    best: dict | None,
    items: Items,
    judge: Judge,
    tokenizer: PieceTokenizer,
    config: ReaderTrainConfig,
    minutes: float | None,
    max_steps: int | None,
    log: Callable[[str], object],
    progress: bool,
) -> dict:
    """The run's steps (:func:`rckit.training.steps.run_steps`) with this job's batches, loss and figures."""
    model = run.model
    lengths = np.diff(items.bounds)
    target = torch.from_numpy(items.target.astype(np.int64))

    def loss_of(idx: list[int]) -> torch.Tensor:
        x = tensors(items.rows(idx), items.q_len[idx].tolist())
        out = model(x["ids"], x["mask"], x["types"], x["allowed"])
        y = target[idx]
        return span_loss(out.start, out.end, y[:, 0], y[:, 1])

    def figures() -> dict:
        return judge.figures(lambda pairs: read(model, tokenizer, pairs, config.max_pieces, config.stride))

    def keep(line: dict, best: dict | None) -> dict | None:  # the best official v2.0 F1 on the tuning quarter
        if best is not None and line["tune_f1"] <= best["tune_f1"]:
            return None
        save_atomic({"model": model.state_dict(), "config": config_dict(config), "best": line}, run.out / "best.pt")
        return line

    model.train()
    bar = tqdm(total=run.planned, initial=step, desc="reader", unit="step", disable=not progress)
    return run_steps(
        run,
        step,
        best,
        lambda epoch: length_batches(lengths, config.batch_size, config.seed + epoch),
        loss_of,
        figures,
        keep,
        bar,
        minutes,
        max_steps,
        log,
    )
