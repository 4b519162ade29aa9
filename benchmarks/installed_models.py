"""One question, and one explanation, with each model installed with rckit, in one process.

    python benchmarks/installed_models.py [--repeat 100] [--explain 10] [--record]
    python benchmarks/installed_models.py --files A.onnx B.safetensors ...   (any exported files)

For each installed model (``rckit models``) and each file it has (``.safetensors`` on PyTorch,
``.onnx`` on onnxruntime), loaded with ``rckit.Reader.load`` and its default threads; rckit's own
reader (one ``.safetensors`` file for both) on each backend (``PointerReader.load(..., backend=)``):

- one question: ``reader.answer(paragraph, question)`` on load_serve.py's ~150-token paragraph,
  its questions in turn, ``--repeat`` calls after 10 warm-up calls: median and p90 ms. A model
  reading a contextual encoder's states is timed with the encoder's memo off, as if each call
  brought a new paragraph, and again with it on ("asked again": the paragraph read once, each
  question after the first read alone, as the page's user asks);
- one explanation (PyTorch files): ``reader.explain`` of the first of those questions with its
  default integrated-gradients steps (``DEFAULT_STEPS``), ``--explain`` calls after one warm-up: median seconds;
- the load: seconds from ``Reader.load`` to its return, and the file's size.

Prints a Markdown table. ``--record`` writes each model's median milliseconds to
``src/rckit/bundled/speed.json``, with the machine and date, where ``rckit models`` reads them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load_serve import PARAGRAPH, QUESTIONS  # noqa: E402

from rckit.answering.explanation import DEFAULT_STEPS  # noqa: E402
from rckit.answering.pointer_reader import PointerReader  # noqa: E402
from rckit.answering.reader import Reader  # noqa: E402
from rckit.cli.models import SPEED  # noqa: E402
from rckit.model_files.reader_file import is_reader_file  # noqa: E402
from rckit.model_files.source import installed_files, installed_models  # noqa: E402

BACKENDS = {"safetensors": "PyTorch", "onnx": "onnxruntime"}


def time_answers(reader, repeat: int, memo: bool = False) -> tuple[float, float]:
    encoder = getattr(reader, "encoder", None)  # rckit's own reader is the encoder: no memo
    kept = encoder.memo if encoder is not None else None
    if encoder is not None and not memo:
        encoder.memo = None  # every call reads the paragraph, as a new one would be
    try:
        return _time_answers(reader, repeat)
    finally:
        if encoder is not None:
            encoder.memo = kept


def _time_answers(reader, repeat: int) -> tuple[float, float]:
    for i in range(10):
        reader.answer(PARAGRAPH, QUESTIONS[i % len(QUESTIONS)])
    times = []
    for i in range(repeat):
        start = time.perf_counter()
        reader.answer(PARAGRAPH, QUESTIONS[i % len(QUESTIONS)])
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return statistics.median(times), times[int(0.9 * (len(times) - 1))]


def time_explain(reader, n: int, question: str = QUESTIONS[0], steps: int = DEFAULT_STEPS) -> float:
    """Median seconds of ``n`` explanations of ``question`` on the paragraph, after one."""
    reader.explain(PARAGRAPH, question, steps)
    times = []
    for _ in range(n):
        start = time.perf_counter()
        reader.explain(PARAGRAPH, question, steps)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def loads(files: dict[str, Path]) -> list[tuple[str, Path, object]]:
    """(backend, file, how to load it) for each way a model's ``files`` answer."""
    out = []
    for fmt, path in files.items():
        if is_reader_file(path):  # rckit's own reader: the one file on each backend
            out += [
                ("PyTorch", path, lambda p=path: PointerReader.load(p, backend="torch")),
                ("onnxruntime", path, lambda p=path: PointerReader.load(p, backend="onnx")),
            ]
        else:
            out.append((BACKENDS[fmt], path, lambda p=path: Reader.load(p)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--explain", type=int, default=10)
    ap.add_argument("--models", default="all", help="names joined by commas (default: every installed model)")
    ap.add_argument("--record", action="store_true")
    ap.add_argument(
        "--files",
        nargs="+",
        metavar="FILE",
        help="time these exported files instead (named by their file names; not recorded)",
    )
    args = ap.parse_args()
    names = installed_models() if args.models == "all" else args.models.split(",")
    rows, speed = [], {}
    if args.files:
        args.record = False
        names = [Path(f).name for f in args.files]
        given = {Path(f).name: {Path(f).suffix.lstrip("."): Path(f)} for f in args.files}
    for name in names:
        for backend, path, load in loads(given[name] if args.files else installed_files(name)):
            start = time.perf_counter()
            reader = load()
            load_s = time.perf_counter() - start
            median, p90 = time_answers(reader, args.repeat)
            again = time_answers(reader, args.repeat, memo=True)[0] if getattr(reader, "encoder", None) else None
            explains = backend == "PyTorch" and hasattr(reader, "explain") and args.explain
            explain_s = time_explain(reader, args.explain) if explains else None
            speed.setdefault(name, {})[backend] = round(median, 1)
            rows.append(
                (
                    name,
                    backend,
                    f"{path.stat().st_size / 2**20:.1f}",
                    f"{load_s:.2f}",
                    f"{median:.1f} / {p90:.1f}",
                    "-" if again is None else f"{again:.1f}",
                    "-" if explain_s is None else f"{explain_s:.3f}",
                )
            )
            print(
                json.dumps(
                    {
                        "model": name,
                        "backend": backend,
                        "mib": path.stat().st_size / 2**20,
                        "load_s": load_s,
                        "median_ms": median,
                        "p90_ms": p90,
                        "asked_again_ms": again,
                        "explain_s": explain_s,
                    }
                ),
                file=sys.stderr,
            )
    print(
        f"| model | backend | file MiB | load s | one question, median / p90 ms | asked again, median ms | "
        f"explain s ({DEFAULT_STEPS} IG steps) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    if args.record:
        machine = f"{os.cpu_count()}-core {platform.machine()} CPU"
        record = {
            "machine": machine,
            "date": datetime.date.today().isoformat(),
            "paragraph": "benchmarks/load_serve.py",
            # --models NAME,...: the others keep their figures (timed on another day, perhaps)
            "models": {**(json.loads(SPEED.read_text())["models"] if SPEED.is_file() else {}), **speed},
        }
        SPEED.write_text(json.dumps(record, indent=1) + "\n")
        print(f"recorded in {SPEED}", file=sys.stderr)


if __name__ == "__main__":
    main()
