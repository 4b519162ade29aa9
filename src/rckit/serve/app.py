"""The HTTP side of ``rckit serve``: a JSON API over a :class:`rckit.answering.reader.Reader`, and a page.

``POST /v1/answer`` takes ``{"context": ..., "question": ...}`` (or ``"questions": [...]``, with
optional ``"top_k"`` and ``"max_answer_len"``) and returns ``{"answers": ..., "model": ...,
"ms": ...}``; ``GET /v1/model`` describes the model, ``GET /health`` says the server is up,
``/docs`` is FastAPI's OpenAPI page and ``/`` a page to ask questions from a browser. Started with
an index of documents (``rckit serve --index INDEX``), ``POST /v1/ask`` takes ``{"question": ...}``
(optional ``"top_k"``, ``"passages"``) and answers from every document (retrieve, then read).

Every mistake in a request gets one JSON line ``{"error": "what is wrong, naming the field"}``
and a 4xx status, and the server goes on serving: 400 for a body that is not JSON, 413 for a
body over ``max_body_bytes`` (refused from its Content-Length, or while it streams in, without
reading more), 422 for a missing or mistyped field, an empty context or question, too many
questions or a ``top_k`` out of range. A failure of the model itself is a 500 for the requests
of that batch. Questions of concurrent requests are answered together (:mod:`.batcher`).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from rckit.retrieval.store import PassageIndex
from rckit.retrieval.collection import DEFAULT_PASSAGES, DEFAULT_RETRIEVER_WEIGHT, rank
from rckit.answering.reader import Reader, text_problem
from rckit.model_files.source import open_model
from rckit.serve.batcher import Batcher, RequestTimeout, TooMuchWork

STATIC = Path(__file__).resolve().parent / "static"
TOP_K = (1, 20)
MAX_ANSWER_LEN = (1, 200)  # tokens; the decoder's cost grows with it
PASSAGES = (1, 50)  # passages the retriever gives the reader for one question of POST /v1/ask
HAS_WORD = r"[^\W_]"  # a letter or digit (Python's re: str.isalnum), what text_problem asks of every text


@dataclass(frozen=True)
class Limits:
    """What one request may ask, as the server enforces it and its OpenAPI schema states it.

    ``work`` bounds the model's reading for one request: questions x windows of the context. A
    context of ``n`` characters has at most ``n`` tokens, so at most ``windows(n)`` windows; the
    character limits are the work limit turned into lengths a schema can state (one question:
    a long document; a list of questions: a context of ``work / questions`` windows). The
    default ``body_bytes`` holds a body within the default lengths however its characters are
    escaped (12 bytes a character at most: an escaped surrogate pair).
    """

    body_bytes: int
    questions: int
    question_chars: int
    context_chars: int  # with one question
    context_chars_per_list: int  # with a list of questions
    work: int
    seconds: float | None  # time limit per request

    @classmethod
    def derive(cls, window: int, max_body_bytes: int = 4_000_000, max_questions: int = 64,
               max_question_chars: int = 1_000, max_context_chars: int = 200_000, max_work: int = 2_048,
               timeout_s: float | None = 60.0) -> "Limits":
        stride = max(1, window // 2)  # the reader's default
        if max_work < max_questions:
            raise ValueError(f"max_work ({max_work}) must be at least max_questions ({max_questions}): "
                             "a list of questions reads each on at least one window")

        def chars_for(windows: int) -> int:  # the longest context whose windows fit
            return min(max_context_chars, window + (windows - 1) * stride)

        one, many = chars_for(max_work), chars_for(max_work // max_questions)
        return cls(max_body_bytes, max_questions, max_question_chars, one, many, max_work, timeout_s)

    def ask_schema(self) -> dict:
        """The JSON schema of ``POST /v1/ask``'s body: every rule :func:`parse_ask` enforces."""
        return {"type": "object", "additionalProperties": False, "required": ["question"], "properties": {
            "question": {"type": "string", "minLength": 1, "maxLength": self.question_chars, "pattern": HAS_WORD,
                         "description": f"the question: at least one letter or digit, at most "
                                        f"{self.question_chars:,} characters"},
            "top_k": {"type": "integer", "minimum": TOP_K[0], "maximum": TOP_K[1], "default": 1,
                      "description": "how many answers, best first"},
            "passages": {"type": "integer", "minimum": PASSAGES[0], "maximum": PASSAGES[1],
                         "default": DEFAULT_PASSAGES,
                         "description": "how many passages the retriever gives the reader"}},
            "description": f"One question; the whole body at most {self.body_bytes:,} bytes (413 above)"}

    def request_schema(self) -> dict:
        """The JSON schema of ``POST /v1/answer``'s body: every rule :func:`parse_request` enforces."""
        def text(max_chars: int, what: str) -> dict:
            return {"type": "string", "minLength": 1, "maxLength": max_chars, "pattern": HAS_WORD,
                    "description": f"{what}: at least one letter or digit, at most {max_chars:,} characters"}

        common = {"top_k": {"type": "integer", "minimum": TOP_K[0], "maximum": TOP_K[1], "default": 1,
                            "description": "how many answers per question, best first"},
                  "max_answer_len": {"anyOf": [{"type": "integer", "minimum": MAX_ANSWER_LEN[0],
                                                "maximum": MAX_ANSWER_LEN[1]}, {"type": "null"}],
                                     "description": "longest answer in tokens (default: the model's own setting)"}}
        one = {"type": "object", "title": "one question", "additionalProperties": False,
               "required": ["context", "question"],
               "properties": {"context": text(self.context_chars, "the passage to read"),
                              "question": text(self.question_chars, "one question"), **common}}
        many = {"type": "object", "title": "several questions", "additionalProperties": False,
                "required": ["context", "questions"],
                "properties": {"context": text(self.context_chars_per_list, "the passage to read (shorter than "
                                               "with one question: the model reads it once per question)"),
                               "questions": {"type": "array", "minItems": 1, "maxItems": self.questions,
                                             "items": text(self.question_chars, "a question"),
                                             "description": "several questions about the same context"},
                               **common}}
        return {"oneOf": [one, many], "description": (
            f"One context and `question` or `questions`; the whole body at most {self.body_bytes:,} bytes "
            f"(413 above), each request read within {self.seconds:g} s (503 after)" if self.seconds else
            f"One context and `question` or `questions`; the whole body at most {self.body_bytes:,} bytes (413 above)")}


