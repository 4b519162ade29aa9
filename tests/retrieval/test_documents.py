"""Reading documents of each format (PDF, HTML, DOCX, EPUB, Markdown, reStructuredText, gzip) into
clean text with their pages and sections, and refusing in one line what cannot be read. The files
are real ones, written by tests/retrieval/make_documents.py."""

import gzip
import pickle
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from rckit.retrieval import documents
from rckit.retrieval.documents import Document, IndexInputError, Region, format_of, read_documents
from rckit.retrieval.store import PassageStore
from tests.retrieval import make_documents as make


def read(path: Path):
    kind, docs = read_documents(path, path.read_bytes())
    assert len(docs) == 1 and docs[0].key is None
    return kind, docs[0]


def sections(doc) -> list[str]:
    return [r.section for r in doc.regions]


def at(hit, word: str) -> Region:
    """The region of a hit's document where ``word`` is in the hit's passage."""
    return hit.region_at(hit.start + hit.text.index(word))


def test_pdf_pages(tmp_path):
    for path in (
        make.write_pdf(tmp_path),
        make.write_encrypted_pdf(tmp_path, "open-rc4.pdf", user_password=""),
        make.write_encrypted_pdf(tmp_path, "open-aes.pdf", user_password="", algorithm="AES-256"),
    ):
        kind, doc = read(path)
        assert (kind, doc.title, doc.text) == ("pdf", make.PDF_TITLE, make.PDF_TEXT)
        page_two = make.PDF_TEXT.index(make.PDF_PAGES[1][0])
        assert doc.regions == (Region(0, 1), Region(page_two, 2))
    data = make.pdf_bytes(make.PDF_PAGES)
    for why, damaged in [
        ("damaged (object 99 0 not defined)", data.replace(b"/Contents 5 0 R", b"/Contents 99 0 R")),
        ("damaged (its page tree lists 3 pages, 2 are there)", data.replace(b"/Count 2", b"/Count 3")),
        ("not a PDF (no %PDF- header)", b"%!PS-Adobe-3.0\n%%EOF\n"),
    ]:
        with pytest.raises(IndexInputError) as e:
            read_documents(tmp_path / "bad.pdf", damaged)
        assert str(e.value) == f"{tmp_path / 'bad.pdf'}: {why}"
    untitled = tmp_path / "untitled.pdf"
    untitled.write_bytes(make.pdf_bytes([("Only page",), (), ("Third page",)]))  # an empty page: no region
    kind, doc = read(untitled)
    assert (doc.title, doc.text, doc.regions) == (
        "untitled.pdf",
        "Only page\n\nThird page",
        (Region(0, 1), Region(11, 3)),
    )


def test_html_main_text_blocks_table_and_sections(tmp_path):
    kind, doc = read(make.write_html(tmp_path))
    assert (kind, doc.title, doc.text) == ("html", make.HTML_TITLE, make.HTML_TEXT)
    assert sections(doc) == list(make.HTML_SECTIONS)
    for r in doc.regions:
        assert doc.text[r.start :].startswith(r.section) and r.page is None
    assert not any(words in doc.text for words in make.HTML_BOILERPLATE)


