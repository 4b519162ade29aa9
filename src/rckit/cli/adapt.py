"""``rckit adapt``: fine-tune a trained reader on a few hundred questions about one's own documents.

The whole path (docs/adapt.md): the labels are split by document into train and dev and SQuAD
questions are mixed into train (:mod:`rckit.data.adapt`); the vocabulary is the model's own with
the new words' GloVe rows added; the model's weights start a short run at a low learning rate
(:mod:`rckit.training.adapt`), the best epoch on the user's dev is exported to
``OUT/model.safetensors``, and the dev F1 before and after is printed and kept in
``OUT/adapt.json`` (and in the file, for ``rckit models``), each question's answer before and after in
``OUT/dev-before.json`` and ``OUT/dev-predictions.json``. A killed run goes on with ``--resume``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rckit.cli.arguments import model_option
from rckit.training import memory


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Fine-tune a trained reader (default: the installed default) on your own labelled questions "
        "(a SQuAD-layout file, e.g. from `rckit serve --labels`): split by document into train and dev, "
        "SQuAD questions mixed in so it does not forget, a few epochs at a low learning rate, the best "
        "epoch on your dev written to OUT/model.safetensors with its dev F1 before and after."
    )
    p.add_argument(
        "run", nargs="?", metavar="NAME|RUN|FILE", help="the model to start from (default: the installed default)"
    )
    model_option(p)
    p.add_argument("--labels", required=True, help="your questions: a SQuAD-layout JSON file (any version field)")
    p.add_argument("--dev", help="your own dev file (default: about --dev-share of the labels' documents are held out)")
    p.add_argument("--out", required=True, help="folder for the data, the run, model.safetensors and adapt.json")
    p.add_argument(
        "--dev-share", type=float, default=0.2, help="share of the questions held out, by whole documents (default 0.2)"
    )
    p.add_argument(
        "--squad-mix",
        type=float,
        default=1.0,
        help="SQuAD v1.1 train questions mixed in per training label (default 1; 0: your questions alone)",
    )
    p.add_argument(
        "--squad-train", help="SQuAD v1.1 train file to mix in (default: found in --data-dir or $RCKIT_DATA)"
    )
    p.add_argument("--data-dir", help="folder holding train-v1.1.json (default: $RCKIT_DATA)")
    p.add_argument("--epochs", type=int, default=4, help="passes over the training questions (default 4)")
    p.add_argument(
        "--lr-scale", type=float, default=0.1, help="the learning rate, as a share of the model's own (default 0.1)"
    )
    p.add_argument(
        "--limit", type=int, metavar="N", help="learn from N of your training questions only, drawn at random (seeded)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--resume", action="store_true", help="go on with a run in OUT that was stopped")
    p.add_argument(
        "--embeddings",
        help="the GloVe text file the model was trained with (default: the glove-6b-50d "
        "package, as the installed models were)",
    )
    p.add_argument("--cache-dir", help="where prepared data go (default: $RCKIT_CACHE or ~/.cache/rckit)")
    p.add_argument("--device", default="auto", help="cpu, cuda, ... (default: cuda if available)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def squad_train_file(args: argparse.Namespace) -> Path | None:
    """The SQuAD v1.1 train file mixed in: given, or found on disk (never downloaded here)."""
    if args.squad_mix == 0:
        return None
    if args.squad_train:
        return Path(args.squad_train)
    from rckit.data.download import resolve_squad_files

    try:
        return resolve_squad_files(
            "1.1", data_dir=args.data_dir, cache_dir=args.cache_dir, download=False, splits=("train",)
        )["train"]
    except FileNotFoundError as e:
        raise FileNotFoundError(
            f"{e}; give --squad-train FILE, or --squad-mix 0 to adapt on your questions alone"
        ) from None


def run(args: argparse.Namespace) -> int:
    memory.use_huge_pages()  # before torch is imported
    from rckit.answering.decoding import decode_config_of
    from rckit.config import from_dict
    from rckit.data.adapt import adapt_files
    from rckit.data.sources import DataSource, prepare_data
    from rckit.device import pick_device
    from rckit.evaluation.evaluate import evaluate
    from rckit.export.metadata_edit import record_score
    from rckit.export.safetensors import export_run
    from rckit.model_files.load import load_model
    from rckit.model_files.source import pytorch_source
    from rckit.models import MODELS
    from rckit.training.adapt import adapt_train_config
    from rckit.training.loop import train

    if args.run is not None and args.model is not None:
        raise ValueError(f"give the model once: NAME|RUN|FILE ({args.run}) or --model ({args.model}), not both")
    source = pytorch_source(args.run if args.run is not None else args.model)
    out = Path(args.out)
    run_dir = out / "run"
    if (run_dir / "last.pt").exists() and not args.resume:
        raise FileExistsError(
            f"{out} already holds an adapting run; pass --resume to go on with it or choose another --out"
        )
    _, vocabs, meta = load_model(source)
    if meta.get("task", "span") != "span":
        raise ValueError(f"{source}: a cloze model; adapting reads SQuAD-layout questions, for span models")
    progress = not args.no_progress
    t0 = time.perf_counter()

    files = adapt_files(
        args.labels,
        out / "data",
        dev=args.dev,
        squad_train=squad_train_file(args),
        squad_mix=args.squad_mix,
        dev_share=args.dev_share,
        seed=args.seed,
        limit=args.limit,
    )
    for note in files.notes:
        print(f"rckit adapt: {note}", file=sys.stderr)
    c = files.counts
    print(
        f"rckit adapt: {c['train_questions']} questions to learn from ({c['train_documents']} {c['split_by']}s) "
        f"and {c['squad_questions']} of SQuAD's; {c['dev_questions']} to check on ({c['dev_documents']})",
        file=sys.stderr,
    )
    base_vocab = out / "data" / "base-vocab.json"
    base_vocab.write_text(json.dumps(vocabs.to_json()))
    prepared = prepare_data(
        DataSource(train=files.train, dev=files.dev, cache_dir=args.cache_dir, embeddings=args.embeddings),
        [f"base_vocab={base_vocab.resolve()}"],
    )
    cfg_cls, model_cls = MODELS[meta["model"]]
    tcfg, steps = adapt_train_config(
        meta.get("train_config") or {}, c["train_questions"] + c["squad_questions"], args.epochs, args.lr_scale
    )
    device = pick_device(args.device)

    def dev_scores(model_file: Path, predictions: Path) -> dict:  # every question answered: labels have answers
        return evaluate(model_file, files.dev, always_answer=True, device=device, progress=progress, out=predictions)

    before = dev_scores(source, out / "dev-before.json")
    summary = train(
        meta["model"],
        model_cls,
        from_dict(cfg_cls, meta["model_config"]),
        tcfg,
        prepared,
        run_dir,
        max_steps=steps,
        resume=args.resume,
        device=device,
        progress=progress,
        decode=decode_config_of(meta),
        init_from=None if args.resume else source,
    )
    model_file = out / "model.safetensors"
    export_run(run_dir, model_file)
    after = dev_scores(model_file, out / "dev-predictions.json")
    record_score(model_file, files.dev, after)
    report = {
        "model": str(source),
        "labels": str(args.labels),
        **c,
        "epochs": args.epochs,
        "steps": summary["steps"],
        "lr": tcfg.lr,
        "dev_before": {k: before[k] for k in ("exact_match", "f1")},
        "dev_after": {k: after[k] for k in ("exact_match", "f1")},
        "model_file": str(model_file),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    (out / "adapt.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report))
    if after["f1"] <= before["f1"]:
        print(
            f"rckit adapt: the adapted model scores no better on your dev ({after['f1']:.2f} F1, before "
            f"{before['f1']:.2f}): keep the one you started from, or label more questions",
            file=sys.stderr,
        )
    return 0
