import gzip
import json
import shutil
import sqlite3

import pytest

from rckit.retrieval import store
from rckit.retrieval.documents import IndexInputError
from rckit.retrieval.passages import cut_passages
from rckit.retrieval.store import Hit, PassageStore

SQUAD = {
    "version": "1.1",
    "data": [
        {
            "title": "Volcanoes",
            "paragraphs": [
                {"context": "Magma erupts from a volcano as lava.", "qas": []},
                {"context": "Pumice is a light volcanic rock that floats.", "qas": []},
            ],
        },
        {"title": "Rivers", "paragraphs": [{"context": "The Danube flows through Vienna and Budapest.", "qas": []}]},
    ],
}


def make_corpus(root):
    docs = root / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / ".hidden").mkdir()
    (docs / "notes.txt").write_text("Penguins live in Antarctica.\n\nThey eat krill and fish.\n", encoding="utf-8")
    (docs / "sub" / "guide.md").write_text(
        "# Guide\r\n\r\nThe lighthouse keeper polished the brass lamp.\r\n", encoding="utf-8"
    )
    (docs / "README").write_bytes("\ufeffCafé owners brew espresso déjà vu.\n".encode("utf-8"))  # BOM dropped
    (docs / "facts.jsonl").write_text(
        json.dumps({"id": "q7", "title": "Space", "text": "Saturn has prominent rings of ice."})
        + "\n\n"
        + json.dumps({"text": "Octopuses have three hearts."})
        + "\n",
        encoding="utf-8",
    )
    (docs / "squad.json").write_text(json.dumps(SQUAD), encoding="utf-8")
    (docs / "blob.bin").write_bytes(b"\x89PNG\x00\x00\xff\xfe penguins")
    (docs / ".secret.txt").write_text("zebras everywhere", encoding="utf-8")
    (docs / ".hidden" / "x.txt").write_text("zebras again", encoding="utf-8")
    return docs


def check_hits(ix, hits):
    for h in hits:
        assert isinstance(h, Hit)
        assert ix.document_text(h.source, h.key)[h.start : h.end] == h.text


def fts_consistent(db_path):
    """The FTS5 index holds exactly what a rebuild from the content view would: no stale rows."""
    con = sqlite3.connect(db_path)
    con.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, passages_fts, instance)")
    before = sorted(con.execute("SELECT * FROM temp.v"))
    con.execute("INSERT INTO passages_fts(passages_fts) VALUES ('rebuild')")
    after = sorted(con.execute("SELECT * FROM temp.v"))
    con.rollback()
    con.close()
    return before == after


def test_index_a_folder_and_search(tmp_path, capsys):
    docs = make_corpus(tmp_path)
    with PassageStore(tmp_path / "index.db") as ix:
        report = ix.add([docs])
        assert report["added"] == 5 and report["unchanged"] == 0 and report["removed"] == 0
        assert report["skipped"] == [{"path": str((docs / "blob.bin").resolve()), "why": report["skipped"][0]["why"]}]
        assert "NUL" in report["skipped"][0]["why"]
        warning = capsys.readouterr().err.strip().splitlines()
        assert len(warning) == 1 and "blob.bin" in warning[0]
        # text 1 + md 1 + README 1 + jsonl 2 + squad 3
        assert report["documents"] == 8 and ix.stats()["sources"] == 5

        hits = ix.search("Where do penguins live?")
        assert hits[0].source == str((docs / "notes.txt").resolve()) and hits[0].key is None
        assert (
            hits[0].title == "notes.txt" and hits[0].text == "Penguins live in Antarctica.\n\nThey eat krill and fish."
        )
        assert hits[0].text == (docs / "notes.txt").read_text(encoding="utf-8")[hits[0].start : hits[0].end]

        hits = ix.search("What does the lighthouse keeper polish?")
        md = (docs / "sub" / "guide.md").read_bytes().decode("utf-8")  # \r\n kept, offsets into the file's text
        assert hits[0].title == "guide.md" and md[hits[0].start : hits[0].end] == hits[0].text

        hits = ix.search("cafe deja")  # diacritics folded
        readme = (docs / "README").read_text(encoding="utf-8-sig")
        assert hits[0].title == "README" and readme[hits[0].start : hits[0].end] == hits[0].text

        hits = ix.search("rings")  # porter stemming: rings ~ ring
        assert (hits[0].key, hits[0].title) == ("q7", "Space")
        assert (ix.search("hearts octopus")[0].key, ix.search("hearts")[0].title) == ("3", "facts.jsonl")
        assert (ix.search("Vienna")[0].key, ix.search("Vienna")[0].title) == ("1/0", "Rivers")
        assert ix.search("pumice floats")[0].key == "0/1"

        assert ix.search("zebras") == []  # hidden files and folders are not read
        assert ix.search("What is the?")  # only stopwords: they are kept
        assert ix.search("?!  ...") == [] and ix.search("penguins", k=0) == []
        check_hits(ix, ix.search("penguins lighthouse cafe rings hearts Vienna pumice magma", k=50))
        assert len(ix.search("penguins lighthouse cafe rings hearts Vienna pumice magma", k=3)) == 3


