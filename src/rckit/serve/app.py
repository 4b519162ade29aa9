"""The HTTP side of ``rckit serve``: a JSON API over one or several :class:`rckit.answering.reader.Reader`, and a page.

``POST /v1/answer`` takes ``{"context": ..., "question": ...}`` (or ``"questions": [...]``, with
optional ``"top_k"`` and ``"max_answer_len"``) and returns ``{"answers": ..., "model": ...,
"ms": ...}``; ``GET /v1/model`` describes the model, ``GET /health`` says the server is up,
``/docs`` is FastAPI's OpenAPI page and ``/`` a page to ask questions from a browser.
``POST /v1/explain`` takes one ``question`` about a ``context`` (optional ``"steps"``,
``"max_answer_len"``) and returns ``{"explanation": ..., "model": ..., "ms": ...}`` (with
``?format=html`` the explanation drawn as one self-contained page instead), computed one at a time
off the event loop (:class:`~.explainer.Explainer`); a server of an ONNX file explains with the
``.safetensors`` file beside it, loaded on the first explanation, or answers 501. Started with
an index of documents (``rckit serve --index INDEX``), ``POST /v1/ask`` takes ``{"question": ...}``
(optional ``"top_k"``, ``"passages"``) and answers from every document (retrieve, then read).
Started with a file of labels (``--labels FILE``), ``POST /v1/labels`` adds a question about a
passage with its answer to it and ``GET /v1/labels`` counts them (:mod:`.labels`): the page's
Label tab, for ``rckit adapt``.

A server may hold several models (``rckit serve --model all``, or ``--model dcn,qanet``): each
with its own batcher and explainer, ``GET /v1/models`` lists them, and every request body may
name the one that answers it (``"model"``; left out, the first), which its reply names.

Every mistake in a request gets one JSON line ``{"error": "what is wrong, naming the field"}``
and a 4xx status, and the server goes on serving: 400 for a body that is not JSON, 413 for a
body over ``max_body_bytes`` (refused from its Content-Length, or while it streams in, without
reading more), 422 for a missing or mistyped field, an empty context or question, too many
questions or a ``top_k`` out of range (the request bodies and their checks: :mod:`.schema`). A
failure of the model itself is a 500 for the requests of that batch. Questions of concurrent
requests are answered together (:mod:`.batcher`). Every setting is a field of
:class:`~rckit.serve.config.ServeConfig`.

Who may call the API (keys), how much (per-client limits), CORS, the request id and the access
log stand in one middleware in front of the routes (:mod:`.access`): 401 without the server's
key, 429 past a client's limit.

:func:`create_app` puts the app together: its settings, the middleware, then the routes by feature,
each group added by a function of its own: answering (:func:`add_answer_routes`), the index
(:func:`add_index_routes`), labels (:func:`add_label_routes`), the models and health
(:func:`add_model_routes`), the page (:func:`add_page`); the request bodies' examples stand beside
their models in :mod:`.schema`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from rckit.answering.reader import Reader
from rckit.model_files.source import installed_name, model_names, names_several, open_model
from rckit.retrieval.collection import DEFAULT_RETRIEVER_WEIGHT, retrieve
from rckit.retrieval.store import PassageStore
from rckit.serve.access import AccessLog, Gate, declare, limits_of, request_id_of
from rckit.serve.batcher import Batcher, RequestTimeout, TooMuchWork
from rckit.serve.config import ServeConfig, is_loopback
from rckit.serve.explainer import Explainer
from rckit.serve.keys import Keys
from rckit.serve.labels import LabelFile
from rckit.serve.schema import (
    ANSWER_EXAMPLE,
    ASK_EXAMPLE,
    EXPLAIN_EXAMPLE,
    LABEL_EXAMPLE,
    AnswerResponse,
    ApiError,
    AskResponse,
    ErrorResponse,
    ExplainResponse,
    ModelsResponse,
    Requests,
    error_sentence,
    not_served,
)

STATIC = Path(__file__).resolve().parent / "static"
FORMATS = ("json", "html")  # what POST /v1/explain answers with: ?format=


def error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def model_name(info: dict) -> str:
    name = info.get("model") or info.get("name") or "unknown"
    return name if isinstance(name, str) else json.dumps(name)


def served_name(info: dict) -> str:
    """What a server of one reader calls it: its installed name, else :func:`model_name`."""
    source = info.get("source")
    return (installed_name(source) if source else None) or model_name(info)


@dataclass(frozen=True)
class Served:
    """One model of a server: the name requests give it, its reader, and its own batcher and explainer."""

    name: str
    reader: Any
    batcher: Batcher
    explainer: Explainer

    def describe(self, default: bool) -> dict[str, Any]:
        """Its entry of ``GET /v1/models`` (:class:`~rckit.serve.schema.ServedModel`), from the reader's ``info``."""
        info = self.reader.info
        return {
            "name": self.name,
            "model": model_name(info),
            "file": info.get("source"),
            "backend": info.get("backend"),
            "default": default,
            "parameters": info.get("parameters"),
            "window": int(self.reader.window),
            "dev_score": info.get("dev_score"),
            "scores": info.get("scores") or [],
            "explains": hasattr(self.reader, "explain"),
        }


