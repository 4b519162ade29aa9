"""Micro-batching: questions from concurrent requests answered by one model call.

A request puts its (context, question) pairs on an asyncio queue and awaits a future. One
collector task takes the first waiting request, then keeps taking more for up to ``window_ms``
or until ``max_batch`` questions are in hand (a request counts for all of its questions), and
runs one ``answer_batch`` call for all of them in a single worker thread, so the event loop
keeps accepting and parsing requests while the model computes. Each request's future then gets
exactly its own answers. While the model computes, new requests wait in the queue and form the
next batch, so batches grow with the load without waiting any longer.

A request that would take a batch past ``max_batch`` waits for the next one; a request with
more than ``max_batch`` questions on its own is answered in calls of ``max_batch``. Requests
asking for different ``max_answer_len`` go to separate calls; ``top_k`` is the batch's largest,
each request keeping its own first k. When a call fails and it held several requests, each
is retried alone, so one request the model cannot answer fails only itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

# answer_batch(pairs, top_k, max_answer_len) -> one best-first list of answers per pair
AnswerBatch = Callable[[list[tuple[str, str]], int, "int | None"], list[list[dict]]]


@dataclass
class Pending:
    """One request waiting in the queue: its pairs, settings and the future its answers go to."""

    pairs: list[tuple[str, str]]
    top_k: int
    max_answer_len: int | None
    future: asyncio.Future = field(repr=False)


class Batcher:
    """Answers ``submit``-ted questions in batches; ``answer_batch`` runs in one worker thread."""

    def __init__(self, answer_batch: AnswerBatch, max_batch: int = 32, window_ms: float = 2.0):
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, not {max_batch}")
        if window_ms < 0:
            raise ValueError(f"window_ms must be at least 0, not {window_ms}")
        self.answer_batch = answer_batch
        self.max_batch = max_batch
        self.window = window_ms / 1000
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="rckit-model")
        self.calls = 0  # model calls made
        self.questions = 0  # questions answered by them
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[Pending] | None = None
        self._task: asyncio.Task | None = None
        self._held: Pending | None = None  # taken from the queue, waits for the next batch
        self._current: list[Pending] = []  # the batch being answered

    def start(self) -> None:
        """Start the collector in the running event loop (again, if the loop changed)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a queue belongs to one loop
            self._loop, self._queue, self._held = loop, asyncio.Queue(), None
        elif self._task is not None and not self._task.done():
            return
        self._task = loop.create_task(self._collect(), name="rckit-batcher")

    async def stop(self) -> None:
        """Cancel the collector; requests in hand or still waiting get an error instead of hanging."""
        waiting = list(self._current)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        if self._held is not None:
            waiting.append(self._held)
        while self._queue is not None and not self._queue.empty():
            waiting.append(self._queue.get_nowait())
        for p in waiting:
            if not p.future.done():
                p.future.set_exception(RuntimeError("the server is shutting down"))
        self._held = None

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)

    @property
    def queued(self) -> int:
        """Requests waiting for a batch."""
        return (self._queue.qsize() if self._queue is not None else 0) + (self._held is not None)

    async def submit(self, pairs: list[tuple[str, str]], top_k: int = 1,
                     max_answer_len: int | None = None) -> list[list[dict]]:
        """The answers to ``pairs``, one best-first list of at most ``top_k`` per pair."""
        self.start()
        future = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(Pending(list(pairs), top_k, max_answer_len, future))
        return await future

    async def _collect(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            first = self._held or await self._queue.get()
            self._held = None
            batch, n = [first], len(first.pairs)
            deadline = loop.time() + self.window
            while n < self.max_batch:
                if self._queue.empty():
                    timeout = deadline - loop.time()
                    if timeout <= 0:
                        break
                    try:
                        item = await asyncio.wait_for(self._queue.get(), timeout)
                    except asyncio.TimeoutError:
                        break
                else:
                    item = self._queue.get_nowait()
                if n + len(item.pairs) > self.max_batch:
                    self._held = item
                    break
                batch.append(item)
                n += len(item.pairs)
            self._current = batch
            try:
                await self._answer(batch)
            finally:
                self._current = []

    async def _answer(self, batch: list[Pending]) -> None:
        batch = [p for p in batch if not p.future.done()]  # a client gone before its turn
        groups: dict[int | None, list[Pending]] = {}
        for p in batch:
            groups.setdefault(p.max_answer_len, []).append(p)
        for max_answer_len, group in groups.items():
            try:
                answers = await self._call(group, max_answer_len)
            except Exception as e:  # noqa: BLE001 - the error goes to the requests, not the loop
                if len(group) == 1:
                    _resolve(group[0], exception=e)
                    continue
                for p in group:  # find the request(s) the model cannot answer
                    try:
                        _resolve(p, await self._call([p], max_answer_len))
                    except Exception as e1:  # noqa: BLE001
                        _resolve(p, exception=e1)
                continue
            i = 0
            for p in group:
                _resolve(p, [a[: p.top_k] for a in answers[i : i + len(p.pairs)]])
                i += len(p.pairs)

    async def _call(self, group: list[Pending], max_answer_len: int | None) -> list[list[dict]]:
        """One model call per ``max_batch`` questions of ``group``, in the worker thread."""
        pairs = [pair for p in group for pair in p.pairs]
        top_k = max(p.top_k for p in group)
        loop = asyncio.get_running_loop()
        answers: list[list[dict]] = []
        for i in range(0, len(pairs), self.max_batch):
            chunk = pairs[i : i + self.max_batch]
            out = await loop.run_in_executor(self.executor, self.answer_batch, chunk, top_k, max_answer_len)
            if len(out) != len(chunk):
                raise RuntimeError(f"the model gave {len(out)} answer lists for {len(chunk)} questions")
            self.calls += 1
            self.questions += len(chunk)
            answers.extend(out)
        return answers


def _resolve(p: Pending, result=None, exception: BaseException | None = None) -> None:
    if p.future.done():  # cancelled: the client went away
        return
    if exception is not None:
        p.future.set_exception(exception)
    else:
        p.future.set_result(result)
