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
questions or a ``top_k`` out of range (the request bodies and their checks: :mod:`.schema`). A
failure of the model itself is a 500 for the requests of that batch. Questions of concurrent
requests are answered together (:mod:`.batcher`). Every setting is a field of
:class:`~rckit.serve.config.ServeConfig`.

Who may call the API (keys), how much (per-client limits), CORS, the request id and the access
log stand in one middleware in front of the routes (:mod:`.access`): 401 without the server's
key, 429 past a client's limit.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from rckit.retrieval.store import PassageStore
from rckit.retrieval.collection import DEFAULT_RETRIEVER_WEIGHT, retrieve
from rckit.answering.reader import Reader
from rckit.model_files.source import open_model
from rckit.serve.access import AccessLog, Gate, declare, limits_of, request_id_of
from rckit.serve.batcher import Batcher, RequestTimeout, TooMuchWork
from rckit.serve.config import ServeConfig, is_loopback
from rckit.serve.keys import Keys
from rckit.serve.schema import AnswerResponse, ApiError, AskResponse, ErrorResponse, Requests, explain

STATIC = Path(__file__).resolve().parent / "static"


def error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def model_name(info: dict) -> str:
    name = info.get("model") or info.get("name") or "unknown"
    return name if isinstance(name, str) else json.dumps(name)


def create_app(reader, config: ServeConfig = ServeConfig()) -> FastAPI:
    """A FastAPI app answering with ``reader`` (a :class:`~rckit.answering.reader.Reader`, or anything
    with its ``plan_many``, ``read``, ``window`` and ``info``), as ``config`` says: what a request
    may ask (:class:`~rckit.serve.schema.Requests`), how model calls are formed
    (:class:`~rckit.serve.batcher.Batcher`). With ``config.index`` (a file of ``rckit index``)
    ``POST /v1/ask`` asks its documents (:mod:`rckit.retrieval.collection`), their passages read by
    the same batcher as ``/v1/answer``'s requests. Every request passes :class:`~.access.Gate`
    first (keys, per-client limits, CORS, the access log)."""
    config.check()
    keys, limits, log = Keys(config.api_key, config.api_key_file), limits_of(config), AccessLog(config.access_log)
    requests = Requests.of(config, reader.window)
    batcher = Batcher(reader, config)
    retriever_weight = DEFAULT_RETRIEVER_WEIGHT if config.retriever_weight is None else config.retriever_weight
    info = reader.info
    name = model_name(info)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # Opened here, in the event loop's thread, where /v1/ask searches it (SQLite keeps a
        # connection to the thread that made it).
        app.state.index = PassageStore(config.index) if config.index is not None else None
        batcher.start()
        yield
        await batcher.stop()
        if app.state.index is not None:
            app.state.index.close()
        log.close()

    app = FastAPI(title="rckit", summary="Answers questions about a passage with a reading-comprehension model.",
                  lifespan=lifespan)
    app.state.batcher = batcher
    app.state.requests = requests
    app.add_middleware(Gate, keys=keys, limits=limits, log=log, config=config)
    plain_openapi = app.openapi

    def openapi() -> dict[str, Any]:  # the keys and limits, stated where the gate applies them
        return declare(plain_openapi(), config, keys, limits)

    app.openapi = openapi
    errors = {status: {"model": ErrorResponse, "description": text} for status, text in (
        (400, "the body is not JSON"), (413, f"the body is over {config.max_body_bytes:,} bytes"),
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
        rid = request_id_of(request)  # answered outside the gate, which echoes it on every other reply
        return error(500, f"internal error: {type(e).__name__}: {e}", {"X-Request-ID": rid} if rid else None)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, e: RequestValidationError):
        return error(422, explain(e.errors()[0]))

    @app.post("/v1/answer", response_model=AnswerResponse, responses=errors, openapi_extra={
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": requests.answer_schema(),
            "example": {"context": "The Eiffel Tower was completed in 1889 in Paris.",
                        "question": "When was the Eiffel Tower completed?", "top_k": 3}}}}})
    async def answer(request: Request):
        """Answer one question (`question`) or several (`questions`) about one `context`."""
        t0 = time.perf_counter()
        req = requests.parse_answer(await read_body(request, config.max_body_bytes))
        questions = req.questions if req.several else [req.question]
        answers = await read(batcher, [(req.context, q) for q in questions], req.top_k, req.max_answer_len)
        ms = (time.perf_counter() - t0) * 1000
        return JSONResponse({"answers": answers if req.several else answers[0], "model": name, "ms": round(ms, 2)})

    @app.post("/v1/ask", response_model=AskResponse, responses={**errors, 404: {
        "model": ErrorResponse, "description": "the server has no index (rckit serve --index INDEX)"}},
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
            "schema": requests.ask_schema(),
            "example": {"question": "When was the Eiffel Tower completed?", "top_k": 3}}}}})
    async def ask(request: Request):
        """Ask `question` of every document of the server's index: the retriever's `passages` best
        passages, read by the model, the best answers over all of them with their documents."""
        t0 = time.perf_counter()
        if app.state.index is None:
            return error(404, "this server has no index of documents: start it with rckit serve --index INDEX")
        req = requests.parse_ask(await read_body(request, config.max_body_bytes))
        found = retrieve(app.state.index, [req.question], req.passages)
        spans = await read(batcher, found.pairs, req.top_k, None) if found.pairs else []
        answers = found.rank(spans, req.top_k, retriever_weight)[0]
        ms = (time.perf_counter() - t0) * 1000
        return JSONResponse({"answers": answers, "model": name, "ms": round(ms, 2)})

    @app.get("/v1/index", responses={404: {"model": ErrorResponse,
                                          "description": "the server has no index (rckit serve --index INDEX)"}})
    async def index_stats() -> dict[str, Any]:
        """The server's index of documents (404 without one): how many documents and passages."""
        if app.state.index is None:
            raise ApiError(404, "this server has no index of documents: start it with rckit serve --index INDEX")
        return {**app.state.index.stats(), "path": str(Path(config.index).resolve()), "retriever_weight": retriever_weight}

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
    async def page():
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