def create_app(models, config: ServeConfig = ServeConfig(), settings: dict[str, ServeConfig] | None = None) -> FastAPI:
    """A FastAPI app answering with ``models``: one reader (a :class:`~rckit.answering.reader.Reader`,
    or anything with its ``plan_many``, ``read``, ``window`` and ``info``), named by its ``info``, or
    several, ``{name: reader}``, the first the default; as ``config`` says: what a request may ask
    (:class:`~rckit.serve.schema.Requests`), how model calls are formed
    (:class:`~rckit.serve.batcher.Batcher`, one per model, with its ``settings[name]`` where given:
    :func:`serve` gives each model its backend's threads and workers). With ``config.index`` (a
    file of ``rckit index``) ``POST /v1/ask`` asks its documents (:mod:`rckit.retrieval.collection`),
    their passages read by the chosen model's batcher, as ``/v1/answer``'s requests are. Every
    request passes :class:`~.access.Gate` first (keys, per-client limits, CORS, the access log);
    the routes are added group by group, each group's function adding its own."""
    config.check()
    served = served_models(models, config, settings or {})
    keys, limits, log = Keys(config.api_key, config.api_key_file), limits_of(config), AccessLog(config.access_log)
    requests = Requests.of(config, min(int(m.reader.window) for m in served.values()), tuple(served))
    app = FastAPI(
        title="rckit",
        summary="Answers questions about a passage with a reading-comprehension model.",
        lifespan=lifespan(served, config, log),
    )
    app.state.batcher = next(iter(served.values())).batcher
    app.state.models = served
    app.state.requests = requests
    app.add_middleware(Gate, keys=keys, limits=limits, log=log, config=config)
    plain_openapi = app.openapi

    def openapi() -> dict[str, Any]:  # the keys and limits, stated where the gate applies them
        return declare(plain_openapi(), config, keys, limits)

    app.openapi = openapi
    add_error_handlers(app)
    add_answer_routes(app, config, requests, served)
    add_index_routes(app, config, requests, served)
    add_label_routes(app, config, requests)
    add_model_routes(app, served)
    add_page(app)
    return app


def served_models(models, config: ServeConfig, settings: dict[str, ServeConfig]) -> dict[str, Served]:
    """:func:`create_app`'s ``models`` by name, the default first, each with its batcher and
    explainer under its ``settings[name]`` (else ``config``). One reader is named as installed
    (``minilm_reader``, ``qanet``, ...) where its file is an installed model's, else by its architecture."""
    readers = models if isinstance(models, dict) else {served_name(models.info): models}
    if not readers:
        raise ValueError("create_app needs at least one model")
    return {
        name: Served(
            name, reader, Batcher(reader, settings.get(name, config)), Explainer(reader, settings.get(name, config))
        )
        for name, reader in readers.items()
    }


def chosen(served: dict[str, Served], name: str | None) -> Served:
    """A request's model: the one it names (the name checked by the schema), else the first."""
    return next(iter(served.values())) if name is None else served[name]


