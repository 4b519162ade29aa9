"""The text of an HTML page or an EPUB book: its main text in blocks, its headings as sections.

A page is parsed with lxml's HTML parser (forgiving, as browsers are). The main text is the
``<main>`` element (or ``role="main"``) if there is one, else the page's only ``<article>``, else
``<body>``. Left out: what is not text (script, style, noscript, template, svg, canvas, iframe,
object, embed, audio, video, the head), form controls (button, select, input, textarea, label),
page chrome (nav, aside, and header and footer unless inside an article, main or section: the
ARIA rule for banner and contentinfo), elements with role navigation, banner, contentinfo,
complementary or search, hidden ones (``hidden``, ``aria-hidden="true"``, ``display: none``), and
elements whose id or class names boilerplate (:data:`BOILERPLATE`). Those names were chosen from
real documentation pages: DocBook's ``TOC``, Texinfo's ``header`` (its Next/Previous/Up line),
``section-toc`` and ``menu``, npm's ``_table_of_contents`` (``_`` is read as ``-``). An element
named ``header`` that holds a heading or is inside one is kept (Javadoc puts a page's title in
one, mdBook a heading's text). A link whose whole text is ``#``, ``¶``, ``§`` or ``🔗`` is the
anchor that documentation generators put beside a heading (Sphinx, Texinfo, rustdoc, Node.js)
and is left out.

The text is made of blocks (paragraphs, headings, list items, table, ``<pre>``) separated by a
blank line; whitespace inside a block is collapsed to single spaces, ``<br>`` is a line break, and
a ``<pre>`` block keeps its whitespace. A table is one block, a line per row, cells separated by a
tab (a table holding a table or a heading lays out a page; its cells are read as blocks). Each
heading (h1-h6) is a block of its own and starts a section named by its text.

Encoding: a byte-order mark, else the charset a ``<meta>`` tag or the XML declaration names, else
UTF-8 if the bytes are UTF-8, else Windows-1252 (never lxml's silent Latin-1).

trafilatura was measured for this and rejected: on Debian's users-and-groups page it lost every
heading, on a small page it kept the navigation bar's text and merged the heading into the
paragraph, and it pulls about 55 MB of dependencies.

An EPUB is a zip: ``META-INF/container.xml`` names the package file (OPF), whose spine lists the
chapters in reading order; each chapter is read as a page, whole body (a book's asides, headers and
footers are its text), the navigation document left out, chapters separated by a blank line.
The book's title is the OPF's ``dc:title``. A book whose content is encrypted (DRM: an
``encryption.xml`` naming anything but the font obfuscation of the EPUB and Adobe specifications,
or a ``rights.xml``) is refused.

lxml is imported when a file is read, not when this module is.
"""

from __future__ import annotations

import codecs
import io
import posixpath
import re
import zipfile
import zlib
from urllib.parse import unquote

# Extracted text: (title or None, text, regions as (start, page, section)).
Extracted = tuple[str | None, str, list[tuple[int, int | None, str | None]]]

SKIPPED = frozenset(
    """
script style noscript template svg math canvas iframe object embed audio video head title meta link
nav aside button select input textarea label
""".split()
)
BOILERPLATE = frozenset(
    """
nav navbar navigation nav-panel navheader navfooter menu breadcrumb breadcrumbs sidebar footer header
cookie cookies cookie-banner cookie-notice skip-link skiplink toc section-toc table-of-contents
""".split()
)
PERMALINKS = frozenset({"#", "¶", "§", "🔗"})  # the text of a link to a heading, beside it
CHROME_ROLES = frozenset({"navigation", "banner", "contentinfo", "complementary", "search"})
BLOCKS = frozenset(
    """
address article aside blockquote body center dd details dialog dir div dl dt fieldset figcaption figure
footer form header hgroup hr html legend li main menu nav ol p section summary ul caption tr td th
tbody thead tfoot
""".split()
)
HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none", re.I)
_META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.I)
_XML_ENCODING = re.compile(rb"""^\s*<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9._:-]+)""", re.I)
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>")
# How WHATWG's Encoding Standard reads some labels: Latin-1 and ASCII pages are Windows-1252.
_ENCODINGS = {"latin-1": "cp1252", "iso8859-1": "cp1252", "ascii": "cp1252", "gb2312": "gbk"}
_FONT_OBFUSCATION = frozenset({"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"})


