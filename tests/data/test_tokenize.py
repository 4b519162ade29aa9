import random

import pytest

from rckit.data.squad import read_squad
from rckit.data.tokenize import char_to_token_span, token_to_char_span, tokenize


def test_rules():
    toks, offs = tokenize("I don't know; it's 1,000.5 dollars in 2010. B2B state-of-the-art 1990s can’t")
    assert toks == [
        "I", "do", "n't", "know", ";", "it", "'s", "1,000.5", "dollars", "in", "2010", ".", "B2B",
        "state", "-", "of", "-", "the", "-", "art", "1990s", "ca", "n’t",
    ]  # fmt: skip


def test_offsets_reproduce_tokens_on_unicode_text():
    text = "Zürich  —  “Beyoncé” naïve\tcafé 東京 2½ ½ e\u0301"
    toks, offs = tokenize(text)
    assert [text[s:e] for s, e in offs] == toks
    assert all(not text[s:e].isspace() for s, e in offs)
    # Nothing but whitespace is lost between tokens.
    gaps = [text[e:s] for (_, e), (s, _) in zip(offs, offs[1:])]
    assert all(g.strip() == "" for g in gaps)


def test_span_round_trip_random():
    rng = random.Random(0)
    text = "The quick-brown fox's 3.5 jumps (over) the lazy dog, twice; then rests."
    _, offs = tokenize(text)
    for _ in range(200):
        i = rng.randrange(len(offs))
        j = rng.randrange(i, len(offs))
        s, e = token_to_char_span(offs, i, j)
        assert char_to_token_span(offs, s, e) == (i, j, True)


def test_inexact_and_empty_spans():
    text = "in 20-18 win"
    _, offs = tokenize(text)  # in 20 - 18 win
    assert char_to_token_span(offs, 7, 8) == (3, 3, False)  # "8" inside "18"
    assert char_to_token_span(offs, 2, 3) is None  # only whitespace
    assert char_to_token_span(offs, 0, 12)[2] is True


@pytest.mark.realdata
def test_dev_alignment_at_least_99_5_percent(shared_data):
    ds = read_squad(shared_data / "squad-v1.1" / "dev-v1.1.json.gz")
    cache = {}
    total = exact = 0
    for ex in ds.examples:
        if ex.context_index not in cache:
            cache[ex.context_index] = tokenize(ex.context)[1]
        offs = cache[ex.context_index]
        for a in ex.answers:
            total += 1
            span = char_to_token_span(offs, a.start, a.end)
            exact += bool(span and span[2])
    assert total == 34726
    assert exact / total >= 0.995, exact / total


def test_cjk_scripts_split_per_character_with_offsets():
    cases = {
        "北京在2008年举办了奥运会。": ["北", "京", "在", "2008", "年", "举", "办", "了", "奥", "运", "会", "。"],
        "東京タワーは1958年に完成": ["東", "京", "タ", "ワ", "ー", "は", "1958", "年", "に", "完", "成"],
        "서울은 한국의 수도": ["서", "울", "은", "한", "국", "의", "수", "도"],
        "ＡＢ１２！": ["Ａ", "Ｂ", "１", "２", "！"],
        "Beijing (北京) doesn't": ["Beijing", "(", "北", "京", ")", "does", "n't"],
        "か\u3099き": ["か\u3099", "き"],  # a combining voicing mark stays with its kana
    }
    for text, want in cases.items():
        toks, offs = tokenize(text)
        assert toks == want, text
        assert [text[s:e] for s, e in offs] == toks


def test_a_span_can_end_inside_cjk_text():
    text = "首都是北京。"
    _, offs = tokenize(text)
    assert char_to_token_span(offs, 3, 5) == (3, 4, True)  # 北京


@pytest.mark.realdata
def test_latin_text_tokenizes_as_before_cjk_splitting(shared_data):
    """Only texts holding CJK characters changed from the first tokenizer (ptb-regex-1)."""
    import re

    from rckit.data.tokenize import _CJK

    v1 = re.compile(
        r"\d+(?:[.,]\d+)*(?![^\W_])|[^\W_]+?(?=n['\u2019]t\b)|n['\u2019]t\b|['\u2019](?:s|re|ve|ll|d|m)\b"
        r"|[^\W_]+|[^\w\s]|_",
        re.IGNORECASE,
    )
    cjk = re.compile(f"[{_CJK}]")
    ds = read_squad(shared_data / "squad-v1.1" / "dev-v1.1.json.gz")
    changed = [
        t
        for t in ds.contexts + [ex.question for ex in ds.examples]
        if [m.span() for m in v1.finditer(t)] != tokenize(t)[1]
    ]
    assert changed and all(cjk.search(t) for t in changed)