def lifespan(served: dict[str, Served], config: ServeConfig, log: AccessLog):
    """The app's lifespan: the index opened, every model's batcher and explainer started; at the
    end all of them stopped and closed, and the access log with them."""

    @asynccontextmanager
    async def run(app: FastAPI):
        # Opened here, in the event loop's thread, where /v1/ask searches it (SQLite keeps a
        # connection to the thread that made it).
        app.state.index = PassageStore(config.index) if config.index is not None else None
        for m in served.values():
            m.batcher.start()
            m.explainer.start()
        yield
        for m in served.values():
            m.explainer.stop()
            await m.batcher.stop()
        if app.state.index is not None:
            app.state.index.close()
        log.close()

    return run


def error_responses(config: ServeConfig) -> dict[int, dict[str, Any]]:
    """The refusals of a route that reads a request body, as OpenAPI ``responses``."""
    return {
        status: {"model": ErrorResponse, "description": text}
        for status, text in (
            (400, "the body is not JSON"),
            (413, f"the body is over {config.max_body_bytes:,} bytes"),
            (
                422,
                "a field is missing, of the wrong type, empty, too long or out of range, or names a model not "
                "served here",
            ),
            (500, "the model failed"),
            (503, "the request was not answered within the server's time limit"),
        )
    }


def json_body(schema: dict, example: dict) -> dict[str, Any]:
    """A route's OpenAPI ``requestBody``: JSON, required, its schema (:class:`~.schema.Requests`'s) and an example."""
    return {"required": True, "content": {"application/json": {"schema": schema, "example": example}}}


