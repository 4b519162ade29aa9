"""What a context or question must have to be read: the one rule for every reader, ``rckit predict`` and the API."""

from __future__ import annotations


def text_problem(text: str) -> str | None:
    """What leaves a context or question with nothing to read or ask, or None: ``is empty``,
    or ``has no letter or digit ...``. The one rule for ``Reader``, ``rckit predict`` and the API,
    each of which names the field in its own way."""
    if not text.strip():
        return "is empty"
    if not any(ch.isalnum() for ch in text):
        return f"has no letter or digit, only punctuation ({text.strip()[:20]!r})"
    return None


def check_text(name: str, text: str) -> None:
    """Refuse a context or question that is not a string or has nothing to read (:func:`text_problem`)."""
    if not isinstance(text, str):
        raise ValueError(f"the {name} should be a string, got {type(text).__name__}")
    problem = text_problem(text)
    if problem:
        raise ValueError(f"the {name} {problem}: nothing to answer")


def check_request(
    pairs: list[tuple[str, str]], top_k: int, max_answer_len: int | None, default: int
) -> tuple[int, int]:
    """``(top_k, max_answer_len)`` of a request checked (``max_answer_len`` None: ``default``), and
    the texts of its ``pairs`` too: a ValueError names the pair."""
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    max_answer_len = default if max_answer_len is None else int(max_answer_len)
    if max_answer_len < 1:
        raise ValueError(f"max_answer_len must be >= 1, got {max_answer_len}")
    for i, (context, question) in enumerate(pairs):
        where = "" if len(pairs) == 1 else f" (pair {i})"
        try:
            check_text("context", context)
            check_text("question", question)
        except ValueError as e:
            raise ValueError(f"{e}{where}") from None
    return top_k, max_answer_len
