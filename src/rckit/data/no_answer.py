"""The SQuAD v2.0 files a reader that may answer "no answer" trains and is judged on.

There is no v2.0 training file beside the data rckit is developed on, only a v2.0 dev file.
``rckit prepare squad-no-answer`` builds what a no-answer reader trains and is judged on, by
one seeded, counted rule that anyone can rerun:

- **Unanswerable pairs made from v1.1 train** (:func:`rckit.data.unanswerable.unanswerable_pairs`).
  A question is paired with another paragraph of its own article that does not hold its answer
  (:func:`rckit.data.unanswerable.holds_answer`: SQuAD's answer comparison, so "The Tower" and
  "tower" count as the same answer). The paragraph is of the same topic, so the question's words
  often appear in it, which is what makes the pair hard; a paragraph that holds the answer is never
  used, so the pair is unanswerable for the reason a reader must learn. ``rate`` is the share of
  v1.1 questions that get such a pair (0.5 gives about one unanswerable question in three, as in
  the official v2.0 train set).
- **The v2.0 dev file split by article position** (counting from 0 in the file): the articles
  at odd positions are the **evaluation half**, never trained on and never used to choose a
  threshold, a checkpoint or a setting; the even positions 0, 4, 8, ... join the training file
  and the even positions 2, 6, 10, ... are the **tuning slice** on which the no-answer threshold
  and the best checkpoint are chosen (real, human-written unanswerable questions, unlike the
  made pairs). ``repeat`` writes the training quarter that many times (question ids of the
  copies end in ``-copy1``, ``-copy2``, ...), so that its few real unanswerable questions weigh
  more beside the many made pairs.

Written to ``out``: ``train-v2.0.no-answer.json.gz`` (v1.1 train, its unanswerable pairs and
the training quarter of v2.0 dev), ``tune-v2.0.json.gz``, ``eval-v2.0.json.gz`` and
``report.json`` with every count. All files are SQuAD v2.0 JSON (``"version": "v2.0"``,
``is_impossible``, empty ``answers`` for an unanswerable question).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from rckit.data.squad import SquadFormatError, load_json
from rckit.data.unanswerable import unanswerable_pairs

TRAIN_FILE = "train-v2.0.no-answer.json.gz"
TUNE_FILE = "tune-v2.0.json.gz"
EVAL_FILE = "eval-v2.0.json.gz"


def split_v2_dev(raw: dict) -> tuple[list[dict], list[dict], list[dict]]:
    """(train, tune, eval) articles of a v2.0 dev file: positions 0 mod 4, 2 mod 4, odd."""
    articles = raw["data"]
    return articles[0::4], articles[2::4], articles[1::2]


def _count(articles: list[dict]) -> dict:
    qas = [qa for a in articles for p in a["paragraphs"] for qa in p["qas"]]
    impossible = sum(bool(qa.get("is_impossible")) for qa in qas)
    return {
        "articles": len(articles),
        "paragraphs": sum(len(a["paragraphs"]) for a in articles),
        "questions": len(qas),
        "unanswerable": impossible,
        "answerable": len(qas) - impossible,
    }


def _copies(articles: list[dict], suffix: str) -> list[dict]:
    """``articles`` again, each question id ending in ``suffix`` (ids stay unique in a file)."""
    return [
        {
            **a,
            "paragraphs": [
                {**p, "qas": [{**qa, "id": f"{qa['id']}{suffix}"} for qa in p["qas"]]} for p in a["paragraphs"]
            ],
        }
        for a in articles
    ]


def _write(path: Path, articles: list[dict]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as fh:
        json.dump({"version": "v2.0", "data": articles}, fh, ensure_ascii=False)
    tmp.replace(path)  # a killed write leaves no half file under the real name


def build_no_answer_data(
    v11_train: str | Path,
    v2_dev: str | Path,
    out: str | Path,
    rate: float = 0.5,
    seed: int = 0,
    repeat: int = 1,
    pairing: str = "random",
) -> dict:
    """Write the three files described in the module docstring to ``out``; return the report."""
    train_raw, dev_raw = load_json(v11_train), load_json(v2_dev)
    for path, raw in ((v11_train, train_raw), (v2_dev, dev_raw)):
        if not isinstance(raw, dict) or not isinstance(raw.get("data"), list):
            raise SquadFormatError(f"{path}: top level should be an object with 'data'")
    if not str(dev_raw.get("version", "")).lstrip("v").startswith("2"):
        raise SquadFormatError(
            f"{v2_dev}: not a SQuAD v2.0 file (version {dev_raw.get('version')!r}); "
            "the evaluation half must come from v2.0 dev"
        )
    if repeat < 1:
        raise ValueError(f"repeat is how many times the v2.0 training quarter is written, at least 1; got {repeat}")
    made, pair_counts = unanswerable_pairs(train_raw["data"], rate, seed, pairing)
    dev_train, tune, held_out = split_v2_dev(dev_raw)
    dev_train = dev_train + [copy for k in range(1, repeat) for copy in _copies(dev_train, f"-copy{k}")]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    train = made + dev_train
    files = {"train": (TRAIN_FILE, train), "tune": (TUNE_FILE, tune), "eval": (EVAL_FILE, held_out)}
    report = {
        "inputs": {"v1.1_train": str(v11_train), "v2.0_dev": str(v2_dev)},
        "rate": rate,
        "seed": seed,
        "repeat": repeat,
        "pairing": pairing,
        "pairs": pair_counts,
        "v2.0_dev_positions": {
            "train": "0, 4, 8, ...",
            "tune": "2, 6, 10, ...",
            "eval": "1, 3, 5, ... (never trained or tuned on)",
        },
    }
    for name, (fname, articles) in files.items():
        _write(out / fname, articles)
        report[name] = {"file": fname, **_count(articles)}
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    return report
