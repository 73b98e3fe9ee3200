"""Micro-batching: requests that arrive within a few milliseconds of each other are handed to
one call of `process` on one worker thread.

The event loop never runs JAX: a request puts its job on an asyncio queue and awaits a future;
one collector task takes the first job, waits `wait_s` for more (up to `max_batch`), and runs
`process(jobs)` on the single worker thread. While that batch runs, new jobs queue up and form
the next one, so a busy server batches more and an idle one answers after `wait_s`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Callable, Optional, Sequence


class MicroBatcher:
  """Batches jobs for `process(jobs) -> [result or exception]` (one entry per job).

  `on_batch(size)` is called for each batch (metrics)."""

  def __init__(self, process: Callable[[Sequence], list], *, max_batch: int = 32,
               wait_s: float = 0.005, on_batch: Optional[Callable[[int], None]] = None):
    if max_batch < 1:
      raise ValueError(f"`max_batch` must be >= 1, got {max_batch}.")
    if wait_s < 0:
      raise ValueError(f"`wait_s` must be >= 0, got {wait_s}.")
    self.process = process
    self.max_batch = max_batch
    self.wait_s = wait_s
    self.on_batch = on_batch
    self._queue: Optional[asyncio.Queue] = None
    self._task: Optional[asyncio.Task] = None
    self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None

  def start(self) -> None:
    """Starts the collector on the running event loop and the worker thread."""
    self._queue = asyncio.Queue()
    self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="jaxsel-serve")
    self._task = asyncio.get_running_loop().create_task(self._collect())

  async def submit(self, job):
    """The result of `job` (its exception raised), once its batch has run."""
    if self._queue is None:
      raise RuntimeError("the batcher is not running")
    future = asyncio.get_running_loop().create_future()
    await self._queue.put((job, future))
    return await future

  async def stop(self) -> None:
    """Runs what is queued, then stops the collector and the worker thread."""
    if self._queue is None:
      return
    await self._queue.put(None)
    await self._task
    self._executor.shutdown(wait=True)
    self._queue = None

  async def _collect(self) -> None:
    loop = asyncio.get_running_loop()
    stopping = False
    while not stopping:
      item = await self._queue.get()
      if item is None:
        break
      batch = [item]
      if self.wait_s and self.max_batch > 1:
        await asyncio.sleep(self.wait_s)
      while len(batch) < self.max_batch and not self._queue.empty():
        item = self._queue.get_nowait()
        if item is None:
          stopping = True
          break
        batch.append(item)
      if self.on_batch is not None:
        self.on_batch(len(batch))
      jobs = [job for job, _ in batch]
      try:
        results = await loop.run_in_executor(self._executor, self.process, jobs)
      except Exception as e:  # noqa: BLE001 -- process itself failed: every job gets the error
        results = [e] * len(batch)
      for (_, future), result in zip(batch, results):
        if future.done():  # the client went away
          continue
        if isinstance(result, BaseException):
          future.set_exception(result)
        else:
          future.set_result(result)
    # After the stop marker: anything queued behind it still gets its answer.
    while not self._queue.empty():
      item = self._queue.get_nowait()
      if item is not None:
        job, future = item
        result = (await loop.run_in_executor(self._executor, self.process, [job]))[0]
        if not future.done():
          (future.set_exception if isinstance(result, BaseException) else future.set_result)(result)
