import json
import time

import numpy as np
import pytest

from rckit.data.prepare import PrepareConfig, featurize, prepare_squad
from rckit.data.squad import read_squad
from rckit.data.vocab import PAD, load_pretrained
from tests.conftest import squad_json, write_json


def _prep(tiny_squad, tiny_glove, out, **cfg):
    train, dev = tiny_squad
    return prepare_squad(train, {"dev": dev}, out, PrepareConfig(embeddings=str(tiny_glove), **cfg))


def test_vocab_vectors_and_spans(tiny_squad, tiny_glove, tmp_path):
    p = _prep(tiny_squad, tiny_glove, tmp_path / "out")
    words = p.vocabs.words
    assert words.itos[:2] == ["<pad>", "<unk>"] and words.n_trainable == 2
    assert p.vocabs.lowercase  # the tiny GloVe file is lower-cased
    # Train words with a vector are in; "eiffel" (dev only, no vector) is not; "tower" (dev, vector) is.
    assert "denver" in words.stoi and "tower" in words.stoi and "eiffel" not in words.stoi
    pre = load_pretrained(str(tiny_glove))
    np.testing.assert_allclose(p.word_vectors[words.get("paris")], pre.vectors[pre.index["paris"]])
    assert not p.word_vectors[PAD].any()
    train = p.split("train")
    # "Levi's Stadium" -> tokens Levi 's Stadium; its token span maps back to the exact text.
    i = train.qids.index("t2")
    ctx, offs = train.context_of(i)
    s, e = train.a["y_start"][i], train.a["y_end"][i]
    assert ctx[offs[s][0] : offs[e][1]] == "Levi's Stadium"
    meta = p.meta["splits"]
    assert meta["train"]["alignment"] == 1.0 and meta["dev"]["answers"] == 2
    cov = meta["dev"]["coverage"]["tokens_with_pretrained_vector"]
    assert 0 < cov < 1


def test_cache_reuse_and_rebuild_on_changed_setting(tiny_squad, tiny_glove, tmp_path):
    out = tmp_path / "out"
    a = _prep(tiny_squad, tiny_glove, out)
    assert not a.from_cache
    stamp = (a.root / "meta.json").stat().st_mtime_ns
    b = _prep(tiny_squad, tiny_glove, out)
    assert b.from_cache and b.root == a.root
    assert (b.root / "meta.json").stat().st_mtime_ns == stamp  # nothing rewritten
    c = _prep(tiny_squad, tiny_glove, out, max_word_len=8)
    assert not c.from_cache and c.root != a.root
    assert c.split("train").a["form_chars"].shape[1] == 8
    # Editing the input file changes the key too.
    train, dev = tiny_squad
    doc = json.loads(train.read_text())
    doc["data"][0]["paragraphs"][1]["qas"][0]["question"] = "Which city is the capital of France?"
    write_json(train, doc)
    d = _prep(tiny_squad, tiny_glove, out)
    assert not d.from_cache and d.root not in (a.root, c.root)


def test_interrupted_build_leaves_no_half_cache(tiny_squad, tiny_glove, tmp_path, monkeypatch):
    import rckit.data.prepare as P

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(P, "save_split", boom)
    with pytest.raises(KeyboardInterrupt):
        _prep(tiny_squad, tiny_glove, tmp_path / "out")
    assert [x.name for x in (tmp_path / "out").iterdir()] == []


def test_featurize_new_file_with_saved_vocab(tiny_squad, tiny_glove, tmp_path):
    p = _prep(tiny_squad, tiny_glove, tmp_path / "out")
    doc = squad_json([("Denver won in Oslo.", [("n1", "Who won?", [("Denver", 0)])])])
    split, stats = featurize(read_squad(write_json(tmp_path / "new.json", doc)), p.vocabs)
    b = split.collate([0])
    words = [p.vocabs.words.itos[i] for i in b.c_words[0].tolist()]
    assert words == ["denver", "won", "in", "<unk>", "."]
    assert b.y_start.item() == 0 and b.y_end.item() == 0 and stats["alignment"] == 1.0


def test_char_vectors_from_glove_char_file(tiny_squad, tiny_glove, tmp_path):
    chars = tmp_path / "chars.txt"
    chars.write_text("a 1 1 1\nD 2 2 2\nz 3 3 3\n")
    p = _prep(tiny_squad, tiny_glove, tmp_path / "out", char_embeddings=str(chars))
    assert p.char_vectors.shape == (len(p.vocabs.chars), 3)
    np.testing.assert_allclose(p.char_vectors[p.vocabs.chars.get("a")], [1, 1, 1])
    assert p.meta["char_vectors_found"] == 2  # 'z' never occurs in the training text


