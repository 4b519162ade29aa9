"""What an answer is, declared once: :class:`Answer` (a span of the text given, or no answer)
and :class:`FoundAnswer` (an answer found in a collection of documents, with where it is).

Answers are JSON-shaped dicts, as the field's tools give them (transformers' question-answering
pipeline: ``{"answer", "score", "start", "end"}``; an abstention is the answer ``""`` as in the
official SQuAD v2.0 prediction files), typed here as ``TypedDict``s so that the Reader, the
collection, the command line and the server's schema (:mod:`rckit.serve.schema`) name the same
fields. Each field's description is carried in its ``Annotated`` metadata, which is what the
server's OpenAPI schema states. :func:`span` and :func:`no_answer` make them.
"""

from __future__ import annotations

import json
from typing import Annotated, NotRequired, TypedDict


class Reason(TypedDict):
    """Where the text comes nearest to what a question asks (:mod:`rckit.answering.reason`)."""

    text: Annotated[str, "the sentence, equal to context[start:end]"]
    start: Annotated[int, "character offset of the sentence in the context"]
    end: Annotated[int, "character offset just past the sentence"]


class Answer(TypedDict):
    """One answer to a question about a text."""

    answer: Annotated[
        str, 'the answer text, equal to context[start:end]; "" where the model says the context holds no answer'
    ]
    score: Annotated[float | None, 'the model\'s probability of this span (of no answer, for "")']
    start: Annotated[int | None, "character offset of the answer in the context; null for no answer"]
    end: Annotated[int | None, "character offset just past the answer; null for no answer"]
    no_answer_probability: Annotated[
        float | None,
        "the model's probability that the context holds no answer; "
        "null for a model that cannot abstain (trained on SQuAD v1.1 "
        "alone)",
    ]
    reason: NotRequired[
        Annotated[
            Reason | None,
            'on an abstention ("") only: the sentence of the context nearest to the question (the '
            "most of its words), for a person to check that the text does not say; null where no "
            "sentence shares a word with the question",
        ]
    ]


class Passage(TypedDict):
    """The passage of a document an answer was read in."""

    id: Annotated[int, "the passage's row in the collection"]
    start: Annotated[int, "character offset of the passage in its document"]
    end: Annotated[int, "character offset just past the passage"]
    text: Annotated[str, "the passage's text"]


class FoundAnswer(Answer):
    """An answer found in a collection of documents (:mod:`rckit.retrieval.collection`): ``start``
    and ``end`` are offsets into its document, ``score`` the ranking score."""

    source: Annotated[str | None, "the file the answer is in; null for no answer"]
    key: Annotated[
        str | None,
        "the record (JSON lines) or paragraph (SQuAD JSON, article/paragraph) of that file; null for a text file",
    ]
    title: Annotated[str | None, "the document's title"]
    page: Annotated[int | None, "the page the answer is on (PDF, counted from 1); null for a document without pages"]
    section: Annotated[
        str | None,
        "the heading of the section the answer is in (HTML, Markdown, reStructuredText, "
        "Word, EPUB); null where there is none",
    ]
    passage: Annotated[Passage | None, "the passage the answer was read in"]
    reader_score: Annotated[float | None, "the reader's probability of the span in its passage"]
    retriever_score: Annotated[float | None, "the passage's BM25 score"]


def span(context: str, start: int, end: int, score: float, p_null: float | None) -> Answer:
    """The answer ``context[start:end]`` (character offsets), with the model's probability of it."""
    return {"answer": context[start:end], "score": score, "start": start, "end": end, "no_answer_probability": p_null}


def no_answer(p_null: float | None) -> Answer:
    """The abstention: the text holds no answer, with the model's probability of that (a reader's
    own comes with its reason: :func:`rckit.answering.reason.abstention`)."""
    return {"answer": "", "score": p_null, "start": None, "end": None, "no_answer_probability": p_null}


def shown(answer: Answer, after: list[Answer] | None = None) -> str:
    """An answer as text for a person: the span, or that the text holds none (with the best span
    of ``after``, the answers that follow an abstention, as the reader's guess)."""
    if answer["start"] is not None:
        return answer["answer"]
    said = ["no answer in the text"]
    if answer.get("reason"):
        said.append(f"nearest: {json.dumps(answer['reason']['text'], ensure_ascii=False)}")
    guess = next((a for a in after or [] if a["start"] is not None), None)
    if guess is not None:
        said.append(f"best guess: {guess['answer']}")
    return f"({'; '.join(said)})"
