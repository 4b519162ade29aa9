"""What the verifier (issues 43 and 71) costs a question: ``Reader.answer`` on one paragraph-sized
passage with the model file's verifier, with its feature network alone (rckit's own reader set
aside, where the file names one), and with no verifier, each backend.

    python benchmarks/verifier_cost.py [--model qanet] [--repeats 300]

The settings are timed in alternation (one call each, ``--repeats`` times) so that a slower spell
of the machine falls on all; prints the median milliseconds of each and of the verifier's own
step (features and the network, or the own reader's pass) alone. Figures go to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from rckit.answering.reader import Reader
from rckit.model_files.source import installed_files

CONTEXT = (
    "The Rosetta Stone is a granodiorite stele inscribed with three versions of a decree issued in Memphis, "
    "Egypt, in 196 BC during the Ptolemaic dynasty on behalf of King Ptolemy V Epiphanes. The top and middle "
    "texts are in Ancient Egyptian using hieroglyphic and Demotic scripts respectively, while the bottom is in "
    "Ancient Greek. The decree has only minor differences between the three versions, making the Rosetta "
    "Stone key to deciphering the Egyptian scripts. The stone was discovered in 1799 by a French soldier, "
    "Pierre-Francois Bouchard, during the Napoleonic campaign in Egypt. Jean-Francois Champollion announced "
    "the first decipherment of the hieroglyphs in 1822."
)
QUESTION = "Who announced the decipherment of the hieroglyphs?"


def ms(fn, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return 1e3 * (time.perf_counter() - t) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qanet")
    ap.add_argument("--repeats", type=int, default=300)
    args = ap.parse_args()
    out = {}
    for path in installed_files(args.model).values():
        with_v = Reader.load(path, "cpu")
        assert with_v.verifier is not None, f"{path}: no verifier"
        readers = {"with_verifier": with_v}
        if with_v.verifier.own is not None:
            features = Reader.load(path, "cpu")
            features.verifier.own = None
            readers["features_only"] = features
        without = Reader.load(path, "cpu")
        without.verifier = None
        readers["without"] = without
        for r in readers.values():
            ms(lambda: r.answer(CONTEXT, QUESTION), 20)  # warm up
        times: dict[str, list[float]] = {name: [] for name in readers}
        for _ in range(args.repeats):
            for name, r in readers.items():
                times[name].append(ms(lambda: r.answer(CONTEXT, QUESTION), 1))
        job = with_v.plan([(CONTEXT, QUESTION)])
        with_v.read_all(job)
        step = ms(lambda: job.no_answer_probabilities(), 100)
        median = {name: statistics.median(t) for name, t in times.items()}
        out[with_v.info["backend"]] = {
            **{f"{name}_ms": round(m, 2) for name, m in median.items()},
            "verifier_step_ms": round(step, 3),
            "slower_percent": round(100 * (median["with_verifier"] / median["without"] - 1), 1),
        }
    print(json.dumps({"model": args.model, **out}, indent=1))


if __name__ == "__main__":
    main()