def test_html_without_main_reads_its_body_or_its_one_article(tmp_path):
    page = (
        '<html><body><div id="breadcrumbs">Home &gt; Docs</div><header><h1>Site</h1></header>'
        '<div class="header">Next: Up:</div><div class="toc"><a href="#a">1. Intro</a></div>'
        '<div role="navigation">Links</div><h2>Intro<a href="#a">#</a></h2><p>Body text.</p>'
        "<section><header><h3>Part</h3></header><p>Part text.</p></section>"
        '<div style="display: none">Invisible</div><footer>Footer text</footer></body></html>'
    )
    kind, doc = read_documents(tmp_path / "page.htm", page.encode())
    assert doc[0].text == "Intro\n\nBody text.\n\nPart\n\nPart text." and sections(doc[0]) == ["Intro", "Part"]
    assert doc[0].title == "page.htm"
    one_article = "<body><p>Teaser</p><article><h1>Story</h1><p>Story text.</p></article><p>More</p></body>"
    assert read_documents(tmp_path / "a.html", one_article.encode())[1][0].text == "Story\n\nStory text."
    two_articles = "<body><article><p>One</p></article><article><p>Two</p></article></body>"
    assert read_documents(tmp_path / "b.html", two_articles.encode())[1][0].text == "One\n\nTwo"
    layout = (
        "<body><table><tr><td><h1>Title</h1><p>Cell one.</p></td><td><table><tr><td>x</td><td>y</td></tr>"
        "</table></td></tr></table><pre>a\n\n  b<br>c</pre><p>Line<br>break</p></body>"
    )
    doc = read_documents(tmp_path / "c.html", layout.encode())[1][0]
    assert doc.text == "Title\n\nCell one.\n\nx\ty\n\na\n\n  b\nc\n\nLine\nbreak"
    with pytest.raises(IndexInputError, match="deep.html: not readable HTML .Excessive depth"):
        read_documents(tmp_path / "deep.html", b"<div>" * 3000 + b"text" + b"</div>" * 3000)  # never silently lost
    for empty in (b"", b"  \n", b"<!-- only a comment -->", b"<html><head><title>T</title></head></html>"):
        doc = read_documents(tmp_path / "e.html", empty)[1][0]
        assert doc.text == "" and doc.regions == ()


def test_html_encodings(tmp_path):
    page = "<html><head>{}<title>Caf\u00e9</title></head><body><p>\u201cCaf\u00e9\u201d</p></body></html>"
    cases = [
        (page.format("").encode("utf-8"), "\u201cCaf\u00e9\u201d"),  # UTF-8, undeclared
        (page.format("").encode("cp1252"), "\u201cCaf\u00e9\u201d"),  # not UTF-8: Windows-1252
        (page.format('<meta charset="iso-8859-1">').encode("cp1252"), "\u201cCaf\u00e9\u201d"),  # Latin-1 is 1252
        (
            page.format('<meta http-equiv="Content-Type" content="text/html; charset=koi8-r">')
            .replace("\u201cCaf\u00e9\u201d", "\u041c\u0438\u0440")
            .replace("Caf\u00e9", "T")
            .encode("koi8-r"),
            "\u041c\u0438\u0440",
        ),
        (b"\xff\xfe" + page.format("").encode("utf-16-le"), "\u201cCaf\u00e9\u201d"),  # byte-order mark
        (
            '<?xml version="1.0" encoding="iso-8859-15"?><html><body><p>Caf\u00e9 \u20ac</p></body></html>'.encode(
                "iso-8859-15"
            ),
            "Caf\u00e9 \u20ac",
        ),  # an XML declaration
    ]
    for data, text in cases:
        assert read_documents(tmp_path / "p.xhtml", data)[1][0].text == text


def read_with_headings(path, kind: str, title: str, text: str, headings) -> Document:
    """The file read as ``kind`` to exactly ``title`` and ``text``, its sections the ``headings``,
    each region starting at its heading."""
    got_kind, doc = read(path)
    assert (got_kind, doc.title, doc.text) == (kind, title, text)
    assert sections(doc) == list(headings)
    for r in doc.regions:
        assert doc.text[r.start :].startswith(r.section)
    return doc


def test_docx_paragraphs_headings_and_tables(tmp_path):
    doc = read_with_headings(make.write_docx(tmp_path), "docx", make.DOCX_TITLE, make.DOCX_TEXT, make.DOCX_SECTIONS)
    assert doc.text.count("2.5 km") == 1
    without_core = tmp_path / "untitled.docx"  # no docProps/core.xml: titled by its name, not python-docx's default
    with zipfile.ZipFile(tmp_path / "bridges.docx") as z, zipfile.ZipFile(without_core, "w") as out:
        for member in z.infolist():
            data = z.read(member)
            if member.filename == "_rels/.rels":
                data = re.sub(rb"<Relationship [^>]*core-properties[^>]*/>", b"", data)
            if member.filename != "docProps/core.xml":
                out.writestr(member, data)
    assert read(without_core)[1].title == "untitled.docx"


