"""An explanation drawn for people: a PNG figure and one self-contained HTML page.

What is drawn is what ``Reader.explain`` returns (:mod:`rckit.answering.explanation`), or that same
JSON read back from a file: this module needs neither torch nor the model, so an explanation saved as
JSON can be drawn later and elsewhere. Both drawings hold the same four views, each left out where the
explanation has nothing for it:

- the passage (the window explained), each word shaded by the model's start probability (blue, upper
  half) and end probability (orange, lower half), the answer boxed;
- the attention between question and passage as a heat map with the words on its axes: QANet's
  context-query attention (S_bar and S_bbar, Yu et al. 2018, eqs. 1-2), DCN's coattention (A^D and A^Q,
  Xiong et al. 2017, eq. 2). A long passage shows the passage words around the answer and says so;
- DCN's dynamic decoder, one row for the start and one for the end estimate of every iteration, the word
  each picks outlined, as in Figure 3 of Xiong et al. (2017);
- the saliency of each word for the chosen span's score, signed (green raises it, pink lowers it):
  integrated gradients in the PNG, a switch between gradient x input and integrated gradients in HTML.

Shades are relative: each view scales its colour to its own largest value, which its legend gives, so a
flat distribution still shows where its mass is; probabilities of the passage and the decoder are shaded
by the square root of that share, so that the runners-up of a peaked distribution show too. The HTML page
has no script and loads nothing: its switches are radio buttons styled with CSS, every text is escaped,
and hovering over a word or a cell gives its numbers. matplotlib (in the ``torch`` extra) is imported only
when a PNG is written.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rckit.model_files.errors import MissingPackage

SUFFIXES = (".png", ".html", ".json")
KEYS = (
    "model",
    "context",
    "question",
    "window",
    "context_tokens",
    "context_offsets",
    "question_tokens",
    "question_offsets",
    "answer",
    "answer_tokens",
    "start_probs",
    "end_probs",
    "null_prob",
    "attention",
    "decoder",
    "saliency",
    "notes",
)
FOCUS = 60  # the most passage words a heat map shows at once

MODEL_NAMES = {"qanet": "QANet", "dcn": "DCN", "dcn_plus": "DCN+", "deep_lstm_reader": "Deep LSTM Reader"}
# RGB, shared by both drawings: blue/orange and green/pink stay apart for colour-blind readers.
START, END = (31, 119, 180), (255, 127, 14)
POSITIVE, NEGATIVE = (27, 120, 55), (197, 27, 125)
ATTENTION = (84, 39, 143)


def write_explanation(explanation: Mapping[str, Any], path: str | Path) -> Path:
    """Write ``explanation`` to ``path`` as its suffix says: ``.png`` (a figure), ``.html`` (one page)
    or ``.json`` (the explanation itself). Any other suffix is a ValueError."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".png":
        write_png(explanation, path)
    elif suffix == ".html":
        write_html(explanation, path)
    elif suffix == ".json":
        _checked(explanation)
        _write_atomically(
            path,
            lambda tmp: tmp.write_text(json.dumps(explanation, ensure_ascii=False, indent=1) + "\n", encoding="utf-8"),
        )
    else:
        raise ValueError(
            f"{path}: an explanation is written as {', '.join(SUFFIXES[:-1])} or {SUFFIXES[-1]}, "
            f"by the file's suffix (got {path.suffix or 'none'})"
        )
    return path


def _checked(explanation: Mapping[str, Any]) -> Mapping[str, Any]:
    missing = [k for k in KEYS if k not in explanation]
    if missing:
        raise ValueError(f"not an explanation (what Reader.explain returns): it lacks {', '.join(missing)}")
    return explanation


def _write_atomically(path: Path, write: Callable[[Path], Any]) -> None:
    # A half-written file is never left under the name asked for (a figure watched while it is redrawn).
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------------
# What both drawings show, worked out once


@dataclass
class Word:
    """One token as the user wrote it: its text, what separates it from the token before ("" when they
    touch, " " for a space, "\\n" for a paragraph break) and its index in its token list."""

    text: str
    sep: str
    index: int


def words(text: str, tokens: Sequence[str], offsets: Sequence[Sequence[int]]) -> list[Word]:
    """The tokens as written in ``text`` (the offsets index it), with what separates them; the token's
    own string where its offsets do not fit the text."""
    out, previous = [], None
    for i, token in enumerate(tokens):
        start, end = offsets[i] if i < len(offsets) else (-1, -1)
        valid = 0 <= start < end <= len(text)
        shown = " ".join(text[start:end].split()) if valid else str(token)
        gap = text[previous:start] if valid and previous is not None and previous <= start else " "
        sep = "" if previous is None or gap == "" else "\n" if gap.count("\n") >= 2 else " "
        out.append(Word(shown or str(token), sep, i))
        previous = end if valid else None
    return out


def answer_tokens(ex: Mapping[str, Any]) -> tuple[int, int] | None:
    span = ex.get("answer_tokens")
    return (int(span[0]), int(span[1])) if span else None


def focus(ex: Mapping[str, Any], limit: int = FOCUS) -> tuple[int, int]:
    """The passage tokens ``[lo, hi)`` a heat map shows: all of them when there are at most ``limit``,
    else ``limit`` around the answer (and the decoder's estimates when they fit beside it)."""
    n = len(ex["context_tokens"])
    if n <= limit:
        return 0, n
    span = answer_tokens(ex) or (_argmax(ex["start_probs"]), _argmax(ex["end_probs"]))
    first, last = min(span), max(span)
    # A decoder step that points at the null (-1) has no place among the words.
    points = [first, last] + [int(it[k]) for it in ex.get("decoder") or () for k in ("start", "end") if it[k] >= 0]
    if max(points) - min(points) < limit:
        first, last = min(points), max(points)
    lo = (first + last + 1) // 2 - limit // 2
    lo = max(0, min(lo, n - limit))
    return lo, lo + limit


