"""Asking a folder of documents: ``rckit index`` then ``rckit ask`` (retrieve, then read), and ``rckit.Index``."""

import json

import pytest

from rckit.answering.reader import Reader
from rckit.cli import main
from rckit.retrieval.collection import Collection, rank
from tests.serve.test_serve import call

DOCS = {
    "eiffel.txt": "The Eiffel Tower was completed in 1889 in Paris.\n\nIt was designed by the company of Gustave "
    "Eiffel and is 330 metres tall.\n",
    "notes/thames.md": "# The barrier\n\nThe Thames Barrier, which spans 520 metres of the river at Woolwich in "
    "south-east London, was built between 1974 and 1982 to protect the city from tidal surges.\n",
    "notes/README": "Shopping list: bread, milk, apples.\n",
    "records.jsonl": json.dumps(
        {
            "id": "moon",
            "title": "Apollo",
            "text": "Apollo 11 landed on the Moon in July "
            "1969; Neil Armstrong was the first person to walk on its surface.",
        }
    )
    + "\n",
}


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "docs"
    for name, text in DOCS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def _run(argv, capsys):
    capsys.readouterr()
    code = main([str(a) for a in argv])
    return (code, *capsys.readouterr())


def test_index_then_ask_finds_the_answer_in_its_file_with_offsets_into_it(folder, tmp_path, capsys):
    """The bundled model over a folder, as a person would ask it: the right file, offsets that slice it."""
    index = tmp_path / "docs.sqlite"
    code, out, _ = _run(["index", folder, "--out", index, "--no-progress"], capsys)
    assert code == 0 and "4 documents" in out and "4 files added" in out
    cases = [
        ("When was the Eiffel Tower completed?", "eiffel.txt", "1889"),
        ("Who was the first person to walk on the Moon?", "records.jsonl", "Neil Armstrong"),
        ("When was the Thames Barrier built?", "thames.md", "1974"),
    ]
    for question, file, expected in cases:
        code, out, err = _run(["ask", index, question, "--json"], capsys)
        assert code == 0, err
        got = json.loads(out)
        assert expected in got["answer"] and got["source"].endswith(file), (question, got)
        if got["key"] is None:  # a text file: the offsets slice the file's own text
            assert (folder / file if file == "eiffel.txt" else folder / "notes" / file).read_text()[
                got["start"] : got["end"]
            ] == got["answer"]
        else:
            assert got["key"] == "moon" and got["title"] == "Apollo"
    code, out, _ = _run(["ask", index, "When was the Eiffel Tower completed?"], capsys)
    assert code == 0 and out.startswith("1889\t") and "eiffel.txt" in out
    # Indexing again after a change: the new text is asked, nothing is duplicated.
    (folder / "eiffel.txt").write_text("The Eiffel Tower was completed in 1890 in Paris.\n", encoding="utf-8")
    code, out, _ = _run(["index", folder, "--out", index, "--no-progress"], capsys)
    assert code == 0 and "4 documents" in out and "1 updated" in out and "3 unchanged" in out
    assert (
        "1890"
        in json.loads(_run(["ask", index, "When was the Eiffel Tower completed?", "--json"], capsys)[1])["answer"]
    )


def test_ask_a_file_of_questions(folder, tmp_path, capsys):
    index = tmp_path / "docs.sqlite"
    assert _run(["index", folder, "--out", index, "--no-progress"], capsys)[0] == 0
    questions = tmp_path / "q.jsonl"
    questions.write_text(
        "".join(
            json.dumps(r) + "\n"
            for r in (
                {"id": "a", "question": "When was the Eiffel Tower completed?"},
                {"id": "b", "question": "How long is the Thames Barrier?"},
            )
        )
    )
    code, _, err = _run(["ask", index, "--questions", questions, "--out", tmp_path / "a.jsonl", "--top-k", 2], capsys)
    assert code == 0, err
    got = [json.loads(ln) for ln in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert [r["id"] for r in got] == ["a", "b"] and all(len(r["answers"]) == 2 for r in got)
    assert "1889" in got[0]["answers"][0]["answer"] and "520" in got[1]["answers"][0]["answer"]


def test_ask_refuses_with_one_line(tmp_path, capsys):
    code, _, err = _run(["ask", tmp_path / "none.sqlite", "When?"], capsys)
    assert code == 2 and "no such index" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "q.jsonl").write_text('{"id": 1}\n')
    (tmp_path / "i.sqlite").write_bytes(b"")
    code, _, err = _run(["ask", tmp_path / "i.sqlite", "--questions", tmp_path / "q.jsonl"], capsys)
    assert code == 2 and "line 1" in err and "'question'" in err
    code, _, err = _run(["ask", tmp_path / "i.sqlite"], capsys)
    assert code == 2 and "give a question" in err