def model_settings(onnx: bool, model_workers: int | None = None) -> tuple[int, int]:
    """``(model_workers, threads)`` by default: the model calls in flight at once, and each one's threads.

    onnxruntime: two calls at once where there are two cores or more, the cores shared between
    them, threads sleeping between operations (``spin=False``) so the event loop gets a core
    whenever it needs one. While one call runs, the next forms from the requests that arrived
    meanwhile, which serves more questions/s than one call on every core, and threads that spin
    starve the event loop (BENCHMARKS.md, "Answering without PyTorch"). PyTorch: one call on every
    core but one, which the event loop needs to parse requests and write answers while the model
    computes (BENCHMARKS.md, "Serving and long documents"; the alternatives measured:
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


def serve(source: str | None = None, config: ServeConfig = ServeConfig()) -> None:
    """Load the model from ``source`` (a run, an exported file, None: the default model) and serve it
    as ``config`` says until Ctrl-C or SIGTERM.

    The model runs in ``config.model_workers`` threads, each call on ``config.threads`` cores
    (left as None: :func:`model_settings`' for the backend, with onnxruntime two calls sharing the
    cores, with PyTorch one call on all cores but one); the event loop only parses requests and
    forms batches. Prints the URL once the socket listens (``port`` 0 takes a free port and prints
    which; ``https://`` with ``ssl_certfile``), then, for a network address served without a key
    (``allow_anonymous``), that anyone who can reach it can use it. A setting out of range, a bad
    key file or certificate, or a network address without a key or ``allow_anonymous`` is refused
    before the model loads.
    """
    config.check()
    found = open_model(source)  # which backend sets the defaults below
    model_workers, threads = model_settings(found.kind == "onnx", config.model_workers)
    config = replace(config, model_workers=model_workers, threads=config.threads or threads)
    reader = Reader.load(found.path, always_answer=config.always_answer, threads=config.threads, spin=False)
    app = create_app(reader, config)
    sock = listen(config.host, config.port)
    shown = f"[{config.host}]" if ":" in config.host else config.host
    url = f"{'https' if config.ssl_certfile else 'http'}://{shown}:{sock.getsockname()[1]}/"
    print(f"rckit serve: {model_name(reader.info)} at {url} (API: POST {url}v1/answer, docs: {url}docs); "
          "Ctrl-C stops", flush=True)
    if config.api_key is None and config.api_key_file is None and not is_loopback(config.host):
        print(f"rckit serve: no key (--allow-anonymous): anyone who can reach {shown}:{sock.getsockname()[1]} "
              "can use this server", flush=True)
    server = SignalledServer(uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=5,
                                            ssl_certfile=config.ssl_certfile, ssl_keyfile=config.ssl_keyfile))
    server.run(sockets=[sock])
    if server.stopped_by == signal.SIGINT:  # uvicorn re-raises it after shutdown, but not in every race
        raise KeyboardInterrupt
