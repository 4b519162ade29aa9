"""What lets the index grow: ranking only the passages with a question's rarer words, reading
files in worker processes, committing as it goes, and indexes of the first schema opened."""

from __future__ import annotations

import sqlite3

import pytest

from rckit.retrieval import store
from rckit.retrieval.store import PassageStore


@pytest.fixture()
def rivers(tmp_path):
    docs = tmp_path / "rivers"
    docs.mkdir()
    for i in range(30):
        (docs / f"r{i:02d}.txt").write_text(
            f"The river number {i} runs past mill {i} and the old river bridge.\n", encoding="utf-8"
        )
    (docs / "zanzibar.txt").write_text("Zanzibar has no great river, only streams.\n", encoding="utf-8")
    (docs / "zanzibar2.txt").write_text(
        "The spice trade of Zanzibar river ports and the river dhows.\n", encoding="utf-8"
    )
    return docs


def test_search_ranks_only_passages_with_the_rarer_words_beyond_its_limit_and_scores_them_in_full(rivers, tmp_path):
    with PassageStore(tmp_path / "i.sqlite") as ix:
        ix.add([rivers])
        every = ix.search("Zanzibar river", k=40)  # no limit below 32 passages holding the words
        assert len(every) == 32
        ix.ranked_passages = 5  # "zanzibar" is in 2 passages, "river" in 32: only the first word's are ranked
        some = ix.search("Zanzibar river", k=40)
        assert sorted(h.source.rsplit("/", 1)[1] for h in some) == ["zanzibar.txt", "zanzibar2.txt"]
        full = {h.passage_id: h.score for h in every}
        for h in some:  # each scored over both words, as the search over every passage scored it
            assert h.score == pytest.approx(full[h.passage_id], rel=1e-9)
        assert [h.passage_id for h in some] == [h.passage_id for h in every[:2]]
        assert ix.search("mill river", k=3) == ix.search("mill river", k=3)  # the counts remembered
        ix.ranked_passages = None
        assert len(ix.search("Zanzibar river", k=40)) == 32


def test_the_counts_of_words_are_forgotten_when_another_connection_changes_the_index(rivers, tmp_path):
    db = tmp_path / "i.sqlite"
    with PassageStore(db) as reader, PassageStore(db) as writer:
        writer.add([rivers])
        reader.ranked_passages = 5
        assert len(reader.search("Zanzibar river", k=40)) == 2
        for i in range(6):
            (rivers / f"z{i}.txt").write_text(f"Zanzibar note {i}.\n", encoding="utf-8")
        writer.add([rivers])  # now "zanzibar" is in 8 passages: more than 5, still the rarer word
        assert len(reader.search("Zanzibar river", k=40)) == 8


def test_files_read_by_a_worker_process_index_what_reading_here_does(rivers, tmp_path):
    (rivers / "bad.bin").write_bytes(b"\x00\x01")
    (rivers / "notes.md").write_text("# Fish\n\nTrout live in the river.\n", encoding="utf-8")
    tables = {}
    for jobs in (0, 1):
        db = tmp_path / f"i{jobs}.sqlite"
        with PassageStore(db) as ix:
            report = ix.add([rivers], jobs=jobs)
            assert report["added"] == 33 and [s["path"].rsplit("/", 1)[1] for s in report["skipped"]] == ["bad.bin"]
        con = sqlite3.connect(db)
        tables[jobs] = [
            con.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
            for t in ("sources", "documents", "passages", "regions")
        ]
        con.close()
    assert tables[0] == tables[1]
    with pytest.raises(store.IndexInputError, match="bad.bin: binary"):  # named alone: refused by a worker too
        PassageStore(tmp_path / "i1.sqlite").add([rivers / "bad.bin"], jobs=1)


def test_a_killed_add_keeps_the_files_it_committed_and_the_next_one_goes_on(rivers, tmp_path, monkeypatch):
    read = store.read_documents
    seen = []

    def read_then_kill(path, data):
        seen.append(path.name)
        if len(seen) == 3:
            raise KeyboardInterrupt
        return read(path, data)

    monkeypatch.setattr(store, "read_documents", read_then_kill)
    db = tmp_path / "i.sqlite"
    with PassageStore(db) as ix:
        ix.commit_seconds = 0  # commit after every file
        with pytest.raises(KeyboardInterrupt):
            ix.add([rivers], jobs=0)
    monkeypatch.setattr(store, "read_documents", read)
    with PassageStore(db) as ix:
        assert ix.stats()["sources"] == 2 and ix.search("mill 1")[0].source.endswith("r01.txt")
        report = ix.add([rivers])
        assert (report["unchanged"], report["added"]) == (2, 30) and report["passages"] == 32


def test_an_index_of_the_first_schema_gains_regions_when_opened(rivers, tmp_path):
    db = tmp_path / "i.sqlite"
    with PassageStore(db) as ix:
        ix.add([rivers])
    con = sqlite3.connect(db)
    con.executescript("DROP TABLE regions; UPDATE meta SET value = '1' WHERE key = 'schema';")
    con.close()
    (rivers / "guide.md").write_text("# Boats\n\nA dhow has a lateen sail.\n", encoding="utf-8")
    with PassageStore(db) as ix:
        assert ix.search("Zanzibar")[0].regions == ()
        ix.add([rivers])
        hit = ix.search("lateen sail")[0]
        assert hit.region_at(hit.start).section == "Boats"
    con = sqlite3.connect(db)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == (str(store.SCHEMA_VERSION),)
    con.close()