def test_epub_chapters_in_reading_order(tmp_path):
    read_with_headings(make.write_epub(tmp_path), "epub", make.EPUB_TITLE, make.EPUB_TEXT, make.EPUB_SECTIONS)
    fonts = make.write_epub(tmp_path, "fonts.epub", encryption="http://www.idpf.org/2008/embedding")
    assert read(fonts)[1].text == make.EPUB_TEXT  # obfuscated fonts are not DRM
    for name, data, why in [
        ("zip.epub", b"PK\x05\x06" + bytes(18), "not an EPUB (no META-INF/container.xml)"),
        ("text.epub", b"plain text", "not an EPUB (not a zip file)"),
    ]:
        with pytest.raises(IndexInputError) as e:
            read_documents(tmp_path / name, data)
        assert str(e.value) == f"{tmp_path / name}: {why}"


def test_markdown_and_rst_text_exact_with_sections(tmp_path):
    for path, text, expected, kind in [
        (make.write_markdown(tmp_path), make.MARKDOWN, make.MARKDOWN_SECTIONS, "markdown"),
        (make.write_rst(tmp_path), make.RST, make.RST_SECTIONS, "rst"),
    ]:
        got_kind, doc = read(path)
        assert (got_kind, doc.title, doc.text) == (kind, path.name, text)
        assert [
            (doc.text[r.start : r.start + len(line)], r.section) for r, (line, _) in zip(doc.regions, expected)
        ] == list(expected)
        assert len(doc.regions) == len(expected)
    md = (
        "Intro\n\n~~~\n# in a tilde fence\n~~~\n\n    # indented code\n\nTwo\nlines\n===\n\n- item\n---\n\n"
        "> quote\n---\n\n#nospace\n\n# Closed #####\n\n###### Six\n\n####### Seven\n"
    )
    doc = read_documents(tmp_path / "x.markdown", md.encode())[1][0]
    assert [(doc.text[r.start : r.start + 3], r.section) for r in doc.regions] == [
        ("Two", "Two lines"),
        ("# C", "Closed"),
        ("###", "Six"),
    ]
    rst = "Title\n===\n\ntoo long a title\n---\n\ntext\nnot a title\n-----------\n\n----\n\n  indented\n  --------\n"
    doc = read_documents(tmp_path / "x.rst", rst.encode())[1][0]
    assert [r.section for r in doc.regions] == []  # every underline too short, not after a blank line, or a transition
    assert [r.section for r in read_documents(tmp_path / "y.rst", b"\xef\xbb\xbfT\n=\n\nx\n")[1][0].regions] == ["T"]


def test_gzip_is_read_as_the_name_without_gz(tmp_path):
    kind, doc = read(make.write_gzip(tmp_path, "changelog.Debian.gz", make.CHANGELOG.encode()))
    assert (kind, doc.title, doc.text, doc.regions) == ("gzip", "changelog.Debian.gz", make.CHANGELOG, ())
    kind, doc = read(make.write_gzip(tmp_path, "page.html.gz", make.HTML.encode()))
    assert (doc.title, doc.text, sections(doc)) == (make.HTML_TITLE, make.HTML_TEXT, list(make.HTML_SECTIONS))
    kind, doc = read(make.write_gzip(tmp_path, "a.pdf.gz", make.pdf_bytes(make.PDF_PAGES)))
    assert (doc.title, doc.text, [r.page for r in doc.regions]) == ("a.pdf.gz", make.PDF_TEXT, [1, 2])
    twice = tmp_path / "notes.txt.gz.gz"
    twice.write_bytes(gzip.compress(gzip.compress(b"twice")))
    assert read(twice)[1].text == "twice"
    with pytest.raises(IndexInputError, match="binary"):
        read_documents(tmp_path / "a.tar.gz", gzip.compress(b"x" + bytes(600)))


def test_what_unpacks_past_the_bound_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(documents, "MAX_UNPACKED", 1000)
    with pytest.raises(IndexInputError, match="uncompressed"):
        read_documents(tmp_path / "big.txt.gz", gzip.compress(b"a" * 1001))
    assert read_documents(tmp_path / "small.txt.gz", gzip.compress(b"a" * 1000))[1][0].text == "a" * 1000
    big = make.write_epub(tmp_path)
    monkeypatch.setattr(documents, "MAX_UNPACKED", 100)
    with pytest.raises(IndexInputError, match="uncompressed"):
        read_documents(big, big.read_bytes())