def _argmax(values: Sequence[float]) -> int:
    return max(range(len(values)), key=lambda i: values[i]) if values else 0


def _scale(values: Sequence[float]) -> float:
    """The largest magnitude of ``values``, what their shading is relative to (1 when all are 0)."""
    top = max((abs(float(v)) for v in values if v is not None and math.isfinite(float(v))), default=0.0)
    return top if top > 0 else 1.0


def _fraction(value: float | None, top: float) -> float:
    """``|value| / top`` in [0, 1]; 0 for a missing value."""
    if value is None or not math.isfinite(float(value)):
        return 0.0
    return min(1.0, abs(float(value)) / top)


def _shade(probability: float | None, top: float) -> float:
    """How dark a probability of the passage or the decoder is drawn: the square root of its share of
    the largest, so that the runners-up of a peaked distribution still show. The attention (with its
    colour bar) and the saliency (signed, less peaked) are drawn linear."""
    return math.sqrt(_fraction(probability, top))


def _number(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{float(value):.{digits}g}"


def _pick(ws: list[Word], index: int) -> str:
    """The word a decoder step picks, with its number; the null (-1) is no answer."""
    if 0 <= index < len(ws):
        return f"\u201c{ws[index].text}\u201d (word {index + 1})"
    return "no answer" if index < 0 else f"word {index + 1}"


def _model_name(ex: Mapping[str, Any]) -> str:
    return MODEL_NAMES.get(str(ex["model"]), str(ex["model"]))


def _answer_line(ex: Mapping[str, Any]) -> str:
    a = ex["answer"]
    text = f"\u201c{a['answer']}\u201d" if a["answer"] else "no answer (the model says the passage holds none)"
    line = f"{text} \u00b7 p = {_number(a.get('score'))}"
    if a.get("no_answer_probability") is not None:
        line += f" \u00b7 p(no answer) = {_number(a['no_answer_probability'])}"
    return line


def _window_line(ex: Mapping[str, Any]) -> str:
    w, n = ex["window"], len(ex["context"])
    part = (
        "the whole context"
        if (w["start"], w["end"]) == (0, n)
        else f"the window of characters {w['start']}\u2013{w['end']} of {n}, where the answer was read"
    )
    return f"model {_model_name(ex)} \u00b7 explained: {part}, {len(ex['context_tokens'])} words"


def _attention_titles(ex: Mapping[str, Any]) -> tuple[str, str, str]:
    """The heat maps' name, and what each of its two matrices is."""
    if ex["attention"]["kind"] == "coattention":
        return (
            f"{_model_name(ex)}'s coattention",
            "passage \u2192 question: each passage word's weights over the question words (A^D; a column "
            "sums to 1, less what goes to the sentinel)",
            "question \u2192 passage: each question word's weights over the passage words (A^Q; a row sums "
            "to 1 over the whole window, less what goes to the sentinel)",
        )
    return (
        f"{_model_name(ex)}'s context-query attention",
        "passage \u2192 question: each passage word's weights over the question words (S_bar; a column sums to 1)",
        "question \u2192 passage: each question word's weights over the passage words (S_bbar; a row sums to 1 "
        "over the whole window)",
    )


def _focus_line(ex: Mapping[str, Any], lo: int, hi: int) -> str:
    n = len(ex["context_tokens"])
    return "" if (lo, hi) == (0, n) else f"passage words {lo + 1}\u2013{hi} of {n}, around the answer"


# ---------------------------------------------------------------------------------------------------
# PNG

WIDTH = 12.0  # inches
MARGIN = 0.35  # inches, left and right
DPI = 110
PT = 72.0  # points an inch


def _matplotlib() -> dict[str, Any]:
    try:
        from matplotlib import colormaps
        from matplotlib.backends.backend_agg import RendererAgg
        from matplotlib.figure import Figure
        from matplotlib.font_manager import FontProperties
        from matplotlib.patches import Rectangle
    except ImportError:
        raise MissingPackage(
            "drawing an explanation as PNG needs matplotlib: pip install 'rckit[torch]' "
            "(or pip install matplotlib), or write .html or .json instead"
        ) from None
    return {
        "RendererAgg": RendererAgg,
        "Figure": Figure,
        "FontProperties": FontProperties,
        "Rectangle": Rectangle,
        "colormaps": colormaps,
    }


def write_png(explanation: Mapping[str, Any], path: str | Path) -> None:
    """Draw ``explanation`` as one PNG figure: its title (question, answer, model), the passage with
    start/end shading, the attention heat maps, the decoder's iterations and the saliency, in that order;
    a view the explanation has nothing for is left out and the figure's height follows what is in it."""
    ex = _checked(explanation)
    pen = _Pen(_matplotlib())
    panels = [_title_panel(ex, pen), _passage_panel(ex, pen)]
    if ex["attention"] is not None:
        panels.append(_attention_panel(ex, pen))
    if ex["decoder"]:
        panels.append(_decoder_panel(ex, pen))
    if ex["saliency"]:
        panels.append(_saliency_panel(ex, pen))
    gap = 0.22  # inches between panels
    height = sum(h for h, _ in panels) + gap * (len(panels) - 1) + 0.3
    fig = pen.mpl["Figure"](figsize=(WIDTH, height))  # no pyplot: no global figure state
    fig.patch.set_facecolor("white")
    top = 0.15
    for h, draw in panels:
        draw(_Place(fig, height, top))
        top += h + gap
    _write_atomically(Path(path), lambda tmp: fig.savefig(tmp, dpi=DPI, format="png"))


@dataclass
class _Place:
    """Where a panel draws: the figure, its height and the panel's top (inches from the figure's top)."""

    fig: Any
    height: float
    top: float

    def axes(self, left: float, top: float, width: float, height: float):
        """Axes at ``left`` (inches from the figure's left) and ``top`` (inches from the panel's top)."""
        bottom = self.height - self.top - top - height
        return self.fig.add_axes((left / WIDTH, bottom / self.height, width / WIDTH, height / self.height))

    def text(self, left: float, top: float, text: str, font, color: str = "#111111"):
        """A line whose baseline is ``top`` inches below the panel's top."""
        self.fig.text(
            left / WIDTH,
            (self.height - self.top - top) / self.height,
            text,
            fontproperties=font,
            color=color,
            va="baseline",
            parse_math=False,
        )


def _rgb(color: tuple[int, int, int], alpha: float) -> tuple[float, float, float]:
    """``color`` at ``alpha`` over white, opaque (overlapping boxes do not darken each other)."""
    return tuple(1 - alpha * (1 - c / 255) for c in color)


def _hex(color: tuple[int, int, int]) -> str:
    return "#{:02x}{:02x}{:02x}".format(*color)


class _Pen:
    """Fonts, and text measured in points as the PNG will draw it."""

    def __init__(self, mpl: dict[str, Any]):
        self.mpl = mpl
        # Measured at the DPI the figure is saved at: glyphs are hinted to that DPI's pixels.
        self.renderer = mpl["RendererAgg"](8, 8, DPI)
        self._fonts: dict[tuple, Any] = {}
        self._widths: dict[tuple, float] = {}

    def font(self, size: float, weight: str = "normal", style: str = "normal"):
        key = (size, weight, style)
        if key not in self._fonts:
            self._fonts[key] = self.mpl["FontProperties"](family="DejaVu Sans", size=size, weight=weight, style=style)
        return self._fonts[key]

    def width(self, text: str, font) -> float:
        """The advance of ``text`` in points: between "x"s, so that its side bearings and a trailing
        comma count as they do when the next word follows (an ink box alone would make them touch)."""
        key = (text, font.get_size_in_points(), font.get_weight(), font.get_style())
        if key not in self._widths:
            measure = self.renderer.get_text_width_height_descent
            self._widths[key] = (
                (measure(f"x{text}x", font, ismath=False)[0] - measure("xx", font, ismath=False)[0]) * PT / DPI
            )
        return self._widths[key]


@dataclass
class _Box:
    """A word drawn in a panel: its text, colours and, once flowed, where it goes."""

    text: str
    sep: str  # before it: "" (touching), " " (a space), "   " (a wide gap) or "\n" (a new paragraph)
    font: Any
    color: str = "#222222"
    top: tuple | None = None  # fill of the upper half (RGB 0-1), or of the whole box with no `bottom`
    bottom: tuple | None = None
    boxed: bool = False
    line: int = 0
    x: float = 0.0
    w: float = 0.0
    left: float = 0.0  # padding before the text


def _flow(boxes: list[_Box], pen: _Pen, width: float, indent: float = 0.0, pad: float = 1.5) -> int:
    """Lay ``boxes`` out from ``indent``, wrapping at ``width`` (points); returns the number of lines.
    Tokens that touch in the text (a word and its comma) touch here too, and wrap together."""
    line, x, group = 0, indent, 0  # group: the first box of the run of touching boxes that ends here
    for k, b in enumerate(boxes):
        text_w = pen.width(b.text, b.font)
        if b.sep == "\n" and x > indent:
            line, x = line + 1, indent
        elif b.sep.strip(" ") == "" and b.sep and x > indent:
            x += pen.width(" ", b.font) * len(b.sep)
        if b.sep != "":
            group = k
        # Touching, except across the answer's box, whose line would cover the neighbour's edge.
        right = 0.0 if k + 1 < len(boxes) and boxes[k + 1].sep == "" and boxes[k + 1].boxed == b.boxed else pad
        b.left = 0.0 if b.sep == "" and x > indent and boxes[k - 1].boxed == b.boxed else pad
        if x > indent and x + b.left + text_w + right > width:
            line, x = line + 1, indent
            if group < k and boxes[group].x > indent:  # the run moves to the new line whole
                for g in boxes[group:k]:
                    g.line, g.x, x = line, x, x + g.w
                boxes[group].left = pad
            else:
                b.left = pad
        b.w = b.left + text_w + right
        b.line, b.x = line, x
        x += b.w
    return line + 1 if boxes else 0


def _text_boxes(
    text: str, pen: _Pen, size: float, color: str = "#222222", weight: str = "normal", style: str = "normal"
) -> list[_Box]:
    font = pen.font(size, weight, style)
    return [_Box(w, "" if i == 0 else " ", font, color) for i, w in enumerate(text.split())]


def _legend(pen: _Pen, parts: list[tuple[str, tuple | None]], size: float = 9.5) -> list[_Box]:
    """A legend line: (text, swatch colour or None) pieces, a wide gap between them."""
    out: list[_Box] = []
    for text, swatch in parts:
        piece = _text_boxes(text, pen, size, "#444444")
        if swatch is not None:
            piece.insert(0, _Box("\u25a0", "", pen.font(size + 2), color=_hex(swatch)))
            piece[1].sep = " "
        piece[0].sep = "   " if out else ""
        out.extend(piece)
    return out


def _words_panel(pen: _Pen, lines: list[list[_Box]], blocks: list[tuple[str, list[_Box]]], size: float = 11):
    """A panel of flowed text: ``lines`` (headings, each wrapped) and ``blocks`` (a label in the margin
    and the words beside it, hanging)."""
    width = (WIDTH - 2 * MARGIN) * PT
    line_h = size * 1.85
    label_w = max((pen.width(label, pen.font(size, "bold")) for label, _ in blocks if label), default=0.0)
    indent = label_w + 12 if label_w else 0.0
    rows: list[tuple[str, list[_Box], float, float]] = []  # (label, boxes, y of the first line, line height)
    y = 0.0
    for boxes in lines:
        h = max(b.font.get_size_in_points() for b in boxes) * 1.5 if boxes else 0
        rows.append(("", boxes, y, h))
        y += _flow(boxes, pen, width, pad=0.0) * h
    for label, boxes in blocks:
        y += 3
        rows.append((label, boxes, y, line_h))
        y += _flow(boxes, pen, width, indent) * line_h
    height = y

    def draw(place: _Place):
        ax = place.axes(MARGIN, 0, WIDTH - 2 * MARGIN, height / PT)
        ax.set_axis_off()
        ax.set_xlim(0, width)
        ax.set_ylim(height, 0)
        Rectangle = pen.mpl["Rectangle"]
        for label, boxes, y0, h in rows:
            baseline = h * 0.66
            if label:
                ax.text(
                    0,
                    y0 + baseline,
                    label,
                    fontproperties=pen.font(size, "bold"),
                    color="#555555",
                    va="baseline",
                    parse_math=False,
                )
            for b in boxes:
                top = y0 + b.line * h + 1.5
                inner = h - 3  # a gap between lines keeps their shades apart
                if b.top is not None and b.bottom is not None:
                    ax.add_patch(Rectangle((b.x, top), b.w, inner / 2, facecolor=b.top, lw=0))
                    ax.add_patch(Rectangle((b.x, top + inner / 2), b.w, inner / 2, facecolor=b.bottom, lw=0))
                elif b.top is not None:
                    ax.add_patch(Rectangle((b.x, top), b.w, inner, facecolor=b.top, lw=0))
                ax.text(
                    b.x + b.left,
                    y0 + b.line * h + baseline,
                    b.text,
                    fontproperties=b.font,
                    color=b.color,
                    va="baseline",
                    parse_math=False,
                )
            for line in sorted({b.line for b in boxes if b.boxed}):
                span = [b for b in boxes if b.boxed and b.line == line]
                x0, x1 = min(b.x for b in span), max(b.x + b.w for b in span)
                ax.add_patch(
                    Rectangle(
                        (x0 - 1, y0 + line * h + 0.5), x1 - x0 + 2, h - 1, fill=False, edgecolor="#111111", lw=1.8
                    )
                )

    return height / PT, draw


def _title_panel(ex: Mapping[str, Any], pen: _Pen):
    lines = [
        _text_boxes(f"Q: {ex['question']}", pen, 13.5, "#111111", "bold"),
        _text_boxes(f"A: {_answer_line(ex)}", pen, 12, "#111111"),
        _text_boxes(_window_line(ex), pen, 9.5, "#555555"),
    ]
    lines += [_text_boxes(f"Note: {note}", pen, 9.5, "#555555", style="italic") for note in ex["notes"] or ()]
    return _words_panel(pen, lines, [])


def _heading(text: str, pen: _Pen) -> list[_Box]:
    return _text_boxes(text, pen, 11.5, "#111111", "bold")


def _passage_panel(ex: Mapping[str, Any], pen: _Pen):
    start, end = ex["start_probs"], ex["end_probs"]
    s_top, e_top = _scale(start), _scale(end)
    span = answer_tokens(ex)
    font = pen.font(11)
    boxes = []
    for w in words(ex["context"], ex["context_tokens"], ex["context_offsets"]):
        i = w.index
        boxes.append(
            _Box(
                w.text,
                w.sep,
                font,
                top=_rgb(START, 0.85 * _shade(start[i] if i < len(start) else None, s_top)),
                bottom=_rgb(END, 0.85 * _shade(end[i] if i < len(end) else None, e_top)),
                boxed=span is not None and span[0] <= i <= span[1],
            )
        )
    null = [] if ex["null_prob"] is None else [(f"no answer: {_number(ex['null_prob'])}", None)]
    heading = [
        _heading("Where the answer starts and ends", pen),
        _legend(
            pen,
            [
                (f"start probability (upper half; darkest {_number(s_top)})", START),
                (f"end probability (lower half; darkest {_number(e_top)})", END),
                *null,
                ("the answer boxed" if span else "no answer: nothing boxed", None),
                ("shade ∝ √p", None),
            ],
        ),
    ]
    return _words_panel(pen, heading, [("", boxes)])


def _saliency_panel(ex: Mapping[str, Any], pen: _Pen):
    ig = ex["saliency"]["integrated_gradients"]
    q_vals, c_vals = ig["question"], ig["context"]
    top = _scale(list(q_vals) + list(c_vals))
    span = answer_tokens(ex)

    def shaded(ws: list[Word], values: Sequence[float], answer: bool) -> list[_Box]:
        out = []
        for w in ws:
            v = values[w.index] if w.index < len(values) else None
            color = POSITIVE if v is not None and v >= 0 else NEGATIVE
            out.append(
                _Box(
                    w.text,
                    w.sep,
                    pen.font(11),
                    top=_rgb(color, 0.8 * _fraction(v, top)),
                    boxed=answer and span is not None and span[0] <= w.index <= span[1],
                )
            )
        return out

    heading = [
        _heading("Which words the answer rests on (integrated gradients)", pen),
        _legend(
            pen,
            [
                ("raises the answer's score", POSITIVE),
                ("lowers it", NEGATIVE),
                (
                    f"darkest = \u00b1{_number(top)}; {ig['steps']} steps from an all-zero embedding; "
                    f"their sum {_number(ig['sum'])}, score \u2212 baseline "
                    f"{_number(ig['score'] - ig['baseline_score'])}",
                    None,
                ),
            ],
        ),
    ]
    blocks = [
        ("Question", shaded(words(ex["question"], ex["question_tokens"], ex["question_offsets"]), q_vals, False)),
        ("Passage", shaded(words(ex["context"], ex["context_tokens"], ex["context_offsets"]), c_vals, True)),
    ]
    return _words_panel(pen, heading, blocks)


def _grid_geometry(pen: _Pen, columns: list[str], row_labels: list[str], right: float):
    """Left edge, cell width and column-label height (inches) of a heat map over ``columns``."""
    label_h = max((pen.width(c, pen.font(8)) for c in columns), default=0.0) / PT + 0.1
    left = MARGIN + max((pen.width(r, pen.font(9)) for r in row_labels), default=0.0) / PT + 0.1
    room = WIDTH - MARGIN - left - right
    return left, min(room / max(len(columns), 1), 0.34), label_h


def _grid_axes(
    ax, columns: list[str], rows: list[str], lo: int, span: tuple[int, int] | None, pen: _Pen, show_columns: bool
):
    """Row and column labels of a heat map, the answer's columns in bold and outlined."""
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows, fontproperties=pen.font(9), parse_math=False)
    ax.set_xticks(range(len(columns)))
    ax.tick_params(length=0, pad=2)
    for side in ax.spines.values():
        side.set_visible(False)
    if show_columns:
        ax.set_xticklabels(columns, rotation=90, fontproperties=pen.font(8), parse_math=False)
        for j, label in enumerate(ax.get_xticklabels()):
            answer = span is not None and span[0] <= lo + j <= span[1]
            label.set_fontproperties(pen.font(8, "bold" if answer else "normal"))
            label.set_color("#000000" if answer else "#444444")
    else:
        ax.set_xticklabels([])
    hi = lo + len(columns)
    if span is not None and span[1] >= lo and span[0] < hi:
        a, b = max(span[0], lo) - lo, min(span[1], hi - 1) - lo
        ax.add_patch(
            pen.mpl["Rectangle"](
                (a - 0.5, -0.5), b - a + 1, len(rows), fill=False, edgecolor="#111111", lw=1.5, clip_on=False
            )
        )