def add_error_handlers(app: FastAPI) -> None:
    """Every refusal and failure as one JSON line ``{"error": ...}``: the schema's, FastAPI's own
    (404, 405, a body it validates) and a bug's."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, e: ApiError):
        return error(e.status, e.message)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException):
        if e.status_code == 404:
            return error(404, f"no such page: {request.url.path}")
        if e.status_code == 405:  # with Allow, which RFC 9110 asks of a 405: every route's of this path
            return error(
                405,
                f"{request.method} is not allowed on {request.url.path}",
                {**(e.headers or {}), "Allow": allowed_methods(request)},
            )
        return error(e.status_code, str(e.detail), e.headers)

    @app.exception_handler(Exception)
    async def _bug(request: Request, e: Exception):  # a bug in rckit: still one JSON line for the client
        rid = request_id_of(request)  # answered outside the gate, which echoes it on every other reply
        return error(500, f"internal error: {type(e).__name__}: {e}", {"X-Request-ID": rid} if rid else None)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, e: RequestValidationError):
        return error(422, error_sentence(e.errors()[0]))


def add_answer_routes(app: FastAPI, config: ServeConfig, requests: Requests, served: dict[str, Served]) -> None:
    """Answering about a context: ``POST /v1/answer`` (through the model's batcher) and
    ``POST /v1/explain`` (through its explainer)."""
    errors = error_responses(config)

    @app.post(
        "/v1/answer",
        response_model=AnswerResponse,
        responses=errors,
        openapi_extra={"requestBody": json_body(requests.answer_schema(), ANSWER_EXAMPLE)},
    )
    async def answer(request: Request):
        """Answer one question (`question`) or several (`questions`) about one `context`."""
        t0 = time.perf_counter()
        req = requests.parse_answer(await read_body(request, config.max_body_bytes))
        questions = req.questions if req.several else [req.question]
        m = chosen(served, req.model)
        answers = await read(m.batcher, [(req.context, q) for q in questions], req.top_k, req.max_answer_len)
        ms = (time.perf_counter() - t0) * 1000
        return JSONResponse({"answers": answers if req.several else answers[0], "model": m.name, "ms": round(ms, 2)})

    @app.post(
        "/v1/explain",
        response_model=ExplainResponse,
        responses={
            **errors,
            200: {
                "description": "the explanation; with `?format=html` the same drawn as one self-contained "
                "HTML page (inline CSS, no script)",
                "content": {"text/html": {"schema": {"type": "string"}}},
            },
            501: {
                "model": ErrorResponse,
                "description": "the server's model is an ONNX file, and explaining needs the "
                "PyTorch model: its .safetensors file beside it, and PyTorch installed",
            },
        },
        openapi_extra={
            "parameters": [
                {
                    "name": "format",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "string", "enum": list(FORMATS), "default": "json"},
                    "description": "json: the explanation as JSON; html: the explanation drawn as one HTML page",
                }
            ],
            "requestBody": json_body(requests.explain_schema(), EXPLAIN_EXAMPLE),
        },
    )
    async def explain_answer(request: Request):
        """Why the model gives its answer to `question` about `context`: the window it read, its start
        and end probabilities, its attention, DCN's decoder iterations and each word's saliency
        (integrated gradients in `steps` steps). One explanation at a time: several wait their turn."""
        t0 = time.perf_counter()
        req = requests.parse_explain(await read_body(request, config.max_body_bytes))
        kind = request.query_params.get("format", "json")
        if kind not in FORMATS:
            raise ApiError(422, f"'format' must be json or html, not {kind[:40]!r}")
        m = chosen(served, req.model)
        explanation, page = await m.explainer.explain(
            req.context, req.question, req.steps, req.max_answer_len, kind == "html"
        )
        if page is not None:
            return HTMLResponse(page)
        ms = (time.perf_counter() - t0) * 1000
        return JSONResponse({"explanation": explanation, "model": m.name, "ms": round(ms, 2)})


def add_index_routes(app: FastAPI, config: ServeConfig, requests: Requests, served: dict[str, Served]) -> None:
    """Asking the server's index of documents (``rckit serve --index``): ``POST /v1/ask`` (retrieve,
    then read with the model's batcher) and ``GET /v1/index``; both 404 without an index."""
    retriever_weight = DEFAULT_RETRIEVER_WEIGHT if config.retriever_weight is None else config.retriever_weight

    @app.post(
        "/v1/ask",
        response_model=AskResponse,
        responses={
            **error_responses(config),
            404: {"model": ErrorResponse, "description": "the server has no index (rckit serve --index INDEX)"},
        },
        openapi_extra={"requestBody": json_body(requests.ask_schema(), ASK_EXAMPLE)},
    )
    async def ask(request: Request):
        """Ask `question` of every document of the server's index: the retriever's `passages` best
        passages, read by the model, the best answers over all of them with their documents."""
        t0 = time.perf_counter()
        if app.state.index is None:
            return error(404, "this server has no index of documents: start it with rckit serve --index INDEX")
        req = requests.parse_ask(await read_body(request, config.max_body_bytes))
        m = chosen(served, req.model)
        found = retrieve(app.state.index, [req.question], req.passages)
        spans = await read(m.batcher, found.pairs, req.top_k, None, own=False) if found.pairs else []
        answers = found.rank(spans, req.top_k, retriever_weight, m.reader.collection_verifier, m.reader.own_verifier)
        answers = answers[0]
        ms = (time.perf_counter() - t0) * 1000
        return JSONResponse({"answers": answers, "model": m.name, "ms": round(ms, 2)})

    @app.get(
        "/v1/index",
        responses={404: {"model": ErrorResponse, "description": "the server has no index (rckit serve --index INDEX)"}},
    )
    async def index_stats() -> dict[str, Any]:
        """The server's index of documents (404 without one): how many documents and passages."""
        if app.state.index is None:
            raise ApiError(404, "this server has no index of documents: start it with rckit serve --index INDEX")
        return {
            **app.state.index.stats(),
            "path": str(Path(config.index).resolve()),
            "retriever_weight": retriever_weight,
        }


def add_label_routes(app: FastAPI, config: ServeConfig, requests: Requests) -> None:
    """The page's Label tab (``rckit serve --labels FILE``): ``GET /v1/labels`` counts the file's
    labels, ``POST /v1/labels`` adds one; both 404 without a file."""
    labels = LabelFile(config.labels) if config.labels is not None else None
    no_labels = "this server keeps no labels: start it with rckit serve --labels FILE"

    @app.get("/v1/labels", responses={404: {"model": ErrorResponse, "description": no_labels}})
    async def label_stats() -> dict[str, Any]:
        """The server's file of labels (404 without one): how many questions, passages and documents."""
        if labels is None:
            raise ApiError(404, no_labels)
        return await asyncio.to_thread(labels.stats)

    @app.post(
        "/v1/labels",
        responses={**error_responses(config), 404: {"model": ErrorResponse, "description": no_labels}},
        openapi_extra={"requestBody": json_body(requests.label_schema(), LABEL_EXAMPLE)},
    )
    async def add_label(request: Request) -> dict[str, Any]:
        """Add a question about a passage, with its answer, to the server's file of labels (a SQuAD
        v1.1 file, for `rckit adapt`); 422 where the answer is not the passage's text at answer_start."""
        if labels is None:
            raise ApiError(404, no_labels)
        req = requests.parse_label(await read_body(request, config.max_body_bytes))
        try:
            return await asyncio.to_thread(
                labels.add, req.document, req.context, req.question, req.answer, req.answer_start
            )
        except ValueError as e:
            raise ApiError(422, str(e)) from None


def add_model_routes(app: FastAPI, served: dict[str, Served]) -> None:
    """What is served and how it goes: ``GET /v1/model`` (a model's card), ``GET /v1/models`` and
    ``GET /health``."""
    default = next(iter(served.values()))

    @app.get(
        "/v1/model",
        responses={422: {"model": ErrorResponse, "description": "`model` names a model not served here"}},
        openapi_extra={
            "parameters": [
                {
                    "name": "model",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "string", "enum": list(served)},
                    "description": f"which served model (default: {default.name})",
                }
            ]
        },
    )
    async def model(request: Request) -> dict[str, Any]:
        """What the model is (the default one, or `?model=NAME`): name, where it was loaded from, its
        configuration, its dev score if known."""
        name = request.query_params.get("model")
        if name is not None and name not in served:
            raise ApiError(422, not_served(name, tuple(served)))
        return chosen(served, name).reader.info

    @app.get("/v1/models", response_model=ModelsResponse)
    async def models_served() -> dict[str, Any]:
        """The served models, the default first: each one's name (what a request's `model` gives),
        architecture, file, backend, parameters and scores."""
        return {"models": [m.describe(m is default) for m in served.values()]}

    @app.get("/health")
    async def health() -> dict[str, Any]:
        """The server is up; how many model calls and questions it has answered, how many requests wait."""
        batchers = [m.batcher for m in served.values()]
        return {
            "status": "ok",
            "model": default.name,
            "models": list(served),
            "calls": sum(b.calls for b in batchers),
            "questions": sum(b.questions for b in batchers),
            "queued": sum(b.queued for b in batchers),
        }


