"""Concurrent /generate requests of `mathrl vllm-serve`, served by one engine call.

Under torchrun every trainer rank sends its prompts at about the same time. ``Batcher`` holds
the first request for ``window_s`` (rollout.server_batch_window_s), takes every request that
arrived meanwhile and runs them as one engine call on the engine thread; requests that arrive
while the engine runs form the next batch. Each request keeps its own n and sampling
parameters (``VLLMEngine.generate_many`` gives every prompt its own vLLM ``SamplingParams``,
seeds included, so a batched request samples what it would alone), and gets back its own
results. If a batched call fails, its requests are rerun one by one so that one bad request
fails alone.
"""

from __future__ import annotations

import asyncio

__all__ = ["Batcher"]


class Batcher:
    """``run(requests) -> results`` is the blocking engine call (one result per request)."""

    def __init__(self, run, window_s: float, executor):
        self.run, self.window_s, self.executor = run, window_s, executor
        self.pending: list[tuple[tuple, asyncio.Future]] = []
        self.calls = 0  # engine calls made
        self.requests = 0  # requests served
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    async def submit(self, request: tuple):
        loop = asyncio.get_running_loop()
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._loop())
        future = loop.create_future()
        self.pending.append((request, future))
        self._wake.set()
        return await future

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            if self.window_s:
                await asyncio.sleep(self.window_s)
            batch, self.pending = self.pending, []
            self._wake.clear()
            if not batch:
                continue
            results = await loop.run_in_executor(self.executor, self._call, [r for r, _ in batch])
            for (_, future), result in zip(batch, results):
                if future.done():  # the client went away
                    continue
                if isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    future.set_result(result)

    def _call(self, requests: list[tuple]) -> list:
        """On the engine thread: one call for all; on failure one call each."""
        self.calls += 1
        self.requests += len(requests)
        try:
            return list(self.run(requests))
        except Exception as e:
            if len(requests) == 1:
                return [e]
        results = []
        for request in requests:
            self.calls += 1
            try:
                results.append(self.run([request])[0])
            except Exception as e:
                results.append(e)
        return results
