"""Inside a cloze reader: where the Attentive or Impatient Reader looked in a document, and how
sure it was of each candidate entity (Hermann et al. 2015, Figure 3).

:func:`explain_cloze` reads one example of a run's cloze data (``--example N``, or its id) with the
run's model and returns a JSON-shaped :class:`ClozeExplanation`: the document and query tokens,
the attention over the document (the Attentive Reader's one ``s(t)``; the Impatient Reader's
``s(i, t)`` for every query token ``i``, its real steps only), and every candidate entity's
probability (the softmax over the document's entities, as the model ranks them). The Deep LSTM
Reader reads document and query as one sequence and attends to nothing: its explanation has the
candidates and a note. :func:`write_cloze_png` draws it as the paper does: the document's words
shaded by attention, the entities numbered, the gold one boxed, and the candidates' bars.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

import numpy as np
import torch

from rckit.data.cloze.dataset import detect_layout, load_eval_split, read_split
from rckit.model_files.errors import MissingPackage
from rckit.model_files.load import load_model
from rckit.models.attentive_reader import AttentiveReader, ImpatientReader


class Candidate(TypedDict):
    entity: str  # "@entity3"
    probability: float


class ClozeExplanation(TypedDict):
    model: str
    example: int  # its position in the split
    id: str
    split: str
    document_tokens: list[str]
    query_tokens: list[str]
    attention: list[float] | list[list[float]] | None  # (Td,) Attentive; (Tq real steps, Td) Impatient; None
    attention_steps: list[int] | None  # the Impatient Reader's query positions of the rows
    candidates: list[Candidate]  # best first
    answer: str  # the model's entity
    gold: str
    notes: list[str]


def explain_cloze(
    source: str | Path,
    example: int | str,
    data: str | Path | None = None,
    split: str | None = None,
    device: str = "cpu",
) -> ClozeExplanation:
    """The explanation of ``example`` (a position or an id) of ``split`` of a cloze run's data
    (``data`` and ``split`` default to what the run evaluated on)."""
    model, _, meta = load_model(source, device)
    if meta.get("task") != "cloze":
        raise ValueError(
            f"{source}: a span model; --example explains a cloze run (span models: --context and --question)"
        )
    root = Path(data or meta["data"]["cloze_dir"])
    split = split or meta["data"]["eval_split"]
    examples = read_split(root, detect_layout(root), split)
    ids = [ex.id for ex in examples]
    if isinstance(example, str) and not example.isdigit():
        if example not in ids:
            raise ValueError(f"{root} {split}: no example with id {example!r}")
        index = ids.index(example)
    else:
        index = int(example)
        if not 0 <= index < len(examples):
            raise ValueError(f"{root} {split}: example {index} is out of range (0 to {len(examples) - 1})")
    ex = examples[index]
    encoded = load_eval_split(root, split, meta["vocab"])  # the same examples, as the run's ids
    batch = encoded.collate(np.array([index])).to(device)
    notes = []
    with torch.inference_mode():
        out = model(batch)
        seen = model.attend(batch) if isinstance(model, (AttentiveReader, ImpatientReader)) else None
    probs = torch.softmax(out.logits[0].float(), dim=-1)
    candidates = sorted(
        ({"entity": c, "probability": float(probs[int(c[len("@entity") :])])} for c in dict.fromkeys(ex.candidates)),
        key=lambda c: -c["probability"],
    )
    attention, steps = None, None
    if seen is None:
        notes.append(
            f"the {meta['model']} reads the document and query as one sequence: it has no attention "
            "to show, only its candidates' probabilities"
        )
    elif seen.s.dim() == 2:  # Attentive: (1, Td)
        attention = seen.s[0, : len(ex.document)].float().tolist()
    else:  # Impatient: (1, Tq, Td), padded query steps are zero rows
        real = batch.q_mask[0].nonzero().flatten().tolist()
        steps = real
        attention = [seen.s[0, i, : len(ex.document)].float().tolist() for i in real]
    return ClozeExplanation(
        model=meta["model"],
        example=index,
        id=ex.id,
        split=split,
        document_tokens=list(ex.document),
        query_tokens=list(ex.query),
        attention=attention,
        attention_steps=steps,
        candidates=candidates,
        answer=candidates[0]["entity"],
        gold=ex.answer,
        notes=notes,
    )


def write_cloze(explanation: ClozeExplanation, path: str | Path) -> Path:
    """``.json`` or ``.png`` (:func:`write_cloze_png`) by the suffix."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".json":
        path.write_text(json.dumps(explanation, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        return path
    if suffix == ".png":
        return write_cloze_png(explanation, path)
    raise ValueError(f"{path}: a cloze explanation is written as .png or .json")


def write_cloze_png(e: ClozeExplanation, path: str | Path) -> Path:
    """The document as lines of words, each shaded by its attention (the Impatient Reader's
    averaged over its query steps), entity mentions in bold, the gold entity's boxed; the query
    above, the candidates' probabilities beside. The words flow as text does: each is measured as
    drawn, and a line breaks where the next word would pass the margin."""
    plt = _pyplot()
    words = e["document_tokens"]
    labels = [w.replace("@entity", "ent") if w.startswith("@entity") else w for w in words]
    fig = plt.figure(figsize=(13, 4))  # the height follows the lines, once they are known
    ax = fig.add_axes([0.01, 0.0, 0.74, 1.0])
    ax.axis("off")
    ax.set_xlim(0, 1)
    at = _flow_words(fig, ax, words, labels)
    lines = at[-1][1] + 1 if at else 1
    fig.set_size_inches(13, 1.6 + 0.32 * lines + 0.25 * min(len(e["candidates"]), 8))
    ax.set_ylim(lines + 4, 0)
    _draw_heading(ax, e)
    _draw_document(ax, e, labels, at)
    _draw_candidates(fig, e)
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingPackage(
            "drawing needs matplotlib: pip install 'rckit[torch]' (or pip install matplotlib), or write .json instead"
        ) from None
    return plt


def _flow_words(fig, ax, words: list[str], labels: list[str]) -> list[tuple[float, int]]:
    """Where each word goes: (x as a fraction of the axes' width, line), each measured as drawn."""
    renderer = fig.canvas.get_renderer()
    across = ax.get_window_extent(renderer).width  # pixels; the figure's height does not change it

    def width(label: str, bold: bool) -> float:
        t = ax.text(0, 0, label, fontsize=8, weight="bold" if bold else "normal")
        w = t.get_window_extent(renderer).width / across
        t.remove()
        return w

    gap, at, x, line = 0.008, [], 0.0, 0
    for w, label in zip(words, labels):
        wide = width(label, w.startswith("@entity"))
        if x > 0 and x + wide > 1.0:
            x, line = 0.0, line + 1
        at.append((x, line))
        x += wide + gap
    return at


def _draw_heading(ax, e: ClozeExplanation) -> None:
    """The query, and a line saying which model, which example and what is shaded."""
    ax.text(0, 0.6, "query: " + " ".join(e["query_tokens"]), fontsize=11, weight="bold")
    what = (
        "attention over the document" + (" (mean over the query steps)" if e["attention_steps"] else "")
        if e["attention"] is not None
        else "no attention (" + e["model"] + ")"
    )
    ax.text(
        0,
        1.5,
        f"{e['model']} · {e['split']} example {e['example']} ({e['id']}) · {what} · "
        f"answer {e['answer']}, gold {e['gold']}",
        fontsize=9,
        color="#555",
    )


def _draw_document(ax, e: ClozeExplanation, labels: list[str], at: list[tuple[float, int]]) -> None:
    """The words where :func:`_flow_words` put them, shaded by the attention (the Impatient Reader's
    mean over its query steps) relative to its largest, the gold entity boxed."""
    words = e["document_tokens"]
    att = e["attention"]
    if att is not None and att and isinstance(att[0], list):
        att = list(np.mean(np.asarray(att), axis=0))
    weight = np.asarray(att if att is not None else [0.0] * len(words))
    top = float(weight.max()) if weight.size and weight.max() > 0 else 1.0
    for i, (w, label, (x, line)) in enumerate(zip(words, labels, at)):
        shade = float(weight[i]) / top if att is not None else 0.0
        box = {
            "boxstyle": "square,pad=0.15",
            "facecolor": (0.85, 0.1, 0.1, 0.85 * shade),
            "edgecolor": "black" if w == e["gold"] else "none",
            "linewidth": 1.5,
        }
        ax.text(
            x,
            3 + line,
            label,
            fontsize=8,
            weight="bold" if w.startswith("@entity") else "normal",
            bbox=box,
            va="center",
        )


def _draw_candidates(fig, e: ClozeExplanation) -> None:
    """The eight most probable candidates' bars, the gold one in red."""
    bars = fig.add_axes([0.79, 0.15, 0.19, 0.7])
    shown = e["candidates"][:8][::-1]
    bars.barh(
        [c["entity"].replace("@entity", "ent") for c in shown],
        [c["probability"] for c in shown],
        color=["#c0392b" if c["entity"] == e["gold"] else "#7f8c8d" for c in shown],
    )
    bars.set_xlim(0, 1)
    bars.set_title("candidates (gold in red)", fontsize=9)
    bars.tick_params(labelsize=8)
