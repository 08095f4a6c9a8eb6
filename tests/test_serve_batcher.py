"""The dynamic batcher alone (pure asyncio, no HTTP): a lone request runs at once, waiting only for requests
known to be on their way, merging, the token cap, the bounded queue, draining, and failures that reach only
the batch they happened in. Batches are counted, never timed."""

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


GUARD_S = 60
"""A hang guard, not a timing assertion: the batchers below would wait ten minutes if they waited on a timer."""


def test_a_lone_request_on_an_idle_batcher_runs_at_once():
    model = Model()

    async def main():
        b = Batcher(model, max_batch_tokens=100, max_wait_s=600, max_queue=8)
        b.start()
        out = await asyncio.wait_for(b.submit(["a"], 1), GUARD_S)  # nothing else is on its way: no wait
        await b.close()
        return out

    assert asyncio.run(main()) == ["<a>"]
    assert model.batches == [["a"]]


def test_requests_arriving_while_a_batch_runs_form_the_next_batch_up_to_the_token_cap():
    gate = threading.Event()
    model = Model(gate)

    async def main():
        b = Batcher(model, max_batch_tokens=6, max_wait_s=600, max_queue=8)
        b.start()
        first = asyncio.ensure_future(b.submit(["a"], 1))
        await _until(model.running.is_set)  # "a" runs alone, at once
        later = [asyncio.ensure_future(b.submit(items, len(items))) for items in (["b"], ["c", "d"], ["e", "f", "g"],
                                                                                   ["h"])]
        await _until(lambda: b.depth == 4)
        gate.set()
        out = await asyncio.wait_for(asyncio.gather(first, *later), GUARD_S)
        await b.close()
        return out

    assert asyncio.run(main()) == [["<a>"], ["<b>"], ["<c>", "<d>"], ["<e>", "<f>", "<g>"], ["<h>"]]
    assert model.batches == [["a"], ["b", "c", "d", "e", "f", "g"], ["h"]]  # 6 tokens, then the rest


def test_concurrent_requests_merge_into_one_batch_and_split_back():
    model = Model()

    async def main():
        b = Batcher(model, max_batch_tokens=6, max_wait_s=600, max_queue=8)
        b.start()
        out = await asyncio.wait_for(asyncio.gather(b.submit(["a"], 1), b.submit(["b", "c"], 2),
                                                    b.submit(["d", "e", "f"], 3)), GUARD_S)
        await b.close()
        return out

    assert asyncio.run(main()) == [["<a>"], ["<b>", "<c>"], ["<d>", "<e>", "<f>"]]
    assert model.batches == [["a", "b", "c", "d", "e", "f"]]  # queued in one turn of the loop: one batch


async def _turns(n: int = 20) -> None:
    """Let the event loop run the batcher's task a few times (a batcher that did not wait would run now)."""
    for _ in range(n):
        await asyncio.sleep(0)


def test_a_batch_waits_for_a_request_known_to_be_on_its_way_and_no_longer_once_it_is_refused():
    model = Model()

    async def main():
        b = Batcher(model, max_batch_tokens=100, max_wait_s=600, max_queue=8)
        b.start()
        coming, refused = b.expect(), b.expect()
        assert b.arriving == 2
        a = asyncio.ensure_future(b.submit(["a"], 1))
        await _turns()
        assert model.batches == [] and b.depth == 1  # two are on their way: the batch waits for them
        c = asyncio.ensure_future(b.submit(["c"], 1, coming))
        await _turns()
        assert model.batches == [] and b.arriving == 1
        with refused:  # e.g. a 422: it never reaches submit
            pass
        out = await asyncio.wait_for(asyncio.gather(a, c), GUARD_S)
        await b.close()
        return out, b.arriving

    assert asyncio.run(main()) == ([["<a>"], ["<c>"]], 0)
    assert model.batches == [["a", "c"]]


def test_a_full_batch_does_not_wait_for_requests_on_their_way_and_the_wait_is_bounded():
    model = Model()

    async def main():
        b = Batcher(model, max_batch_tokens=2, max_wait_s=600, max_queue=8)
        b.start()
        never = b.expect()  # announced, never submitted
        full = await asyncio.wait_for(b.submit(["a", "b"], 2), GUARD_S)
        b.max_wait_s = 0.01  # the announced request never comes: the next batch waits this long, then runs
        alone = await asyncio.wait_for(b.submit(["c"], 1), GUARD_S)
        never.close()
        await b.close()
        return full, alone

    assert asyncio.run(main()) == (["<a>", "<b>"], ["<c>"])
    assert model.batches == [["a", "b"], ["c"]]


def test_a_refused_submit_closes_its_arrival():
    gate = threading.Event()
    model = Model(gate)

    async def main():
        b = Batcher(model, max_batch_tokens=100, max_wait_s=600, max_queue=1)
        b.start()
        first = asyncio.ensure_future(b.submit(["a"], 1))
        await _until(model.running.is_set)
        waiting = asyncio.ensure_future(b.submit(["b"], 1))
        await _until(lambda: b.depth == 1)
        with pytest.raises(QueueFull):
            await b.submit(["c"], 1, b.expect())
        arriving = b.arriving
        gate.set()
        out = await asyncio.wait_for(asyncio.gather(first, waiting), GUARD_S)  # "b" does not wait for "c"
        await b.close()
        return out, arriving

    assert asyncio.run(main()) == ([["<a>"], ["<b>"]], 0)


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
        b = Batcher(model, max_batch_tokens=100, max_wait_s=600, max_queue=8)
        b.start()
        coming = b.expect()  # announced: the batch would wait ten minutes for it
        pending = [asyncio.ensure_future(b.submit([x], 1)) for x in "ab"]
        await _until(lambda: b.depth == 2)
        threading.Thread(target=b.stop_taking).start()  # as a signal handler would, from outside the loop
        out = await asyncio.wait_for(asyncio.gather(*pending), GUARD_S)
        with pytest.raises(Closed):
            await b.submit(["c"], 1, coming)
        await b.close()
        return out, b.arriving

    assert asyncio.run(main()) == ([["<a>"], ["<b>"]], 0)
    assert model.batches == [["a", "b"]]


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
