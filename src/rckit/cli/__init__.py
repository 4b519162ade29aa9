"""The ``rckit`` command: a table of commands, one module each in this package.

A command module has ``add_arguments(p)`` (its flags, description and help) and ``run(args)``
(parse, call the library, print; returns the exit status). Only the chosen command's module is
imported, and a module imports the library modules that bring PyTorch inside ``run``: importing
torch is slow, and ``rckit --help``, ``rckit score``, ``rckit prepare squad`` and answering with
an ONNX file do not need it; the commands that train (train, bench, sweep) must tune the CPU
allocator (:mod:`rckit.training.memory`) before torch is first imported.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import TYPE_CHECKING, NoReturn

from rckit.cli.errors import error_line

if TYPE_CHECKING:
    from types import ModuleType

DESCRIPTION = """\
rckit: neural machine reading comprehension on SQuAD and cloze data.

  rckit prepare squad                     tokenize, index and cache SQuAD (downloads if needed)
  rckit prepare squad-no-answer --out DIR SQuAD v2.0 training/tuning/evaluation files (no-answer readers)
  rckit prepare squad-near-miss --out DIR near misses made from SQuAD v1.1 train (rckit finetune's data)
  rckit prepare squad-cloze --out DIR     an entity-anonymised cloze set built from SQuAD v1.1
  rckit train MODEL --out RUN             train a model, with checkpoints and a learning curve
  rckit adapt --labels L.json --out DIR   fine-tune a reader on your own labelled questions
  rckit evaluate RUN                      official EM/F1 (SQuAD) or accuracy (cloze) of a trained run
  rckit predict [RUN] --context .. --question ..   answer a question (default: the installed model)
  rckit predict [RUN] --questions Q.jsonl --out A.jsonl   answer a file of questions
  rckit explain [RUN] --context .. --question .. --json   why the model gives its answer
  rckit export RUN --out MODEL.safetensors   one file with the model, for answering and serving
  rckit distill --out RUN                 distil a small contextual encoder (a faster reader)
  rckit finetune --train T --out RUN ...  fine-tune rckit's own reader end to end (answers, "no answer")
  rckit verifier --model qanet --data-dir DIR --into FILE   teach a reader to say "no answer"
  rckit models [DIR]                      the default model, and the exported models in DIR
  rckit index PATH... --out INDEX         index a folder of documents for asking (SQLite, BM25)
  rckit ask INDEX "question"              retrieve passages from the index, then read them
  rckit serve [RUN]                       answer questions over HTTP
  rckit score DATA.json PREDS.json        official EM/F1 of a predictions file
  rckit bench MODEL                       training/inference speed and memory
  rckit sweep MODEL --out DIR             a time-boxed hyper-parameter sweep, resumable
"""

ERRORS = """\
Errors: a mistake in what you give rckit (a missing, broken or foreign file, a setting that does
not exist, a checkpoint from another run) prints one line `rckit COMMAND: what, where` to stderr
and exits with status 2. A Python traceback means a bug in rckit: please report it.
"""

# name -> (module in rckit.cli, one-line help), in the order `rckit --help` lists them
COMMANDS = {
    "prepare": ("prepare", "tokenize, index and cache a dataset"),
    "train": ("train", "train a model"),
    "adapt": ("adapt", "fine-tune a trained reader on your own labelled questions"),
    "evaluate": ("evaluate", "official EM/F1 (or cloze accuracy) of a trained run"),
    "predict": ("predict", "answer questions about a text"),
    "explain": ("explain", "why a span model gives its answer: probabilities, attention, saliency"),
    "export": ("export", "write a trained model to one file: .safetensors (PyTorch) or .onnx (onnxruntime)"),
    "distill": ("distill", "distil a small contextual encoder from a teacher's states"),
    "finetune": ("finetune", 'fine-tune rckit\'s own reader end to end: answers and "no answer"'),
    "verifier": ("verifier", 'train the verifier that lets a reader say "no answer", and put it into model files'),
    "models": ("models", "the default model, and exported models in a directory"),
    "index": ("index", "index documents for `rckit ask`"),
    "ask": ("ask", "ask a question of an indexed collection"),
    "serve": ("serve", "answer questions over HTTP"),
    "score": ("score", "official EM/F1 of a predictions file"),
    "bench": ("bench", "speed and memory of a model"),
    "sweep": ("sweep", "hyper-parameter sweep"),
}


class Parser(argparse.ArgumentParser):
    """argparse with the CLI's error rule: one line ``rckit COMMAND: message``, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


def build_parser(chosen: str | None = None) -> tuple[Parser, ModuleType | None]:
    """The parser of every command's name and help; ``chosen``: the command whose module adds its
    arguments (the others are never parsed). Returns the parser and that module (None without one)."""
    parser = Parser(
        prog="rckit", description=DESCRIPTION, epilog=ERRORS, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    module = None
    for name, (module_name, help) in COMMANDS.items():
        p = sub.add_parser(name, help=help)
        if name == chosen:
            module = importlib.import_module(f"rckit.cli.{module_name}")
            module.add_arguments(p)
    return parser, module


def main(argv: list[str] | None = None) -> int:
    """Run one command. A user error prints one line ``rckit COMMAND: ...`` and returns 2 (see ERRORS)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    name = next((a for a in argv if not a.startswith("-")), None)  # the top level has no other flags
    try:
        parser, command = build_parser(name)
        args = parser.parse_args(argv)  # exits 2 on a bad argument, 0 after --help
        code = command.run(args)
        sys.stdout.flush()  # a closed pipe (`rckit ... | head -1`) shows here, inside the command
        return code
    except BrokenPipeError:
        # The reader has gone: what is left of the output goes nowhere, quietly, as with other tools.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a command its pipe closed
    except KeyboardInterrupt:
        print(f"rckit {name}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        line = error_line(e)
        if line is None:
            raise
        print(f"rckit {name}: {line}", file=sys.stderr)
        return 2
