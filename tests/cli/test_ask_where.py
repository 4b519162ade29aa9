"""``rckit ask``'s text output says where an answer is (the file, its page or section) and shows
the passage around it with the answer marked; ``--json`` carries ``page`` and ``section``."""

from __future__ import annotations

import json
import sys

import pytest

from rckit.cli import main
from rckit.cli.ask import around
from tests.retrieval.test_formats_answered import write_facts


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """An index of write_facts' files (a two-page PDF, HTML, Word, EPUB, Markdown, gzip'd text)."""
    root = tmp_path_factory.mktemp("where")
    write_facts(root / "docs")
    assert main(["index", str(root / "docs"), "--out", str(root / "docs.sqlite"), "--no-progress"]) == 0
    return root / "docs.sqlite"


def _ask(capsys, *argv) -> list[str]:
    capsys.readouterr()
    assert main(["ask", *map(str, argv)]) == 0
    return capsys.readouterr().out.splitlines()


def _shown(lines: list[str]) -> tuple[str, str, str]:
    """The first line, the location line and the passage (its wrapped lines joined), unindented."""
    first, where, *passage = lines
    assert where.startswith("    ") and all(line.startswith("    ") for line in passage), lines
    return first, where.strip(), " ".join(line.strip() for line in passage)


def test_ask_says_the_page_and_marks_the_answer_in_its_passage(index, capsys, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    first, where, passage = _shown(_ask(capsys, index, "How many gales did the weather station record in 1890?"))
    # The first line as before: answer, score, title, source, chars a-b.
    answer, score, title, rest = first.split("\t")
    assert answer == "261" and 0 < float(score) <= 1 and title == "Observatory Log"
    assert rest.endswith("observatory.pdf chars " + rest.rsplit(" ", 1)[1])
    assert where == "observatory.pdf, page 2"
    # The passage runs across the page break (a blank line in the text): shown as one space.
    assert "1883. The weather station on the summit recorded **261** gales in 1890. Its observers" in passage
    assert "\n" not in passage and "  " not in passage


def test_ask_says_the_section_and_json_carries_page_and_section(index, capsys):
    first, where, passage = _shown(_ask(capsys, index, "Who completed the Caledonian Canal?"))
    assert first.startswith("Thomas Telford\t") and where == 'waterways.docx, section "Canals"'
    assert "by the engineer **Thomas Telford**." in passage

    got = json.loads(_ask(capsys, index, "Who completed the Caledonian Canal?", "--json")[0])
    assert (got["answer"], got["page"], got["section"]) == ("Thomas Telford", None, "Canals")
    got = json.loads(_ask(capsys, index, "When was the observatory on Ben Nevis opened?", "--json")[0])
    assert (got["answer"], got["page"], got["section"]) == ("1883", 1, None)

    # A file without pages or sections: the file alone; top-k answers each have their lines.
    lines = _ask(capsys, index, "Who painted the clock tower green?", "--top-k", 2)
    firsts = [i for i, line in enumerate(lines) if not line.startswith(" ")]
    assert len(firsts) == 2 and firsts[0] == 0
    first, where, passage = _shown(lines[: firsts[1]])
    assert first.startswith("Margaret Ellis\t") and where == "town.txt.gz"
    assert passage == "The clock tower in the town square was painted green by **Margaret Ellis** in 1921."


def test_ask_marks_the_answer_in_bold_on_a_terminal_unless_no_color(index, capsys, monkeypatch):
    question = "When does the apple harvest in Kent begin?"
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    first, where, passage = _shown(_ask(capsys, index, question))
    assert where == 'orchards.html, section "Harvest"'
    assert "begins in \033[1mlate August\033[0m and" in passage and "**" not in passage
    monkeypatch.setenv("NO_COLOR", "1")
    assert "begins in **late August** and" in _shown(_ask(capsys, index, question))[2]


def test_around_cuts_at_word_boundaries_and_shows_whitespace_as_one_space():
    words = [f"w{i}" for i in range(100)]
    text = " ".join(words)
    start = text.index("w50")
    assert around(text, start, start + 3) == "… " + " ".join(words[20:50]) + " **w50** " + " ".join(words[51:81]) + " …"
    assert around(text, start, start + 3, words=2) == "… w48 w49 **w50** w51 w52 …"
    text = "The harbour\n(at  Leith)\n\nopened in\t1887."
    start = text.index("Leith")
    assert around(text, start, start + 5, "[", "]") == "The harbour (at [Leith]) opened in 1887."
    assert around(text, 0, 3, words=2) == "**The** harbour (at …"
    assert around("a b\nc", 2, 5) == "a **b c**"  # an answer across a line break
