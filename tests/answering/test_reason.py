"""An abstention's reason (:mod:`rckit.answering.reason`): the passage's sentence nearest to the
question, a person's way to check that the text does not say; and how it is shown."""

from __future__ import annotations

from rckit.answering.answer import shown, span
from rckit.answering.reason import abstention, nearest_sentence

STONE = (
    "The Rosetta Stone was found in 1799 by French soldiers.  Jean-François Champollion deciphered "
    "its hieroglyphs in 1822. The stone is in the British Museum, where the stone is seen by millions."
)


def test_the_nearest_sentence_shares_the_questions_rarest_words():
    got = nearest_sentence(STONE, "Who deciphered the hieroglyphs of the stone?")
    assert got["text"] == "Jean-François Champollion deciphered its hieroglyphs in 1822."
    assert STONE[got["start"] : got["end"]] == got["text"]  # offsets into the passage, no whitespace around
    # "stone" is in two sentences, "museum" in one: the rarer word decides
    assert nearest_sentence(STONE, "Which museum holds the stone?")["text"].startswith("The stone is in the British")
    # a tie goes to the earlier sentence
    assert nearest_sentence(STONE, "What about the stone?")["start"] == 0


def test_no_sentence_is_given_where_none_shares_a_word_with_the_question():
    assert nearest_sentence(STONE, "Who won the 2018 World Cup?") is None
    assert nearest_sentence(STONE, "What is it?") is None  # stopwords only
    assert nearest_sentence("", "Who found it?") is None


def test_an_abstention_carries_its_reason_and_says_it_in_words():
    said = abstention(0.9, STONE, "When did soldiers lose the stone?")
    assert said["answer"] == "" and said["start"] is None and said["score"] == 0.9
    assert said["reason"]["text"] == "The Rosetta Stone was found in 1799 by French soldiers."
    guess = span(STONE, 31, 35, 0.2, 0.9)
    assert shown(said, [guess]) == (
        '(no answer in the text; nearest: "The Rosetta Stone was found in 1799 by French soldiers."; best guess: 1799)'
    )
    assert shown(abstention(0.9, STONE, "Who won the World Cup?")) == "(no answer in the text)"