def whole_number(value):
    """JSON has one number type: ``2.0`` is the integer 2 (as JSON Schema's ``integer`` says);
    ``2.5``, ``"2"`` and ``true`` stay what they are and are refused."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


Integer = Annotated[int, BeforeValidator(whole_number)]


class AnswerRequest(BaseModel):
    """The body of ``POST /v1/answer``: one context and either one question or a list of them."""

    model_config = ConfigDict(extra="forbid", strict=True)

    context: str = Field(description="the passage to read")
    question: str | None = Field(None, description="one question (or give `questions`)")
    questions: list[str] | None = Field(None, description="several questions about the same context")
    top_k: Integer = Field(1, ge=TOP_K[0], le=TOP_K[1], description="how many answers per question, best first")
    max_answer_len: Integer | None = Field(None, ge=MAX_ANSWER_LEN[0], le=MAX_ANSWER_LEN[1],
                                       description="longest answer in tokens (default: the model's own setting)")


class Answer(BaseModel):
    answer: str = Field(description="the answer text, equal to context[start:end]; \"\" where the model "
                        "says the context holds no answer")
    score: float = Field(description="the model's probability of this span (of no answer, for \"\")")
    start: int | None = Field(description="character offset of the answer in the context; null for no answer")
    end: int | None = Field(description="character offset just past the answer; null for no answer")
    no_answer_probability: float | None = Field(
        description="the model's probability that the context holds no answer; null for a model that cannot "
        "abstain (trained on SQuAD v1.1 alone)")


class AnswerResponse(BaseModel):
    answers: list[Answer] | list[list[Answer]] = Field(
        description="for `question`: its answers, best first; for `questions`: one such list per question")
    model: str
    ms: float = Field(description="time spent in the server, milliseconds")


class AskRequest(BaseModel):
    """The body of ``POST /v1/ask``: one question, asked of every document of the server's index."""

    model_config = ConfigDict(extra="forbid", strict=True)

    question: str = Field(description="the question")
    top_k: Integer = Field(1, ge=TOP_K[0], le=TOP_K[1], description="how many answers, best first")
    passages: Integer = Field(DEFAULT_PASSAGES, ge=PASSAGES[0], le=PASSAGES[1],
                              description="how many passages the retriever gives the reader")