def test_fts_syntax_in_a_question_is_only_words(tmp_path):
    docs = make_corpus(tmp_path)
    with PassageStore(tmp_path / "index.db") as ix:
        ix.add([docs])
        for q in [
            '"NOT" AND (near*',
            "penguins NOT krill",
            "NEAR(a b)",
            "title:penguins OR",
            "-x ^y {z}",
            "'\"",
            'col:"unterminated',
            "AND",
            "*",
            "a_b c-d",
        ]:
            check_hits(ix, ix.search(q))
        assert ix.search("penguins NOT krill")[0].title == "notes.txt"


def test_given_files_that_cannot_be_read_raise_one_line(tmp_path):
    bad = tmp_path / "image.png"
    bad.write_bytes(b"abc\xff\xfedef")
    lines = tmp_path / "bad.jsonl"
    lines.write_text('{"text": "fine"}\n\n{"text": oops}\n', encoding="utf-8")
    not_squad = tmp_path / "package.json"
    not_squad.write_text('{"name": "x"}', encoding="utf-8")
    with PassageStore(tmp_path / "index.db") as ix:
        for path, words in [(bad, ["not UTF-8", "0xff"]), (lines, ["line 3"]), (not_squad, ["not SQuAD"])]:
            with pytest.raises(IndexInputError) as e:
                ix.add([path])
            message = str(e.value)
            assert "\n" not in message and message.startswith(str(path.resolve()))
            assert all(w in message for w in words) and "reads: plain UTF-8 text" in message
        with pytest.raises(FileNotFoundError, match="nowhere.txt"):
            ix.add([tmp_path / "nowhere.txt"])
        assert ix.stats()["sources"] == 0


def test_reindex_after_edit_delete_and_twice(tmp_path):
    docs = make_corpus(tmp_path)
    db = tmp_path / "index.db"
    with PassageStore(db) as ix:
        first = ix.add([docs])
        again = ix.add([docs, docs / "notes.txt", docs])  # same folder twice, a file in it by name
        assert (again["added"], again["updated"], again["unchanged"], again["removed"]) == (0, 0, 5, 0)
        assert (again["documents"], again["passages"]) == (first["documents"], first["passages"])

        (docs / "notes.txt").write_text("Walruses sunbathe on ice floes.\n", encoding="utf-8")
        edited = ix.add([docs])
        assert (edited["added"], edited["updated"], edited["unchanged"]) == (0, 1, 4)
        assert ix.search("penguins krill") == [] and ix.search("walruses")[0].title == "notes.txt"
        assert edited["documents"] == first["documents"]
        assert edited["passages"] == first["passages"]  # one passage before (two short paragraphs) and after
        assert ix.search("lighthouse")[0].title == "guide.md"

        (docs / "sub" / "guide.md").unlink()
        (docs / "new.txt").write_text("Glaciers carve valleys.", encoding="utf-8")
        after = ix.add([docs])
        assert (after["added"], after["updated"], after["unchanged"], after["removed"]) == (1, 0, 4, 1)
        assert ix.search("lighthouse") == [] and ix.search("glaciers")[0].title == "new.txt"
        assert after["documents"] == first["documents"]

        (docs / "README").write_bytes(b"\xff now binary")  # an indexed file that can no longer be read
        gone = ix.add([docs])
        assert gone["removed"] == 1 and ix.search("espresso") == []
        check_hits(ix, ix.search("walruses glaciers rings Vienna", k=50))
    assert fts_consistent(db)


def test_an_interrupted_add_leaves_the_index_as_it_was(tmp_path, monkeypatch):
    docs = make_corpus(tmp_path)
    db = tmp_path / "index.db"
    with PassageStore(db) as ix:
        ix.add([docs])
        before = ix.stats()
        hits_before = ix.search("penguins rings Vienna lighthouse", k=10)
    (docs / "notes.txt").write_text("Walruses sunbathe.", encoding="utf-8")  # replaced in the database first
    (docs / "squad.json").unlink()
    (docs / "zzz.txt").write_text("Meteors streak.", encoding="utf-8")  # the next file read (sorted order)
    read = store.read_documents
    calls = []

    def read_then_interrupt(path, data):
        calls.append(path.name)
        if path.name == "zzz.txt":
            raise KeyboardInterrupt
        return read(path, data)

    monkeypatch.setattr(store, "read_documents", read_then_interrupt)
    with PassageStore(db) as ix:
        with pytest.raises(KeyboardInterrupt):
            ix.add([docs])
        assert calls == ["blob.bin", "notes.txt", "zzz.txt"]  # notes.txt was rewritten before the interrupt
        assert ix.stats() == before and ix.search("penguins rings Vienna lighthouse", k=10) == hits_before
        assert ix.search("walruses") == []
    monkeypatch.setattr(store, "read_documents", read)
    with PassageStore(db) as ix:  # still opens, and the next add does the work
        assert ix.stats() == before and ix.search("penguins rings Vienna lighthouse", k=10) == hits_before
        report = ix.add([docs])
        assert (report["added"], report["updated"], report["removed"]) == (1, 1, 1)
        assert ix.search("walruses")[0].title == "notes.txt" and ix.search("Vienna") == []
    assert fts_consistent(db)


