"""Who may use ``rckit serve``, how much, and what was asked: one ASGI middleware, :class:`Gate`.

Every HTTP request passes, in this order:

1. its request id: ``X-Request-ID`` as sent where it is a sane token (:data:`REQUEST_ID`), else a
   new one; echoed on every response;
2. the access log (:class:`AccessLog`): one JSON line once it is answered;
3. CORS (Starlette's ``CORSMiddleware``), only for the ``cors_origin`` settings: it answers
   preflights itself, before a key is asked for (a browser sends none with a preflight);
4. the key (:class:`rckit.serve.keys.Keys`), on every path but the public ones (:func:`is_public`):
   401 with ``WWW-Authenticate: Bearer`` and one JSON line, the same for a wrong key and none;
5. the per-client limits (:class:`rckit.serve.limits.ClientLimits`), a client being its key's name,
   else its address: 429 with ``Retry-After`` past one, the refusal held until the client could
   have been admitted (a second at most), so that a client ignoring ``Retry-After`` cannot keep
   the server busy refusing it;
6. the route.

The public paths are what a browser loads before it can be given a key and what holds no data:
the page (``/``, ``/static/...``), the API docs and the schema they read (``/docs``,
``/openapi.json``) and ``/health``. Every other path, a path that does not exist included, needs
the key, so a route added later is closed unless made public here. :func:`declare` states the
same in the OpenAPI schema (an HTTP bearer scheme on every protected operation, its 401 and 429).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import sys
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse

from rckit.serve.config import ServeConfig
from rckit.serve.keys import Keys
from rckit.serve.limits import ClientLimits

REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+=/-]{0,127}")  # bounded, nothing a log or a header could mistake
PUBLIC = {"/", "/health", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"}
HOLD_REFUSAL = 1.0  # seconds a 429 is held at most before it is sent (BENCHMARKS.md, "One greedy client")
NEEDS_KEY = "this server needs a key: send it as the header `Authorization: Bearer KEY`"


def is_public(path: str) -> bool:
    """Whether ``path`` is answered without a key (and without the per-client limits)."""
    return path in PUBLIC or path.startswith("/static/")


def limits_of(config: ServeConfig) -> ClientLimits | None:
    """The per-client limits ``config`` sets, or None where it sets none."""
    if config.rate_limit is None and config.max_in_flight is None:
        return None
    return ClientLimits(config.rate_limit, config.burst, config.max_in_flight)


def over_limit(config: ServeConfig, wait: str) -> str:
    """The 429's message: the limits each client has, and when to try again."""
    said = []
    if config.rate_limit is not None:
        said.append(
            f"{config.rate_limit:g} request{'s' * (config.rate_limit != 1)} a second (bursts of "
            f"{config.burst}; --rate-limit)"
        )
    if config.max_in_flight is not None:
        said.append(
            f"{config.max_in_flight} request{'s' * (config.max_in_flight != 1)} being answered at once "
            "(--max-in-flight)"
        )
    return f"too many requests from this client, which may make {' and '.join(said)}; retry {wait}"


def request_id(sent: str | None) -> str:
    """``sent`` where it is a sane token, else a new id."""
    return sent if sent is not None and REQUEST_ID.fullmatch(sent) else uuid.uuid4().hex


def header(scope, name: bytes) -> bytes | None:
    return next((v for k, v in scope["headers"] if k == name), None)


def bearer(scope) -> bytes | None:
    """The token of an ``Authorization: Bearer TOKEN`` header, or None."""
    value = header(scope, b"authorization")
    if value is None:
        return None
    scheme, _, token = value.strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return None
    return token.strip() or None