class Passage(BaseModel):
    id: int
    start: int = Field(description="character offset of the passage in its document")
    end: int
    text: str


class FoundAnswer(Answer):
    score: float | None = Field(description="the ranking score: the reader's probability of the span in its "
                                "passage, weighed by the passage's BM25 rank; for \"\", the probability of no "
                                "answer, null where no passage matched the question or the model cannot abstain")
    source: str | None = Field(description="the file the answer is in; null for no answer")
    key: str | None = Field(description="the record (JSON lines) or paragraph (SQuAD JSON, article/paragraph) of "
                            "that file; null for a text file")
    title: str | None
    passage: Passage | None = Field(description="the passage the answer was read in")
    reader_score: float | None
    retriever_score: float | None = Field(description="the passage's BM25 score")
    start: int | None = Field(description="character offset of the answer in its document (a text file: the file)")
    end: int | None


class AskResponse(BaseModel):
    answers: list[FoundAnswer] = Field(description="best first; the answer \"\" where the reader found no answer "
                                       "in any passage it read")
    model: str
    ms: float


class ErrorResponse(BaseModel):
    error: str


class ApiError(Exception):
    """A request the server refuses: its HTTP status and what is wrong."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def model_name(info: dict) -> str:
    name = info.get("model") or info.get("name") or "unknown"
    return name if isinstance(name, str) else json.dumps(name)


def check_options(options: dict) -> None:
    """Refuse a serving setting out of range, naming it (before the model loads)."""
    for name, least in (("max_batch", 1), ("batch_window_ms", 0), ("max_body_bytes", 1), ("max_questions", 1),
                        ("max_question_chars", 1), ("max_context_chars", 1), ("max_work", 1), ("max_tokens", 1)):
        if name in options and options[name] < least:
            raise ValueError(f"{name} must be at least {least}, not {options[name]}")
    if options.get("request_timeout_s") is not None and options["request_timeout_s"] <= 0:
        raise ValueError(f"request_timeout_s must be above 0, not {options['request_timeout_s']}")
    if options.get("index") is not None and not Path(options["index"]).is_file():
        raise FileNotFoundError(f"{options['index']}: no such index (make one with `rckit index PATH... --out INDEX`)")


def create_app(reader, max_batch: int = 32, batch_window_ms: float = 2, max_body_bytes: int = 4_000_000,
               max_questions: int = 64, max_question_chars: int = 1_000, max_context_chars: int = 200_000,
               max_work: int = 2_048, max_tokens: int = 4_096, request_timeout_s: float | None = 60.0,
               policy: str = "fair", index: str | Path | None = None,
               retriever_weight: float = DEFAULT_RETRIEVER_WEIGHT, model_workers: int = 1) -> FastAPI:
    """A FastAPI app answering with ``reader`` (a :class:`~rckit.answering.reader.Reader`, or anything
    with its ``plan``, ``read``, ``window`` and ``info``); the limits are :class:`Limits`', the
    scheduling :class:`~rckit.serve.batcher.Batcher`'s (``model_workers``: its ``workers``). With ``index`` (a file of ``rckit index``)
    ``POST /v1/ask`` asks its documents (:mod:`rckit.retrieval.collection`), their passages read by
    the same batcher as ``/v1/answer``'s requests."""
    check_options(dict(max_batch=max_batch, batch_window_ms=batch_window_ms, max_body_bytes=max_body_bytes,
                       max_questions=max_questions, max_question_chars=max_question_chars,
                       max_context_chars=max_context_chars, max_work=max_work, max_tokens=max_tokens,
                       request_timeout_s=request_timeout_s, index=index))
    limits = Limits.derive(reader.window, max_body_bytes, max_questions, max_question_chars, max_context_chars,
                           max_work, request_timeout_s)
    batcher = Batcher(reader, max_batch=max_batch, window_ms=batch_window_ms, max_tokens=max_tokens,
                      max_work=max_work, timeout_s=request_timeout_s, policy=policy, workers=model_workers)
    info = reader.info
    name = model_name(info)
    index_file = index  # (the name `index` goes to the page's route below)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # Opened here, in the event loop's thread, where /v1/ask searches it (SQLite keeps a
        # connection to the thread that made it).
        app.state.index = PassageIndex(index_file) if index_file is not None else None
        batcher.start()
        yield
        await batcher.stop()
        if app.state.index is not None:
            app.state.index.close()

    app = FastAPI(title="rckit", summary="Answers questions about a passage with a reading-comprehension model.",
                  lifespan=lifespan)
    app.state.batcher = batcher
    app.state.limits = limits
    errors = {status: {"model": ErrorResponse, "description": text} for status, text in (
        (400, "the body is not JSON"), (413, f"the body is over {limits.body_bytes:,} bytes"),
        (422, "a field is missing, of the wrong type, empty, too long or out of range"),
        (500, "the model failed"), (503, "the request was not answered within the server's time limit"))}

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, e: ApiError):
        return error(e.status, e.message)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException):
        if e.status_code == 404:
            return error(404, f"no such page: {request.url.path}")
        if e.status_code == 405:  # e.headers has Allow, which RFC 9110 asks of a 405
            return error(405, f"{request.method} is not allowed on {request.url.path}", e.headers)
        return error(e.status_code, str(e.detail), e.headers)

    @app.exception_handler(Exception)
    async def _bug(request: Request, e: Exception):  # a bug in rckit: still one JSON line for the client
        return error(500, f"internal error: {type(e).__name__}: {e}")

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, e: RequestValidationError):
        return error(422, explain(e.errors()))

    @app.post("/v1/answer", response_model=AnswerResponse, responses=errors, openapi_extra={
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": limits.request_schema(),
            "example": {"context": "The Eiffel Tower was completed in 1889 in Paris.",
                        "question": "When was the Eiffel Tower completed?", "top_k": 3}}}}})
    async def answer(request: Request):
        """Answer one question (`question`) or several (`questions`) about one `context`."""
        t0 = time.perf_counter()
        body = await read_body(request, limits.body_bytes)
        req = parse_request(body, limits)
        one = req.question is not None
        questions = [req.question] if one else req.questions
        answers = await read(batcher, [(req.context, q) for q in questions], req.top_k, req.max_answer_len)
        ms = (time.perf_counter() - t0) * 1000
        return JSONResponse({"answers": answers[0] if one else answers, "model": name, "ms": round(ms, 2)})

    @app.post("/v1/ask", response_model=AskResponse, responses={**errors, 404: {
        "model": ErrorResponse, "description": "the server has no index (rckit serve --index INDEX)"}},
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
            "schema": limits.ask_schema(),
            "example": {"question": "When was the Eiffel Tower completed?", "top_k": 3}}}}})
    async def ask(request: Request):
        """Ask `question` of every document of the server's index: the retriever's `passages` best
        passages, read by the model, the best answers over all of them with their documents."""
        t0 = time.perf_counter()
        if app.state.index is None:
            return error(404, "this server has no index of documents: start it with rckit serve --index INDEX")
        req = parse_ask(await read_body(request, limits.body_bytes), limits)
        hits = app.state.index.search(req.question, req.passages)
        found = await read(batcher, [(h.text, req.question) for h in hits], req.top_k, None) if hits else []
        answers = rank(list(zip(hits, found)), req.top_k, retriever_weight)
        ms = (time.perf_counter() - t0) * 1000
        return JSONResponse({"answers": answers, "model": name, "ms": round(ms, 2)})

    @app.get("/v1/index", responses={404: {"model": ErrorResponse,
                                          "description": "the server has no index (rckit serve --index INDEX)"}})
    async def index_stats() -> dict[str, Any]:
        """The server's index of documents (404 without one): how many documents and passages."""
        if app.state.index is None:
            raise ApiError(404, "this server has no index of documents: start it with rckit serve --index INDEX")
        return {**app.state.index.stats(), "path": str(Path(index_file).resolve()), "retriever_weight": retriever_weight}

    @app.get("/v1/model")
    async def model() -> dict[str, Any]:
        """What the model is: name, where it was loaded from, its configuration, its dev score if known."""
        return info

    @app.get("/health")
    async def health() -> dict[str, Any]:
        """The server is up; how many model calls and questions it has answered, how many requests wait."""
        return {"status": "ok", "model": name, "calls": batcher.calls, "questions": batcher.questions,
                "queued": batcher.queued}

    @app.get("/", include_in_schema=False)
    async def index():
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