def decode(data: bytes) -> str:
    """The page's text (see the module docstring for how its encoding is found)."""
    for bom, encoding in ((b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be")):
        if data.startswith(bom):
            return data[len(bom) :].decode(encoding, errors="replace")
    head = data[:4096]
    m = _XML_ENCODING.match(head) or _META_CHARSET.search(head)
    if m:
        try:
            encoding = codecs.lookup(m.group(1).decode("ascii")).name
        except LookupError:
            encoding = None
        if encoding and encoding.startswith(("utf-16", "utf-32")):  # bytes read as ASCII say otherwise
            encoding = "utf-8"
        if encoding:
            return data.decode(_ENCODINGS.get(encoding, encoding), errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def _tokens(el) -> set[str]:
    """An element's class names and id, lower-case, "_" read as "-" ("_table_of_contents")."""
    return {t.strip("_-").replace("_", "-") for t in f"{el.get('class', '')} {el.get('id', '')}".lower().split()}


def _skipped(el, book: bool) -> bool:
    """Whether an element and all it holds are left out of the text (see the module docstring)."""
    tag = el.tag if isinstance(el.tag, str) else ""
    if not tag:  # a comment or processing instruction the parser kept
        return True
    tag = tag.rsplit(":", 1)[-1].lower()
    if el.get("hidden") is not None or el.get("aria-hidden", "").strip().lower() == "true":
        return True
    if _HIDDEN_STYLE.search(el.get("style", "")):
        return True
    if tag in SKIPPED and not (book and tag == "aside"):
        return True
    if tag == "a" and el.text_content().strip() in PERMALINKS:
        return True
    if not book:
        if el.get("role", "").strip().lower() in CHROME_ROLES:
            return True
        if tag in ("header", "footer") and not any(a.tag in ("article", "main", "section") for a in el.iterancestors()):
            return True
    tokens = _tokens(el) & BOILERPLATE
    if tokens == {"header"}:  # a heading's own part (mdBook's anchor) or holder (Javadoc's title) is kept
        return not any(e.tag in HEADINGS for e in (*el.iterancestors(), *el.iterdescendants()))
    return bool(tokens)


def _events(root, book: bool):
    """("start", element), ("text", str), ("end", element) through ``root``, depth first, the left
    out elements skipped (their tails kept); without recursion, for deeply nested pages."""
    stack = [(root, False)]
    while stack:
        el, closing = stack.pop()
        if closing:
            yield "end", el
        elif el is not root and _skipped(el, book):
            pass
        else:
            yield "start", el
            if el.text:
                yield "text", el.text
            stack.append((el, True))
            stack.extend((child, False) for child in reversed(el))
            continue
        if el is not root and el.tail:
            yield "text", el.tail


def _lines(pieces: list[str]) -> str:
    """Inline pieces as a block: "\\n" pieces are line breaks, other whitespace collapsed."""
    lines = (" ".join(line.split()) for line in "".join(pieces).split("\n"))
    return "\n".join(line for line in lines if line)


def _is_data_table(table) -> bool:
    return not any(e.tag == "table" or e.tag in HEADINGS for e in table.iterdescendants())


def _blocks(root, book: bool) -> list[tuple[str, str | None]]:
    """The blocks of ``root``'s text in order: (text, the heading's text if it is a heading)."""
    blocks: list[tuple[str, str | None]] = []
    inline: list[str] = []  # the pieces of the block being read
    heading = pre = table = None  # the element being read as a heading, a <pre> block, a data table
    rows: list[str] = []
    cells: list[str] = []

    def flush():
        text = _lines(inline)
        if text:
            blocks.append((text, None))
        inline.clear()

    for event, item in _events(root, book):
        if event == "text":
            inline.append(item.replace("\n", " ") if pre is None else item)
            continue
        tag = item.tag.rsplit(":", 1)[-1].lower()
        if table is not None:  # inside a data table: rows of cells
            if event == "end" and tag in ("td", "th"):
                cells.append(" ".join("".join(inline).split()))
                inline.clear()
            elif event == "end" and tag in ("tr", "caption"):
                if tag == "caption":
                    cells.append(" ".join("".join(inline).split()))
                    inline.clear()
                row = "\t".join(cells).rstrip("\t")
                if row.strip():
                    rows.append(row)
                cells.clear()
            elif event == "end" and item is table:
                inline.clear()  # text between cells is layout whitespace
                if rows:
                    blocks.append(("\n".join(rows), None))
                table, rows = None, []
            elif event == "start" and tag in ("td", "th"):
                inline.clear()
            elif tag in BLOCKS or tag == "br":
                inline.append(" ")
            continue
        if pre is not None:
            if event == "start" and tag == "br":
                inline.append("\n")
            elif event == "end" and item is pre:
                text = re.sub(r"^(?:[ \t]*\n)+", "", "".join(inline)).rstrip()
                if text.strip():
                    blocks.append((text, None))
                inline.clear()
                pre = None
            continue
        if heading is not None:
            if event == "end" and item is heading:
                text = " ".join("".join(inline).split())
                if text:
                    blocks.append((text, text))
                inline.clear()
                heading = None
            elif tag in BLOCKS or tag == "br":
                inline.append(" ")
            continue
        if event == "start" and tag in HEADINGS:
            flush()
            heading = item
        elif event == "start" and tag == "pre":
            flush()
            pre = item
        elif event == "start" and tag == "table" and _is_data_table(item):
            flush()
            table = item
        elif tag == "br":
            if event == "start":
                inline.append("\n")
        elif tag in BLOCKS or tag == "table":
            flush()
    flush()
    return blocks


def _joined(blocks: list[tuple[str, str | None]]) -> tuple[str, list[tuple[int, int | None, str | None]]]:
    """The blocks' text, a blank line between blocks, and a region at each heading."""
    parts, regions, pos = [], [], 0
    for text, section in blocks:
        if parts:
            pos += 2
        if section is not None:
            regions.append((pos, None, section))
        parts.append(text)
        pos += len(text)
    return "\n\n".join(parts), regions


def _parse(data: bytes):
    import lxml.etree
    import lxml.html

    text = _XML_DECLARATION.sub("", decode(data), count=1)  # lxml refuses a str that declares an encoding
    if not text.strip():
        return None
    parser = lxml.html.HTMLParser(remove_comments=True, remove_pis=True, huge_tree=True)
    try:
        root = lxml.html.document_fromstring(text, parser=parser)
    except (lxml.etree.ParserError, ValueError) as e:
        if "empty" in str(e):  # only comments, a doctype
            return None
        raise ValueError(f"not readable HTML ({e})") from None
    limits = [e.message for e in parser.error_log if e.type_name == "ERR_RESOURCE_LIMIT"]
    if limits:  # libxml2 drops what lies past its limits, silently but for this
        raise ValueError(f"not readable HTML ({limits[0].split(',')[0]})")
    return root


def _main_element(root):
    """The element that holds a page's main text (see the module docstring)."""
    main = root.xpath("//main | //*[@role='main']")
    if main:
        return main[0]
    articles = root.xpath("//article")
    if len(articles) == 1:
        return articles[0]
    body = root.find("body")
    return root if body is None else body


def extract(data: bytes, book: bool = False) -> Extracted:
    """A page's title (``<title>``, None without one), its text and its sections. ``book``: an
    EPUB chapter, its whole body read, asides, headers and footers kept."""
    root = _parse(data)
    if root is None:
        return None, "", []
    title = root.find("head/title")
    title = " ".join(title.text_content().split()) if title is not None else ""
    body = root.find("body")
    chosen = (root if body is None else body) if book else _main_element(root)
    text, regions = _joined(_blocks(chosen, book))
    return title or None, text, regions


def _xml(data: bytes):
    import lxml.etree

    parser = lxml.etree.XMLParser(resolve_entities=False, no_network=True, recover=True, remove_comments=True)
    root = lxml.etree.fromstring(data, parser=parser)
    if root is None:
        raise ValueError("not a readable EPUB (an XML file in it is empty or broken)")
    return root


def _drm(book: zipfile.ZipFile, names: set[str]) -> bool:
    if "META-INF/rights.xml" in names:
        return True
    if "META-INF/encryption.xml" not in names:
        return False
    methods = _xml(book.read("META-INF/encryption.xml")).xpath("//*[local-name()='EncryptionMethod']/@Algorithm")
    return not methods or any(m not in _FONT_OBFUSCATION for m in methods)


def read_epub(data: bytes) -> Extracted:
    """A book's title (``dc:title``), its chapters' text in reading order, and their sections."""
    import lxml.etree

    try:
        book = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise ValueError("not an EPUB (not a zip file)") from None
    try:
        names = set(book.namelist())
        if _drm(book, names):
            raise ValueError("encrypted (DRM)")
        if "META-INF/container.xml" not in names:
            raise ValueError("not an EPUB (no META-INF/container.xml)")
        found = _xml(book.read("META-INF/container.xml")).xpath("//*[local-name()='rootfile']/@full-path")
        if not found or found[0] not in names:
            raise ValueError("not an EPUB (its container names no package file)")
        opf = _xml(book.read(found[0]))
        folder = posixpath.dirname(found[0])
        titles = [" ".join(t.split()) for t in opf.xpath("//*[local-name()='metadata']/*[local-name()='title']/text()")]
        items = {item.get("id"): item for item in opf.xpath("//*[local-name()='manifest']/*[local-name()='item']")}
        blocks: list[tuple[str, str | None]] = []
        for ref in opf.xpath("//*[local-name()='spine']/*[local-name()='itemref']/@idref"):
            item = items.get(ref)
            if item is None or "nav" in item.get("properties", "").split():
                continue
            if item.get("media-type") not in ("application/xhtml+xml", "text/html"):
                continue
            path = posixpath.normpath(posixpath.join(folder, unquote(item.get("href", "").split("#")[0])))
            if path not in names:
                raise ValueError(f"not a readable EPUB (its chapter {path} is missing)")
            root = _parse(book.read(path))
            if root is not None:
                body = root.find("body")
                blocks.extend(_blocks(root if body is None else body, book=True))
    except (
        zipfile.BadZipFile,
        KeyError,
        RuntimeError,
        EOFError,
        NotImplementedError,
        zlib.error,
        lxml.etree.LxmlError,
    ) as e:
        raise ValueError(f"not a readable EPUB ({e})") from None
    text, regions = _joined(blocks)
    return next((t for t in titles if t), None), text, regions