def add_page(app: FastAPI) -> None:
    """The page to ask questions from a browser: ``/`` and its files under ``/static``."""

    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")


def allowed_methods(request: Request) -> str:
    """The methods of every route whose path is the request's (Starlette's own 405 names the
    first such route's alone: ``GET`` for ``/v1/labels``, which also takes ``POST``)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        if match != Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return ", ".join(sorted(methods))


async def read(
    batcher: Batcher, pairs: list[tuple[str, str]], top_k: int, max_answer_len: int | None, own: bool = True
) -> list:
    """The batcher's answers to ``pairs``, or the :class:`ApiError` of this request: 413 for too
    much work, 503 past the time limit, 500 where the model failed (the server goes on).
    ``own``: as :meth:`rckit.answering.reader.Reader.answer_batch`'s."""
    try:
        return await batcher.submit(pairs, top_k, max_answer_len, own)
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


def model_settings(onnx: bool, model_workers: int | None = None) -> tuple[int, int]:
    """``(model_workers, threads)`` by default: the model calls in flight at once, and each one's threads.

    onnxruntime: two calls at once where there are two cores or more, the cores shared between
    them, threads sleeping between operations (``spin=False``) so the event loop gets a core
    whenever it needs one. While one call runs, the next forms from the requests that arrived
    meanwhile, which serves more questions/s than one call on every core, and threads that spin
    starve the event loop (docs/benchmark-history.md, "Answering without PyTorch (issue 30)").
    PyTorch: one call on every core but one, which the event loop needs to parse requests and
    write answers while the model computes (BENCHMARKS.md, "Serving and long documents"; the alternatives measured:
    docs/benchmark-history.md, "Serving: the defaults")."""
    cores = available_cores()
    if onnx:
        model_workers = model_workers or min(2, cores)
        return model_workers, max(1, cores // model_workers)
    return model_workers or 1, max(1, cores - 1)


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


def sources(spec: str | None) -> list[str | None]:
    """The model sources ``spec`` names: the installed models it lists for ``all`` or names joined
    by commas (:func:`~rckit.model_files.source.model_names`: an unknown one is a one-line
    FileNotFoundError listing the installed ones), else ``spec`` itself, one source (a run, a file,
    an installed model's name, or None: the default model)."""
    if names_several(spec):
        return model_names(spec)
    return [spec]


def serve(source: str | None = None, config: ServeConfig = ServeConfig()) -> None:
    """Load the model from ``source`` (a run, an exported file, an installed model's name, None: the
    default model; ``all`` or ``dcn,qanet``: several installed models, the first the default) and
    serve it as ``config`` says until Ctrl-C or SIGTERM.

    Each model runs in ``config.model_workers`` threads, each call on ``config.threads`` cores
    (left as None: :func:`model_settings`' for its backend, with onnxruntime two calls sharing the
    cores, with PyTorch one call on all cores but one); the event loop only parses requests and
    forms batches. A model is named by its installed name, else by its architecture (what a request's
    ``model`` gives, and its reply says). Prints the URL once the socket listens (``port`` 0 takes a
    free port and prints which; ``https://`` with ``ssl_certfile``), then, for a network address
    served without a key (``allow_anonymous``), that anyone who can reach it can use it. A setting
    out of range, a bad key file or certificate, a network address without a key or
    ``allow_anonymous``, or a model name not installed is refused before any model loads.
    """
    config.check()
    found = [open_model(s) for s in sources(source)]  # which backend sets each one's defaults below
    loaded = []  # (installed name or None, reader, its settings)
    for f in found:
        model_workers, threads = model_settings(f.kind == "onnx", config.model_workers)
        own = replace(config, model_workers=model_workers, threads=config.threads or threads)
        reader = Reader.load(
            f.path,
            always_answer=own.always_answer,
            threads=own.threads,
            spin=False,
            no_answer_threshold=own.no_answer_threshold,
        )
        loaded.append((installed_name(f.path), reader, own))
    if len(loaded) == 1:  # one model: the server it always was, named by its installed name where it has one
        name, reader, config = loaded[0]
        app = create_app(reader if name is None else {name: reader}, config)
    else:  # several installed models, the first the default
        config = loaded[0][2]
        app = create_app({name: reader for name, reader, _ in loaded}, config, {name: own for name, _, own in loaded})
    sock = listen(config.host, config.port)
    shown = f"[{config.host}]" if ":" in config.host else config.host
    url = f"{'https' if config.ssl_certfile else 'http'}://{shown}:{sock.getsockname()[1]}/"
    print(
        f"rckit serve: {', '.join(app.state.models)} at {url} (API: POST {url}v1/answer, docs: {url}docs); "
        "Ctrl-C stops",
        flush=True,
    )
    if config.api_key is None and config.api_key_file is None and not is_loopback(config.host):
        print(
            f"rckit serve: no key (--allow-anonymous): anyone who can reach {shown}:{sock.getsockname()[1]} "
            "can use this server",
            flush=True,
        )
    server = SignalledServer(
        uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=5,
            ssl_certfile=config.ssl_certfile,
            ssl_keyfile=config.ssl_keyfile,
        )
    )
    server.run(sockets=[sock])
    if server.stopped_by == signal.SIGINT:  # uvicorn re-raises it after shutdown, but not in every race
        raise KeyboardInterrupt
