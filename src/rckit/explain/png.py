"""An explanation drawn as one PNG figure (:mod:`.common` says what it shows and how it is shaded).

The figure is laid out in inches and points, each word measured as matplotlib will draw it, so that the
passage flows as text does and the figure's height follows the views it holds. matplotlib (in the
``torch`` extra) is imported only when a PNG is written, and without pyplot: no global figure state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rckit.explain.common import (
    END,
    NEGATIVE,
    POSITIVE,
    START,
    Word,
    answer_line,
    answer_tokens,
    attention_titles,
    checked,
    focus,
    focus_line,
    fraction,
    number,
    picked,
    scale,
    shade,
    window_line,
    words,
    write_atomically,
)
from rckit.model_files.errors import MissingPackage

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
    ex = checked(explanation)
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
    write_atomically(Path(path), lambda tmp: fig.savefig(tmp, dpi=DPI, format="png"))


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
        _text_boxes(f"A: {answer_line(ex)}", pen, 12, "#111111"),
        _text_boxes(window_line(ex), pen, 9.5, "#555555"),
    ]
    lines += [_text_boxes(f"Note: {note}", pen, 9.5, "#555555", style="italic") for note in ex["notes"] or ()]
    return _words_panel(pen, lines, [])


def _heading(text: str, pen: _Pen) -> list[_Box]:
    return _text_boxes(text, pen, 11.5, "#111111", "bold")


def _passage_panel(ex: Mapping[str, Any], pen: _Pen):
    start, end = ex["start_probs"], ex["end_probs"]
    s_top, e_top = scale(start), scale(end)
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
                top=_rgb(START, 0.85 * shade(start[i] if i < len(start) else None, s_top)),
                bottom=_rgb(END, 0.85 * shade(end[i] if i < len(end) else None, e_top)),
                boxed=span is not None and span[0] <= i <= span[1],
            )
        )
    null = [] if ex["null_prob"] is None else [(f"no answer: {number(ex['null_prob'])}", None)]
    heading = [
        _heading("Where the answer starts and ends", pen),
        _legend(
            pen,
            [
                (f"start probability (upper half; darkest {number(s_top)})", START),
                (f"end probability (lower half; darkest {number(e_top)})", END),
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
    top = scale(list(q_vals) + list(c_vals))
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
                    top=_rgb(color, 0.8 * fraction(v, top)),
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
                    f"darkest = \u00b1{number(top)}; {ig['steps']} steps from an all-zero embedding; "
                    f"their sum {number(ig['sum'])}, score \u2212 baseline "
                    f"{number(ig['score'] - ig['baseline_score'])}",
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
    name, first, second = attention_titles(ex)
    where = focus_line(ex, lo, hi)
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
            top = scale([v for row in matrix for v in row])
            image = ax.imshow(matrix, aspect="auto", cmap="Purples", interpolation="nearest", vmin=0, vmax=top)
            _grid_axes(ax, columns, questions, lo, span, pen, show_columns=k == 1)
            bar = place.axes(left + cell_w * len(columns) + 0.1, y, 0.09, grid_h)
            place.fig.colorbar(image, cax=bar)
            bar.set_yticks([0, top], labels=["0", number(top, 2)], fontsize=7.5)
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
    where = focus_line(ex, lo, hi)

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
                top = scale(it[key])
                image.append([cmap(0.9 * shade(v, top)) for v in it[key][lo:hi]])
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
                    f"{key}: {picked(ws, pick)}",
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