async def read(batcher: Batcher, pairs: list[tuple[str, str]], top_k: int, max_answer_len: int | None) -> list:
    """The batcher's answers to ``pairs``, or the :class:`ApiError` of this request: 413 for too
    much work, 503 past the time limit, 500 where the model failed (the server goes on)."""
    try:
        return await batcher.submit(pairs, top_k, max_answer_len)
    except TooMuchWork as e:
        raise ApiError(413, str(e)) from None
    except RequestTimeout as e:
        raise ApiError(503, str(e)) from None
    except Exception as e:  # noqa: BLE001 - the model's failure is this request's 500, not the server's end
        raise ApiError(500, f"the model failed on this request: {type(e).__name__}: {e}") from None


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it is known to be over ``limit`` bytes."""
    length = request.headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise ApiError(400, f"Content-Length is not a number: {length[:40]!r}")
        if int(length) > limit:
            raise ApiError(413, f"the body has {int(length)} bytes; this server takes at most {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():  # also bounds a chunked body, which has no Content-Length
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"the body is over {limit} bytes, the most this server takes")
        chunks.append(chunk)
    return b"".join(chunks)


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


def parse_ask(body: bytes, limits: Limits) -> AskRequest:
    """The checked ``POST /v1/ask`` request (the rules of :meth:`Limits.ask_schema`)."""
    try:
        req = AskRequest.model_validate(json_object(body, '{"question": "..."}'))
    except ValidationError as e:
        raise ApiError(422, explain(e.errors())) from None
    check_text("question", req.question, limits.question_chars)
    return req


def parse_request(body: bytes, limits: Limits) -> AnswerRequest:
    """The checked request, or an :class:`ApiError` naming what is wrong (the rules of
    :meth:`Limits.request_schema`)."""
    data = json_object(body, '{"context": "...", "question": "..."}')
    try:
        req = AnswerRequest.model_validate(data)
    except ValidationError as e:
        raise ApiError(422, explain(e.errors())) from None
    if req.question is None and req.questions is None:
        raise ApiError(422, "'question' (one question) or 'questions' (a list of them) is required")
    if req.question is not None and req.questions is not None:
        raise ApiError(422, "give 'question' or 'questions', not both")
    if req.question is not None:
        check_text("context", req.context, limits.context_chars)
        check_text("question", req.question, limits.question_chars)
    else:
        if not req.questions:
            raise ApiError(422, "'questions' is an empty list")
        if len(req.questions) > limits.questions:
            raise ApiError(422, f"'questions' has {len(req.questions)} questions; this server takes at most "
                                f"{limits.questions} in one request")
        check_text("context", req.context, limits.context_chars_per_list,
                   f"with 'questions'; one 'question' may ask about {limits.context_chars:,}")
        for i, q in enumerate(req.questions):
            check_text(f"questions[{i}]", q, limits.question_chars)
    return req


def check_text(field: str, text: str, max_chars: int, note: str = "") -> None:
    problem = text_problem(text)  # the reader's rule, with the field named as JSON names it
    if problem:
        raise ApiError(422, f"'{field}' {problem}")
    if len(text) > max_chars:
        raise ApiError(422, f"'{field}' has {len(text):,} characters; this server reads at most {max_chars:,}"
                            + (f" ({note})" if note else ""))


def explain(errors: list[dict]) -> str:
    """One sentence for the first of pydantic's validation errors, naming the field."""
    err = errors[0]
    loc = [str(p) for p in err.get("loc", ()) if p != "body"]
    field = "".join(f"[{p}]" if p.isdigit() else (f".{p}" if i else p) for i, p in enumerate(loc)) or "the body"
    kind, given, ctx = err.get("type", ""), err.get("input"), err.get("ctx") or {}
    bounds = {"top_k": TOP_K, "max_answer_len": MAX_ANSWER_LEN}.get(field)
    if kind == "missing":
        return f"'{field}' is required"
    if kind == "extra_forbidden":
        return f"unknown field '{field}' (the fields are {', '.join(AnswerRequest.model_fields)})"
    if kind == "string_type":
        return f"'{field}' must be a string, not {json_type(given)}"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"'{field}' must be an integer, not {json_type(given)}"
    if kind == "list_type":
        return f"'{field}' must be a list of strings, not {json_type(given)}"
    if kind in ("greater_than_equal", "less_than_equal") and bounds:
        return f"'{field}' must be between {bounds[0]} and {bounds[1]}, not {given}"
    if kind == "model_type" or kind == "dict_type":
        return f"'{field}' must be a JSON object, not {json_type(given)}"
    detail = err.get("msg", "is not valid")
    return f"'{field}': {detail}" + (f" ({ctx})" if ctx and not bounds else "")


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


