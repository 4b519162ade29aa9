"""How much one client may ask of the server: :class:`ClientLimits`.

A client (its key's name, else its address) has two limits, each off when its setting is None:
a request rate, kept by a token bucket (``burst`` tokens at most, refilled at ``rate`` a second,
one taken per request admitted: ``burst`` requests at once, then ``rate`` a second on average),
and a number of its requests being answered at once (``in_flight``). A request past either is
refused with the seconds to wait (the route answers 429 with ``Retry-After``), and takes
nothing: a refused request spends no token and holds no place.

Memory stays bounded by the clients that are active: a client whose bucket is full and who has
nothing in flight is the same as a client never seen, so its state is dropped, when its last
request leaves if its bucket is full then, else by a sweep at most once every time an empty bucket
takes to fill (``burst / rate``). A flood of addresses costs a few hundred bytes for each address
seen in the last two such spells.

Not thread-safe, and needs no lock where it is used: the server's event loop calls
:meth:`~ClientLimits.enter` and :meth:`~ClientLimits.leave` from its one thread, and neither awaits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

IN_FLIGHT_WAIT = 1.0  # seconds a client at its in-flight limit is told to wait: a request the model reads soon ends


@dataclass(slots=True)
class ClientState:
    """One client's bucket (``tokens`` at time ``stamp``) and its requests being answered."""

    tokens: float
    stamp: float
    in_flight: int = 0


class ClientLimits:
    """Per-client limits: a token bucket of ``burst`` tokens refilled at ``rate`` a second
    (``rate=None``: no rate limit) and at most ``in_flight`` requests being answered at once
    (None: no limit). ``clock``: seconds, monotonic (tests pass a fake one)."""

    def __init__(
        self, rate: float | None, burst: int, in_flight: int | None, clock: Callable[[], float] = time.monotonic
    ):
        if rate is not None and rate <= 0:
            raise ValueError(f"rate must be above 0 requests a second, not {rate}")
        if burst < 1:
            raise ValueError(f"burst must be at least 1, not {burst}")
        if in_flight is not None and in_flight < 1:
            raise ValueError(f"in_flight must be at least 1, not {in_flight}")
        self.rate, self.burst, self.in_flight, self.clock = rate, burst, in_flight, clock
        self.clients: dict[str, ClientState] = {}
        self.refill = burst / rate if rate else 0.0  # seconds an empty bucket takes to fill
        self.swept = clock()

    def __len__(self) -> int:
        """The clients with state kept: a token short of a full bucket, or a request in flight."""
        return len(self.clients)

    def enter(self, client: str) -> float | None:
        """None: admitted (the caller must call leave(client) once the request is answered);
        else the seconds the client should wait (Retry-After), and nothing was taken."""
        now = self.clock()
        if self.rate and now - self.swept >= self.refill:
            self.sweep(now)
        state = self.clients.get(client)
        if state is None:
            state = ClientState(float(self.burst), now)
        elif self.rate:
            state.tokens = min(self.burst, state.tokens + (now - state.stamp) * self.rate)
            state.stamp = now
        wait = 0.0
        if self.in_flight is not None and state.in_flight >= self.in_flight:
            wait = IN_FLIGHT_WAIT
        if self.rate and state.tokens < 1:
            wait = max(wait, (1 - state.tokens) / self.rate)  # when the next token arrives
        if wait:
            return wait  # a new client is never refused, so nothing was stored for it
        if self.rate:
            state.tokens -= 1
        state.in_flight += 1
        self.clients[client] = state
        return None

    def leave(self, client: str) -> None:
        """One of ``client``'s admitted requests has been answered."""
        state = self.clients.get(client)
        if state is None:
            return
        state.in_flight = max(0, state.in_flight - 1)
        if not state.in_flight and self.full(state, self.clock()):
            del self.clients[client]

    def full(self, state: ClientState, now: float) -> bool:
        """Whether ``state``'s bucket is full at ``now`` (always, without a rate limit)."""
        return not self.rate or state.tokens + (now - state.stamp) * self.rate >= self.burst

    def sweep(self, now: float) -> None:
        """Drop the state of every client that has nothing in flight and a full bucket."""
        idle = [c for c, s in self.clients.items() if not s.in_flight and self.full(s, now)]
        for c in idle:
            del self.clients[c]
        self.swept = now
