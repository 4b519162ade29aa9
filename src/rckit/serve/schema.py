"""What the HTTP API takes and gives, declared once: each request body is a pydantic model built
from the server's :class:`~rckit.serve.config.ServeConfig`, and both ``/openapi.json`` and the
checks come from it (``model_json_schema()`` states the rules that ``model_validate`` enforces).

``POST /v1/answer`` takes one of two bodies, :class:`OneQuestion` or :class:`SeveralQuestions` (the
schema's ``oneOf``); :meth:`Requests.parse_answer` is the one place that chooses between them.
``POST /v1/explain`` takes :class:`ExplainBody`, one question with the same fields and rules as
:class:`OneQuestion` (:meth:`Requests.parse_explain`). Every body may name the served model that
answers it (``model``, :func:`served`: one of the server's names, stated as the schema's ``enum``;
left out, the server's first model). A text field (:func:`text`) is checked by :func:`check_field`,
which asks the reader's rule (:func:`rckit.answering.reader.text_problem`) and the field's length;
the schema states the same rule as ``minLength``, ``pattern`` and ``maxLength`` (:data:`HAS_WORD`,
made by :func:`letter_or_digit`: the characters ``str.isalnum`` accepts, spelled as JSON Schema's
regular expressions read them). The answers' schema is :mod:`rckit.answering.answer`'s TypedDicts,
their ``Annotated`` descriptions carried over (:func:`model_of`). Each body's example for
``/docs`` stands beside it (:data:`ANSWER_EXAMPLE`, :data:`ASK_EXAMPLE`, :data:`EXPLAIN_EXAMPLE`,
:data:`LABEL_EXAMPLE`).

A refused request is an :class:`ApiError`: one sentence naming the field (:func:`explain`), for
the first mistake found in this order: the body is not a JSON object, a field is unknown,
neither or both of ``question`` and ``questions`` are given, then the fields in order, each one's
type before the rest (a list's length, then a text's content and length).
"""

from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any, ClassVar, NotRequired, Union, get_args, get_origin, get_type_hints, is_typeddict

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, create_model
from pydantic_core import PydanticCustomError

from rckit.answering import answer, explanation
from rckit.answering.texts import text_problem
from rckit.retrieval.collection import DEFAULT_PASSAGES
from rckit.serve.config import ServeConfig


def letter_or_digit() -> str:
    r"""The ``pattern`` of a text with a letter or digit in it, :func:`text_problem`'s rule
    (``str.isalnum``) as this Python decides it: one character class of every code point it
    accepts, spelled so that JSON Schema's ECMA-262 (with the ``u`` flag JSON Schema asks for),
    Python's ``re`` and Rust's ``regex`` read it alike: ASCII as itself, the rest of the Basic
    Multilingual Plane as ``\uXXXX``, the planes above it as the characters themselves (no escape
    for those is read by all three).

    Not ``[^\W_]``, which JSON Schema's tools read as an ASCII letter or digit (ECMA-262's ``\w``
    is ASCII), so that a question in Greek or Chinese broke the published schema; nor
    ``[\p{L}\p{N}]``, the same set on the code points this Python knows, but one that the
    validator may read with a newer Unicode than the server's, that Python's ``re`` cannot read,
    and that schemathesis approximates (Latin letters only) when it makes data a schema forbids."""
    runs, first = [], None
    for cp in range(sys.maxunicode + 2):
        if cp <= sys.maxunicode and chr(cp).isalnum():
            first = cp if first is None else first
        elif first is not None:
            runs.append((first, cp - 1))
            first = None

    def one(cp: int) -> str:
        return chr(cp) if cp < 0x80 or cp > 0xFFFF else f"\\u{cp:04X}"

    def run(lo: int, hi: int) -> str:
        return one(lo) if lo == hi else one(lo) + ("-" if hi > lo + 1 else "") + one(hi)

    return "[" + "".join(run(lo, hi) for lo, hi in runs) + "]"