def test_rank_combines_reader_and_retriever_and_says_no_answer_where_every_passage_abstains():
    from rckit.retrieval.store import Hit

    def hit(i, score):
        return Hit(i, f"/d/{i}.txt", None, f"{i}.txt", 100 * i, 100 * i + 50, "x" * 50, score)

    def span(p, start=3):
        return {"answer": "xx", "score": p, "start": start, "end": start + 2, "no_answer_probability": None}

    read = [(hit(1, 10.0), [span(0.5)]), (hit(2, 4.0), [span(0.9)])]
    assert rank(read, 1, 0.0)[0]["source"] == "/d/2.txt"  # the reader alone: the surer span
    top = rank(read, 2, 0.5)  # 0.9 * exp(0.5 * (4 - 10)) = 0.045 < 0.5
    assert [a["source"] for a in top] == ["/d/1.txt", "/d/2.txt"]
    assert top[0]["start"] == 103 and top[0]["passage"] == {"id": 1, "start": 100, "end": 150, "text": "x" * 50}
    assert top[1]["score"] == pytest.approx(0.9 * 2.718281828**-3)
    abstain = {"answer": "", "score": 0.7, "start": None, "end": None, "no_answer_probability": 0.7}
    nothing = rank(
        [(hit(1, 3.0), [abstain, span(0.1)]), (hit(2, 2.0), [dict(abstain, no_answer_probability=0.6)])], 1, 0.0
    )
    assert nothing == [
        {
            "answer": "",
            "score": 0.6,
            "start": None,
            "end": None,
            "source": None,
            "key": None,
            "title": None,
            "page": None,
            "section": None,
            "passage": None,
            "reader_score": None,
            "retriever_score": None,
            "no_answer_probability": 0.6,
        }
    ]
    assert rank([], 1, 0.0)[0]["answer"] == "" and rank([], 1, 0.0)[0]["start"] is None
    assert top[0]["page"] is None and top[0]["section"] is None  # a text file has neither


def test_an_answer_is_on_the_page_and_under_the_heading_where_it_starts():
    """A passage across a page break: the answer's page is the one its first character is on."""
    from rckit.retrieval.documents import Region
    from rckit.retrieval.store import Hit

    regions = (Region(80, page=1, section="Intro"), Region(120, page=2, section="Intro"), Region(140, 2, "Use"))
    hit = Hit(7, "/d/a.pdf", None, "a.pdf", 100, 150, "x" * 50, 1.0, regions)
    for start, page, section in [(105, 1, "Intro"), (120, 2, "Intro"), (139, 2, "Intro"), (140, 2, "Use")]:
        a = {"answer": "xx", "score": 0.5, "start": start - 100, "end": start - 98, "no_answer_probability": None}
        found = rank([(hit, [a])], 1, 0.0)[0]
        assert (found["start"], found["page"], found["section"]) == (start, page, section)


def test_index_class_opens_adds_and_asks(folder, tmp_path, tiny_run):
    """``rckit.Index`` from Python, with any reader (here a tiny trained run)."""
    import rckit

    with rckit.Index.open(tmp_path / "i.sqlite", Reader.load(tiny_run)) as index:
        report = index.add([folder])
        assert report["added"] == 4
        answers = index.ask("When was the Eiffel Tower completed?", top_k=3, passages=2)
        assert 1 <= len(answers) <= 3
        for a in answers:
            text = index.store.document_text(a["source"], a["key"])
            assert text[a["start"] : a["end"]] == a["answer"]
            assert a["passage"]["start"] <= a["start"] <= a["end"] <= a["passage"]["end"]
    with rckit.Index.open(tmp_path / "i.sqlite", Reader.load(tiny_run)) as again:  # closed, then opened again
        assert isinstance(again, Collection) and again.add([folder])["added"] == 0  # nothing new in the folder
        assert [a["answer"] for a in again.ask("When was the Eiffel Tower completed?", top_k=3, passages=2)] == [
            a["answer"] for a in answers
        ]


