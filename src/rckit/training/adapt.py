"""How ``rckit adapt`` fine-tunes a trained reader on a few hundred of a user's questions: the
recipe (:func:`adapt`) and its settings (:func:`adapt_train_config`).

The recipe of the field for a new domain (DrQA's maintainers, Haystack's ``FARMReader.train``,
transformers' ``run_qa.py``): start from the model trained on SQuAD, train a few epochs at a low
learning rate on the user's questions with SQuAD's mixed in (:mod:`rckit.data.adapt`), keep the
epoch that scores best on the user's held-out documents. :func:`adapt_train_config` derives that
run's settings from the ones the model was trained with:

- the learning rate ``lr_scale`` times the model's, falling in a straight line to 0 over the run,
  no warm-up (the weights are trained already; a warm-up would spend a small run's steps);
- no weight averaging (``ema_decay`` 0): over a hundred steps an average would stay at the start;
- one evaluation and one checkpoint per epoch, over every dev question;
- DCN+'s mixed objective from the first step (the model ended its training on it).

The batch size, dropout, loss and every model setting stay the model's own.

The whole path (docs/adapt.md, :func:`adapt`): the labels are split by document into train and
dev and SQuAD questions are mixed into train (:mod:`rckit.data.adapt`); the vocabulary is the
model's own with the new words' GloVe rows added; the model's weights start the short run, the best
epoch on the user's dev is exported to ``OUT/model.safetensors``, and the dev F1 before and after is
kept in ``OUT/adapt.json`` (and in the file, for ``rckit models``), each question's answer before
and after in ``OUT/dev-before.json`` and ``OUT/dev-predictions.json``. A killed run goes on with
``resume``.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from rckit.config import from_dict
from rckit.training.config import TrainConfig

if TYPE_CHECKING:
    from rckit.data.adapt import AdaptFiles

LR_SCALE = 0.1  # of the model's own learning rate
EPOCHS = 4


@dataclass(frozen=True)
class AdaptSettings:
    """How :func:`adapt` splits, mixes and trains (the command's flags of the same names)."""

    dev: str | Path | None = None  # the user's own dev file; None: held out from the labels
    squad_train: str | Path | None = None  # SQuAD v1.1 train, mixed in (needed where squad_mix > 0)
    squad_mix: float = 1.0  # SQuAD questions per training label
    dev_share: float = 0.2  # of the labels' questions held out, by whole documents
    epochs: int = EPOCHS
    lr_scale: float = LR_SCALE
    limit: int | None = None  # learn from this many of the user's training questions only
    seed: int = 0
    embeddings: str | None = None  # the GloVe text file the model was trained with
    cache_dir: str | None = None
    device: str = "auto"
    progress: bool = True
    resume: bool = False


def to_stderr(line: str) -> None:
    print(f"rckit adapt: {line}", file=sys.stderr)


def adapt_train_config(
    train_config: dict, examples: int, epochs: int = EPOCHS, lr_scale: float = LR_SCALE
) -> tuple[TrainConfig, int]:
    """(the settings of the fine-tune, its number of steps) for ``examples`` training questions
    (the user's and the SQuAD ones mixed in), from the ``train_config`` a model was saved with."""
    if epochs < 1:
        raise ValueError(f"epochs must be at least 1, got {epochs}")
    if not lr_scale > 0:
        raise ValueError(f"the learning-rate scale must be positive, got {lr_scale}")
    cfg = from_dict(TrainConfig, train_config) if train_config else TrainConfig()
    per_epoch = max(1, math.ceil(examples / cfg.batch_size))
    cfg = replace(
        cfg,
        lr=cfg.lr * lr_scale,
        warmup_steps=0,
        decay_from=0,
        decay_steps=0,
        decay_share=1.0,
        ema_decay=0.0,
        reward_from=0,
        eval_every=per_epoch,
        eval_questions=0,
        checkpoint_every=per_epoch,
        log_every=max(1, min(cfg.log_every, per_epoch)),
    )
    return cfg, per_epoch * epochs


def adapt(
    source: object,
    labels: str | Path,
    out: str | Path,
    settings: AdaptSettings,
    log: Callable[[str], object] = to_stderr,
) -> dict:
    """Fine-tune the span model ``source`` (a :func:`rckit.model_files.source.pytorch_source`) on the
    questions of ``labels`` in ``out`` (module docstring); a file of rckit's own reader is
    adapted by :func:`rckit.training.adapt_reader.adapt_reader` instead. Returns the report written to
    ``out/adapt.json``: the counts of questions, the steps, the learning rate, the dev EM/F1 before
    and after, the model file and the seconds."""
    from rckit.model_files.load import load_model

    out, t0 = Path(out), time.perf_counter()
    refuse_a_run(out, settings)
    _, vocabs, meta = load_model(source)
    if meta.get("task", "span") != "span":
        raise ValueError(f"{source}: a cloze model; adapting reads SQuAD-layout questions, for span models")
    files = split_and_mixed(labels, out, settings, log)
    c = files.counts
    log(
        f"{c['train_questions']} questions to learn from ({c['train_documents']} {c['split_by']}s) "
        f"and {c['squad_questions']} of SQuAD's; {c['dev_questions']} to check on ({c['dev_documents']})"
    )
    base_vocab = out / "data" / "base-vocab.json"
    base_vocab.write_text(json.dumps(vocabs.to_json()))
    tcfg, steps = adapt_train_config(
        meta.get("train_config") or {}, c["train_questions"] + c["squad_questions"], settings.epochs, settings.lr_scale
    )
    before, after, summary, model_file = _fine_tune(source, meta, files, base_vocab, tcfg, steps, out, settings)
    return written_report(out, source, labels, c, settings, summary["steps"], tcfg.lr, before, after, model_file, t0)


def written_report(
    out: Path,
    source: object,
    labels: str | Path,
    counts: dict,
    settings: AdaptSettings,
    steps: int,
    lr: float,
    before: dict,
    after: dict,
    model_file: Path,
    t0: float,
    **more,
) -> dict:
    """The report of an adapting run, written to ``out/adapt.json``: the counts of questions (and
    ``more``), the steps, the learning rate, the dev EM/F1 before and after, the file, the seconds."""
    report = {
        "model": str(source),
        "labels": str(labels),
        **counts,
        **more,
        "epochs": settings.epochs,
        "steps": steps,
        "lr": lr,
        "dev_before": {k: before[k] for k in ("exact_match", "f1")},
        "dev_after": {k: after[k] for k in ("exact_match", "f1")},
        "model_file": str(model_file),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    (out / "adapt.json").write_text(json.dumps(report, indent=1))
    return report


def refuse_a_run(out: Path, settings: AdaptSettings) -> None:
    """A FileExistsError where ``out`` holds an adapting run and ``settings.resume`` is off."""
    if (out / "run" / "last.pt").exists() and not settings.resume:
        raise FileExistsError(
            f"{out} already holds an adapting run; pass --resume to go on with it or choose another --out"
        )


def split_and_mixed(labels: str | Path, out: Path, settings: AdaptSettings, log: Callable[[str], object]) -> AdaptFiles:
    """The run's train and dev files in ``out/data`` (:func:`rckit.data.adapt.adapt_files` with
    ``settings``), their notes logged."""
    from rckit.data.adapt import adapt_files

    files = adapt_files(
        labels,
        out / "data",
        dev=settings.dev,
        squad_train=settings.squad_train if settings.squad_mix else None,
        squad_mix=settings.squad_mix,
        dev_share=settings.dev_share,
        seed=settings.seed,
        limit=settings.limit,
    )
    for note in files.notes:
        log(note)
    return files


def _fine_tune(
    source: object,
    meta: dict,
    files: AdaptFiles,
    base_vocab: Path,
    tcfg: TrainConfig,
    steps: int,
    out: Path,
    settings: AdaptSettings,
) -> tuple[dict, dict, dict, Path]:
    """Prepare the split files on the model's vocabulary, score the dev before, train, export the
    best epoch, score the dev after and keep that figure in the file: (before, after, the run's
    summary, the model file)."""
    from rckit.answering.decoding import decode_config_of
    from rckit.data.sources import DataSource, prepare_data
    from rckit.device import pick_device
    from rckit.evaluation.evaluate import evaluate
    from rckit.export.metadata_edit import record_score
    from rckit.export.safetensors import export_run
    from rckit.models import MODELS, model_config
    from rckit.training.loop import train

    prepared = prepare_data(
        DataSource(train=files.train, dev=files.dev, cache_dir=settings.cache_dir, embeddings=settings.embeddings),
        [f"base_vocab={base_vocab.resolve()}"],
    )
    device = pick_device(settings.device)

    def dev_scores(model_file: Path, predictions: Path) -> dict:  # every question answered: labels have answers
        return evaluate(
            model_file, files.dev, always_answer=True, device=device, progress=settings.progress, out=predictions
        )

    before = dev_scores(source, out / "dev-before.json")
    summary = train(
        meta["model"],
        MODELS[meta["model"]][1],
        model_config(meta["model"], meta["model_config"]),
        tcfg,
        prepared,
        out / "run",
        max_steps=steps,
        resume=settings.resume,
        device=device,
        progress=settings.progress,
        decode=decode_config_of(meta),
        init_from=None if settings.resume else source,
    )
    model_file = out / "model.safetensors"
    export_run(out / "run", model_file)
    after = dev_scores(model_file, out / "dev-predictions.json")
    record_score(model_file, files.dev, after)
    return before, after, summary, model_file
