"""Asking documents of every format with the installed model: each answer comes from its file, on
its page or under its heading, its offsets slicing the document's text; and the same paragraphs
written in each format give the same answers.

The files are written here (PDF by hand, Word by python-docx, EPUB with zipfile), with content of
their own, so that these tests do not hang on other tests' constants.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from tests.retrieval.make_documents import pdf_bytes, write_gzip

# --- one fact per file ---------------------------------------------------------------------------

PDF_FACTS = (  # two pages: (lines of page 1, lines of page 2)
    ("Observatory Log", "The observatory on the summit of Ben Nevis was opened in 1883."),
    (
        "The weather station on the summit recorded 261 gales in 1890.",
        "Its observers climbed the mountain path every week.",
    ),
)
HTML_FACTS = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Kent Orchards</title></head>
<body><nav><a href="/">Home</a></nav>
<main>
<h1>Orchards</h1>
<p>Kent has been called the garden of England for its orchards of cherries and pears.</p>
<h2>Harvest</h2>
<p>The apple harvest in Kent begins in late August and lasts until October.</p>
</main>
<footer>Copyright 2025</footer></body></html>
"""
DOCX_FACTS = (
    ("Waterways", 0),
    ("Railways", 1),
    ("The first railway in Wales carried iron ore to the coast.", None),
    ("Canals", 1),
    ("The Caledonian Canal was completed in 1822 by the engineer Thomas Telford.", None),
)
EPUB_FACTS = (
    ("The Voyage", "The sailors left the harbour of Oban in a fishing boat."),
    ("The Island", "The sailors reached the island of St Kilda after nine days at sea."),
)
MARKDOWN_FACTS = """# Beekeeping

Bees are kept in wooden hives in many gardens.

## Honey

A strong hive can make forty kilograms of honey in a good summer.
"""
TEXT_FACTS = "The clock tower in the town square was painted green by Margaret Ellis in 1921.\n"

# (question, file, expected answer, page, section)
FACT_QUESTIONS = [
    ("How many gales did the weather station record in 1890?", "observatory.pdf", "261", 2, None),
    ("When was the observatory on Ben Nevis opened?", "observatory.pdf", "1883", 1, None),
    ("When does the apple harvest in Kent begin?", "orchards.html", "late August", None, "Harvest"),
    ("Who completed the Caledonian Canal?", "waterways.docx", "Thomas Telford", None, "Canals"),
    ("How long were the sailors at sea before reaching St Kilda?", "voyage.epub", "nine days", None, "The Island"),
    ("How much honey can a strong hive make in a summer?", "bees.md", "forty kilograms", None, "Honey"),
    ("Who painted the clock tower green?", "town.txt.gz", "Margaret Ellis", None, None),
]


def write_pdf(folder: Path, pages, name: str, title: str | None = None) -> Path:
    path = Path(folder, name)
    path.write_bytes(pdf_bytes(pages, title=title))
    return path


def write_text(folder: Path, text: str, name: str) -> Path:
    """A UTF-8 file: HTML, Markdown or plain text, as its name says."""
    path = Path(folder, name)
    path.write_text(text, encoding="utf-8")
    return path


def write_docx(folder: Path, blocks, name: str) -> Path:
    """A Word document of (text, heading level) blocks; level None is a paragraph."""
    import docx

    document = docx.Document()
    for text, level in blocks:
        if level is None:
            document.add_paragraph(text)
        else:
            document.add_heading(text, level=level)
    path = Path(folder, name)
    document.save(path)
    return path


def write_epub(folder: Path, chapters, name: str, title: str = "A Book") -> Path:
    """An EPUB 3 of (heading, paragraphs...) chapters, one XHTML file each."""
    items = "".join(
        f'<item id="c{i}" href="c{i}.xhtml" media-type="application/xhtml+xml"/>' for i in range(len(chapters))
    )
    spine = "".join(f'<itemref idref="c{i}"/>' for i in range(len(chapters)))
    opf = (
        '<?xml version="1.0" encoding="UTF-8"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0" '
        'unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:identifier id="id">'
        f"urn:uuid:1234</dc:identifier><dc:title>{title}</dc:title><dc:language>en</dc:language></metadata>"
        f"<manifest>{items}</manifest><spine>{spine}</spine></package>"
    )
    path = Path(folder, name)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip")
        z.writestr(
            "META-INF/container.xml",
            '<?xml version="1.0"?><container version="1.0" '
            'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles><rootfile '
            'full-path="content.opf" media-type="application/oebps-package+xml"/></rootfiles></container>',
        )
        z.writestr("content.opf", opf)
        for i, (heading, *paragraphs) in enumerate(chapters):
            body = (f"<h1>{heading}</h1>" if heading else "") + "".join(f"<p>{p}</p>" for p in paragraphs)
            z.writestr(
                f"c{i}.xhtml",
                '<?xml version="1.0" encoding="utf-8"?>\n<html xmlns="http://www.w3.org/1999/'
                f'xhtml"><head><title>{heading or title}</title></head><body>{body}</body></html>',
            )
    return path


