"""The dynamic batcher alone (pure asyncio, no HTTP): merging, the token cap, the bounded queue,
draining, and failures that reach only the batch they happened in."""

from __future__ import annotations

import asyncio
import threading

import pytest

from albertlm.serve.batcher import Batcher, Closed, QueueFull


class Model:
    """A stand-in for the model: records each batch; `gate` (when given) holds every batch until set."""

    def __init__(self, gate: threading.Event | None = None, fail_on: str | None = None):
        self.batches: list[list] = []
        self.gate, self.fail_on = gate, fail_on
        self.running = threading.Event()

    def __call__(self, items: list) -> list:
        self.batches.append(list(items))
        self.running.set()
        if self.gate is not None:
            self.gate.wait(timeout=30)
        if self.fail_on in items:
            raise ValueError(f"cannot do {self.fail_on}")
        return [f"<{x}>" for x in items]


async def _until(condition) -> None:
    while not condition():
        await asyncio.sleep(0.005)


def test_concurrent_requests_merge_into_one_batch_and_split_back():
    model = Model()

    async def main():
        # a long wait: the batch closes because the three requests fill the token cap, not on a timer
        b = Batcher(model, max_batch_tokens=6, max_wait_s=60, max_queue=8)
        b.start()
        out = await asyncio.gather(b.submit(["a"], 1), b.submit(["b", "c"], 2), b.submit(["d", "e", "f"], 3))
        await b.close()
        return out

    assert asyncio.run(main()) == [["<a>"], ["<b>", "<c>"], ["<d>", "<e>", "<f>"]]
    assert model.batches == [["a", "b", "c", "d", "e", "f"]]


def test_the_token_cap_splits_batches_in_arrival_order_and_a_large_request_runs_alone():
    model = Model()

    async def main():
        b = Batcher(model, max_batch_tokens=8, max_wait_s=0.01, max_queue=8)
        b.start()
        out = await asyncio.gather(b.submit(["a"], 4), b.submit(["b"], 4), b.submit(["c"], 4),
                                   b.submit(["big"], 20), b.submit(["d"], 1))
        await b.close()
        return out

    assert asyncio.run(main()) == [["<a>"], ["<b>"], ["<c>"], ["<big>"], ["<d>"]]
    assert model.batches == [["a", "b"], ["c"], ["big"], ["d"]]


def test_a_full_queue_refuses_and_close_answers_every_accepted_request():
    gate = threading.Event()
    model = Model(gate)

    async def main():
        b = Batcher(model, max_batch_tokens=100, max_wait_s=0, max_queue=2)
        b.start()
        first = asyncio.ensure_future(b.submit(["a"], 1))
        await _until(model.running.is_set)  # "a" is in the model: the queue is empty again
        waiting = [asyncio.ensure_future(b.submit([x], 1)) for x in "bc"]
        await _until(lambda: b.depth == 2)
        with pytest.raises(QueueFull, match=r"2 requests are waiting \(--max-queue 2\)"):
            await b.submit(["d"], 1)
        closing = asyncio.ensure_future(b.close())
        await asyncio.sleep(0)
        with pytest.raises(Closed):
            await b.submit(["e"], 1)
        gate.set()
        await closing
        return await first, [await w for w in waiting]

    assert asyncio.run(main()) == (["<a>"], [["<b>"], ["<c>"]])
    assert model.batches == [["a"], ["b", "c"]]


def test_stop_taking_runs_the_waiting_requests_without_waiting_for_more():
    model = Model()

    async def main():
        b = Batcher(model, max_batch_tokens=100, max_wait_s=600, max_queue=8)  # would wait ten minutes
        b.start()
        pending = [asyncio.ensure_future(b.submit([x], 1)) for x in "ab"]
        await _until(lambda: b.depth == 2)
        threading.Thread(target=b.stop_taking).start()  # as a signal handler would, from outside the loop
        out = [await p for p in pending]
        with pytest.raises(Closed):
            await b.submit(["c"], 1)
        await b.close()
        return out

    assert asyncio.run(main()) == [["<a>"], ["<b>"]]


def test_a_failing_batch_fails_its_requests_only():
    model = Model(fail_on="bad")

    async def main():
        b = Batcher(model, max_batch_tokens=2, max_wait_s=0.01, max_queue=8)
        b.start()
        out = await asyncio.gather(b.submit(["ok"], 1), b.submit(["bad"], 1), b.submit(["later"], 1),
                                   return_exceptions=True)
        await b.close()
        return out

    ok, bad, later = asyncio.run(main())
    assert isinstance(ok, ValueError) and isinstance(bad, ValueError) and "cannot do bad" in str(bad)
    assert later == ["<later>"]
    assert model.batches == [["ok", "bad"], ["later"]]


def test_a_cancelled_request_does_not_disturb_the_others():
    gate = threading.Event()
    model = Model(gate)

    async def main():
        b = Batcher(model, max_batch_tokens=100, max_wait_s=0, max_queue=8)
        b.start()
        first = asyncio.ensure_future(b.submit(["a"], 1))
        await _until(model.running.is_set)
        gone, kept = asyncio.ensure_future(b.submit(["b"], 1)), asyncio.ensure_future(b.submit(["c"], 1))
        await _until(lambda: b.depth == 2)
        gone.cancel()  # its client disconnected
        gate.set()
        out = await first, await kept
        await b.close()
        return out, gone.cancelled()

    assert asyncio.run(main()) == ((["<a>"], ["<c>"]), True)
    assert model.batches == [["a"], ["c"]]  # nothing computed for it


def test_a_model_giving_the_wrong_number_of_results_is_an_error_not_a_misaligned_answer():
    async def main():
        b = Batcher(lambda items: items[:-1], max_batch_tokens=100, max_wait_s=0, max_queue=8)
        b.start()
        try:
            with pytest.raises(RuntimeError, match="1 results for 2 inputs"):
                await b.submit(["a", "b"], 2)
        finally:
            await b.close()

    asyncio.run(main())
