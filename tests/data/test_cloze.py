import pytest
import torch

from rckit.data.batching import BucketBatchSampler
from rckit.data.cloze.baselines import (
    exclusive_frequency,
    maximum_frequency,
    placeholder_position,
    score_baselines,
    word_distance,
)
from rckit.data.cloze.examples import (
    DELIMITER,
    ENTITY_OFFSET,
    PLACEHOLDER,
    SPECIALS,
    UNK,
    ClozeExample,
    ClozeFormatError,
    ClozeSplit,
    ClozeVocab,
    load_cloze_jsonl,
    read_chen_file,
    read_question_dir,
    read_question_file,
    write_cloze_jsonl,
)

QUESTION = """http://www.cnn.com/2015/01/01/story.html

@entity0 ( @entity1 ) -- @entity2 met @entity1 in @entity0 . @entity1 said so .

@placeholder met @entity1 in @entity0

@entity2

@entity0:London
@entity1:CNN
@entity2:Amy Winehouse
"""

CHEN = (
    "@placeholder met @entity1 in @entity0\n@entity2\n@entity0 ( @entity1 ) -- @entity2 met @entity1 in @entity0 .\n\n"
    "Who Is @placeholder\n@entity1\n@entity1 Was Here\n\n"
)


def test_question_file(tmp_path):
    p = tmp_path / "abc123.question"
    p.write_text(QUESTION)
    ex = read_question_file(p)
    assert ex.id == "abc123"
    assert ex.document[:3] == ["@entity0", "(", "@entity1"] and len(ex.document) == 15
    assert ex.query == [PLACEHOLDER, "met", "@entity1", "in", "@entity0"]
    assert ex.answer == "@entity2"
    assert ex.candidates == ["@entity0", "@entity1", "@entity2"]
    assert ex.entities == {"@entity0": "London", "@entity1": "CNN", "@entity2": "Amy Winehouse"}


def test_question_dir_sorted(tmp_path):
    for name in ("b", "a", "c"):
        (tmp_path / f"{name}.question").write_text(QUESTION)
    (tmp_path / "notes.txt").write_text("ignored")
    assert [ex.id for ex in read_question_dir(tmp_path)] == ["a", "b", "c"]
    with pytest.raises(FileNotFoundError):
        read_question_dir(tmp_path / "nothing")


@pytest.mark.parametrize(
    "text, where, what",
    [
        (QUESTION.replace("\n@entity2\n\n", "\n\n\n"), 7, "missing answer"),
        (QUESTION.replace("\n@entity2\n\n", "\nAmy Winehouse\n\n"), 7, "should be one entity marker"),
        (QUESTION.replace("\n@entity2\n\n", "\n@entity9\n\n"), 7, "does not occur in the document"),
        ("\n".join(QUESTION.split("\n")[:5]) + "\n", 7, "truncated file: expected the answer"),
        ("\n".join(QUESTION.split("\n")[:2]), 3, "truncated file: expected the document"),
        (QUESTION.replace("@entity2:Amy Winehouse", "Amy Winehouse"), 11, "expected an entity line"),
        (QUESTION.replace("@placeholder met", "someone met"), 5, "@placeholder"),
        (QUESTION.replace("story.html\n\n", "story.html\nextra\n"), 2, "expected a blank line"),
    ],
)
def test_question_file_errors_name_file_and_line(tmp_path, text, where, what):
    p = tmp_path / "bad.question"
    p.write_text(text)
    with pytest.raises(ClozeFormatError, match=rf"bad\.question:{where}: .*{what}"):
        read_question_file(p)


def test_chen_file(tmp_path):
    p = tmp_path / "train.txt"
    p.write_text(CHEN)
    a, b = read_chen_file(p)
    assert (a.id, b.id) == ("train:0", "train:1")
    assert a.answer == "@entity2" and a.candidates == ["@entity0", "@entity1", "@entity2"]
    assert b.query == ["who", "is", PLACEHOLDER] and b.document == ["@entity1", "was", "here"]
    assert b.entities == {}
    p.write_text(CHEN.rstrip("\n"))  # no final blank line
    assert len(read_chen_file(p)) == 2


@pytest.mark.parametrize(
    "text, where, what",
    [
        (CHEN.replace("\n@entity1\n@entity1 Was", "\n\n@entity1 Was"), 6, "missing answer"),
        (CHEN.replace("\n@entity1\n@entity1 Was", "\njohn\n@entity1 Was"), 6, "should be one entity marker"),
        (CHEN.replace("\n@entity1\n@entity1 Was", "\n@entity7\n@entity1 Was"), 6, "@entity7 does not occur"),
        ("\n".join(CHEN.split("\n")[:6]) + "\n", 7, "truncated block 1: expected the document"),
        ("\n".join(CHEN.split("\n")[:5]) + "\n", 6, "truncated block 1: expected the answer"),
        (CHEN.replace("Was Here\n\n", "Was Here\nmore\n"), 8, "expected a blank line"),
        (CHEN.replace(".\n\nWho", ".\n\n\nWho"), 5, "expected the question"),
    ],
)
def test_chen_file_errors_name_file_and_line(tmp_path, text, where, what):
    p = tmp_path / "dev.txt"
    p.write_text(text)
    with pytest.raises(ClozeFormatError, match=rf"dev\.txt:{where}: .*{what}"):
        read_chen_file(p)


