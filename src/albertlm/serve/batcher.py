"""Dynamic batching: requests from concurrent clients merged into one model call, then split back.

One asyncio task takes the queue's requests in arrival order. The first request of a batch waits up to
`max_wait_s` for others to join; the batch closes early once the waiting requests hold
`max_batch_tokens`, and takes whole requests while they fit (a request larger than the cap runs
alone). The model runs in one worker thread, so the event loop keeps accepting and refusing requests
while it computes, and batches never overlap. The queue is bounded: `submit` refuses a request
(`QueueFull`) when `max_queue` requests are already waiting. `stop_taking` (on SIGTERM) refuses new
requests and runs the waiting ones at once; `close` does the same and returns once every accepted
request has its answer. Pure asyncio: no HTTP here.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
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


class Batcher:
    """Merge concurrent `submit` calls into batches for `run`.

    Args:
        run: items -> one result per item, in order; called in a worker thread, one batch at a time.
        max_batch_tokens: tokens a batch holds at most (a larger request runs alone).
        max_wait_s: how long the first request of a batch waits for more.
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
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="albertlm-model")

    @property
    def depth(self) -> int:
        """Requests waiting (not yet in a running batch)."""
        return len(self._queue)

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

    async def submit(self, items: Sequence[Any], tokens: int) -> list:
        """The results of `run` for `items`, once the batch holding them has run.

        Args:
            items: the request's inputs (at least one).
            tokens: what they cost against max_batch_tokens.
        Raises:
            QueueFull: max_queue requests are waiting.
            Closed: the batcher is shutting down.
            Exception: whatever `run` raised for the batch.
        """
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
        """Wait until the queue holds a full batch, the first request has waited max_wait_s, or closing."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wait_s
        while not self._closing and self._queued_tokens < self.max_batch_tokens:
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
