"""Fine-tuning the cross-encoder verifier (:mod:`rckit.answering.cross_verifier`) beside a frozen reader.

**What it learns.** Each example is (passage, question, a candidate span) with a target: the
span's official F1 against the question's answers (0 for an unanswerable question). A span that
half-overlaps the answer is half right: the target the verifier's ``p(the span answers)`` should
track, since answering it scores that much and abstaining scores nothing. The candidates:

- **the reader's** best two spans on every question (the reader frozen, always answering, read
  once and kept: :class:`CandidateCache`): what the verifier judges when answering, right and
  wrong both;
- **the gold answer** of an answerable question (target 1), and the **plausible answers** SQuAD
  2.0's writers gave an unanswerable one (target 0), where the file has them.
- **made pairs** (``--made``, :func:`made_examples`): a question made unanswerable by rule beside
  its source, the same passage and span (target 0 against 1).

**Weights** (:func:`example_weights`, ``--balance``): where some passages carry only answerable
questions (SQuAD v1.1's, most of v2.0 train's), a model that recognises the passage lowers its loss
without reading the question; ``paragraphs`` weighs each passage's two kinds alike (docs/no-answer.md).

**The data rckit may train on** (:func:`training_questions`): the v2.0 dev training quarter
(articles 0, 4, 8, ...: written unanswerable questions and answerable ones), the first articles of
SQuAD v2.0 train (written ones with plausible answers), and a seeded sample of SQuAD v1.1 train's
answerable questions. The **tuning quarter** (articles 2, 6, ...: whole articles the verifier
never trains on) chooses the checkpoint (the best official v2.0 F1 at its best threshold) and the
threshold; the evaluation half (odd articles) is never read here.

**The run** (:func:`fine_tune`) is resumable and time-budgeted: ``DIR/last.pt`` holds the model,
AdamW, the step and the data order's seed (each epoch's order is drawn from ``seed + epoch``), so a
killed or budget-stopped run continues exactly; ``DIR/best.pt`` the best checkpoint by tuning F1;
``DIR/log.jsonl`` a line per evaluation. Batches are drawn from chunks of like-length examples
(less padding on two cores).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from rckit.answering.cross_verifier import MAX_PIECES, CrossVerifier, cross_inputs
from rckit.answering.reader import Reader
from rckit.contextual.encoders import EncoderFiles
from rckit.contextual.pieces import PieceTokenizer
from rckit.data.no_answer import split_v2_dev
from rckit.data.squad import load_json
from rckit.evaluation.auc import auc
from rckit.evaluation.squad_metrics import f1_score
from rckit.export.cross_verifier import export_cross_verifier
from rckit.models.cross_encoder import CrossEncoder, CrossEncoderConfig
from rckit.training.steps import adamw_run, previous_run, run_steps, save_atomic
from rckit.training.verifier import KEEP, Pair, curve, keeping, reader_key, tuned

KEEPS = (KEEP, 0.95, 0.92, 0.9)  # shares of the answers' F1 kept, whose thresholds are recorded

CHUNK = 256  # questions read by the reader at once, and saved after
AUC_SLACK = 0.005  # the int8 graph ships where its tuning ROC AUC is at most this much below fp32's


@dataclass(frozen=True)
class Question:
    """A question with its passage, answers (``(text, start)``), plausible answers and source."""

    qid: str
    context: str
    question: str
    answers: tuple[tuple[str, int], ...]
    plausible: tuple[tuple[str, int], ...]
    source: str

    @property
    def unanswerable(self) -> bool:
        return not self.answers


@dataclass(frozen=True)
class Example:
    """(passage, question, span ``context[start:end]``) and the target p(the span answers)."""

    context: str
    question: str
    start: int | None
    end: int | None
    target: float
    kind: str  # reader, gold, plausible
    unanswerable: bool = False  # the question's, whatever the span


def questions_of(articles: list[dict], source: str) -> list[Question]:
    out = []
    for article in articles:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                answers = (
                    () if qa.get("is_impossible") else tuple((a["text"], a["answer_start"]) for a in qa["answers"])
                )
                plausible = tuple((a["text"], a["answer_start"]) for a in qa.get("plausible_answers", []))
                out.append(Question(qa["id"], para["context"], qa["question"], answers, plausible, source))
    return out


def training_questions(
    v2_dev: dict, v2_train: dict | None, v11_train: dict | None, v11_sample: int, seed: int = 0
) -> list[Question]:
    """The training side (module docstring): the v2.0 dev training quarter, SQuAD v2.0 train's
    articles given, and ``v11_sample`` answerable questions of v1.1 train drawn with ``seed``."""
    out = questions_of(split_v2_dev(v2_dev)[0], "v2_dev_train_quarter")
    if v2_train is not None:
        out += questions_of(v2_train["data"], "v2_train")
    if v11_train is not None and v11_sample:
        v11 = questions_of(v11_train["data"], "v11_train")
        out += random.Random(seed).sample(v11, min(v11_sample, len(v11)))
    return out


def tuning_questions(v2_dev: dict) -> tuple[list[Question], dict]:
    """The v2.0 dev tuning quarter's questions, and the quarter as SQuAD JSON (for scoring)."""
    tune = split_v2_dev(v2_dev)[1]
    return questions_of(tune, "v2_dev_tuning_quarter"), {"version": "v2.0", "data": tune}


