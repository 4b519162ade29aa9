"""Arguments that several commands share: where the data is, which model and preset, the device;
and what the answering commands (predict, ask, evaluate) do with theirs: load the reader
(:func:`load_reader`) and answer a questions file on Ray (:func:`answer_on_ray`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rckit.answering.reader import CHUNK, Reader
from rckit.cluster.answers import AnswerTask, answer_file, summary
from rckit.data.sources import DataSource
from rckit.presets import models_and_presets
from rckit.training.config import parse_duration


def data_arguments(p: argparse.ArgumentParser) -> None:
    """The SQuAD files, the cache and the pretrained vectors (:class:`DataSource`)."""
    p.add_argument("--train", help="training file (SQuAD JSON, plain or .gz)")
    p.add_argument("--dev", help="evaluation file (SQuAD JSON, plain or .gz)")
    p.add_argument(
        "--data-dir",
        help="directory holding train-v1.1*/dev-v1.1*/dev-v2.0* files (default: $RCKIT_DATA); "
        "used instead of downloading",
    )
    p.add_argument("--version", default="1.1", choices=["1.1", "2.0"], help="SQuAD version for the official files")
    p.add_argument("--cache-dir", help="where downloads and prepared data go (default: $RCKIT_CACHE or ~/.cache/rckit)")
    p.add_argument("--embeddings", help="GloVe text file (word v1 .. vd per line); default: the glove-6b-50d package")
    p.add_argument("--char-embeddings", help="GloVe-format character vectors to initialise character embeddings")


def data_source(args: argparse.Namespace, cloze: str | None = None) -> DataSource:
    """The :class:`DataSource` of the arguments :func:`data_arguments` added (``cloze``: ``--cloze-data``)."""
    return DataSource(
        train=args.train,
        dev=args.dev,
        data_dir=args.data_dir,
        version=args.version,
        cache_dir=args.cache_dir,
        embeddings=args.embeddings,
        char_embeddings=args.char_embeddings,
        cloze=cloze,
    )


def models_help() -> str:
    return "models and their presets (--preset NAME, or a JSON/TOML file of the same shape):\n" + "\n".join(
        f"  {m:18s} {', '.join(presets)}" for m, presets in models_and_presets().items()
    )


def model_argument(p: argparse.ArgumentParser) -> None:
    """The MODEL positional of train, bench and sweep, with the models and their presets listed
    below the command's help."""
    p.epilog = models_help()
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("model", help=f"model name: {', '.join(models_and_presets())} (presets below)")


def preset_arguments(
    p: argparse.ArgumentParser, preset_help: str = "preset name or file", set_help: str = "override a config field"
) -> None:
    """``--preset`` and ``--set KEY=VALUE`` (:func:`rckit.presets.run_configs`)."""
    p.add_argument("--preset", help=preset_help)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=set_help)


def duration(text: str | None, flag: str) -> float | None:
    """Seconds of a duration flag (``45m``, ``2h``, ``90s``), an error naming the flag."""
    try:
        return parse_duration(text)
    except ValueError as e:
        raise ValueError(f"{flag}: {e}") from None


MODEL_HELP = (
    "an installed model by name (`rckit models` lists them: minilm_reader, qanet, dcn, dcn_plus, "
    "deep_lstm_reader, qanet_paper, qanet_glove, qanet_minilm_l2), a run directory or an exported file; the same as RUN"
)


def model_option(p: argparse.ArgumentParser, help: str = MODEL_HELP) -> None:
    """``--model NAME|RUN|FILE``, the same as a command's RUN positional (:func:`model_source`)."""
    p.add_argument("--model", metavar="NAME|RUN|FILE", help=help)


def model_source(args: argparse.Namespace) -> str | None:
    """The model a command was given, as RUN or as ``--model`` (not both); None for the default."""
    if args.run is not None and args.model is not None:
        raise ValueError(f"give the model once: RUN ({args.run}) or --model ({args.model}), not both")
    return args.run if args.run is not None else args.model


