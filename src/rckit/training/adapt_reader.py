"""``rckit adapt`` for rckit's own reader (a file of :mod:`rckit.model_files.reader_file`).

The recipe of :mod:`rckit.training.adapt` (docs/adapt.md), with what this reader needs besides:

- **the data**: the user's labels split by document into train and dev, SQuAD v1.1 questions
  mixed in (:func:`rckit.data.adapt.adapt_files`), then near misses of the training passages
  (:func:`rckit.data.near_miss.with_near_misses`: the sentence holding an answer cut out, the
  question kept, until one question in three has no answer), so that the reader goes on learning
  to abstain while it learns the new domain, as its own run taught it;
- **the run**: the file's weights start it (the word table stays frozen, as in its run); its run's
  settings (window, batch size, weight decay) with the learning rate at ``lr_scale`` of its own,
  falling in a straight line to 0, no warm-up; ``epochs`` passes; the user's dev read after each
  one, always answering (labels have answers), and the best epoch kept (``OUT/run/best.pt``); a
  killed run goes on with ``resume`` (:mod:`rckit.training.steps`); on the CPU (a few hundred
  questions' run is short there);
- **the result**: ``OUT/model.safetensors`` in the file's own format, with the file's tokenizer,
  window, calibration and threshold (its dev holds too few unanswerable questions to refit them),
  ``adapted_from`` and the dev figures recorded in it; ``OUT/adapt.json`` as for a span reader.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from rckit.training.adapt import AdaptSettings, refuse_a_run, split_and_mixed, written_report


def adapt_reader(
    source: Path, labels: str | Path, out: str | Path, settings: AdaptSettings, log: Callable[[str], object]
) -> dict:
    """Adapt the reader of the file ``source`` to the questions of ``labels`` in ``out`` (module
    docstring); the report, as :func:`rckit.training.adapt.adapt` returns it."""
    from rckit.evaluation.evaluate import evaluate
    from rckit.export.metadata_edit import record_score
    from rckit.model_files.reader_file import read_reader_file, write_reader_file

    out, t0 = Path(out), time.perf_counter()
    refuse_a_run(out, settings)
    weights, meta = read_reader_file(source)
    files = split_and_mixed(labels, out, settings, log)
    train_file, made = near_miss_file(files.train, settings.seed)
    c = files.counts
    log(
        f"{c['train_questions']} questions to learn from ({c['train_documents']} {c['split_by']}s), "
        f"{c['squad_questions']} of SQuAD's and {made} near misses made of their passages; "
        f"{c['dev_questions']} to check on ({c['dev_documents']})"
    )

    def dev_scores(model_file: Path, predictions: Path) -> dict:  # every question answered: labels have answers
        return evaluate(model_file, files.dev, always_answer=True, progress=settings.progress, out=predictions)

    before = dev_scores(source, out / "dev-before.json")
    state, config, summary = _run(weights, meta, train_file, files.dev, out / "run", settings, str(source))
    model_file = out / "model.safetensors"
    adapted = {
        **{k: v for k, v in meta.items() if k != "format"},
        "step": summary["best"]["step"],
        "adapted_from": str(source),
        "config": config,
        "scores": [],
    }
    write_reader_file(model_file, state, adapted)
    after = dev_scores(model_file, out / "dev-predictions.json")
    record_score(model_file, files.dev, after)
    steps, lr = summary["step"], config["lr"]
    return written_report(out, source, labels, c, settings, steps, lr, before, after, model_file, t0, near_misses=made)


def _run(
    weights: dict, meta: dict, train: Path, dev: Path, run_dir: Path, settings: AdaptSettings, source: str
) -> tuple[dict, dict, dict]:
    """The short run (module docstring) in ``run_dir`` from the file's ``weights``: its best epoch's
    state (float32 arrays), the run's configuration and :func:`rckit.training.steps.run_steps`' summary."""
    import torch
    from tqdm import tqdm

    from rckit.contextual.pieces import PieceTokenizer
    from rckit.data.squad import load_json
    from rckit.evaluation.squad_metrics import score_predictions
    from rckit.models.encoder_reader import EncoderReader
    from rckit.models.losses import span_loss
    from rckit.training.encoder_reader import (
        ReaderTrainConfig,
        answer_texts,
        config_dict,
        length_batches,
        make_items,
        pairs_of,
        read,
        tensors,
    )
    from rckit.training.steps import adamw_run, previous_run, run_steps, save_atomic

    base = ReaderTrainConfig(**meta["config"])
    tokenizer = PieceTokenizer(meta["tokenizer"])
    pairs, _, kinds = pairs_of(load_json(train))
    items = make_items(tokenizer, pairs, kinds, base.max_pieces, base.stride, settings.progress)
    per_epoch = -(-len(items) // base.batch_size)
    lr = base.lr * settings.lr_scale
    config = replace(base, lr=lr, warmup=0.0, epochs=settings.epochs, eval_every=per_epoch, seed=settings.seed)
    torch.manual_seed(config.seed)
    model = EncoderReader(meta["bert_config"], config.model)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
    dev_raw = load_json(dev)
    dev_pairs, dev_ids, _ = pairs_of(dev_raw)
    kept = {"config": config_dict(config), "adapted_from": source}
    run = adamw_run(run_dir, model, model.trainable(), per_epoch, config, kept)
    run_dir.mkdir(parents=True, exist_ok=True)
    step, best = run.restore(previous_run(run_dir, settings.resume))
    lengths = [int(n) for n in (items.bounds[1:] - items.bounds[:-1])]
    target = torch.from_numpy(items.target.astype("int64"))

    def loss_of(idx: list[int]) -> torch.Tensor:
        x = tensors(items.rows(idx), items.q_len[idx].tolist())
        got = model(x["ids"], x["mask"], x["types"], x["allowed"])
        return span_loss(got.start, got.end, target[idx, 0], target[idx, 1])

    def figures() -> dict:
        got = read(model, tokenizer, dev_pairs, config.max_pieces, config.stride)
        scores = score_predictions(dev_raw, dict(zip(dev_ids, answer_texts(dev_pairs, got))))
        return {"dev_em": scores["exact_match"], "dev_f1": scores["f1"]}

    def keep(line: dict, best: dict | None) -> dict | None:
        if best is not None and line["dev_f1"] <= best["dev_f1"]:
            return None
        save_atomic({"model": model.state_dict(), "best": line}, run_dir / "best.pt")
        return line

    model.train()
    bar = tqdm(total=run.planned, initial=step, desc="adapt", unit="step", disable=not settings.progress)
    order = lambda epoch: length_batches(lengths, config.batch_size, config.seed + epoch)  # noqa: E731
    summary = run_steps(run, step, best, order, loss_of, figures, keep, bar, log=lambda _: None)
    state = torch.load(run_dir / "best.pt", weights_only=True)["model"]
    return {k: v.float().numpy() for k, v in state.items()}, config_dict(config), summary


def near_miss_file(train: Path, seed: int) -> tuple[Path, int]:
    """``train`` with near misses of its passages (:func:`rckit.data.near_miss.with_near_misses`)
    written beside it as SQuAD v2.0 JSON; the file and how many unanswerable questions were added."""
    from rckit.data.near_miss import NearMissConfig, with_near_misses
    from rckit.data.squad import load_json

    articles, counts = with_near_misses(load_json(train)["data"], NearMissConfig(seed=seed))
    path = train.with_name("train-near-miss.json")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"version": "v2.0", "data": articles}, ensure_ascii=False), encoding="utf-8")
    tmp.replace(path)
    return path, counts["in_file"]
