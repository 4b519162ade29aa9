"""Scheduling a server's model calls by window, across every waiting request.

A request is first planned (``reader.plan_many``: its contexts tokenized and cut into windows),
then its windows wait to be read. One collector task forms each model call from the windows of
all waiting requests and runs it (``reader.read``) in a model thread, so the event loop keeps
accepting and parsing requests meanwhile; a request gets its answers, merged over its windows
(``job.answers()``), once its last window is read and no call still holds one. A long document
is therefore never one unit that everything queued behind it waits for: its windows take turns
with other requests' in calls of bounded size.

``model_workers`` calls may be in flight at once, each in its own thread: the items waiting when calls
are formed are shared between the idle workers, one call each, and what arrives while every
worker is busy joins the next call. With 8 closed-loop clients one call's clients are being
answered and their next requests parsed while the other call reads (docs/benchmark-history.md,
"Answering without PyTorch (issue 30)").

Planning: the requests with short contexts (up to ten windows' worth of characters) that wait
when a call is formed are planned together, in one tokenizing pass, in the model thread just
before it, as one batched call would; a long document is planned alone in a planning thread
beside the model's, so that tokenizing it never holds up the others' calls.

A call holds at most ``max_batch`` items (a question on a window) and at most ``max_tokens``
context tokens, which bounds how long one call keeps the model, and so how long a request that
arrives during it waits for the next. Which windows go in (``policy``):

- ``"fair"`` (the default): the requests with the least work left go first, whole; and once
  requests have waited ``age_ms``, each call first takes one window of one of them, in turn
  (the one whose turn was longest ago). A paragraph question is read in the next call even
  while long documents are being read, and no long document starves behind a stream of short
  ones: it advances in every call they leave room in, and by one window in its turn
  (BENCHMARKS.md, "Serving and long documents": measured against ``"round-robin"``, one window of each waiting
  request in turn).
- ``"round-robin"``: one window of each waiting request in turn, in arrival order.

Before a call that is not full the collector waits ``batch_window_ms`` for requests to join it. A
request's time limit (``request_timeout``, planning included) fails it with :class:`RequestTimeout`
and drops its windows; one of more than ``max_work`` items is refused after planning with
:class:`TooMuchWork`. When a call fails and it held several requests, each is read alone again,
so one request the model cannot answer fails only itself.
"""

from __future__ import annotations

import asyncio
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from rckit.serve.config import ServeConfig


class TooMuchWork(ValueError):
    """A request whose questions x windows is over the server's ``max_work``."""

    def __init__(self, work: int, limit: int):
        super().__init__(
            f"the request asks for {work} readings (questions x windows of the context); this server "
            f"reads at most {limit} for one request (--max-work): send fewer questions or a shorter context"
        )
        self.work, self.limit = work, limit


class RequestTimeout(TimeoutError):
    """A request not answered within the server's time limit."""

    def __init__(self, limit: float):
        super().__init__(
            f"the request was not answered within {limit:g} s, the most this server gives one "
            "(--request-timeout); it was dropped"
        )
        self.limit = limit


@dataclass(eq=False)
class Submission:
    """A request waiting to be planned."""

    pairs: list[tuple[str, str]]
    top_k: int
    max_answer_len: int | None
    future: asyncio.Future = field(repr=False)  # its answers
    arrived: float = 0.0  # event-loop time
    own: bool = True  # the verifier's own reader judges each pair (False: a collection's passages)
    chars: int = 0  # its contexts' length: a long one is planned alone

    def __post_init__(self):
        self.chars = sum(len(c) for c in {c for c, _ in self.pairs})


@dataclass(eq=False)
class Pending:
    """One planned request waiting: its job, its windows still to read, and where its answers go."""

    job: Any  # rckit.answering.job.Job, or anything with windows, cost(), answers()
    future: asyncio.Future = field(repr=False)
    arrived: float  # event-loop time
    windows: deque = field(default_factory=deque)
    left: int = 0  # items still to read
    served: float = 0.0  # when it last had an aged turn (fair policy)
    in_flight: int = 0  # model calls reading some of its windows now

    def __post_init__(self):
        self.windows = deque(self.job.windows)
        self.left = sum(len(w) for w in self.windows)
        self.served = self.arrived