def test_passages_respect_max_words_and_never_overlap(tmp_path):
    long_paragraph = " ".join(f"Sentence number {i} has exactly nine words in it." for i in range(12))
    run_on = " ".join(f"w{i}" for i in range(23))  # one sentence longer than max_words
    text = f"  Intro line.\n\n{long_paragraph}\n \t\n{run_on}\n\nShort one? Yes! Done.\n\n\n   \n"
    spans = cut_passages(text, 10)
    assert spans and all(text[s:e].strip() == text[s:e] and text[s:e] for s, e in spans)
    assert all(len(text[s:e].split()) <= 10 for s, e in spans)
    assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:]))
    assert " ".join(text[s:e] for s, e in spans).split() == text.split()  # every word in exactly one passage
    assert text[spans[0][0] : spans[0][1]] == "Intro line."  # 2 + 9 words would exceed 10
    assert cut_passages(" \n\n\t ", 10) == [] and cut_passages("one two three", 10) == [(0, 13)]
    assert cut_passages("a b.\n\nc d.", 10) == [(0, 10)]  # short paragraphs merge

    (tmp_path / "long.txt").write_text(text, encoding="utf-8")
    (tmp_path / "empty.txt").write_text("   \n", encoding="utf-8")
    with PassageStore(tmp_path / "index.db", max_words=10) as ix:
        report = ix.add([tmp_path / "long.txt", tmp_path / "empty.txt"])
        assert report["added"] == 2 and report["documents"] == 2 and report["passages"] == len(spans)
        assert ix.document_text(str((tmp_path / "empty.txt").resolve()), None) == "   \n"
        hits = ix.search(" ".join(text.split()), k=100)  # every word: every passage matches
        assert sorted((h.start, h.end) for h in hits) == spans
        check_hits(ix, hits)
        assert ix.add([tmp_path / "empty.txt"])["unchanged"] == 1
    with PassageStore(tmp_path / "index.db", max_words=999) as ix:  # an index keeps its passage size
        assert ix.stats()["max_words"] == 10


def test_open_refuses_what_is_not_an_index(tmp_path):
    random_file = tmp_path / "notes.db"
    random_file.write_bytes(b"this is not a database at all" * 100)
    other_db = tmp_path / "other.sqlite"
    con = sqlite3.connect(other_db)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    for path in (random_file, other_db, tmp_path):
        with pytest.raises(IndexInputError) as e:
            PassageStore(path)
        assert str(e.value).startswith(str(path)) and "\n" not in str(e.value)
    with pytest.raises(FileNotFoundError, match="missing"):
        PassageStore(tmp_path / "missing" / "index.db")
    with PassageStore(tmp_path / "fresh.db") as ix:  # a new path makes a new index
        assert ix.stats()["documents"] == 0 and ix.stats()["bytes"] > 0


def test_squad_gz_and_a_copied_index(tmp_path):
    (tmp_path / "dev.json.gz").write_bytes(gzip.compress(json.dumps(SQUAD).encode("utf-8")))
    with PassageStore(tmp_path / "index.db") as ix:
        assert ix.add([tmp_path / "dev.json.gz"])["documents"] == 3
    shutil.copy(tmp_path / "index.db", tmp_path / "copy.db")  # one file is the whole index
    with PassageStore(tmp_path / "copy.db") as ix:
        hit = ix.search("Which rock floats?")[0]
        assert (hit.key, hit.title, hit.text) == ("0/1", "Volcanoes", SQUAD["data"][0]["paragraphs"][1]["context"])
        assert hit.score > 0


def test_a_file_is_read_as_the_format_its_name_says(tmp_path):
    from rckit.retrieval.documents import FORMATS, READS, format_of, read_documents

    kinds = {
        name: format_of(tmp_path / name).kind
        for name in ("a.txt", "README", "b.md", "c.jsonl", "d.json", "E.JSON.GZ", "f.json.txt", "g.jsonl.bak")
    }
    assert kinds == {
        "a.txt": "text",
        "README": "text",
        "b.md": "markdown",
        "c.jsonl": "jsonl",
        "d.json": "squad",
        "E.JSON.GZ": "squad",
        "f.json.txt": "text",
        "g.jsonl.bak": "text",
    }
    assert READS.startswith(
        "reads: plain UTF-8 text, Markdown, reStructuredText, JSON Lines {id, title, text}, SQuAD JSON, "
    )  # and the formats of tests/retrieval/test_documents.py
    assert [f.kind for f in FORMATS][:5] == ["text", "markdown", "rst", "jsonl", "squad"]
    kind, docs = read_documents(tmp_path / "r.jsonl", b'{"id": 4, "title": "T", "text": "x y"}\n')
    assert kind == "jsonl" and [(d.key, d.title, d.text) for d in docs] == [("4", "T", "x y")]
    with pytest.raises(IndexInputError, match="line 1: holds a NUL"):
        read_documents(tmp_path / "r.jsonl", b'{"text": "a\\u0000b"}\n')
