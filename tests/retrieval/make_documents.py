"""Real files of each document format ``rckit index`` reads, written for tests.

Each ``write_x(folder)`` writes one file into ``folder`` and returns its path; the constants say
what reading it should give (its text, its title, where its sections or pages start), so a test
can ask questions the file answers. :func:`write_documents` writes one good file of every format,
:func:`write_refused` one file of each kind that is refused, with a word of its refusal.
"""

from __future__ import annotations

import gzip
import io
import zipfile
from pathlib import Path

# --- PDF ---------------------------------------------------------------------------------------

PDF_TITLE = "Harbour Report"
PDF_PAGES = (
    ("Harbour Report", "The harbour (at Leith) opened in 1887 after ten years of work."),
    ("The lighthouse keeper counted 412 ships in the winter of 1903.",),
)
PDF_TEXT = "\n\n".join("\n".join(lines) for lines in PDF_PAGES)


def pdf_bytes(pages, title: str | None = None) -> bytes:
    """A PDF written by hand: one page per sequence of lines, in Helvetica, with an /Info /Title
    when ``title`` is given and an xref table whose offsets are right. A page without lines has a
    drawn line and no text, as a scanned page has an image and no text."""

    def string(s: str) -> bytes:
        return b"(" + s.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)").encode("latin-1") + b")"

    objects = {1: b"<< /Type /Catalog /Pages 2 0 R >>", 3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"}
    kids = []
    for lines in pages:
        n = len(objects) + 2  # the page's object number; its content stream follows it
        ops = [b"BT /F1 12 Tf 72 720 Td"] if lines else [b"0.5 w 72 700 m 540 700 l S"]
        for i, line in enumerate(lines):
            ops.append((b"0 -16 Td " if i else b"") + string(line) + b" Tj")
        if lines:
            ops.append(b"ET")
        stream = b"\n".join(ops)
        objects[n] = (
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (n + 1)
        )
        objects[n + 1] = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream)
        kids.append(b"%d 0 R" % n)
    objects[2] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), len(kids))
    info = b""
    if title is not None:
        objects[len(objects) + 1] = b"<< /Title %s >>" % string(title)
        info = b" /Info %d 0 R" % len(objects)
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for n in range(1, len(objects) + 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (n, objects[n])
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, info, xref)
    return bytes(out)


def write_pdf(folder: Path, name: str = "report.pdf") -> Path:
    path = Path(folder, name)
    path.write_bytes(pdf_bytes(PDF_PAGES, title=PDF_TITLE))
    return path


def write_encrypted_pdf(
    folder: Path, name: str = "locked.pdf", user_password: str = "secret", algorithm: str | None = None
) -> Path:
    """The two-page PDF encrypted by pypdf's writer (RC4 unless ``algorithm``, e.g. "AES-256")."""
    import pypdf

    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(pdf_bytes(PDF_PAGES, title=PDF_TITLE))))
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm=algorithm)
    path = Path(folder, name)
    with open(path, "wb") as f:
        writer.write(f)
    return path