def model_settings(onnx: bool, workers: int | None = None) -> tuple[int, int]:
    """``(workers, threads)`` by default: the model calls in flight at once, and each one's threads.

    onnxruntime: two calls at once where there are two cores or more, the cores shared between
    them, threads sleeping between operations (``spin=False``) so the event loop gets a core
    whenever it needs one. While one call runs, the next forms from the requests that arrived
    meanwhile: at 8 clients on 2 cores, two calls of one thread served 288 and 317 questions/s
    against 194 and 254 for one call of two threads; threads that spin starve the event loop
    (BENCHMARKS.md, "Answering without PyTorch"). PyTorch: one call on every core but one, which
    the event loop needs to parse requests and write answers while the model computes (on 2 cores
    and a 5 ms window, 1 thread served 134.6 questions/s at 8 clients against 108.4 with 2:
    BENCHMARKS.md, Serving)."""
    cores = available_cores()
    if onnx:
        workers = workers or min(2, cores)
        return workers, max(1, cores // workers)
    return workers or 1, max(1, cores - 1)


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one), or an OSError saying which address."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(2048)
    except OSError as e:
        raise OSError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


class SignalledServer(uvicorn.Server):
    """uvicorn's server that remembers which signal stopped it, so that Ctrl-C always ends
    ``rckit serve`` with status 130: uvicorn re-raises the signal after its graceful shutdown,
    but one CI run saw the process exit 0 after SIGINT instead."""

    stopped_by: int | None = None

    def handle_exit(self, sig, frame) -> None:
        self.stopped_by = sig
        super().handle_exit(sig, frame)


