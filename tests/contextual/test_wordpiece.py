"""rckit's WordPiece reader gives the ``tokenizers`` library's pieces and offsets, text for text."""

from __future__ import annotations

import json

import pytest

from rckit.contextual.encoders import find_encoder
from rckit.contextual.pieces import PieceTokenizer
from rckit.contextual.wordpiece import WordPiece
from rckit.data.squad import load_json

tokenizers = pytest.importorskip("tokenizers")  # the reference; installed with the test extra

AWKWARD = [
    "",
    "   ",
    "[CLS] a special token written in the text [SEP]x",
    "Straße İstanbul ΣΟΦΙΑ ñandú café\u200djoined\x00nul\ufffdreplacement\x0bvt",
    "中文字 and  日本\t語 mixed with ｆｕｌｌ width",
    "a" * 120 + " after a word too long",
    "naïve coöperate ﬁne ① résumé's \u00ad soft hyphen \x85 next line",
    "🙂 emoji 𝒜 script \u2028 separator \u3000 ideographic space",
    "U.S.-based $3,000+ <tags> ~tilde^caret |pipe| `tick` e-mail@host.org",
]


def reference(path):
    tok = tokenizers.Tokenizer.from_file(str(path))
    tok.no_truncation()
    tok.no_padding()
    return tok


def assert_same(path, texts):
    ours, ref = WordPiece(path), reference(path)
    for text, want in zip(texts, ref.encode_batch(texts, add_special_tokens=False)):
        ids, offsets = ours.encode(text)
        assert (ids, offsets) == (want.ids, [tuple(o) for o in want.offsets]), text[:80]


def test_awkward_texts_read_as_the_library_reads_them():
    path = find_encoder("minilm-l2").root / "tokenizer.json"
    assert_same(path, AWKWARD)
    assert_same(path, AWKWARD)  # again, from what it remembers of words and characters


def test_every_squad_dev_paragraph_and_question_reads_as_the_library_reads_it(shared_data):
    raw = load_json(shared_data / "squad-v1.1" / "dev-v1.1.json.gz")
    paragraphs = [p for a in raw["data"] for p in a["paragraphs"]]
    texts = [p["context"] for p in paragraphs] + [q["question"] for p in paragraphs for q in p["qas"]]
    assert len(texts) == 2067 + 10570
    assert_same(find_encoder("minilm-l2").root / "tokenizer.json", texts)


def test_a_test_encoders_tokenizer_reads_the_same(tmp_path):
    from tests.conftest import write_tiny_encoder

    root = write_tiny_encoder(tmp_path / "enc", words=("hello", "world"))
    assert_same(root / "tokenizer.json", ["Hello, world!", "héllo wörld 🙂", "[CLS] xyz"])
    tok = PieceTokenizer(root / "tokenizer.json")
    assert tok.cls == 2 and tok.sep == 3


def test_another_kind_of_tokenizer_is_refused_naming_the_field(tmp_path):
    path = find_encoder("minilm-l2").root / "tokenizer.json"
    spec = json.loads(path.read_text())
    spec["model"] = {"type": "BPE", "vocab": {}, "merges": []}
    bad = tmp_path / "tokenizer.json"
    bad.write_text(json.dumps(spec))
    with pytest.raises(ValueError, match=r"tokenizer.json: model.type is 'BPE'"):
        WordPiece(bad)
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(ValueError, match="broken.json: not a readable tokenizer file"):
        WordPiece(tmp_path / "broken.json")
