"""``POST /v1/explain``'s explanations, one at a time beside the batcher's answers (:class:`Explainer`)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from rckit.answering.explanation import Explanation, needs_torch
from rckit.answering.reader import Reader
from rckit.explain.page import html_of
from rckit.model_files.source import installed, pytorch_beside
from rckit.serve.batcher import RequestTimeout
from rckit.serve.config import ServeConfig
from rckit.serve.schema import ApiError


class Explainer:
    """``POST /v1/explain``'s explanations (:meth:`Reader.explain <rckit.answering.reader.Reader.explain>`),
    one at a time in a thread of their own.

    Explaining reads ``steps + 1`` copies of a window with gradients and switches a process-wide
    setting while it runs (``kernels.use``), so two must not overlap: one thread takes them in
    turn, and the event loop, and with it the batcher's answers, goes on meanwhile. A PyTorch
    reader explains itself; a reader of an ONNX file cannot (no gradients), so the ``.safetensors``
    file beside it is loaded with PyTorch on the first explanation, or, where there is none or no
    PyTorch, each request is refused with 501 and :func:`~rckit.answering.explanation.needs_torch`'s
    line; so is every request to a reader without explanations (rckit's own reader,
    :class:`~rckit.answering.pointer_reader.PointerReader`). A request waiting past
    ``config.request_timeout`` is dropped with 503 (one already computing finishes unseen)."""

    def __init__(self, reader, config: ServeConfig):
        self.reader, self.config = reader, config
        self.pytorch = None  # the reader that explains, once known
        self.pool: ThreadPoolExecutor | None = None

    def start(self) -> None:
        if self.pool is None:
            self.pool = ThreadPoolExecutor(1, thread_name_prefix="rckit-explain")

    def stop(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None

    async def explain(
        self, context: str, question: str, steps: int, max_answer_len: int | None, html: bool
    ) -> tuple[Explanation, str | None]:
        """The explanation, and with ``html`` the page that draws it (drawn in the same thread: a
        long window's page is large), or the request's :class:`ApiError`."""
        self.start()  # as the batcher does: an app driven without its lifespan explains too
        work = asyncio.get_running_loop().run_in_executor(
            self.pool, self.run, context, question, steps, max_answer_len, html
        )
        try:
            async with asyncio.timeout(self.config.request_timeout):
                return await work
        except TimeoutError:
            raise ApiError(503, str(RequestTimeout(self.config.request_timeout))) from None

    def run(
        self, context: str, question: str, steps: int, max_answer_len: int | None, html: bool
    ) -> tuple[Explanation, str | None]:
        reader = self.torch_reader()
        try:
            explanation = reader.explain(context, question, steps, max_answer_len)
        except Exception as e:  # noqa: BLE001 - this request's 500; the server goes on
            raise ApiError(500, f"the model failed to explain this request: {type(e).__name__}: {e}") from None
        return explanation, html_of(explanation) if html else None

    def torch_reader(self):
        """The served reader where it is PyTorch's, else the PyTorch model beside its ONNX file (loaded
        once); rckit's own reader (which has no ``explain`` yet) refused with 501."""
        if not hasattr(self.reader, "explain"):
            raise ApiError(501, f"{model_of(self.reader)} cannot explain its answers yet: ask another model to explain")
        if self.pytorch is None and self.reader.info.get("backend") == "torch":
            self.pytorch = self.reader
        if self.pytorch is None:
            source = self.reader.info.get("source")
            beside = pytorch_beside(source)
            if beside is None or not installed("torch"):
                raise ApiError(501, needs_torch(source))
            try:
                self.pytorch = Reader.load(
                    beside,
                    "cpu",
                    always_answer=self.config.always_answer,
                    threads=self.config.threads,
                    no_answer_threshold=self.config.no_answer_threshold,
                )
            except Exception as e:  # noqa: BLE001 - each explanation says so; answering goes on
                raise ApiError(500, f"cannot load {beside.name} to explain with: {type(e).__name__}: {e}") from None
        return self.pytorch


def model_of(reader) -> str:
    """The reader's model and file, as a refusal names them."""
    info = reader.info
    return f"{info.get('model')} ({info.get('source')})" if info.get("source") else str(info.get("model"))
