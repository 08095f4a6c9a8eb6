"""Dynamic batching: requests from concurrent clients merged into one model call, then split back.

One asyncio task takes the queue's requests in arrival order and runs them in one worker thread, one
batch at a time, so the event loop keeps accepting and refusing requests while the model computes.
When the worker is free, the next batch takes every waiting request while they fit `max_batch_tokens`
(a request larger than the cap runs alone) and runs at once, with one exception: if that batch is
not full and some request is known to be on its way (`expect`: the HTTP layer has its headers and is
reading or checking its body), the batch waits for it, at most `max_wait_s`. A lone request on an
idle server therefore never waits, and requests that arrive while a batch runs are taken together by
the next one; nothing waits on a timer for clients that may never come.

The queue is bounded: `submit` refuses a request (`QueueFull`) when `max_queue` requests are already
waiting. `stop_taking` (on SIGTERM) refuses new requests and runs the waiting ones at once; `close`
does the same and returns once every accepted request has its answer. Pure asyncio: no HTTP here.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


class QueueFull(Exception):
    """`max_queue` requests are already waiting."""


class Closed(Exception):
    """The batcher is shutting down and takes no new requests."""


@dataclass
class _Job:
    items: Sequence[Any]
    tokens: int
    future: asyncio.Future


class Arrival:
    """A request on its way to `Batcher.submit` (from `Batcher.expect`): while it is open, a batch that is
    not full waits for it, at most max_wait_s. `submit` closes it, and so does leaving its `with` block
    (a request refused before it was queued)."""

    def __init__(self, batcher: Batcher):
        self._batcher, self.open = batcher, True

    def close(self) -> None:
        """No longer on its way (queued, or refused): a batch waiting for it need not wait any more."""
        if self.open:
            self.open = False
            self._batcher._arrived()

    def __enter__(self) -> Arrival:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Batcher:
    """Merge concurrent `submit` calls into batches for `run`.

    Args:
        run: items -> one result per item, in order; called in a worker thread, one batch at a time.
        max_batch_tokens: tokens a batch holds at most (a larger request runs alone).
        max_wait_s: how long a batch that is not full waits for requests known to be on their way (`expect`).
        max_queue: requests waiting at most.
        on_batch: called on the event loop after each batch with (requests, items, tokens, seconds) (metrics).
        on_depth: called with the number of waiting requests whenever it changes (metrics).
    """

    def __init__(self, run: Callable[[list], list], *, max_batch_tokens: int, max_wait_s: float, max_queue: int,
                 on_batch: Callable[[int, int, int, float], None] | None = None,
                 on_depth: Callable[[int], None] | None = None):
        self.run = run
        self.max_batch_tokens, self.max_wait_s, self.max_queue = max_batch_tokens, max_wait_s, max_queue
        self.on_batch = on_batch or (lambda *args: None)
        self.on_depth = on_depth or (lambda depth: None)
        self._queue: collections.deque[_Job] = collections.deque()
        self._queued_tokens = 0
        self._arriving = 0
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="albertlm-model")

    @property
    def depth(self) -> int:
        """Requests waiting (not yet in a running batch)."""
        return len(self._queue)

    @property
    def arriving(self) -> int:
        """Requests announced by `expect` and not yet queued or refused."""
        return self._arriving

    def expect(self) -> Arrival:
        """Announce a request that will be submitted soon (its body is being read and checked), so that a
        batch that is not full waits for it rather than running without it. Call on the event loop.

        Returns:
            the Arrival; pass it to `submit`, or close it (a `with` block) when the request is refused.
        """
        self._arriving += 1
        return Arrival(self)

    def _arrived(self) -> None:
        self._arriving -= 1
        if self._wakeup is not None:
            self._wakeup.set()  # a batch waiting for it looks again

    def start(self) -> None:
        """Start the batching task on the running event loop."""
        self._wakeup = asyncio.Event()
        self._event_loop = asyncio.get_running_loop()
        self._task = self._event_loop.create_task(self._loop())

    def stop_taking(self) -> None:
        """From any thread (a signal handler): refuse new requests (`Closed`) and run the waiting ones now,
        without waiting out max_wait_s."""
        if self._event_loop is not None:
            self._event_loop.call_soon_threadsafe(self._stop)

    def _stop(self) -> None:
        self._closing = True
        self._wakeup.set()

    async def submit(self, items: Sequence[Any], tokens: int, arrival: Arrival | None = None) -> list:
        """The results of `run` for `items`, once the batch holding them has run.

        Args:
            items: the request's inputs (at least one).
            tokens: what they cost against max_batch_tokens.
            arrival: the request's announcement (`expect`), closed once the request is queued or refused.
        Raises:
            QueueFull: max_queue requests are waiting.
            Closed: the batcher is shutting down.
            Exception: whatever `run` raised for the batch.
        """
        with arrival or contextlib.nullcontext():  # queued first, then no longer on its way: no await between
            if self._closing or self._task is None:
                raise Closed("the server is shutting down")
            if len(self._queue) >= self.max_queue:
                raise QueueFull(f"{len(self._queue)} requests are waiting (--max-queue {self.max_queue})")
            job = _Job(items, tokens, asyncio.get_running_loop().create_future())
            self._queue.append(job)
            self._queued_tokens += tokens
            self.on_depth(len(self._queue))
            self._wakeup.set()
        return await job.future

    async def close(self) -> None:
        """Take no more requests; return once every accepted one is answered."""
        if self._task is not None:
            self._stop()
            await self._task
        self._executor.shutdown(wait=True)

    async def _loop(self) -> None:
        while True:
            if not self._queue:
                if self._closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            await self._gather()
            jobs = self._take()
            if jobs:
                await self._run(jobs)

    async def _gather(self) -> None:
        """Wait while the waiting requests do not fill a batch and more are known to be on their way, at most
        max_wait_s; return at once when none is on its way (a lone request runs now) or when closing."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wait_s
        while not self._closing and self._arriving > 0 and self._queued_tokens < self.max_batch_tokens:
            left = deadline - loop.time()
            if left <= 0:
                return
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), left)
            except asyncio.TimeoutError:
                return

    def _take(self) -> list[_Job]:
        """Whole requests from the front of the queue while they fit the token cap (at least one, unless
        every waiting one was cancelled)."""
        jobs, tokens, dropped = [], 0, 0
        while self._queue and (not jobs or tokens + self._queue[0].tokens <= self.max_batch_tokens):
            job = self._queue.popleft()
            if job.future.cancelled():  # its client went away while it waited: nothing to compute
                dropped += job.tokens
                continue
            jobs.append(job)
            tokens += job.tokens
        self._queued_tokens -= tokens + dropped
        self.on_depth(len(self._queue))
        return jobs

    async def _run(self, jobs: list[_Job]) -> None:
        loop = asyncio.get_running_loop()
        items = [item for job in jobs for item in job.items]
        start = loop.time()
        try:
            results = await loop.run_in_executor(self._executor, self.run, items)
            if len(results) != len(items):
                raise RuntimeError(f"the model gave {len(results)} results for {len(items)} inputs")
        except Exception as exc:  # every request of the batch gets the error; the loop goes on
            for job in jobs:
                if not job.future.done():
                    job.future.set_exception(exc)
            return
        finally:
            self.on_batch(len(jobs), len(items), sum(job.tokens for job in jobs), loop.time() - start)
        at = 0
        for job in jobs:
            if not job.future.done():  # a waiter cancelled meanwhile (its client went away) wants nothing
                job.future.set_result(results[at:at + len(job.items)])
            at += len(job.items)