def test_bad_glove_line_names_file_and_line(tiny_squad, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("paris 1 2\ndenver 1 x\n")
    with pytest.raises(ValueError, match=r"bad\.txt:2: bad number"):
        _prep(tiny_squad, bad, tmp_path / "out")


@pytest.mark.realdata
def test_real_prepare_and_cached_reload(shared_data, tmp_path):
    """Full v1.1 train + dev with the packaged GloVe 6B 50d vectors."""
    d = shared_data / "squad-v1.1"
    files = (d / "train-v1.1.reconstructed.json.gz", {"dev": d / "dev-v1.1.json.gz"})
    p = prepare_squad(*files, tmp_path / "out")
    dev = p.meta["splits"]["dev"]
    assert dev["questions"] == 10570 and dev["alignment"] >= 0.995
    assert p.meta["splits"]["train"]["questions"] == 87599
    assert dev["coverage"]["tokens_with_pretrained_vector"] > 0.98
    t0 = time.perf_counter()
    q = prepare_squad(*files, tmp_path / "out")
    train = q.split("train")
    assert q.from_cache and len(train) == 87599
    assert time.perf_counter() - t0 < 30  # generous: a cache hit must not re-tokenize (~10 s)
    # Every training answer span maps back to text equal to the answer (up to token cutting).
    ex = read_squad(files[0]).examples[123]
    i = train.qids.index(ex.qid)
    ctx, offs = train.context_of(i)
    s, e = train.a["y_start"][i], train.a["y_end"][i]
    assert ctx[offs[s][0] : offs[e][1]] == ex.answers[0].text.strip()


def test_the_answering_path_indexes_texts_as_featurize_does(tiny_squad, tiny_glove, tmp_path):
    """The Reader's lean path (tokenize_texts + a FormIndex that keeps each form's row) gives the
    same word and character ids as featurize, across calls that share words and after the
    table starts afresh at its limit."""
    from rckit.data.prepare import tokenize_texts
    from rckit.data.vocab import FormIndex

    p = _prep(tiny_squad, tiny_glove, tmp_path / "out")
    texts = [
        ("Denver won in Oslo, didn't it?", "Who won in Oslo?"),
        ("Oslo is cold; Denver isn't.", "Is Oslo cold?"),
        ("Ünïcode wörds and a verylongwordbeyondsixteenchars.", "Which words?"),
    ]
    index = FormIndex(p.vocabs, limit=12)
    for context, question in texts:
        doc = squad_json([(context, [("n1", question, [(context[:4], 0)])])])
        split, _ = featurize(read_squad(write_json(tmp_path / "new.json", doc)), p.vocabs)
        t = tokenize_texts([context], [question])
        words, chars = index.rows(t.forms)
        a = split.a
        assert [tuple(o) for o in a["ctx_offsets"].tolist()] == t.ctx_offsets
        np.testing.assert_array_equal(words[t.ctx_forms], a["form_words"][a["ctx_forms"]])
        np.testing.assert_array_equal(chars[t.ctx_forms], a["form_chars"][a["ctx_forms"]])
        np.testing.assert_array_equal(words[t.q_forms], a["form_words"][a["q_forms"]])
        np.testing.assert_array_equal(chars[t.q_forms], a["form_chars"][a["q_forms"]])
        assert len(index.index) <= 12
    assert len(index.index) > 0
    words, chars = index.rows(["Oslo", "Oslo", "cold", "Oslo"])  # a form twice: rows as form_rows gives them
    from rckit.data.vocab import form_rows

    want_words, want_chars = form_rows(["Oslo", "Oslo", "cold", "Oslo"], p.vocabs)
    np.testing.assert_array_equal(words, want_words)
    np.testing.assert_array_equal(chars, want_chars)


def test_the_head_of_a_split_batches_its_first_questions_alike(tiny_squad, tiny_glove, tmp_path):
    """`rckit evaluate --limit N` reads split.head(N): the first N questions, batched as in the whole
    split, and only the contexts they ask about (the texts a contextual encoder then reads)."""
    p = _prep(tiny_squad, tiny_glove, tmp_path / "out")
    train = p.split("train")
    n = 2  # the tiny train file: two questions on its first context, then others
    assert len(train) > n and len(set(train.a["q_ctx"].tolist())) > 1
    head = train.head(n)
    assert len(head) == n and head.qids == train.qids[:n] and head.questions == train.questions[:n]
    assert head.contexts == train.contexts[: int(train.a["q_ctx"][:n].max()) + 1] != train.contexts
    whole, part = train.collate(list(range(n))), head.collate(list(range(n)))
    for field in ("c_words", "c_chars", "q_words", "q_chars", "y_start", "y_end"):
        assert getattr(whole, field).equal(getattr(part, field)), field
    assert head.texts().digest() != train.texts().digest()
    assert len(train.head(10**6)) == len(train) and len(train.head(0)) == 0


def test_caches_built_before_base_vocab_existed_keep_their_key(tiny_squad, tiny_glove):
    """``base_vocab`` (rckit adapt) unset leaves the key as it was before the setting existed, so
    no one's prepared SQuAD (and its contextual states, hours of work) is built again."""
    import dataclasses

    from rckit.data.prepare import cache_key

    train, dev = tiny_squad
    files = {"train": train, "dev": dev}
    before = dataclasses.make_dataclass(
        "PrepareConfig",
        [
            (f.name, f.type, dataclasses.field(default=f.default))
            for f in dataclasses.fields(PrepareConfig)
            if f.name != "base_vocab"
        ],
        namespace={"base_vocab": None},
    )
    assert cache_key(files, PrepareConfig(embeddings=str(tiny_glove))) == cache_key(
        files, before(embeddings=str(tiny_glove))
    )
    assert cache_key(files, PrepareConfig(embeddings=str(tiny_glove), base_vocab=str(train))) != cache_key(
        files, before(embeddings=str(tiny_glove))
    )
