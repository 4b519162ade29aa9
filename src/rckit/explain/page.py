"""An explanation written as one self-contained HTML page (:mod:`.common` says what it shows and how
it is shaded).

The page has no script and loads nothing: its switches are radio buttons styled with CSS, every text is
escaped, and hovering over a word or a cell gives its numbers.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rckit.explain.common import (
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
    write_atomically(Path(path), lambda tmp: tmp.write_text(page, encoding="utf-8"))


def html_of(explanation: Mapping[str, Any]) -> str:
    """``explanation`` as one HTML page that needs nothing else (inline CSS, no script, no link):
    the passage with start/end shading and the answer marked, the attention as a grid whose cells give
    the two words and the weight on hover, the decoder's iterations, and the saliency with a switch
    between gradient x input and integrated gradients. Every text of the explanation is escaped."""
    ex = checked(explanation)
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
        f"<header>\n<h1>Q: {_e(ex['question'])}</h1>\n<p><b>A:</b> {_e(answer_line(ex))}</p>\n"
        f'<p class="sub">{_e(window_line(ex))}</p>\n'
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
    s_top, e_top = scale(start), scale(end)

    def style(i: int) -> tuple[str, str]:
        s = start[i] if i < len(start) else None
        e = end[i] if i < len(end) else None
        css = (
            f"background:linear-gradient({_css_rgb('start', 0.85 * shade(s, s_top))} 50%,"
            f"{_css_rgb('end', 0.85 * shade(e, e_top))} 50%)"
        )
        return css, f"word {i + 1}: start {number(s)}, end {number(e)}"

    ws = words(ex["context"], ex["context_tokens"], ex["context_offsets"])
    span = answer_tokens(ex)
    null = "" if ex["null_prob"] is None else f"; no answer: {number(ex['null_prob'])}"
    return (
        "<section>\n<h2>Where the answer starts and ends</h2>\n"
        f'<p class="legend">{_swatch("start")}start probability (upper half, darkest = {number(s_top)}) '
        f"&nbsp; {_swatch('end')}end probability (lower half, darkest = {number(e_top)}){_e(null)} &nbsp; "
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
    name, first, second = attention_titles(ex)
    views = []
    for key, title, view in (("context_to_query", first, "c2q"), ("query_to_context", second, "q2c")):
        matrix = att[key]
        top = scale([v for row in matrix for v in row])
        rows = []
        for j, q in enumerate(qs):
            values = [row[j] for row in matrix]
            rows.append(
                (
                    q.text,
                    [
                        (
                            f"background:{_css_rgb('att', 0.95 * fraction(v, top))}",
                            f"passage \u201c{w.text}\u201d \u00b7 question \u201c{q.text}\u201d \u00b7 "
                            f"weight {float(v):.3f}",
                            False,
                        )
                        for w, v in zip(ws, values)
                    ],
                )
            )
        views.append(
            f'<div class="view v-{view}"><p class="legend">{_e(title)}; darkest = {number(top)}; '
            f"hover over a cell for its words and weight</p>\n{_html_grid(ws, lo, hi, span, rows)}</div>\n"
        )
    where = focus_line(ex, lo, hi)
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
            top = scale(values)
            rows.append(
                (
                    f"{r + 1} {kind}",
                    [
                        (
                            f"background:{_css_rgb(color, 0.9 * shade(v, top))}",
                            f"iteration {r + 1}, {kind} at \u201c{w.text}\u201d: {float(v):.3f}",
                            i == pick,
                        )
                        for i, (w, v) in enumerate(zip(ws, values))
                    ],
                )
            )
            side.append(f'<span style="color:rgb(var(--{color}))">\u2192 {_e(picked(ws, pick))}</span>')
    spans = "".join(
        f"<li>iteration {r + 1}: {_e(_step_span(ex, ws, int(it['start']), int(it['end'])))}</li>"
        for r, it in enumerate(steps)
    )
    where = focus_line(ex, lo, hi)
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
        top = scale(list(values["question"]) + list(values["context"]))

        def style(i: int, side: Sequence[float] = (), name: str = name) -> tuple[str, str]:
            v = side[i] if i < len(side) else None
            color = "pos" if v is not None and v >= 0 else "neg"
            return f"background:{_css_rgb(color, 0.8 * fraction(v, top))}", f"{name}: {number(v)}"

        extra = ""
        if key == "integrated_gradients":
            extra = (
                f"; {values['steps']} steps from an all-zero embedding; sum {number(values['sum'])} vs score "
                f"\u2212 baseline {number(values['score'] - values['baseline_score'])}"
            )
        views.append(
            f'<div class="view v-{view}"><p class="legend">darkest = \u00b1{number(top)}{_e(extra)}</p>\n'
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