class CandidateCache:
    """The reader's best spans ``[(start, end, score), ...]`` on each question, read once and kept
    in ``DIR/candidates-<reader key>.json`` (saved after every :data:`CHUNK` questions, so a killed
    run keeps what it read)."""

    def __init__(self, folder: str | Path, reader: Reader, top_k: int = 2):
        self.reader, self.top_k = reader, top_k
        self.path = Path(folder) / f"candidates-{reader_key(reader)}-top{top_k}.json"
        self.spans: dict[str, list] = {}
        if self.path.is_file():
            try:
                self.spans = json.loads(self.path.read_text())
            except ValueError as e:
                raise ValueError(f"{self.path}: not a candidates file ({e}); remove it") from None

    @staticmethod
    def key(q: Question) -> str:
        return hashlib.sha1(f"{q.context}\0{q.question}".encode()).hexdigest()

    def of(self, questions: list[Question], log: Callable[[str], object] = print) -> list[list]:
        missing = list({self.key(q): q for q in questions if self.key(q) not in self.spans}.items())
        if missing:
            log(f"reading {len(missing):,} questions with the reader")
        for lo in tqdm(range(0, len(missing), CHUNK), desc="reader", unit="chunk", disable=not missing):
            block = missing[lo : lo + CHUNK]
            answers = self.reader.answer_batch([(q.context, q.question) for _, q in block], self.top_k)
            for (k, _), got in zip(block, answers):
                self.spans[k] = [[a["start"], a["end"], a["score"]] for a in got if a["start"] is not None]
            self.save()
        return [self.spans[self.key(q)] for q in questions]

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.spans))
        tmp.replace(self.path)


def span_f1(q: Question, start: int | None, end: int | None) -> float:
    """The official F1 of ``q.context[start:end]`` against ``q``'s answers (0 for none)."""
    if q.unanswerable or start is None:
        return 0.0
    return max(f1_score(q.context[start:end], a, "2.0") for a, _ in q.answers)


def examples_of(questions: list[Question], candidates: list[list], reader_spans: int = 2) -> list[Example]:
    """Every question's candidates (module docstring; the reader's best ``reader_spans``) as
    examples, a span met twice counted once."""
    out = []
    for q, spans in zip(questions, candidates):
        seen = set()

        def add(start, end, kind):
            if (start, end) in seen:
                return
            seen.add((start, end))
            out.append(Example(q.context, q.question, start, end, span_f1(q, start, end), kind, q.unanswerable))

        for start, end, _ in spans[:reader_spans]:
            add(start, end, "reader")
        for text, start in q.answers[:1]:
            add(start, start + len(text), "gold")
        for text, start in q.plausible[:1]:
            add(start, start + len(text), "plausible")
    return out


