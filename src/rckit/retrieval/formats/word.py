"""The text of a Word document (.docx), with python-docx.

The body's paragraphs and tables in document order (content controls opened, a table of contents
left out: paragraphs styled "TOC ..."), each a block, blocks separated by a blank line, whitespace
inside a paragraph collapsed. A paragraph styled "Title" or "Heading N" starts a section named by
its text. A table is one block, a line per row, cells separated by a tab; a merged cell's text
comes once (a vertically merged cell in its first row); a nested table's text is part of its
cell's. Runs inside tracked insertions, hyperlinks, smart tags and simple fields are read; text
boxes, headers, footers, footnotes and comments are not. The title is the document's core
property "title", else None.

python-docx is imported when a file is read, not when this module is.
"""

from __future__ import annotations

import io
import re
import zipfile

# Extracted text: (title or None, text, regions as (start, page, section)).
Extracted = tuple[str | None, str, list[tuple[int, int | None, str | None]]]

_HEADING_STYLE = re.compile(r"Title|Heading [1-9]")
_RUNS = ".//w:r[not(ancestor::w:txbxContent)]"
_PARAGRAPHS = ".//w:p[not(ancestor::w:txbxContent)]"


def _text(p) -> str:
    """A paragraph's text, whitespace collapsed."""
    return " ".join("".join(r.text for r in p.xpath(_RUNS)).split())


def _table(tbl, qn) -> str:
    rows = []
    for tr in tbl.iterchildren(qn("w:tr")):
        cells = []
        for tc in tr.iterchildren(qn("w:tc")):
            merged = tc.xpath("./w:tcPr/w:vMerge")
            if merged and merged[0].get(qn("w:val")) in (None, "continue"):  # below the merged cell's first row
                cells.append("")
            else:
                cells.append(" ".join(t for t in (_text(p) for p in tc.xpath(_PARAGRAPHS)) if t))
        row = "\t".join(cells).rstrip("\t")
        if row.strip():
            rows.append(row)
    return "\n".join(rows)


def extract(data: bytes) -> Extracted:
    """A document's title, its text and its sections (see the module docstring)."""
    import docx
    from docx.enum.style import WD_STYLE_TYPE
    from docx.opc.constants import RELATIONSHIP_TYPE as RT
    from docx.oxml.ns import qn

    try:
        document = docx.Document(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise ValueError("not a Word document (not a zip file)") from None
    except KeyError as e:  # a part the package should have
        raise ValueError(f"not a Word document ({e.args[0] if e.args else e})") from None
    except Exception as e:  # python-docx's own errors, a broken part's XML
        raise ValueError(f"not a Word document ({e})") from None
    styles = {s.style_id: s.name for s in document.styles}
    default = document.styles.default(WD_STYLE_TYPE.PARAGRAPH)
    default = default.name if default is not None else "Normal"
    parts, regions, pos = [], [], 0
    pending = list(reversed(document.element.body))  # a stack: the next element last
    while pending:
        el = pending.pop()
        if el.tag in (qn("w:sdt"), qn("w:customXml")):  # content controls: what they hold, in place
            content = el.find(qn("w:sdtContent")) if el.tag == qn("w:sdt") else el
            pending.extend(reversed(content) if content is not None else ())
            continue
        section = None
        if el.tag == qn("w:p"):
            style = styles.get(el.style, default) if el.style else default
            if (style or "").startswith("TOC"):
                continue
            text = _text(el)
            if _HEADING_STYLE.fullmatch(style or ""):
                section = text
        elif el.tag == qn("w:tbl"):
            text = _table(el, qn)
        else:
            continue
        if not text:
            continue
        if parts:
            pos += 2
        if section:
            regions.append((pos, None, section))
        parts.append(text)
        pos += len(text)
    # Asked of a file without core properties, python-docx would make them up ("Word Document").
    has_core = any(rel.reltype == RT.CORE_PROPERTIES for rel in document.part.package.rels.values())
    title = " ".join((document.core_properties.title or "").split()) if has_core else ""
    return title or None, "\n\n".join(parts), regions