def found_file(data_dir: str | None, given: str | None, folder: str, pattern: str) -> Path:
    """``given``, or the first file of ``data_dir/folder`` (else ``data_dir``) matching ``pattern``."""
    if given:
        return Path(given)
    if not data_dir:
        raise ValueError(f"give --data-dir, or the file ({pattern}) itself")
    hits = sorted((Path(data_dir) / folder).glob(pattern)) or sorted(Path(data_dir).glob(pattern))
    if not hits:
        raise FileNotFoundError(f"{data_dir}: no {folder}/{pattern}")
    return hits[0]


def abstain_options(p: argparse.ArgumentParser) -> None:
    """``--always-answer`` and ``--no-answer-threshold``: whether and when a model that can say
    "no answer" (a verifier beside it, :mod:`rckit.answering.verifier`, or a null) does."""
    p.add_argument(
        "--always-answer",
        action="store_true",
        help="never say the text holds no answer: the best span "
        "all the same (its no_answer_probability still said); the answers of a model without a verifier",
    )
    p.add_argument(
        "--no-answer-threshold",
        type=float,
        metavar="P",
        help='a model with a verifier says "no answer" where its probability of that is above P '
        "(0..1; default: the model's, chosen on held-out data; lower: more abstentions; docs/no-answer.md)",
    )


def ray_options(p: argparse.ArgumentParser, what: str, blocks: bool = False) -> None:
    """``--ray [ADDRESS]``, ``--workers N``, ``--cpus-per-worker C`` (and with ``blocks``
    ``--ray-block N``): ``what`` on a Ray cluster (:mod:`rckit.cluster`), by Ray's own convention
    for the address."""
    p.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help=f"{what} on a Ray cluster (pip install 'rckit[ray]'): ADDRESS joins that cluster, 'auto' (or "
        "$RAY_ADDRESS) the one running here, none starts a local instance on this machine's cores",
    )
    p.add_argument(
        "--workers", type=int, default=2, metavar="N", help="with --ray: actors, each with its own model (default 2)"
    )
    p.add_argument(
        "--cpus-per-worker", type=float, default=1.0, metavar="C", help="with --ray: cores each actor takes (default 1)"
    )
    if blocks:
        p.add_argument(
            "--ray-block",
            type=int,
            default=CHUNK,
            metavar="N",
            help=f"with --ray: questions an actor answers in one call, and between flushes of the output "
            f"(default {CHUNK})",
        )


def span_options(p: argparse.ArgumentParser) -> None:
    """``--max-answer-len`` and ``--stride``: how a reader cuts a long context and reads spans off
    it (``rckit predict``, ``rckit explain``)."""
    p.add_argument(
        "--max-answer-len",
        type=int,
        metavar="N",
        help="longest answer in tokens (default: the run's decode.max_answer_len)",
    )
    p.add_argument(
        "--stride",
        type=int,
        metavar="N",
        help="tokens between the starts of two windows of a long context (default: half a window)",
    )


def reader_options(args: argparse.Namespace, on_ray: bool = False) -> dict:
    """:meth:`Reader.load`'s options from ``--device`` and :func:`abstain_options`' flags. On a Ray
    cluster (``on_ray``) ``--device auto`` is the CPU: an actor is given cores (``--cpus-per-worker``)."""
    device = "cpu" if on_ray and args.device == "auto" else args.device
    return {"device": device, "always_answer": args.always_answer, "no_answer_threshold": args.no_answer_threshold}


def load_reader(source: str | Path | None, args: argparse.Namespace) -> Reader:
    """The reader a command answers with: ``source`` (an installed model's name, a run or a file;
    None: the default model) loaded with :func:`reader_options`."""
    return Reader.load(source, **reader_options(args))


def answer_on_ray(args: argparse.Namespace, task: AnswerTask, fields: tuple[str, ...], verb: str) -> int:
    """``--questions Q --out A.jsonl --ray``: every record of the file (its text ``fields``)
    answered as ``task`` says by the actors of :func:`ray_options`' flags
    (:func:`rckit.cluster.answers.answer_file`), then one line on stderr saying how many were ``verb``."""
    got = answer_file(
        task, args.questions, args.out, fields, args.workers, args.cpus_per_worker, args.ray or None, args.ray_block
    )
    print(summary(got, verb, args.out), file=sys.stderr)
    return 0