@pytest.fixture(scope="module")
def index_server(tmp_path_factory):
    """``rckit serve --index`` of a folder, with the installed model and a file of labels
    (``folder/../labels.json``), on 127.0.0.1; (URL, folder)."""
    from tests.serve.test_serve import start_server, stop_server

    root = tmp_path_factory.mktemp("collection")
    for name, text in DOCS.items():
        (root / "docs" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "docs" / name).write_text(text, encoding="utf-8")
    assert main(["index", str(root / "docs"), "--out", str(root / "docs.sqlite"), "--no-progress"]) == 0
    proc, url = start_server(
        ["--index", str(root / "docs.sqlite"), "--labels", str(root / "labels.json")], root / "serve.log"
    )
    yield url, root / "docs"
    stop_server(proc)


def test_a_real_server_asks_its_index_over_http(index_server):
    url, folder = index_server
    status, body = call(url, "v1/ask", {"question": "When was the Eiffel Tower completed?", "top_k": 2})
    assert status == 200, body
    best = body["answers"][0]
    assert "1889" in best["answer"] and best["source"].endswith("eiffel.txt")
    assert (folder / "eiffel.txt").read_text()[best["start"] : best["end"]] == best["answer"]
    p = best["passage"]
    assert p["text"][best["start"] - p["start"] : best["end"] - p["start"]] == best["answer"]
    status, stats = call(url, "v1/index")
    assert status == 200 and stats["documents"] == 4 and stats["passages"] >= 4
    for bad, field in (
        ({"question": ""}, "question"),
        ({"question": "x?", "passages": 0}, "passages"),
        ({"question": "x?", "context": "y"}, "context"),
        ({}, "question"),
    ):
        status, err = call(url, "v1/ask", bad)
        assert status == 422 and field in err["error"], (bad, err)
    schema = call(url, "openapi.json")[1]
    ask = schema["paths"]["/v1/ask"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert ask["properties"]["passages"]["maximum"] == 50 and ask["required"] == ["question"]


def test_a_server_without_an_index_says_so(tiny_export, tmp_path):
    from tests.serve.test_serve import start_server, stop_server

    proc, url = start_server([str(tiny_export)], tmp_path / "serve.log")
    try:
        status, err = call(url, "v1/ask", {"question": "When?"})
        assert status == 404 and "--index" in err["error"]
        assert call(url, "v1/index")[0] == 404
    finally:
        stop_server(proc)
    code = main(["serve", str(tiny_export), "--index", str(tmp_path / "none.sqlite")])
    assert code == 2


def test_retrieve_gives_the_pairs_to_read_and_ranks_each_question_as_rank_does(folder, tmp_path):
    """Retrieve -> read -> rank as the collection and the server both do it, whoever reads."""
    from rckit.retrieval.collection import retrieve
    from rckit.retrieval.store import PassageStore

    questions = ["When was the Eiffel Tower completed?", "?!", "Where is the Thames Barrier?"]
    with PassageStore(tmp_path / "i.sqlite") as store:
        store.add([folder])
        found = retrieve(store, questions, 2)
        n = len(found.hits[0])
        assert n >= 1 and found.hits[1] == [] and found.hits[2]
        assert found.pairs == [(h.text, q) for q, hs in zip(questions, found.hits) for h in hs]
        answers = [
            [{"answer": text[:3], "score": 0.5, "start": 0, "end": 3, "no_answer_probability": None}]
            for text, _ in found.pairs
        ]
        ranked = found.rank(answers, 2, 0.25)
        assert ranked[0] == rank(list(zip(found.hits[0], answers[:n])), 2, 0.25)
        assert ranked[1] == rank([], 2, 0.25) and ranked[1][0]["answer"] == ""
        assert ranked[2] == rank(list(zip(found.hits[2], answers[n:])), 2, 0.25)