def test_jsonl_roundtrip_and_errors(tmp_path):
    p = tmp_path / "q.question"
    p.write_text(QUESTION)
    ex = read_question_file(p)
    out = tmp_path / "x.jsonl"
    write_cloze_jsonl(out, [ex, ex])
    assert load_cloze_jsonl(out) == [ex, ex]
    out.write_text(out.read_text().replace('"answer": "@entity2"', '"answer": "@entity8"', 1))
    with pytest.raises(ClozeFormatError, match=r"x\.jsonl:1: answer @entity8"):
        load_cloze_jsonl(out)


EX0 = ClozeExample(
    "e0",
    ["@entity1", "met", "@entity0", "in", "Paris"],
    [PLACEHOLDER, "met", "@entity0"],
    "@entity1",
    ["@entity1", "@entity0"],
)
EX1 = ClozeExample(
    "e1",
    ["the", "cat", "met", "@entity0", "and", "@entity2"],
    ["who", "Met", PLACEHOLDER, "?"],
    "@entity2",
    ["@entity0", "@entity2"],
)


def test_vocab_ids():
    vocab = ClozeVocab.build([EX0, EX1], min_count=2)
    assert vocab.n_entities == 3
    assert vocab.itos[: ENTITY_OFFSET + 3] == SPECIALS + ["@entity0", "@entity1", "@entity2"]
    assert vocab.stoi["<pad>"] == 0 and vocab.stoi["<unk>"] == UNK and vocab.stoi[DELIMITER] == 2
    assert vocab.itos[ENTITY_OFFSET + 3 :] == ["met"]  # 4 times, lower-cased; the rest occur once
    assert vocab.encode(["Paris", "MET", "@entity2", PLACEHOLDER]) == [UNK, ENTITY_OFFSET + 3, ENTITY_OFFSET + 2, 3]
    assert len(ClozeVocab.build([EX0, EX1], n_entities=10)) == ENTITY_OFFSET + 10 + 8
    with pytest.raises(ValueError, match="@entity7"):
        vocab.encode(["@entity7"])


def test_split_collate_and_truncation(tmp_path):
    vocab = ClozeVocab.build([EX0, EX1])
    split = ClozeSplit.from_examples([EX0, EX1], vocab)
    assert split.lengths.tolist() == [8, 10]
    b = split.collate([1, 0])
    assert b.c_words.shape == (2, 6) and b.q_words.shape == (2, 4) and b.candidates.shape == (2, 3)
    assert b.c_words.dtype == b.q_words.dtype == b.answer.dtype == b.index.dtype == torch.long
    assert b.c_mask.dtype == b.q_mask.dtype == b.candidates.dtype == torch.bool
    assert b.c_mask.tolist() == [[True] * 6, [True] * 5 + [False]]
    assert b.q_mask.tolist() == [[True] * 4, [True] * 3 + [False]]
    assert (b.c_words[~b.c_mask] == 0).all() and (b.q_words[~b.q_mask] == 0).all()
    assert b.candidates.tolist() == [[True, False, True], [True, True, False]]
    assert b.answer.tolist() == [2, 1] and b.index.tolist() == [1, 0]
    assert b.answer_cut.tolist() == [False, False]
    assert b.c_words[1, 0].item() == ENTITY_OFFSET + 1 and b.q_words[1, 0].item() == 3
    # The answer of EX1 (position 5) is cut away; the example stays, flagged, answer still a candidate.
    c = split.collate([1, 0], max_doc_len=4)
    assert c.c_words.shape == (2, 4) and c.c_mask.all()
    assert c.answer_cut.tolist() == [True, False]
    assert c.candidates.tolist() == [[True, False, True], [True, True, False]]
    assert split.answers_cut(4) == 1 and split.answers_cut(5) == 1 and split.answers_cut(6) == 0
    assert split.answers_cut(None) == 0
    assert len(c.to("cpu")) == 2

    split.save(tmp_path / "train")
    vocab.save(tmp_path / "vocab.json")
    again = ClozeSplit.load(tmp_path / "train")
    assert again.ids == ["e0", "e1"] and again.n_entities == 3
    d = again.collate([1, 0])
    assert all((getattr(d, k) == getattr(b, k)).all() for k in ("c_words", "q_words", "candidates", "answer"))
    assert ClozeVocab.load(tmp_path / "vocab.json").itos == vocab.itos
    seen = [i for batch in BucketBatchSampler(split.lengths, batch_size=1, seed=0) for i in batch]
    assert sorted(seen) == [0, 1]