class Batcher:
    """Answers ``submit``-ted questions; ``reader.plan_many`` and ``reader.read`` run in worker threads.

    ``config``: the server's settings (``max_batch``, ``max_tokens``, ``batch_window_ms``,
    ``policy``, ``max_work``, ``request_timeout``, ``model_workers``: None is one call at a
    time); ``age_ms``: how long a request waits before the fair policy gives it a turn."""

    def __init__(self, reader, config: ServeConfig = ServeConfig(), age_ms: float = 200.0):
        config.check()
        if age_ms < 0:
            raise ValueError(f"age_ms must be at least 0, not {age_ms}")
        self.reader, self.config = reader, config
        self.batch_window, self.age = config.batch_window_ms / 1000, age_ms / 1000  # seconds
        self.model_workers = config.model_workers or 1
        self.executor = ThreadPoolExecutor(self.model_workers, thread_name_prefix="rckit-model")
        self.planner = ThreadPoolExecutor(1, thread_name_prefix="rckit-plan")
        self.calls = 0  # model calls made
        self.questions = 0  # questions answered
        self.short_chars = 10 * int(reader.window)  # contexts up to this long are planned together
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._plan_wake: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []
        self._free: asyncio.Semaphore | None = None  # model calls that may start now
        self._calls: set[asyncio.Task] = set()  # model calls in flight (more than one worker)
        self._busy = 0  # workers reading
        self._to_plan: list[Submission] = []
        self._waiting: list[Pending] = []

    def start(self) -> None:
        """Start the collector in the running event loop (again, if the loop changed)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # an event belongs to one loop
            self._loop, self._wake, self._plan_wake = loop, asyncio.Event(), asyncio.Event()
            self._free = asyncio.Semaphore(self.model_workers)
            self._waiting, self._to_plan, self._calls, self._busy = [], [], set(), 0
        elif self._tasks and not any(t.done() for t in self._tasks):
            return
        for t in self._tasks:
            t.cancel()
        self._tasks = [
            loop.create_task(self._plan(), name="rckit-planner"),
            loop.create_task(self._collect(), name="rckit-batcher"),
        ]

    async def stop(self) -> None:
        """Cancel the planner, the collector and the calls in flight; requests still waiting get an
        error instead of hanging."""
        for t in [*self._tasks, *self._calls]:
            t.cancel()
            try:
                await t
            except asyncio.CancelledError:
                pass
        self._tasks, self._calls = [], set()
        for p in [*self._to_plan, *self._waiting]:
            _fail(p, RuntimeError("the server is shutting down"))
        self._waiting, self._to_plan = [], []

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.planner.shutdown(wait=False, cancel_futures=True)

    @property
    def queued(self) -> int:
        """Requests waiting to be planned or for (more of) their windows to be read."""
        return len(self._to_plan) + len(self._waiting)

    async def submit(
        self, pairs: list[tuple[str, str]], top_k: int = 1, max_answer_len: int | None = None, own: bool = True
    ) -> list[list[dict]]:
        """The answers to ``pairs``, one best-first list of at most ``top_k`` per pair (``own``:
        :meth:`rckit.answering.reader.Reader.answer_batch`'s)."""
        self.start()
        loop = asyncio.get_running_loop()
        submission = Submission(list(pairs), top_k, max_answer_len, loop.create_future(), loop.time(), own)
        self._to_plan.append(submission)
        self._wake.set()
        self._plan_wake.set()
        try:
            async with asyncio.timeout(self.config.request_timeout):
                return await submission.future
        except TimeoutError:
            raise RequestTimeout(self.config.request_timeout) from None
        finally:  # answered, timed out, or the client went away: nothing of it is left to read
            if submission in self._to_plan:
                self._to_plan.remove(submission)
            self._waiting = [p for p in self._waiting if p.future is not submission.future]

    def _admit(self, submission: Submission, job) -> None:
        """A planned request joins the waiting ones (or is answered or refused at once)."""
        if submission.future.done():
            return
        if not isinstance(job, BaseException):
            job.own = submission.own
        if isinstance(job, BaseException):
            submission.future.set_exception(job)
        elif job.work > self.config.max_work:
            submission.future.set_exception(TooMuchWork(job.work, self.config.max_work))
        elif not job.windows:
            submission.future.set_result(job.answers())
        else:
            self._waiting.append(Pending(job, submission.future, submission.arrived))
            self._wake.set()

    def _items_in_hand(self) -> int:
        return sum(p.left for p in self._waiting) + sum(len(s.pairs) for s in self._short())

    def _short(self) -> list[Submission]:
        return [s for s in self._to_plan if s.chars <= self.short_chars]

    async def _plan_together(self, batch: list[Submission], executor: ThreadPoolExecutor) -> None:
        """Plan ``batch`` in one tokenizing pass in ``executor``; each request its job or error."""
        for s in batch:
            self._to_plan.remove(s)
        batch = [s for s in batch if not s.future.done()]  # gone: timed out, or the client left
        if not batch:
            return
        try:
            jobs = await asyncio.get_running_loop().run_in_executor(
                executor, self.reader.plan_many, [(s.pairs, s.top_k, s.max_answer_len) for s in batch]
            )
        except Exception as e:  # noqa: BLE001 - the error goes to the requests, not the loop
            jobs = [e] * len(batch)
        for s, job in zip(batch, jobs):
            self._admit(s, job)

    async def _plan(self) -> None:
        """The planning thread's task: the long documents, one at a time, oldest first."""
        while True:
            long = [s for s in self._to_plan if s.chars > self.short_chars]
            if not long:
                self._plan_wake.clear()
                await self._plan_wake.wait()
                continue
            await self._plan_together(long[:1], self.planner)

    def _unread(self) -> list[Pending]:
        """The waiting requests with windows not yet in any call."""
        return [p for p in self._waiting if p.windows]

    async def _collect(self) -> None:
        while True:
            while not self._unread() and not self._short():
                self._wake.clear()
                await self._wake.wait()
            if self.batch_window > 0 and self._items_in_hand() < self.config.max_batch:
                await asyncio.sleep(self.batch_window)  # requests arriving meanwhile share the call
            short = self._short()
            if short:  # in a model thread, before the call, as one batched call would
                await self._plan_together(short, self.executor)
            await self._free.acquire()  # while every worker is busy, what is planned waits here
            # The items waiting now, shared between the idle workers: one call each, at once.
            share = -(-sum(p.left for p in self._unread()) // (self.model_workers - self._busy))
            while True:
                parts = self._take(share)
                if not parts:
                    self._free.release()
                    break
                self._busy += 1
                for p, _ in parts:
                    p.in_flight += 1
                if self.model_workers == 1:
                    await self._call(parts)
                    break
                task = self._loop.create_task(self._call(parts))
                self._calls.add(task)
                task.add_done_callback(self._calls.discard)
                if not self._unread() or self._busy == self.model_workers:
                    break
                await self._free.acquire()

    async def _call(self, parts: list[tuple[Pending, list]]) -> None:
        """One model call; then each request whose last window it read gets its answers."""
        try:
            await self._read(parts)
        finally:
            self._busy -= 1
            self._free.release()
            for p, _ in parts:
                p.in_flight -= 1
        for p, _ in parts:
            if not p.windows and not p.in_flight and p in self._waiting:
                self._waiting.remove(p)
                try:
                    answers = p.job.answers()
                except Exception as e:  # noqa: BLE001 - the error goes to the request, not the loop
                    _fail(p, e)
                    continue
                if not p.future.done():
                    p.future.set_result(answers)
                    self.questions += len(p.job.pairs)
        self._wake.set()

    def _take(self, most: int | None = None) -> list[tuple[Pending, list]]:
        """The next call's items, ``(request, its items)``, at most ``most`` (and ``max_batch``),
        chosen by the policy (module docstring)."""
        now = self._loop.time()
        max_batch = self.config.max_batch
        call = _Call(min(max_batch, most or max_batch), self.config.max_tokens)
        unread = self._unread()
        if self.config.policy == "fair":
            aged = [p for p in unread if now - p.arrived >= self.age]
            if aged:  # its turn: the aged request served longest ago, one window
                turn = min(aged, key=lambda p: (p.served, p.arrived))
                call.fill(turn, windows=1)
                turn.served = now
            for p in sorted(unread, key=lambda p: (p.left, p.arrived)):  # then the least work left, whole
                if not call.open or not call.fill(p):
                    break
        else:  # round-robin: one window of each request in turn
            while call.open and any(p.windows for p in unread):
                if not all(call.fill(p, windows=1) for p in unread if p.windows):
                    break
        return list(call.parts.values())

    async def _read(self, parts: list[tuple[Pending, list]]) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self.executor, self.reader.read, [(p.job, items) for p, items in parts])
            self.calls += 1
            return
        except Exception as e:  # noqa: BLE001 - the error goes to the requests, not the loop
            if len(parts) == 1:
                self._drop(parts[0][0], e)
                return
        for p, items in parts:  # find the request(s) the model cannot answer
            try:
                await loop.run_in_executor(self.executor, self.reader.read, [(p.job, items)])
                self.calls += 1
            except Exception as e1:  # noqa: BLE001
                self._drop(p, e1)

    def _drop(self, p: Pending, error: BaseException) -> None:
        if p in self._waiting:
            self._waiting.remove(p)
        _fail(p, error)


class _Call:
    """The items of one model call as they are chosen, within its item and token bounds."""

    def __init__(self, max_items: int, max_tokens: int):
        self.room, self.tokens = max_items, max_tokens
        self.empty = True
        self.parts: dict[int, tuple[Pending, list]] = {}

    @property
    def open(self) -> bool:
        return self.room > 0 and self.tokens > 0

    def fill(self, p: Pending, windows: int | None = None) -> bool:
        """Add up to ``windows`` (None: all) of ``p``'s windows in order while they fit; False
        once the call is full. A window too large for an empty call is split to fit it."""
        n = 0
        while p.windows and (windows is None or n < windows):
            group, cost = p.windows[0], p.job.cost(p.windows[0])
            if len(group) > self.room or cost > self.tokens:
                if not self.empty:
                    return False
                k = max(1, min(self.room, len(group) * self.tokens // max(cost, 1)))
                group, p.windows[0] = group[:k], group[k:]
                cost = p.job.cost(group)
            else:
                p.windows.popleft()
            self.parts.setdefault(id(p), (p, []))[1].extend(group)
            p.left -= len(group)
            self.room, self.tokens, self.empty, n = self.room - len(group), self.tokens - cost, False, n + 1
            if not self.open:
                return False
        return True


def _fail(p: Pending | Submission, error: BaseException) -> None:
    if not p.future.done():  # cancelled: the client went away
        p.future.set_exception(error)