def write_facts(folder: Path) -> dict[str, Path]:
    """One file of each format, each holding its own fact (FACT_QUESTIONS ask them), by name."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [
        write_pdf(folder, PDF_FACTS, "observatory.pdf", title="Observatory Log"),
        write_text(folder, HTML_FACTS, "orchards.html"),
        write_docx(folder, DOCX_FACTS, "waterways.docx"),
        write_epub(folder, EPUB_FACTS, "voyage.epub", title="The Voyage to St Kilda"),
        write_text(folder, MARKDOWN_FACTS, "bees.md"),
        write_gzip(folder, "town.txt.gz", TEXT_FACTS.encode("utf-8")),
    ]
    return {p.name: p for p in paths}


@pytest.fixture(scope="module")
def reader():
    """The model installed with rckit (its ONNX file where onnxruntime is installed)."""
    from rckit.answering.reader import Reader
    from rckit.model_files.source import default_model_path

    return Reader.load(default_model_path())


def test_each_format_answers_its_own_question_on_its_page_or_under_its_heading(tmp_path, reader):
    import rckit

    files = write_facts(tmp_path / "docs")
    with rckit.Index.open(tmp_path / "facts.sqlite", model=reader) as index:
        assert index.add([tmp_path / "docs"])["added"] == len(files)
        for question, name, expected, page, section in FACT_QUESTIONS:
            got = index.ask(question)[0]
            assert got["answer"] == expected, (question, got)
            assert got["source"] == str(files[name]), (question, got)
            assert (got["page"], got["section"]) == (page, section), (question, got)
            text = index.store.document_text(got["source"], got["key"])
            assert text[got["start"] : got["end"]] == got["answer"]
            p = got["passage"]
            assert p["text"] == text[p["start"] : p["end"]] and p["start"] <= got["start"] <= got["end"] <= p["end"]


# --- the same paragraphs in every format ---------------------------------------------------------

SAME = (
    "The Bell Rock Lighthouse stands on a reef eleven miles off the coast of Angus in Scotland.",
    "It was built between 1807 and 1810 by the engineer Robert Stevenson, whose sons built many more.",
    "Its light was first lit on the first of February 1811 and has warned ships ever since.",
)
SAME_QUESTIONS = [
    ("Who built the Bell Rock Lighthouse?", ("Robert Stevenson",)),
    ("How far off the coast is the Bell Rock Lighthouse?", ("eleven miles", "eleven")),
    ("When was the light of the Bell Rock Lighthouse first lit?", ("February 1811",)),
]


def write_same(folder: Path) -> dict[str, Path]:
    """SAME's paragraphs as a PDF (a page of lines), HTML, Word, EPUB, Markdown and gzip'd text, each in a
    folder of its own, by format."""
    folder = Path(folder)
    writers = {
        "pdf": lambda f: write_pdf(f, [SAME], "lighthouse.pdf"),
        "html": lambda f: write_text(
            f,
            "<!DOCTYPE html><html><head><title>Lighthouse</title></head><body><main>"
            + "".join(f"<p>{p}</p>" for p in SAME)
            + "</main></body></html>",
            "lighthouse.html",
        ),
        "docx": lambda f: write_docx(f, [(p, None) for p in SAME], "lighthouse.docx"),
        "epub": lambda f: write_epub(f, [(None, *SAME)], "lighthouse.epub"),
        "markdown": lambda f: write_text(f, "\n\n".join(SAME) + "\n", "lighthouse.md"),
        "text.gz": lambda f: write_gzip(f, "lighthouse.txt.gz", "\n\n".join(SAME).encode("utf-8")),
    }
    out = {}
    for kind, write in writers.items():
        (folder / kind).mkdir(parents=True)
        out[kind] = write(folder / kind)
    return out


def test_the_same_paragraphs_in_every_format_give_the_same_answers(tmp_path, reader):
    import rckit

    answers = {}
    for kind, path in write_same(tmp_path).items():
        with rckit.Index.open(tmp_path / f"{kind}.sqlite", model=reader) as index:
            assert index.add([path.parent])["added"] == 1, kind
            text = index.store.document_text(str(path), None)
            assert " ".join(text.split()) == " ".join(SAME), kind  # the same words, whatever the format
            answers[kind] = [index.ask(q)[0]["answer"] for q, _ in SAME_QUESTIONS]
    first = next(iter(answers.values()))
    assert all(got == first for got in answers.values()), answers  # every format: the same answers
    assert all(a in accepted for a, (_, accepted) in zip(first, SAME_QUESTIONS)), first