def serve(source: str | None = None, host: str = "127.0.0.1", port: int = 8000, threads: int | None = None,
          always_answer: bool = False, workers: int | None = None, **options) -> None:
    """Load the model from ``source`` (a run, an exported file, None: the default model) and serve it
    until Ctrl-C or SIGTERM (``always_answer``: :meth:`Reader.load`'s); ``options`` are :func:`create_app`'s (batching, limits, policy).

    The model runs in ``workers`` threads, each call on ``threads`` cores (defaults:
    :func:`model_settings`: with onnxruntime two calls sharing the cores, with PyTorch one call on
    all cores but one);
    the event loop only parses requests and forms batches. Prints the URL once the socket listens
    (``port=0`` takes a free port and prints which).
    """
    if port < 0:
        raise ValueError(f"port must be at least 0, not {port}")
    for name, value in (("threads", threads), ("workers", workers)):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be at least 1, not {value}")
    check_options(options)
    found = open_model(source)  # which backend sets the defaults below
    workers, default_threads = model_settings(found.kind == "onnx", workers)
    reader = Reader.load(found.path, always_answer=always_answer, threads=threads or default_threads, spin=False)
    app = create_app(reader, model_workers=workers, **options)
    sock = listen(host, port)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{sock.getsockname()[1]}/"
    print(f"rckit serve: {model_name(reader.info)} at {url} (API: POST {url}v1/answer, docs: {url}docs); "
          "Ctrl-C stops", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=5)
    server = SignalledServer(config)
    server.run(sockets=[sock])
    if server.stopped_by == signal.SIGINT:  # uvicorn re-raises it after shutdown, but not in every race
        raise KeyboardInterrupt