def _attention_panel(ex: Mapping[str, Any], pen: _Pen):
    att = ex["attention"]
    lo, hi = focus(ex)
    columns = [w.text for w in words(ex["context"], ex["context_tokens"], ex["context_offsets"])[lo:hi]]
    questions = [w.text for w in words(ex["question"], ex["question_tokens"], ex["question_offsets"])]
    # Shown transposed, (Tq, shown Tc): question words down, passage words across.
    matrices = [
        [[row[j] for row in att[key][lo:hi]] for j in range(len(questions))]
        for key in ("context_to_query", "query_to_context")
    ]
    name, first, second = _attention_titles(ex)
    where = _focus_line(ex, lo, hi)
    left, cell_w, label_h = _grid_geometry(pen, columns, questions, right=0.75)
    grid_h = max(len(questions), 1) * 0.19
    head, sub = 0.3, 0.25
    height = head + 2 * (sub + grid_h) + 0.06 + label_h
    span = answer_tokens(ex)

    def draw(place: _Place):
        place.text(MARGIN, 0.17, name + (f": {where}" if where else ""), pen.font(11.5, "bold"))
        y = head
        for k, (matrix, title) in enumerate(zip(matrices, (first, second))):
            place.text(left, y + sub - 0.07, title, pen.font(9), "#444444")
            y += sub
            ax = place.axes(left, y, cell_w * len(columns), grid_h)
            top = _scale([v for row in matrix for v in row])
            image = ax.imshow(matrix, aspect="auto", cmap="Purples", interpolation="nearest", vmin=0, vmax=top)
            _grid_axes(ax, columns, questions, lo, span, pen, show_columns=k == 1)
            bar = place.axes(left + cell_w * len(columns) + 0.1, y, 0.09, grid_h)
            place.fig.colorbar(image, cax=bar)
            bar.set_yticks([0, top], labels=["0", _number(top, 2)], fontsize=7.5)
            bar.tick_params(length=2, pad=1)
            y += grid_h + 0.06

    return height, draw