def test_split_rejects_unknown_entity():
    vocab = ClozeVocab.build([EX0])  # entities 0..1
    with pytest.raises(ValueError, match="e1"):
        ClozeSplit.from_examples([EX1], vocab)


def _ex(doc, query, answer):
    doc = doc.split()
    return ClozeExample("x", doc, query.split(), answer, list(dict.fromkeys(t for t in doc if t.startswith("@entity"))))


# A: answer most frequent and aligned with "won the cup".
A = _ex("@entity0 met @entity1 . @entity1 met @entity2 . @entity1 won the cup", "@placeholder won the cup", "@entity1")
# B: the most frequent entity is in the query; exclusive frequency ties e0/e2 -> e0 (first mentioned).
B = _ex(
    "@entity1 beat @entity0 . @entity1 lost to @entity2 . @entity1 smiled", "@entity1 beat @placeholder", "@entity0"
)
# C: all ties: every baseline picks e3, mentioned first; the answer is e4.
C = _ex("@entity3 x @entity4 y", "@placeholder z", "@entity4")
# D: no placeholder: the wh-word stands in for it.
D = _ex("@entity1 beat @entity0 . @entity2 lost .", "Who beat @entity0 ?", "@entity1")


def test_baselines_by_hand():
    assert [maximum_frequency(e) for e in (A, B, C, D)] == ["@entity1", "@entity1", "@entity3", "@entity1"]
    assert [exclusive_frequency(e) for e in (A, B, C, D)] == ["@entity1", "@entity0", "@entity3", "@entity1"]
    assert [word_distance(e) for e in (A, B, C, D)] == ["@entity1", "@entity0", "@entity3", "@entity1"]
    assert placeholder_position(["Who", "won"]) == 0
    assert placeholder_position(["In", "which", "year", "?"]) == 1
    assert placeholder_position(["Name", "it"]) == 0
    assert placeholder_position(["x", PLACEHOLDER, "who"]) == 1
    scores = score_baselines([A, B, C, D])
    assert scores == {"examples": 4, "maximum_frequency": 50.0, "exclusive_frequency": 75.0, "word_distance": 75.0}


def test_word_distance_penalty_cap():
    # "far" is 10 positions from where e1 would put it: with m = 8 it costs 8, not 10.
    ex = _ex("@entity1 a b c d e f g h i j far @entity2 far", "@placeholder far", "@entity2")
    assert word_distance(ex, max_penalty=8) == "@entity2"
    ex2 = _ex("@entity1 a b c d e f g h i j k l m n o p q far", "@placeholder far", "@entity1")
    assert word_distance(ex2, max_penalty=8) == "@entity1"  # alone, capped cost still picks the only candidate


def test_renumber_entities_renames_consistently_and_changes_nothing_else():
    from rckit.data.cloze.examples import ENTITY_OFFSET, renumber_entities

    examples = [
        ClozeExample(
            "a",
            "@entity0 met @entity2 in @entity1 . @entity2 left".split(),
            "who met @entity0 ?".split(),
            "@entity2",
            ["@entity0", "@entity2", "@entity1"],
        ),
        ClozeExample(
            "b", "@entity1 and @entity0 won".split(), "@placeholder won".split(), "@entity0", ["@entity1", "@entity0"]
        ),
    ]
    vocab = ClozeVocab.build(examples, n_entities=6)
    batch = ClozeSplit.from_examples(examples, vocab).collate([0, 1], max_doc_len=4)  # b: cut, a: answer kept
    gen = torch.Generator().manual_seed(0)
    seen = set()
    for _ in range(20):
        new = renumber_entities(batch, gen)
        for b in range(2):
            old_d, new_d = batch.c_words[b], new.c_words[b]
            is_ent = (old_d >= ENTITY_OFFSET) & (old_d < ENTITY_OFFSET + 6)
            assert torch.equal(new_d[~is_ent], old_d[~is_ent])  # words, padding untouched
            # one bijection per row, used for the document, the query, the candidates and the answer
            pairs = {
                (int(o), int(n))
                for o, n in zip(torch.cat([old_d, batch.q_words[b]]), torch.cat([new_d, new.q_words[b]]))
                if o >= ENTITY_OFFSET
            }
            assert len({o for o, _ in pairs}) == len({n for _, n in pairs}) == len(pairs)
            mapping = {o - ENTITY_OFFSET: n - ENTITY_OFFSET for o, n in pairs}
            assert int(new.answer[b]) == mapping[int(batch.answer[b])]
            assert {mapping[int(k)] for k in batch.candidates[b].nonzero()} == set(
                new.candidates[b].nonzero().flatten().tolist()
            )
            seen.add((b, int(new.answer[b])))
        assert torch.equal(new.c_mask, batch.c_mask) and torch.equal(new.answer_cut, batch.answer_cut)
    assert len(seen) > 6  # the numbering really changes from batch to batch