def as_json(body: bytes) -> Any:
    """A logged body: its JSON, else its text."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return body.decode("utf-8", "replace")


class AccessLog:
    """One JSON line a request, flushed as written: to stderr (``"-"``), appended to a file, or
    nowhere (``"off"``). A line is a few hundred bytes written to the page cache or a pipe: it
    keeps the event loop for no time worth a thread."""

    def __init__(self, where: str):
        self.where = where
        self.file = open(where, "a", encoding="utf-8") if where not in ("-", "off") else None

    @property
    def on(self) -> bool:
        return self.where != "off"

    def write(self, record: dict) -> None:
        stream = self.file or sys.stderr  # looked up each time: whoever holds stderr now
        stream.write(json.dumps(record) + "\n")
        stream.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


class Gate:
    """The middleware: request id, access log, CORS, key, per-client limits, in that order (the
    module's docstring). Built by Starlette from ``app.add_middleware(Gate, keys=..., ...)``; the
    keys, limits and log are made by the caller, so that their mistakes show before the first
    request."""

    def __init__(self, app, keys: Keys, limits: ClientLimits | None, log: AccessLog, config: ServeConfig):
        self.app, self.keys, self.limits, self.log, self.config = app, keys, limits, log, config
        self.inner = self.guard
        if config.cors_origin:
            self.inner = CORSMiddleware(
                self.guard,
                allow_origins=list(config.cors_origin),
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type", "X-Request-ID"],
                expose_headers=["X-Request-ID", "Retry-After"],
                max_age=600,
            )

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":  # lifespan (the app has no websocket route: Starlette closes one)
            return await self.app(scope, receive, send)
        started, t0 = datetime.now(UTC), time.perf_counter()
        rid = request_id((header(scope, b"x-request-id") or b"").decode("latin-1") or None)
        scope["rckit.request_id"] = rid  # the 500 handler, outside this middleware, echoes it too
        text = self.log.on and self.config.log_text and not is_public(scope["path"])  # the API's, not the page's
        status, asked, answered, json_answer = [None], [], [], [False]

        async def receive_logged():
            message = await receive()
            if text and message["type"] == "http.request":
                asked.append(message.get("body", b""))
            return message

        async def send_logged(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                headers = [*message.get("headers", []), (b"x-request-id", rid.encode())]
                json_answer[0] = any(k == b"content-type" and v.startswith(b"application/json") for k, v in headers)
                message = {**message, "headers": headers}
            elif text and json_answer[0] and message["type"] == "http.response.body":
                answered.append(message.get("body", b""))
            await send(message)

        try:
            await self.inner(scope, receive_logged if text else receive, send_logged)
        except Exception:
            status[0] = status[0] or 500  # a bug: Starlette's outermost handler answers 500
            raise
        finally:
            if self.log.on:
                client = scope.get("client")
                record = {
                    "time": started.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                    "client": client[0] if client else None,
                    "key": scope.get("rckit.key"),
                    "method": scope["method"],
                    "path": scope["path"],
                    "status": status[0],
                    "ms": round((time.perf_counter() - t0) * 1000, 2),
                    "request_id": rid,
                }
                if text:
                    record["request"] = as_json(b"".join(asked)) if any(asked) else None
                    record["response"] = as_json(b"".join(answered)) if any(answered) else None
                self.log.write(record)

    async def guard(self, scope, receive, send) -> None:
        """The key, then the per-client limits, then the route."""
        if is_public(scope["path"]):
            return await self.app(scope, receive, send)
        name = None
        if self.keys.required:
            name = self.keys.match(bearer(scope))
            if name is None:
                reply = JSONResponse({"error": NEEDS_KEY}, 401, {"WWW-Authenticate": "Bearer"})
                return await reply(scope, receive, send)
            scope["rckit.key"] = name
        if self.limits is None:
            return await self.app(scope, receive, send)
        client = name or (scope.get("client") or ("unknown",))[0]
        wait = self.limits.enter(client)
        if wait is not None:
            # Held before it is sent: a client that resends at once instead of waiting Retry-After
            # would otherwise spend the event loop (and the interpreter lock the model workers'
            # Python needs) on refusals; held, each of its connections costs one refusal a second.
            await asyncio.sleep(min(wait, HOLD_REFUSAL))
            seconds = max(1, math.ceil(wait))
            reply = JSONResponse(
                {"error": over_limit(self.config, f"in {seconds} s")}, 429, {"Retry-After": str(seconds)}
            )
            return await reply(scope, receive, send)
        try:
            await self.app(scope, receive, send)
        finally:
            self.limits.leave(client)


def request_id_of(request) -> str | None:
    """The id :class:`Gate` gave ``request`` (for a reply made outside it)."""
    return request.scope.get("rckit.request_id")


def declare(schema: dict, config: ServeConfig, keys: Keys, limits: ClientLimits | None) -> dict:
    """``schema`` (an OpenAPI document) stating what :class:`Gate` does: with keys, an HTTP
    bearer scheme required by every operation on a path that is not public, each of them
    answering 401; with per-client limits, 429."""
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
    added = {}
    if keys.required:
        schema.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = {
            "type": "http",
            "scheme": "bearer",
            "description": "a key of the server (rckit serve --api-key / --api-key-file)",
        }
        added["401"] = {
            "description": "no key, or not a key of this server",
            "content": error,
            "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
        }
    if limits is not None:
        added["429"] = {
            "description": over_limit(config, "after Retry-After"),
            "content": error,
            "headers": {"Retry-After": {"schema": {"type": "integer", "minimum": 1}, "description": "seconds to wait"}},
        }
    for path, operations in schema.get("paths", {}).items():
        if is_public(path):
            continue
        for operation in operations.values():
            if keys.required:
                operation["security"] = [{"bearer": []}]
            operation.setdefault("responses", {}).update(added)
    return schema