def _decoder_panel(ex: Mapping[str, Any], pen: _Pen):
    steps = ex["decoder"]
    lo, hi = focus(ex)
    ws = words(ex["context"], ex["context_tokens"], ex["context_offsets"])
    columns = [w.text for w in ws[lo:hi]]
    labels = [f"{r + 1} {kind}" for r in range(len(steps)) for kind in ("start", "end")]
    left, cell_w, label_h = _grid_geometry(pen, columns, labels, right=1.7)
    grid_h = len(labels) * 0.19
    head = 0.5
    height = head + grid_h + label_h
    span = answer_tokens(ex)
    cmaps = pen.mpl["colormaps"]
    where = _focus_line(ex, lo, hi)

    def draw(place: _Place):
        place.text(MARGIN, 0.17, "The decoder's iterations" + (f": {where}" if where else ""), pen.font(11.5, "bold"))
        place.text(
            MARGIN,
            0.39,
            f"each iteration's start (blue) and end (orange) estimate over the passage, "
            f"darkest = the row's most probable word, the word it picks outlined; it ran "
            f"{len(steps)} iteration{'s' if len(steps) != 1 else ''}",
            pen.font(9),
            "#444444",
        )
        ax = place.axes(left, head, cell_w * len(columns), grid_h)
        image = []
        for it in steps:
            for key, cmap in (("start_probs", cmaps["Blues"]), ("end_probs", cmaps["Oranges"])):
                top = _scale(it[key])
                image.append([cmap(0.9 * _shade(v, top)) for v in it[key][lo:hi]])
        ax.imshow(image, aspect="auto", interpolation="nearest")
        Rectangle = pen.mpl["Rectangle"]
        for r, it in enumerate(steps):
            for k, (key, color) in enumerate((("start", START), ("end", END))):
                pick, row = int(it[key]), 2 * r + k
                if lo <= pick < hi:
                    ax.add_patch(Rectangle((pick - lo - 0.5, row - 0.5), 1, 1, fill=False, edgecolor="#111111", lw=1.5))
                ax.text(
                    len(columns) - 0.5 + 0.12 / cell_w,
                    row,
                    f"{key}: {_pick(ws, pick)}",
                    va="center",
                    fontproperties=pen.font(8.5),
                    color=_hex(color),
                    parse_math=False,
                    clip_on=False,
                )
            if r:
                ax.axhline(2 * r - 0.5, color="white", lw=3)
        _grid_axes(ax, columns, labels, lo, None, pen, show_columns=True)
        for j, label in enumerate(ax.get_xticklabels()):
            if span is not None and span[0] <= lo + j <= span[1]:
                label.set_fontproperties(pen.font(8, "bold"))
                label.set_color("#000000")

    return height, draw