def made_examples(made: dict, sources: dict, n: int, seed: int = 0) -> list[Example]:
    """Pairs from ``rckit prepare squad-unanswerable``'s ``made`` file (SQuAD v2.0 JSON): ``n``
    made questions drawn with ``seed`` among those that keep their source's answer as the
    plausible one (a name, number or date swapped; a negation), each with that span (target 0),
    and its source question from ``sources`` (SQuAD v1.1 train) with the same span (target 1):
    the same passage and span, the question changed, so only reading the two together tells them
    apart. The nearest-paragraph rule's questions (no span in their passage) are left out."""
    source_q = {qa["id"]: qa["question"] for a in sources["data"] for p in a["paragraphs"] for qa in p["qas"]}
    pool = []
    for article in made["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                if qa.get("plausible_answers") and qa.get("source") in source_q:
                    pool.append((para["context"], qa))
    out, seen = [], set()
    for context, qa in random.Random(seed).sample(pool, min(n, len(pool))):
        a = qa["plausible_answers"][0]
        start, end = a["answer_start"], a["answer_start"] + len(a["text"])
        out.append(Example(context, qa["question"], start, end, 0.0, "made", True))
        if qa["source"] not in seen:
            seen.add(qa["source"])
            out.append(Example(context, source_q[qa["source"]], start, end, 1.0, "gold", False))
    return out


@dataclass
class CrossTrainConfig:
    max_pieces: int = MAX_PIECES
    batch_size: int = 16
    lr: float = 1e-4  # 5e-5 had not moved the tuning F1 from abstaining's after 700 steps (docs/no-answer.md)
    weight_decay: float = 0.01
    warmup: float = 0.06  # share of the planned steps
    epochs: float = 2.0
    eval_every: int = 500  # steps
    seed: int = 0
    v11_sample: int = 6000
    reader_spans: int = 2  # the reader's best spans per question trained on
    balance: str = "none"  # the unanswerable and answerable examples' weights (example_weights)
    made: int = 0  # made questions (with their sources) trained on besides, where a made file is given
    model: CrossEncoderConfig = None  # type: ignore[assignment]

    def __post_init__(self):
        if self.model is None:
            self.model = CrossEncoderConfig()
        elif isinstance(self.model, dict):
            self.model = CrossEncoderConfig(**self.model)


def batches(examples: list[Example], size: int, seed: int) -> list[list[int]]:
    """One epoch's batches (indices into ``examples``): a seeded order, cut into chunks of 50
    batches, each chunk sorted by length and cut into batches, the batches shuffled."""
    rng = random.Random(seed)
    order = list(range(len(examples)))
    rng.shuffle(order)
    out = []
    for lo in range(0, len(order), 50 * size):
        chunk = sorted(order[lo : lo + 50 * size], key=lambda i: len(examples[i].context) + len(examples[i].question))
        out += [chunk[k : k + size] for k in range(0, len(chunk), size)]
    rng.shuffle(out)
    return out


BALANCES = ("none", "questions", "paragraphs")


def example_weights(examples: list[Example], balance: str) -> np.ndarray:
    """Each example's weight in the loss (averaging 1 over those weighing anything): ``"none"``,
    all 1; ``"questions"``, the unanswerable questions' examples and the answerable ones' each
    half of the total; ``"paragraphs"``, so within every passage (a passage with only one kind
    weighs nothing): then the passage alone says nothing of the target, and the model must read
    it with the question."""
    if balance not in BALANCES:
        raise ValueError(f"balance: one of {', '.join(BALANCES)}, got {balance!r}")
    una = np.asarray([e.unanswerable for e in examples], bool)
    w = np.ones(len(examples), np.float32)
    groups: dict[str, list[int]] = {}
    if balance == "questions":
        groups[""] = list(range(len(examples)))
    elif balance == "paragraphs":
        for i, e in enumerate(examples):
            groups.setdefault(e.context, []).append(i)
    for rows in groups.values():
        rows = np.asarray(rows)
        u = una[rows]
        if u.all() or not u.any():
            w[rows] = 0.0 if balance == "paragraphs" else 1.0
            continue
        w[rows[u]] = 0.5 * len(rows) / u.sum()
        w[rows[~u]] = 0.5 * len(rows) / (~u).sum()
    kept = w > 0
    return w * (kept.sum() / w.sum()) if kept.any() else w


def torch_inputs(tokenizer: PieceTokenizer, examples: list[Example], max_pieces: int) -> dict[str, torch.Tensor]:
    x = cross_inputs(tokenizer, [(e.context, e.question, e.start, e.end) for e in examples], max_pieces)
    return {k: torch.from_numpy(v) for k, v in x.items()}


@torch.no_grad()
def logits_of(model: CrossEncoder, tokenizer: PieceTokenizer, triples: list, max_pieces: int) -> np.ndarray:
    """The model's logits on ``(context, question, start, end)`` triples, in eval mode, as answering
    reads them (:class:`CrossVerifier` with the PyTorch module)."""
    was = model.training
    model.eval()

    def run(vectors, mask, types):
        return model(torch.from_numpy(vectors), torch.from_numpy(mask), torch.from_numpy(types)).numpy()

    out = CrossVerifier(run, tokenizer, model.bert.word.weight.detach().numpy(), max_pieces).logits(triples)
    model.train(was)
    return out


def judged(
    p_none: np.ndarray, tune: list[Question], spans: list[list], raw: dict, keeps: tuple[float, ...] = KEEPS
) -> dict:
    """A verifier's ``p(no answer)`` on the tuning quarter (the reader's best spans ``spans``):
    its ROC AUC for the unanswerable questions, the best official v2.0 F1 and its threshold, the
    threshold keeping :data:`KEEP` of the answers' F1 and the F1 there, and the trade curve."""
    texts = [q.context[s[0][0] : s[0][1]] if s else "" for q, s in zip(tune, spans)]
    pairs = [Pair(q.context, q.question, q.unanswerable, "tune", q.qid) for q in tune]
    best = tuned(p_none, texts, pairs, raw)
    kept = {share: keeping(p_none, texts, pairs, raw, share) for share in keeps}
    return {
        "auc": auc(p_none, np.asarray([q.unanswerable for q in tune])),
        "best_f1": best,
        "kept": [{**tuned(p_none, texts, pairs, raw, t), "keeps": share} for share, t in kept.items()],
        "curve": curve(p_none, texts, pairs, raw, (best["threshold"], *kept.values())),
    }


def check_triples() -> list[tuple[str, str, int | None, int | None]]:
    """A few (context, question, span) triples written here, to check an exported graph against PyTorch."""
    eiffel = (
        "The Eiffel Tower was completed in 1889 in Paris. It was designed by the company of Gustave Eiffel "
        "and is 330 metres tall."
    )
    nile = "The Nile flows north through eleven countries and empties into the Mediterranean Sea near Alexandria."
    return [
        (eiffel, "When was the Eiffel Tower completed?", 34, 38),
        (eiffel, "Who won the 2018 World Cup?", 83, 97),
        (eiffel, "How tall is the tower?", 105, 115),
        (eiffel, "When did the tower burn down?", 34, 38),
        (nile, "Where does the Nile empty?", 63, 84),
        (nile, "How long is the Nile?", None, None),
    ]


def fine_tune(
    reader: Reader,
    encoder: EncoderFiles,
    v2_dev: str | Path,
    out: str | Path,
    v2_train: str | Path | None = None,
    v11_train: str | Path | None = None,
    config: CrossTrainConfig | None = None,
    minutes: float | None = None,
    max_steps: int | None = None,
    resume: bool = False,
    log: Callable[[str], object] = print,
    made: str | Path | None = None,
) -> dict:
    """Fine-tune the cross-encoder in ``out`` (module docstring) for at most ``minutes`` of
    training (and ``max_steps`` steps) in this call; ``resume``: continue ``out/last.pt``.
    Returns the run's state: steps done, planned, the best tuning figures."""
    from safetensors.torch import load_file

    out = Path(out)
    state = previous_run(out, resume)
    config = CrossTrainConfig(**state["config"]) if state is not None else (config or CrossTrainConfig())
    encoder.check_window(config.max_pieces)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(config.seed)
    cache = CandidateCache(out, reader)
    examples, weight, kinds, tune, tune_raw = _training_data(cache, v2_dev, v2_train, v11_train, made, config, log)
    tune_spans = cache.of(tune, log)
    tune_triples = [(q.context, q.question, *(s[0][:2] if s else (None, None))) for q, s in zip(tune, tune_spans)]
    tokenizer = PieceTokenizer(encoder.root / "tokenizer.json")
    model = CrossEncoder.from_encoder(load_file(str(encoder.root / "model.safetensors")), encoder.config, config.model)
    params = model.trainable()
    kept = {"config": _config_dict(config), "examples": kinds}
    run = adamw_run(out, model, params, -(-len(examples) // config.batch_size), config, kept)
    step, best = run.restore(state)
    latest: dict = {}  # the last figures, kept whole with the best

    def loss_of(idx: list[int]) -> torch.Tensor:
        batch = [examples[i] for i in idx]
        x = torch_inputs(tokenizer, batch, config.max_pieces)
        target = torch.tensor([e.target for e in batch])
        z = model.read(x["ids"], x["mask"], x["types"])
        return torch.nn.functional.binary_cross_entropy_with_logits(z, target, torch.from_numpy(weight[idx]))

    def figures() -> dict:
        p = 1.0 / (1.0 + np.exp(logits_of(model, tokenizer, tune_triples, config.max_pieces)))
        latest["figures"] = judged(p, tune, tune_spans, tune_raw)
        return _log_figures(latest["figures"])

    def keep(line: dict, best: dict | None) -> dict | None:  # the best F1 on the tuning questions
        if best is not None and line["tuning_f1"] <= best["tuning_f1"]:
            return None
        best = {**line, "figures": latest["figures"]}
        kept = {"model": model.state_dict(), "config": _config_dict(config), "step": line["step"], "best": best}
        save_atomic(kept, out / "best.pt")
        return best

    model.train()
    done = run_steps(
        run,
        step,
        best,
        lambda epoch: batches(examples, config.batch_size, config.seed + epoch),
        loss_of,
        figures,
        keep,
        tqdm(total=run.planned, initial=step, desc="cross-encoder", unit="step"),
        minutes,
        max_steps,
        log,
    )
    return {**done, "examples": kinds}


def _log_figures(figures: dict) -> dict:
    """What a log line says of the tuning figures (:func:`judged`)."""
    return {
        "auc": figures["auc"],
        "tuning_f1": figures["best_f1"]["f1"],
        "threshold": figures["best_f1"]["threshold"],
        "kept_f1": {str(k["keeps"]): k["f1"] for k in figures["kept"]},
    }


def _training_data(
    cache: CandidateCache,
    v2_dev: str | Path,
    v2_train: str | Path | None,
    v11_train: str | Path | None,
    made: str | Path | None,
    config: CrossTrainConfig,
    log: Callable[[str], object],
) -> tuple[list[Example], np.ndarray, dict[str, int], list[Question], dict]:
    """The weighted training examples (those of weight 0 left out), how many of each kind, and the
    tuning questions with their SQuAD file."""
    dev_raw = load_json(v2_dev)
    train_qs = training_questions(
        dev_raw,
        load_json(v2_train) if v2_train else None,
        load_json(v11_train) if v11_train else None,
        config.v11_sample,
        config.seed,
    )
    tune, tune_raw = tuning_questions(dev_raw)
    examples = examples_of(train_qs, cache.of(train_qs, log), config.reader_spans)
    if made is not None and config.made:
        if v11_train is None:
            raise ValueError("made questions need SQuAD v1.1 train, where their sources are")
        examples += made_examples(load_json(made), load_json(v11_train), config.made, config.seed)
    weight = example_weights(examples, config.balance)
    examples, weight = [e for e, w in zip(examples, weight) if w > 0], weight[weight > 0]
    kinds: dict[str, int] = {}
    for e in examples:
        kinds[e.kind] = kinds.get(e.kind, 0) + 1
    log(
        f"{len(examples):,} training examples {kinds} from {len(train_qs):,} questions "
        f"({sum(q.unanswerable for q in train_qs):,} unanswerable); {len(tune):,} tuning questions"
    )
    return examples, weight, kinds, tune, tune_raw


def install_cross_verifier(
    run: str | Path,
    reader: Reader,
    encoder: EncoderFiles,
    v2_dev: str | Path,
    into: Path,
    keep: float = 0.95,
    threshold: float | None = None,
    log: Callable[[str], object] = print,
) -> dict:
    """The run's graph exported beside the model file ``into`` in fp32 and int8, each judged on
    the v2.0 dev tuning quarter (the reader's best spans, read once and kept in the run's folder);
    int8 is kept where its ROC AUC is within :data:`AUC_SLACK` of fp32's, the other file removed.
    Returns the ``cross`` entry a model file's verifier carries, with its tuning figures and its
    ``threshold`` on p(no answer): ``threshold``, or the lowest keeping ``keep`` of the answers'
    F1 on the quarter."""
    tune, raw = tuning_questions(load_json(v2_dev))
    spans = CandidateCache(run, reader).of(tune, log)
    triples = [(q.context, q.question, *(s[0][:2] if s else (None, None))) for q, s in zip(tune, spans)]
    stem = into.name.split(".")[0]
    judged_by = {}
    for int8 in (False, True):
        meta, diff = export_cross_verifier(run, encoder, into.parent, stem, check_triples(), int8)
        p = CrossVerifier.from_json(meta, into).probability(triples)
        judged_by[int8] = (meta, judged(p, tune, spans, raw, (keep,)))
        log(f"{meta['file']}: tuning AUC {judged_by[int8][1]['auc']:.4f}, largest logit difference {diff:.2e}")
    use_int8 = judged_by[False][1]["auc"] - judged_by[True][1]["auc"] <= AUC_SLACK
    (into.parent / judged_by[not use_int8][0]["file"]).unlink()
    meta, figures = judged_by[use_int8]
    chosen = threshold if threshold is not None else figures["kept"][0]["threshold"]
    return {
        **meta,
        "threshold": chosen,
        "tuning": {
            "auc": figures["auc"],
            "auc_fp32": judged_by[False][1]["auc"],
            "best_f1": figures["best_f1"],
            "kept": figures["kept"],
            "curve": figures["curve"],
            "rule": f"threshold {threshold}" if threshold is not None else f"keeps {keep} of the answers' F1",
        },
    }


def _config_dict(config: CrossTrainConfig) -> dict:
    return {**asdict(config), "model": asdict(config.model)}