MAX_DOCUMENT_CHARS = 500  # a label's document name
HAS_WORD = letter_or_digit()  # every text of a request must match it, as text_problem asks
RANGES = {
    "top_k": (1, 20),
    "max_answer_len": (1, 200),  # tokens; the decoder's cost grows with it
    "passages": (1, 50),  # passages the retriever gives the reader for one question of POST /v1/ask
    "steps": (1, 128),
}  # integrated gradients' steps for POST /v1/explain: (steps + 1) copies read, with gradients


class ApiError(Exception):
    """A request the server refuses: its HTTP status and what is wrong."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


# -- the pieces of a request body -------------------------------------------------------------


def whole_number(value):
    """JSON has one number type: ``2.0`` is the integer 2 (as JSON Schema's ``integer`` says);
    ``2.5``, ``"2"`` and ``true`` stay what they are and are refused."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def ranged(name: str) -> Any:
    """The integer field ``name`` within its :data:`RANGES`."""
    least, most = RANGES[name]
    return Annotated[int, Field(ge=least, le=most), BeforeValidator(whole_number)]


def check_field(text: str, max_chars: int, note: str = "") -> str:
    """``text`` if the reader can read it (:func:`text_problem`) and it has at most ``max_chars``
    characters, else a validation error saying what is wrong (:func:`explain` names the field)."""
    problem = text_problem(text)
    if problem is None and len(text) > max_chars:
        problem = f"has {len(text):,} characters; this server reads at most {max_chars:,}" + (
            f" ({note})" if note else ""
        )
    if problem:
        raise PydanticCustomError("text", "{problem}", {"problem": problem})
    return text


def not_served(name: str, models: tuple[str, ...]) -> str:
    """What is wrong with a ``model`` field (or query parameter) naming ``name``, not among ``models``."""
    return f"'model': {name[:40]!r} is not served here (served: {', '.join(models)})"


def check_model(name: str, models: tuple[str, ...]) -> str:
    """``name`` if it is one of the served ``models``, else a validation error listing them."""
    if name not in models:
        raise PydanticCustomError("served", "{problem}", {"problem": not_served(name, models)})
    return name


def served(models: tuple[str, ...]) -> tuple[Any, Any]:
    """The optional ``model`` field of every body: one of ``models``, the server's, checked by
    :func:`check_model` and stated in the schema by the same rule (``enum``); None: the first."""
    return (
        Annotated[
            str, AfterValidator(partial(check_model, models=models)), Field(json_schema_extra={"enum": list(models)})
        ]
        | None,
        Field(
            None,
            description=f"which served model answers: {', '.join(models)} (default: {models[0]}; "
            "GET /v1/models lists them)",
        ),
    )


def text(max_chars: int, what: str, note: str = "") -> Any:
    """A text field, checked by :func:`check_field` and stated in the schema by the same rule:
    at least one letter or digit (``minLength``, ``pattern``), at most ``max_chars`` characters."""
    return Annotated[
        str,
        AfterValidator(partial(check_field, max_chars=max_chars, note=note)),
        Field(
            description=f"{what}: at least one letter or digit, at most {max_chars:,} characters",
            json_schema_extra={"minLength": 1, "maxLength": max_chars, "pattern": HAS_WORD},
        ),
    ]


class Body(BaseModel):
    """A request body: its fields and nothing else, each of its JSON type (no ``"2"`` for 2). The
    bodies below are built from a server's config by :meth:`Requests.of`."""

    model_config = ConfigDict(extra="forbid", strict=True)


class OneQuestion(Body):
    """``POST /v1/answer`` with ``context`` and ``question``."""

    model_config = ConfigDict(title="one question")
    several: ClassVar[bool] = False  # the route reads `question`


class SeveralQuestions(Body):
    """``POST /v1/answer`` with ``context`` and ``questions``, a list."""

    model_config = ConfigDict(title="several questions")
    several: ClassVar[bool] = True  # the route reads `questions`


# Each body's example, shown beside its schema in /openapi.json and on /docs.
ANSWER_EXAMPLE = {
    "context": "The Eiffel Tower was completed in 1889 in Paris.",
    "question": "When was the Eiffel Tower completed?",
    "top_k": 3,
}


class AskBody(Body):
    """``POST /v1/ask``: one question, asked of every document of the server's index."""


ASK_EXAMPLE = {"question": "When was the Eiffel Tower completed?", "top_k": 3}


class ExplainBody(Body):
    """``POST /v1/explain``: one question about one context, its answer explained."""


EXPLAIN_EXAMPLE = {
    "context": "The Eiffel Tower was completed in 1889 in Paris.",
    "question": "When was the Eiffel Tower completed?",
    "steps": 32,
}


class LabelBody(Body):
    """``POST /v1/labels``: one question about a passage of a document, with its answer's text
    and where it starts in the passage (:mod:`rckit.serve.labels`)."""


LABEL_EXAMPLE = {
    "document": "manual.pdf",
    "context": "Press the red button to stop the pump.",
    "question": "What stops the pump?",
    "answer": "the red button",
    "answer_start": 6,
}


def answer_options() -> dict[str, Any]:
    """The fields both bodies of ``POST /v1/answer`` hold beside the context and the question(s)."""
    return {
        "top_k": (ranged("top_k"), Field(1, description="how many answers per question, best first")),
        "max_answer_len": (
            ranged("max_answer_len") | None,
            Field(None, description="longest answer in tokens (default: the model's own setting)"),
        ),
    }


ANSWER_FIELDS = ("context", "question", "questions", *answer_options(), "model")


def context_chars(config: ServeConfig, window: int, questions: int = 1) -> int:
    """The longest context a request of ``questions`` questions may send: the work limit
    (questions x windows) turned into a length a schema can state. A context of ``n`` characters
    has at most ``n`` tokens, so at most as many windows as ``n`` tokens make (``window`` tokens,
    the reader's default stride of ``window // 2`` apart); at most ``max_context_chars``."""
    stride = max(1, window // 2)
    return min(config.max_context_chars, window + (config.max_work // questions - 1) * stride)


@dataclass(frozen=True)
class Requests:
    """The request bodies of one server, built from its config, its readers' ``window`` (the
    smallest, where it serves several: the context limits hold for each) and the names of its
    models (``models``: the ``model`` field, none without them): their schemas
    (:meth:`answer_schema`, :meth:`ask_schema`) and their checks (:meth:`parse_answer`,
    :meth:`parse_ask`)."""

    config: ServeConfig
    one: type[OneQuestion]
    several: type[SeveralQuestions]
    ask: type[AskBody]
    explaining: type[ExplainBody]
    labelling: type[LabelBody]

    @classmethod
    def of(cls, config: ServeConfig, window: int, models: tuple[str, ...] = ()) -> Requests:
        one_chars, list_chars = context_chars(config, window), context_chars(config, window, config.max_questions)
        model = {"model": served(models)} if models else {}
        one = create_model(
            "OneQuestion",
            __base__=OneQuestion,
            __doc__=None,
            context=text(one_chars, "the passage to read"),
            question=text(config.max_question_chars, "one question"),
            **answer_options(),
            **model,
        )
        several = create_model(
            "SeveralQuestions",
            __base__=SeveralQuestions,
            __doc__=None,
            context=text(
                list_chars,
                "the passage to read (shorter than with one question: the model reads it once per question)",
                note=f"with 'questions'; one 'question' may ask about {one_chars:,}",
            ),
            questions=Annotated[
                list[text(config.max_question_chars, "a question")],
                Field(
                    min_length=1,
                    max_length=config.max_questions,
                    description="several questions about the same context",
                ),
            ],
            **answer_options(),
            **model,
        )
        ask = create_model(
            "AskBody",
            __base__=AskBody,
            __doc__=None,
            question=text(config.max_question_chars, "the question"),
            top_k=(ranged("top_k"), Field(1, description="how many answers, best first")),
            passages=(
                ranged("passages"),
                Field(DEFAULT_PASSAGES, description="how many passages the retriever gives the reader"),
            ),
            **model,
        )
        explaining = create_model(
            "ExplainBody",
            __base__=ExplainBody,
            __doc__=None,
            context=text(one_chars, "the passage to read"),
            question=text(config.max_question_chars, "one question"),
            max_answer_len=answer_options()["max_answer_len"],
            steps=(
                ranged("steps"),
                Field(
                    explanation.DEFAULT_STEPS,
                    description="integrated gradients' steps from "
                    "all-zero word vectors: the model reads steps + 1 copies, with gradients",
                ),
            ),
            **model,
        )
        labelling = create_model(
            "LabelBody",
            __base__=LabelBody,
            __doc__=None,
            document=text(MAX_DOCUMENT_CHARS, "the document the passage comes from (the SQuAD article's title)"),
            context=text(config.max_context_chars, "the passage"),
            question=text(config.max_question_chars, "the question"),
            answer=text(config.max_context_chars, "the answer: the passage's text from answer_start"),
            answer_start=(
                Annotated[int, Field(ge=0), BeforeValidator(whole_number)],
                Field(description="where the answer starts in the passage, in characters (Unicode code points)"),
            ),
        )
        return cls(config, one, several, ask, explaining, labelling)

    def limits(self) -> str:
        """The limits of a whole request, for a body's description."""
        limit = f"the whole body at most {self.config.max_body_bytes:,} bytes (413 above)"
        if self.config.request_timeout:
            limit += f", each request read within {self.config.request_timeout:g} s (503 after)"
        return limit

    def answer_schema(self) -> dict:
        """The JSON schema of ``POST /v1/answer``'s body: every rule :meth:`parse_answer` enforces."""
        return {
            "oneOf": [self.one.model_json_schema(), self.several.model_json_schema()],
            "description": f"One context and `question` or `questions`; {self.limits()}",
        }

    def explain_schema(self) -> dict:
        """The JSON schema of ``POST /v1/explain``'s body: every rule :meth:`parse_explain` enforces."""
        return {
            **self.explaining.model_json_schema(),
            "description": f"One context and one `question` (no `questions`); {self.limits()}",
        }

    def ask_schema(self) -> dict:
        """The JSON schema of ``POST /v1/ask``'s body: every rule :meth:`parse_ask` enforces."""
        return {
            **self.ask.model_json_schema(),
            "description": f"One question; the whole body at most {self.config.max_body_bytes:,} bytes (413 above)",
        }

    def parse_answer(self, body: bytes) -> OneQuestion | SeveralQuestions:
        """The checked ``POST /v1/answer`` request, or an :class:`ApiError` naming what is wrong.

        The schema's ``oneOf``, decided here: ``question`` (one) or ``questions`` (a list), not
        both; a field given as null counts as not given."""
        data = json_object(body, '{"context": "...", "question": "..."}')
        data = {k: v for k, v in data.items() if v is not None or k not in ("question", "questions")}
        for name in data:
            if name not in ANSWER_FIELDS:
                raise ApiError(422, unknown_field(name, ANSWER_FIELDS))
        if "question" not in data and "questions" not in data:
            raise ApiError(422, "'question' (one question) or 'questions' (a list of them) is required")
        if "question" in data and "questions" in data:
            raise ApiError(422, "give 'question' or 'questions', not both")
        return validated(self.one if "question" in data else self.several, data)

    def parse_explain(self, body: bytes) -> ExplainBody:
        """The checked ``POST /v1/explain`` request, or an :class:`ApiError` naming what is wrong:
        :meth:`parse_answer`'s checks and messages for one question; ``questions`` is refused."""
        data = json_object(body, '{"context": "...", "question": "..."}')
        data = {k: v for k, v in data.items() if v is not None or k != "question"}
        if "questions" in data:
            raise ApiError(422, "'questions': POST /v1/explain explains one question; send it as 'question'")
        return validated(self.explaining, data)

    def label_schema(self) -> dict:
        """The JSON schema of ``POST /v1/labels``' body: every rule :meth:`parse_label` enforces."""
        return {**self.labelling.model_json_schema(), "description": f"One label; {self.limits()}"}

    def parse_label(self, body: bytes) -> LabelBody:
        """The checked ``POST /v1/labels`` request, or an :class:`ApiError` naming what is wrong."""
        like = '{"document": "...", "context": "...", "question": "...", "answer": "...", "answer_start": 0}'
        return validated(self.labelling, json_object(body, like))

    def parse_ask(self, body: bytes) -> AskBody:
        """The checked ``POST /v1/ask`` request, or an :class:`ApiError` naming what is wrong."""
        return validated(self.ask, json_object(body, '{"question": "..."}'))


def json_object(body: bytes, like: str) -> dict:
    """The body as a JSON object, or an :class:`ApiError` (``like``: an example shown in the message)."""
    if not body.strip():
        raise ApiError(400, f"the body is empty: send JSON like {like}")
    try:
        data = json.loads(body)
    except UnicodeDecodeError:
        raise ApiError(400, "the body is not UTF-8 text") from None
    except ValueError as e:
        raise ApiError(400, f"the body is not valid JSON: {e}") from None
    except RecursionError:
        raise ApiError(400, "the body is JSON nested too deeply to read") from None
    if not isinstance(data, dict):
        raise ApiError(422, f"the body must be a JSON object like {like}, not {json_type(data)}")
    return data


def validated(model: type[Body], data: dict) -> Any:
    """``data`` as a ``model``, or a 422 :class:`ApiError` for its first mistake (the order of the
    module docstring: a field's type before a list's length, before a text's content)."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        errors = sorted(e.errors(), key=lambda err: {"too_short": 1, "too_long": 1, "text": 2}.get(err["type"], 0))
        raise ApiError(422, error_sentence(errors[0], tuple(model.model_fields))) from None


def error_sentence(err: dict, fields: tuple[str, ...] = ANSWER_FIELDS) -> str:
    """One sentence for one of pydantic's validation errors, naming the field (``fields``: the
    body's, listed for an unknown one)."""
    loc = [str(p) for p in err.get("loc", ()) if p != "body"]
    field = "".join(f"[{p}]" if p.isdigit() else (f".{p}" if i else p) for i, p in enumerate(loc)) or "the body"
    kind, given, ctx = err.get("type", ""), err.get("input"), err.get("ctx") or {}
    bounds = RANGES.get(field)
    if kind == "missing":
        return f"'{field}' is required"
    if kind == "extra_forbidden":
        return unknown_field(field, fields)
    if kind == "text":
        return f"'{field}' {ctx['problem']}"
    if kind == "served":
        return ctx["problem"]
    if kind == "string_type":
        return f"'{field}' must be a string, not {json_type(given)}"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"'{field}' must be an integer, not {json_type(given)}"
    if kind == "list_type":
        return f"'{field}' must be a list of strings, not {json_type(given)}"
    if kind == "too_short" and not given:
        return f"'{field}' is an empty list"
    if kind == "too_long":
        return (
            f"'{field}' has {ctx['actual_length']} questions; this server takes at most {ctx['max_length']} "
            "in one request"
        )
    if kind in ("greater_than_equal", "less_than_equal") and bounds:
        return f"'{field}' must be between {bounds[0]} and {bounds[1]}, not {given}"
    if kind == "model_type" or kind == "dict_type":
        return f"'{field}' must be a JSON object, not {json_type(given)}"
    detail = err.get("msg", "is not valid")
    return f"'{field}': {detail}" + (f" ({ctx})" if ctx and not bounds else "")


def unknown_field(name: str, fields: tuple[str, ...]) -> str:
    return f"unknown field '{name}' (the fields are {', '.join(fields)})"


def json_type(value) -> str:
    """How JSON would call ``value``'s type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


# -- the answers --------------------------------------------------------------------------------


def model_of(typed: type) -> type[BaseModel]:
    """A pydantic model of the TypedDict ``typed``: the same fields, each with the description its
    ``Annotated`` metadata carries, nested TypedDicts likewise (pydantic takes ``typing.TypedDict``
    only from Python 3.12, and ignores a plain string in ``Annotated``)."""
    fields = {}
    for name, hint in get_type_hints(typed, include_extras=True).items():
        optional = get_origin(hint) is NotRequired  # a key some of them carry: not required, null where absent
        hint = get_args(hint)[0] if optional else hint
        kind, *extras = get_args(hint) if get_origin(hint) is Annotated else (hint,)
        description = next((x for x in extras if isinstance(x, str)), None)
        fields[name] = (
            with_models(kind),
            Field(None, description=description) if optional else Field(description=description),
        )
    return create_model(typed.__name__, __doc__=typed.__doc__, **fields)


def with_models(kind: Any) -> Any:
    """``kind`` with each TypedDict in it (alone or in a union) as its :func:`model_of`."""
    if is_typeddict(kind):
        return RESPONSE_MODELS.setdefault(kind, model_of(kind))
    if get_origin(kind) in (Union, types.UnionType):
        return Union[tuple(with_models(k) for k in get_args(kind))]  # noqa: UP007 (built at run time)
    if get_origin(kind) is list:
        return list[with_models(get_args(kind)[0])]
    return kind


RESPONSE_MODELS: dict[type, type[BaseModel]] = {}  # each TypedDict's pydantic model, made once
Answer = with_models(answer.Answer)
FoundAnswer = with_models(answer.FoundAnswer)
Explanation = with_models(explanation.Explanation)


class AnswerResponse(BaseModel):
    answers: list[Answer] | list[list[Answer]] = Field(
        description="for `question`: its answers, best first; for `questions`: one such list per question"
    )
    model: str
    ms: float = Field(description="time spent in the server, milliseconds")


class AskResponse(BaseModel):
    answers: list[FoundAnswer] = Field(
        description='best first; the answer "" where the reader found no answer in any passage it read'
    )
    model: str
    ms: float


class ExplainResponse(BaseModel):
    explanation: Explanation = Field(
        description="why the model gives its answer: the window read, the start and "
        "end probabilities, the attention, DCN's decoder iterations, each word's "
        "saliency (rckit.answering.explanation)"
    )
    model: str
    ms: float = Field(description="time spent in the server, milliseconds")


class ErrorResponse(BaseModel):
    error: str


class ServedModel(BaseModel):
    name: str = Field(
        description="what a request's `model` names it: an installed model's name, else its architecture's"
    )
    model: str = Field(description="its architecture (qanet, dcn, dcn_plus, deep_lstm_reader, ...)")
    file: str | None = Field(description="the file or run it was loaded from")
    backend: str | None = Field(description="what computes it: onnxruntime or torch")
    default: bool = Field(description="whether it answers the requests that name no model")
    parameters: int | None = Field(description="its trained parameters")
    window: int = Field(description="the most context tokens it reads at once")
    dev_score: dict[str, Any] | None = Field(description="the F1 on the dev questions it was chosen by in training")
    scores: list[dict[str, Any]] = Field(
        description="its recorded scores (`rckit evaluate FILE --record`): exact "
        "match and F1 on a whole file, named with its checksum"
    )
    explains: bool = Field(
        description="whether `POST /v1/explain` explains its answers (rckit's own reader does not yet: 501)"
    )


class ModelsResponse(BaseModel):
    models: list[ServedModel] = Field(description="the served models, the default first")