# ---------------------------------------------------------------------------------------------------
# HTML

_CSS = """
:root{--start:31,119,180;--end:255,127,14;--pos:27,120,55;--neg:197,27,125;--att:84,39,143}
*{box-sizing:border-box}
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#222;max-width:1240px;
 margin:14px auto;padding:0 14px}
h1{font-size:19px;margin:0}
h2{font-size:15px;margin:16px 0 2px}
p{margin:2px 0}
.sub{color:#555;font-size:13px}
.notes{margin:4px 0;padding-left:18px;color:#555;font-style:italic;font-size:13px}
.legend{color:#555;font-size:13px;margin:0 0 4px}
.sw{display:inline-block;width:11px;height:11px;border-radius:2px;vertical-align:-1px;margin-right:3px}
.text{line-height:1.95;margin:0}
.w{padding:2px 1px;border-radius:2px}
.answer{outline:2px solid #111;outline-offset:1px;border-radius:2px}
.row{display:grid;grid-template-columns:88px 1fr;align-items:baseline}
.label{font-weight:600;color:#555}
.switch{margin:2px 0 6px;font-size:13px}
.switch label{display:inline-block;border:1px solid #999;border-radius:12px;padding:0 10px;margin-right:4px;
 cursor:pointer;user-select:none}
.view{display:none}
.scroll{overflow-x:auto}
.grid{border-collapse:collapse;font-size:12px}
.grid td{min-width:16px;height:19px;padding:0;border:1px solid #fff}
.grid th{font-weight:400;white-space:nowrap;color:#444}
.grid thead th{writing-mode:vertical-rl;transform:rotate(180deg);text-align:left;padding:3px 0;
 vertical-align:bottom;line-height:14px}
.grid tbody th{text-align:right;padding-right:6px}
.grid th.ans{font-weight:700;color:#000}
.grid td.first{border-left:2px solid #111}
.grid td.last{border-right:2px solid #111}
.grid td.pick{outline:2px solid #111;outline-offset:-2px}
.grid td.side{padding-left:8px;white-space:nowrap;font-size:12px}
.out{display:none}
#att-c2q:checked~.v-c2q,#att-q2c:checked~.v-q2c,#sal-ig:checked~.v-ig,#sal-gxi:checked~.v-gxi{display:block}
#att-c2q:checked~.switch [for=att-c2q],#att-q2c:checked~.switch [for=att-q2c],#att-all:checked~.switch [for=att-all],
#sal-ig:checked~.switch [for=sal-ig],#sal-gxi:checked~.switch [for=sal-gxi],#dec-all:checked~.switch [for=dec-all]
{background:#333;color:#fff;border-color:#333}
#att-all:checked~.view .out,#dec-all:checked~.scroll .out{display:table-cell}
"""