def write_truncated_pdf(folder: Path, name: str = "cut.pdf") -> Path:
    data = pdf_bytes(PDF_PAGES, title=PDF_TITLE)
    path = Path(folder, name)
    path.write_bytes(data[: len(data) // 2])
    return path


def write_damaged_pdf(folder: Path, name: str = "damaged.pdf") -> Path:
    """The two-page PDF whose page tree names a first page that is not in the file (pypdf, not
    strict, would read the second page alone)."""
    path = Path(folder, name)
    path.write_bytes(pdf_bytes(PDF_PAGES, title=PDF_TITLE).replace(b"/Kids [4 0 R", b"/Kids [40 0 R"))
    return path


def write_scanned_pdf(folder: Path, name: str = "scan.pdf") -> Path:
    path = Path(folder, name)
    path.write_bytes(pdf_bytes([(), ()]))
    return path


# --- HTML --------------------------------------------------------------------------------------

HTML_TITLE = "Volcano Notes"
HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Volcano  Notes</title>
<style>body { color: red } p::after { content: "style text" }</style>
<script>var tracking = "script text";</script></head>
<body>
<a class="skip-link" href="#main">Skip to content</a>
<nav class="navbar"><a href="/">Home</a> <a href="/about">About us</a></nav>
<header><p>Site banner text</p></header>
<div class="sidebar"><p>Sidebar advert</p></div>
<main id="main">
<h1>Volcanoes <a class="headerlink" href="#volcanoes">¶</a></h1>
<p>Pumice is a volcanic rock
   that floats on water.</p>
<p>Caf&eacute; owners near Etna sell &lt;lava&gt; cakes.<br>They open at dawn.</p>
<h2>Eruptions</h2>
<p>Mount Tambora erupted in 1815.</p>
<table>
  <tr><th>Volcano</th><th>Country</th><th>Height</th></tr>
  <tr><td>Etna</td><td>Italy</td><td>3,357 m</td></tr>
  <tr><td colspan="2">Fuji, Japan</td><td>3,776 m</td></tr>
</table>
<ul><li>Shield volcanoes</li><li>Stratovolcanoes</li></ul>
<pre>
  lava  flows
    slowly</pre>
<div hidden>Hidden text</div>
<p aria-hidden="true">Aria hidden text</p>
<form><label>Search</label><input value="input text"><button>Click me</button></form>
<aside>Aside advert</aside>
</main>
<footer>Copyright 2024 Example</footer>
<noscript>Enable JavaScript</noscript>
</body></html>
"""
HTML_TEXT = (
    "Volcanoes\n\nPumice is a volcanic rock that floats on water.\n\n"
    "Café owners near Etna sell <lava> cakes.\nThey open at dawn.\n\n"
    "Eruptions\n\nMount Tambora erupted in 1815.\n\n"
    "Volcano\tCountry\tHeight\nEtna\tItaly\t3,357 m\nFuji, Japan\t3,776 m\n\n"
    "Shield volcanoes\n\nStratovolcanoes\n\n  lava  flows\n    slowly"
)
HTML_SECTIONS = ("Volcanoes", "Eruptions")
# Text of the page that is not its main text; none of it may be read.
HTML_BOILERPLATE = (
    "style text",
    "script text",
    "Skip to content",
    "Home",
    "About us",
    "Site banner",
    "Sidebar",
    "Hidden text",
    "Aria hidden",
    "Search",
    "input text",
    "Click me",
    "Aside advert",
    "Copyright",
    "Enable JavaScript",
    "¶",
)


def write_html(folder: Path, name: str = "volcanoes.html") -> Path:
    path = Path(folder, name)
    path.write_text(HTML, encoding="utf-8")
    return path


# --- DOCX --------------------------------------------------------------------------------------

DOCX_TITLE = "Scottish Bridges"
DOCX_TEXT = (
    "Bridges of Scotland\n\nBridges\n\nThe Forth Bridge was opened in 1890.\n\n"
    "Bridge\tOpened\tLength\nForth rail cantilever\t1890\t2.5 km\nTay, rebuilt 1887\n\n"
    "Tunnels\n\nThe Clyde Tunnel opened in 1963."
)
DOCX_SECTIONS = ("Bridges of Scotland", "Bridges", "Tunnels")


def write_docx(folder: Path, name: str = "bridges.docx") -> Path:
    """A Word document made by python-docx: a table of contents' heading, a title, headings, a
    paragraph with runs of spaces, a table with a cell merged across two columns, one merged down
    two rows, and a nested table."""
    import docx

    document = docx.Document()
    document.core_properties.title = DOCX_TITLE
    document.add_paragraph("Contents", style="TOC Heading")  # a table of contents: left out
    document.add_heading("Bridges of Scotland", level=0)
    document.add_heading("Bridges", level=1)
    document.add_paragraph("The Forth Bridge was opened   in 1890.")
    table = document.add_table(rows=3, cols=3)
    for row, texts in zip(table.rows, [("Bridge", "Opened", "Length"), ("Forth", "1890", "2.5 km"), ("", "", "")]):
        for cell, text in zip(row.cells, texts):
            cell.text = text
    table.cell(2, 0).merge(table.cell(2, 1)).text = "Tay, rebuilt 1887"
    table.cell(1, 2).merge(table.cell(2, 2))
    inner = table.cell(1, 0).add_table(rows=1, cols=2)
    inner.cell(0, 0).text, inner.cell(0, 1).text = "rail", "cantilever"
    document.add_heading("Tunnels", level=2)
    document.add_paragraph("The Clyde Tunnel opened in 1963.")
    path = Path(folder, name)
    document.save(path)
    return path


def write_fake_docx(folder: Path, name: str = "archive.docx") -> Path:
    """A zip of a text file, renamed .docx."""
    path = Path(folder, name)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("notes.txt", "not a Word document")
    return path


# --- EPUB --------------------------------------------------------------------------------------

EPUB_TITLE = "Glaciers"
EPUB_TEXT = (
    "Chapter One\n\nThe glacier moved three metres a year.\n\n"
    "Chapter Two\n\nMeltwater fed the lake.\n\nA footnote about ice."
)
EPUB_SECTIONS = ("Chapter One", "Chapter Two")
_OPF = """<?xml version="1.0" encoding="UTF-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">
  <metadata xmlns:dc="http://purl.org/dc/elements/1.1/">
    <dc:identifier id="id">urn:uuid:0000</dc:identifier><dc:title>Glaciers</dc:title><dc:language>en</dc:language>
  </metadata>
  <manifest>
    <item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>
    <item id="c2" href="text/chapter%202.xhtml" media-type="application/xhtml+xml"/>
    <item id="c1" href="text/one.xhtml" media-type="application/xhtml+xml"/>
    <item id="css" href="style.css" media-type="text/css"/>
  </manifest>
  <spine><itemref idref="nav"/><itemref idref="c1"/><itemref idref="c2"/></spine>
</package>
"""


def _xhtml(body: str) -> str:
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n<html xmlns="http://www.w3.org/1999/xhtml" '
        f'xmlns:epub="http://www.idpf.org/2007/ops"><head><title>x</title></head><body>{body}</body></html>'
    )


def write_epub(folder: Path, name: str = "glaciers.epub", encryption: str | None = None) -> Path:
    """An EPUB 3 made with zipfile: a navigation document (in the spine, to be left out), two
    chapters listed in the manifest out of reading order (one with a space in its name, one with
    an aside). ``encryption``: an algorithm URI for a META-INF/encryption.xml."""
    path = Path(folder, name)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip")  # stored, first
        z.writestr(
            "META-INF/container.xml",
            '<?xml version="1.0"?><container version="1.0" '
            'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles><rootfile '
            'full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles></container>',
        )
        z.writestr("OEBPS/content.opf", _OPF)
        z.writestr(
            "OEBPS/nav.xhtml",
            _xhtml(
                '<nav epub:type="toc"><ol><li><a href="text/one.xhtml">Chapter One'
                "</a></li></ol></nav><p>Navigation page</p>"
            ),
        )
        z.writestr("OEBPS/text/one.xhtml", _xhtml("<h1>Chapter One</h1><p>The glacier moved three metres a year.</p>"))
        z.writestr(
            "OEBPS/text/chapter 2.xhtml",
            _xhtml(
                "<section><h1>Chapter Two</h1><p>Meltwater fed the lake.</p>"
                '<aside epub:type="footnote">A footnote about ice.</aside>'
                "</section>"
            ),
        )
        z.writestr("OEBPS/style.css", "p { margin: 0 }")
        if encryption:
            z.writestr(
                "META-INF/encryption.xml",
                '<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
                'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData><enc:EncryptionMethod '
                f'Algorithm="{encryption}"/><enc:CipherData><enc:CipherReference URI="OEBPS/text/one.xhtml"/>'
                "</enc:CipherData></enc:EncryptedData></encryption>",
            )
    return path


# --- Markdown, reStructuredText ----------------------------------------------------------------

MARKDOWN = """---
title: Penguins
---

# Penguins

Emperor penguins breed in the Antarctic winter.

```python
# not a heading
```

Diet
----

They eat krill and fish.

---

## Predators ##

Leopard seals hunt them.
"""
MARKDOWN_SECTIONS = (("# Penguins", "Penguins"), ("Diet\n----", "Diet"), ("## Predators ##", "Predators"))

RST = """=====
Tides
=====

The tide rises twice a day.

Spring tides
------------

Spring tides follow the full moon.

::

    Not a title
    -----------

Neap tides
~~~~~~~~~~

Neap tides are weaker.
"""
RST_SECTIONS = (("=====\nTides", "Tides"), ("Spring tides\n---", "Spring tides"), ("Neap tides\n~~~", "Neap tides"))


def write_markdown(folder: Path, name: str = "penguins.md") -> Path:
    path = Path(folder, name)
    path.write_text(MARKDOWN, encoding="utf-8")
    return path


def write_rst(folder: Path, name: str = "tides.rst") -> Path:
    path = Path(folder, name)
    path.write_text(RST, encoding="utf-8")
    return path


# --- gzip --------------------------------------------------------------------------------------

CHANGELOG = "rivers (1.2) unstable; urgency=low\n\n  * The river froze in 1963.\n"


def write_gzip(folder: Path, name: str, data: bytes) -> Path:
    path = Path(folder, name)
    path.write_bytes(gzip.compress(data, mtime=0))
    return path


# --- all of them -------------------------------------------------------------------------------


def write_documents(folder: Path) -> dict[str, Path]:
    """One good file of every format (and a PDF encrypted with an empty password), by kind."""
    folder = Path(folder)
    return {
        "pdf": write_pdf(folder),
        "pdf-empty-password": write_encrypted_pdf(folder, "open.pdf", user_password="", algorithm="AES-256"),
        "html": write_html(folder),
        "docx": write_docx(folder),
        "epub": write_epub(folder),
        "markdown": write_markdown(folder),
        "rst": write_rst(folder),
        "text.gz": write_gzip(folder, "changelog.Debian.gz", CHANGELOG.encode("utf-8")),
        "html.gz": write_gzip(folder, "page.html.gz", HTML.encode("utf-8")),
    }


def write_refused(folder: Path) -> dict[Path, str]:
    """One file of each kind that is refused, and a part of its one-line reason."""
    folder = Path(folder)
    (folder / "old.doc").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504))
    (folder / "broken.txt.gz").write_bytes(b"\x1f\x8b\x08\x00 not gzip at all")
    return {
        write_encrypted_pdf(folder): "encrypted (needs a password)",
        write_truncated_pdf(folder): "truncated",
        write_damaged_pdf(folder): "damaged (object 40 0 not defined)",
        write_scanned_pdf(folder): "no text layer (a scanned PDF? make it searchable with OCR first, e.g. ocrmypdf)",
        write_fake_docx(folder): "not a Word document (",
        write_epub(folder, "drm.epub", encryption="http://www.w3.org/2001/04/xmlenc#aes128-cbc"): "encrypted (DRM)",
        folder / "old.doc": "old binary Word format; save it as .docx",
        folder / "broken.txt.gz": "not a readable gzip file (",
    }
