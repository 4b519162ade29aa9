"""``rckit serve``: answer questions over HTTP.

Its flags are the fields of :class:`rckit.serve.config.ServeConfig`, stated there once: the flag
is the field's name with dashes, its default, help text, choices and metavar the field's.
"""

from __future__ import annotations

import argparse
import os
import typing
from dataclasses import fields

from rckit.serve.config import ServeConfig


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Serve a model, or several, over HTTP (POST /v1/answer, GET /v1/models); concurrent requests are batched."
    )
    p.add_argument(
        "run",
        nargs="?",
        metavar="RUN|FILE",
        help="run directory, exported .safetensors or .onnx file (default: the installed model)",
    )
    p.add_argument(
        "--model",
        metavar="NAMES|RUN|FILE",
        help="the installed models to serve: all, or names joined by commas (dcn,qanet), the first "
        "answering requests that name none; or one run or file, as RUN|FILE",
    )
    types = typing.get_type_hints(ServeConfig)
    for f in fields(ServeConfig):
        flag, kind = "--" + f.name.replace("_", "-"), value_type(types[f.name])
        if kind is bool:
            p.add_argument(flag, action="store_true", help=f.metadata["help"])
            continue
        shown = {key: f.metadata[key] for key in ("choices", "metavar") if key in f.metadata}
        if f.metadata.get("repeat"):  # a tuple of values, one a flag
            p.add_argument(flag, type=str, action="append", default=None, help=f.metadata["help"], **shown)
            continue
        p.add_argument(flag, type=kind, default=f.default, help=f.metadata["help"], **shown)


def value_type(annotation: object) -> type:
    """``int`` of ``int | None``; a plain type as it is."""
    return next((t for t in typing.get_args(annotation) if t is not type(None)), annotation)


def run(args: argparse.Namespace) -> int:
    from rckit.serve.app import serve  # the HTTP server (and PyTorch, for a PyTorch model): not for --help

    given = {f.name: vars(args)[f.name] for f in fields(ServeConfig)}
    for f in fields(ServeConfig):
        if f.metadata.get("repeat"):
            given[f.name] = tuple(given[f.name] or ())
        elif given[f.name] is None and f.metadata.get("env"):  # e.g. the key from $RCKIT_API_KEY
            given[f.name] = os.environ.get(f.metadata["env"]) or None
    if args.run is not None and args.model is not None:
        raise ValueError(f"give the model once: RUN|FILE ({args.run}) or --model ({args.model}), not both")
    serve(args.model if args.run is None else args.run, ServeConfig(**given))
    return 0