def write_html(explanation: Mapping[str, Any], path: str | Path) -> None:
    """Write ``explanation`` as one HTML page (:func:`html_of`)."""
    page = html_of(explanation)
    _write_atomically(Path(path), lambda tmp: tmp.write_text(page, encoding="utf-8"))


def html_of(explanation: Mapping[str, Any]) -> str:
    """``explanation`` as one HTML page that needs nothing else (inline CSS, no script, no link):
    the passage with start/end shading and the answer marked, the attention as a grid whose cells give
    the two words and the weight on hover, the decoder's iterations, and the saliency with a switch
    between gradient x input and integrated gradients. Every text of the explanation is escaped."""
    ex = _checked(explanation)
    parts = [
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n',
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n',
        f"<title>{_e('rckit explains: ' + str(ex['question']))}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n",
        _html_header(ex),
        _html_passage(ex),
    ]
    if ex["attention"] is not None:
        parts.append(_html_attention(ex))
    if ex["decoder"]:
        parts.append(_html_decoder(ex))
    if ex["saliency"]:
        parts.append(_html_saliency(ex))
    parts.append("</body>\n</html>\n")
    return "".join(parts)


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _css_rgb(name: str, alpha: float) -> str:
    return f"rgba(var(--{name}),{alpha:.3f})"