def test_a_folder_skips_each_refused_file_with_its_reason_and_indexes_the_rest(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    good = make.write_documents(folder)
    refused = make.write_refused(folder)
    with PassageStore(tmp_path / "index.db", max_words=30) as store:
        report = store.add([folder])
        assert report["added"] == len(good) and report["documents"] == len(good)
        assert sorted(s["path"] for s in report["skipped"]) == sorted(str(p.resolve()) for p in refused)
        whys = {path.name: why for path, why in refused.items()}
        for skipped in report["skipped"]:
            assert whys[Path(skipped["path"]).name] in skipped["why"] and "\n" not in skipped["why"]
        hit = store.search("lighthouse keeper ships winter", k=1)[0]
        assert hit.source in (str(good["pdf"].resolve()), str(good["pdf-empty-password"].resolve()))
        assert at(hit, "Harbour").page == 1 and at(hit, "lighthouse").page == 2
        hit = next(h for h in store.search("Tambora erupted", k=5) if h.source == str(good["html"].resolve()))
        assert at(hit, "Tambora").section == "Eruptions" and at(hit, "Pumice").section == "Volcanoes"
        hit = store.search("Leopard seals hunt", k=1)[0]
        assert at(hit, "Leopard").section == "Predators"
        hit = store.search("glacier metres", k=1)[0]
        assert hit.title == make.EPUB_TITLE and at(hit, "glacier").section == "Chapter One"


def test_a_refused_file_given_alone_is_one_line_naming_it(tmp_path):
    refused = make.write_refused(tmp_path)
    with PassageStore(tmp_path / "index.db") as store:
        for path, why in refused.items():
            with pytest.raises(IndexInputError) as e:
                store.add([path])
            message = str(e.value)
            assert message.startswith(f"{path.resolve()}: ") and why in message and "\n" not in message
        assert store.stats()["sources"] == 0


@pytest.mark.parametrize(
    "module,writer,what,package",
    [
        ("pypdf", make.write_pdf, "PDF", "pypdf"),
        ("docx", make.write_docx, "Word .docx", "python-docx"),
        ("lxml", make.write_html, "HTML", "lxml"),
        ("lxml", make.write_epub, "EPUB", "lxml"),
    ],
)
def test_a_missing_extra_names_its_package(tmp_path, monkeypatch, module, writer, what, package):
    path = writer(tmp_path)
    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed
    with pytest.raises(IndexInputError) as e:
        read_documents(path, path.read_bytes())
    assert str(e.value) == f"{path}: reading {what} needs {package}: pip install 'rckit[documents]'"


def test_importing_documents_imports_no_format_library():
    code = (
        "import sys, rckit.retrieval.documents, rckit.retrieval.store; "
        "print(sorted(m for m in ('pypdf', 'docx', 'lxml', 'cryptography') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_index_input_error_survives_pickling():
    for error in (IndexInputError("/a/b.pdf", "encrypted (needs a password)", hint=""), IndexInputError("x", "why")):
        back = pickle.loads(pickle.dumps(error))
        assert (type(back), str(back), back.path, back.why, back.hint) == (
            IndexInputError,
            str(error),
            error.path,
            error.why,
            error.hint,
        )


def test_each_file_name_says_its_format(tmp_path):
    kinds = {
        name: format_of(tmp_path / name).kind
        for name in (
            "a.PDF",
            "b.htm",
            "c.xhtml",
            "d.html.gz",
            "e.epub",
            "f.docx",
            "g.doc",
            "h.md",
            "i.markdown",
            "j.rst",
            "k.json.gz",
            "changelog.Debian.gz",
            "l.pdf.txt",
        )
    }
    assert kinds == {
        "a.PDF": "pdf",
        "b.htm": "html",
        "c.xhtml": "html",
        "d.html.gz": "gzip",
        "e.epub": "epub",
        "f.docx": "docx",
        "g.doc": "doc",
        "h.md": "markdown",
        "i.markdown": "markdown",
        "j.rst": "rst",
        "k.json.gz": "squad",
        "changelog.Debian.gz": "gzip",
        "l.pdf.txt": "text",
    }
    assert documents.READS == (
        "reads: plain UTF-8 text, Markdown, reStructuredText, JSON Lines {id, title, text}, "
        "SQuAD JSON, HTML, EPUB, Word .docx, PDF, any of these gzip-compressed (.gz)"
    )