def _swatch(name: str) -> str:
    return f'<span class="sw" style="background:rgb(var(--{name}))"></span>'


def _html_header(ex: Mapping[str, Any]) -> str:
    notes = "".join(f"<li>{_e(n)}</li>" for n in ex["notes"] or ())
    return (
        f"<header>\n<h1>Q: {_e(ex['question'])}</h1>\n<p><b>A:</b> {_e(_answer_line(ex))}</p>\n"
        f'<p class="sub">{_e(_window_line(ex))}</p>\n'
        + (f'<ul class="notes">{notes}</ul>\n' if notes else "")
        + "</header>\n"
    )


def _html_words(ws: list[Word], span: tuple[int, int] | None, style: Callable[[int], tuple[str, str]]) -> str:
    """Words as spans (``style(i)`` gives each its CSS and its hover text), the answer's inside one
    ``<span class="answer">``, separated as they were in the text."""
    out = []
    for w in ws:
        sep = "<br>" if w.sep == "\n" else w.sep
        if span is not None and w.index == span[0]:
            out.append(sep + '<span class="answer" title="the answer">')
            sep = ""
        css, title = style(w.index)
        out.append(f'{sep}<span class="w" style="{css}" title="{_e(title)}">{_e(w.text)}</span>')
        if span is not None and w.index == span[1]:
            out.append("</span>")
    return "".join(out)


def _html_passage(ex: Mapping[str, Any]) -> str:
    start, end = ex["start_probs"], ex["end_probs"]
    s_top, e_top = _scale(start), _scale(end)

    def style(i: int) -> tuple[str, str]:
        s = start[i] if i < len(start) else None
        e = end[i] if i < len(end) else None
        css = (
            f"background:linear-gradient({_css_rgb('start', 0.85 * _shade(s, s_top))} 50%,"
            f"{_css_rgb('end', 0.85 * _shade(e, e_top))} 50%)"
        )
        return css, f"word {i + 1}: start {_number(s)}, end {_number(e)}"

    ws = words(ex["context"], ex["context_tokens"], ex["context_offsets"])
    span = answer_tokens(ex)
    null = "" if ex["null_prob"] is None else f"; no answer: {_number(ex['null_prob'])}"
    return (
        "<section>\n<h2>Where the answer starts and ends</h2>\n"
        f'<p class="legend">{_swatch("start")}start probability (upper half, darkest = {_number(s_top)}) '
        f"&nbsp; {_swatch('end')}end probability (lower half, darkest = {_number(e_top)}){_e(null)} &nbsp; "
        + ("the answer is boxed" if span else "no answer: nothing is boxed")
        + "; hover over a word for its numbers</p>\n"
        f'<p class="text">{_html_words(ws, span, style)}</p>\n</section>\n'
    )


def _html_grid(
    columns: list[Word],
    lo: int,
    hi: int,
    span: tuple[int, int] | None,
    rows: list[tuple[str, list[tuple[str, str, bool]]]],
    side: list[str] | None = None,
) -> str:
    """A heat-map table over passage words: ``rows`` of (label, cells), a cell (CSS, hover text, outlined)
    for each passage word; the words outside ``[lo, hi)`` are hidden until shown. ``side``: HTML after
    each row."""

    def cls(i: int, pick: bool = False) -> str:
        names = ["pick"] if pick else []
        if span is not None and span[0] <= i <= span[1]:
            names += ["ans"] + (["first"] if i == span[0] else []) + (["last"] if i == span[1] else [])
        if not lo <= i < hi:
            names.append("out")
        return f' class="{" ".join(names)}"' if names else ""

    head = "".join(f"<th{cls(w.index)}>{_e(w.text)}</th>" for w in columns)
    body = []
    for r, (label, cells) in enumerate(rows):
        tds = "".join(
            f'<td{cls(i, pick)} style="{css}" title="{_e(title)}"></td>' for i, (css, title, pick) in enumerate(cells)
        )
        extra = f'<td class="side">{side[r]}</td>' if side else ""
        body.append(f"<tr><th>{_e(label)}</th>{tds}{extra}</tr>\n")
    return (
        f'<div class="scroll"><table class="grid"><thead><tr><th></th>{head}</tr></thead>\n'
        f"<tbody>{''.join(body)}</tbody></table></div>\n"
    )


def _html_attention(ex: Mapping[str, Any]) -> str:
    att = ex["attention"]
    lo, hi = focus(ex)
    ws = words(ex["context"], ex["context_tokens"], ex["context_offsets"])
    qs = words(ex["question"], ex["question_tokens"], ex["question_offsets"])
    span = answer_tokens(ex)
    name, first, second = _attention_titles(ex)
    views = []
    for key, title, view in (("context_to_query", first, "c2q"), ("query_to_context", second, "q2c")):
        matrix = att[key]
        top = _scale([v for row in matrix for v in row])
        rows = []
        for j, q in enumerate(qs):
            values = [row[j] for row in matrix]
            rows.append(
                (
                    q.text,
                    [
                        (
                            f"background:{_css_rgb('att', 0.95 * _fraction(v, top))}",
                            f"passage \u201c{w.text}\u201d \u00b7 question \u201c{q.text}\u201d \u00b7 "
                            f"weight {float(v):.3f}",
                            False,
                        )
                        for w, v in zip(ws, values)
                    ],
                )
            )
        views.append(
            f'<div class="view v-{view}"><p class="legend">{_e(title)}; darkest = {_number(top)}; '
            f"hover over a cell for its words and weight</p>\n{_html_grid(ws, lo, hi, span, rows)}</div>\n"
        )
    where = _focus_line(ex, lo, hi)
    everything = "" if not where else f'<label for="att-all">all {len(ws)} passage words</label>'
    return (
        "<section>\n"
        f"<h2>{_e(name)}{': ' + _e(where) if where else ''}</h2>\n"
        '<input type="radio" name="att" id="att-c2q" checked hidden>'
        '<input type="radio" name="att" id="att-q2c" hidden><input type="checkbox" id="att-all" hidden>\n'
        '<div class="switch"><label for="att-c2q">passage \u2192 question</label>'
        f'<label for="att-q2c">question \u2192 passage</label>{everything}</div>\n' + "".join(views) + "</section>\n"
    )


def _html_decoder(ex: Mapping[str, Any]) -> str:
    steps = ex["decoder"]
    lo, hi = focus(ex)
    ws = words(ex["context"], ex["context_tokens"], ex["context_offsets"])
    span = answer_tokens(ex)
    rows, side = [], []
    for r, it in enumerate(steps):
        for key, kind, color in (("start_probs", "start", "start"), ("end_probs", "end", "end")):
            values, pick = it[key], int(it[kind])
            top = _scale(values)
            rows.append(
                (
                    f"{r + 1} {kind}",
                    [
                        (
                            f"background:{_css_rgb(color, 0.9 * _shade(v, top))}",
                            f"iteration {r + 1}, {kind} at \u201c{w.text}\u201d: {float(v):.3f}",
                            i == pick,
                        )
                        for i, (w, v) in enumerate(zip(ws, values))
                    ],
                )
            )
            side.append(f'<span style="color:rgb(var(--{color}))">\u2192 {_e(_pick(ws, pick))}</span>')
    spans = "".join(
        f"<li>iteration {r + 1}: {_e(_step_span(ex, ws, int(it['start']), int(it['end'])))}</li>"
        for r, it in enumerate(steps)
    )
    where = _focus_line(ex, lo, hi)
    everything = (
        "" if not where else f'<div class="switch"><label for="dec-all">all {len(ws)} passage words</label></div>'
    )
    return (
        "<section>\n"
        f"<h2>The decoder's iterations{': ' + _e(where) if where else ''}</h2>\n"
        f'<p class="legend">{_swatch("start")}start and {_swatch("end")}end estimate of each iteration over '
        f"the passage, darkest = the row's most probable word, its pick outlined; it ran {len(steps)} "
        f"iteration{'s' if len(steps) != 1 else ''}</p>\n"
        f'<input type="checkbox" id="dec-all" hidden>{everything}\n'
        + _html_grid(ws, lo, hi, span, rows, side)
        + f'<ul class="sub">{spans}</ul>\n</section>\n'
    )


def _step_span(ex: Mapping[str, Any], ws: list[Word], first: int, last: int) -> str:
    """The span a decoder step points at, in words."""
    if first < 0 or last < 0:
        return "no answer (the null)"
    numbers = f"word {first + 1}" if first == last else f"words {first + 1}\u2013{last + 1}"
    offsets = ex["context_offsets"]
    if first <= last < len(offsets):
        text = ex["context"][offsets[first][0] : offsets[last][1]]
    else:
        text = " ".join(w.text for w in ws[first : last + 1])
    return f"{numbers} \u201c{text}\u201d"


def _html_saliency(ex: Mapping[str, Any]) -> str:
    sal = ex["saliency"]
    qs = words(ex["question"], ex["question_tokens"], ex["question_offsets"])
    ws = words(ex["context"], ex["context_tokens"], ex["context_offsets"])
    span = answer_tokens(ex)
    views = []
    for key, view, name in (
        ("integrated_gradients", "ig", "integrated gradients"),
        ("gradient_x_input", "gxi", "gradient \u00d7 input"),
    ):
        values = sal.get(key)
        if not values:
            continue
        top = _scale(list(values["question"]) + list(values["context"]))

        def style(i: int, side: Sequence[float] = (), name: str = name) -> tuple[str, str]:
            v = side[i] if i < len(side) else None
            color = "pos" if v is not None and v >= 0 else "neg"
            return f"background:{_css_rgb(color, 0.8 * _fraction(v, top))}", f"{name}: {_number(v)}"

        extra = ""
        if key == "integrated_gradients":
            extra = (
                f"; {values['steps']} steps from an all-zero embedding; sum {_number(values['sum'])} vs score "
                f"\u2212 baseline {_number(values['score'] - values['baseline_score'])}"
            )
        views.append(
            f'<div class="view v-{view}"><p class="legend">darkest = \u00b1{_number(top)}{_e(extra)}</p>\n'
            f'<div class="row"><span class="label">Question</span><p class="text">'
            f"{_html_words(qs, None, lambda i, s=values['question']: style(i, s))}</p></div>\n"
            f'<div class="row"><span class="label">Passage</span><p class="text">'
            f"{_html_words(ws, span, lambda i, s=values['context']: style(i, s))}</p></div>\n</div>\n"
        )
    return (
        "<section>\n<h2>Which words the answer rests on</h2>\n"
        f'<p class="legend">{_swatch("pos")}raises the answer\'s score &nbsp; {_swatch("neg")}lowers it; '
        "hover over a word for its value</p>\n"
        '<input type="radio" name="sal" id="sal-ig" checked hidden>'
        '<input type="radio" name="sal" id="sal-gxi" hidden>\n'
        '<div class="switch"><label for="sal-ig">integrated gradients</label>'
        '<label for="sal-gxi">gradient \u00d7 input</label></div>\n' + "".join(views) + "</section>\n"
    )
