"""Background loops (scrapes, watches, tickers): how every one of them is stopped."""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["Stragglers", "cancel_and_wait", "pending_cancels", "raise_if_cancelled_since"]


async def cancel_and_wait(task: asyncio.Task[None] | None) -> None:
    """Cancel a background task and wait until it has ended, so nothing it holds (a
    socket, a watch) outlives the caller's `stop()`; its cancellation is not an error."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


class Stragglers:
    """Tasks a round stopped waiting for (a slow pod's scrape, a slow cluster's status
    poll): they run on under their own deadlines while the next round starts on time, and
    `stop` ends them, so none outlives its owner. Used by the endpoint store and the
    global router's cluster poller."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    async def wait(self, tasks: list[asyncio.Task[None]], until: float | None) -> None:
        """Wait for `tasks` until loop time `until` (None: until they all end) and keep
        those still running; cancelled meanwhile, cancel them all."""
        try:
            wait_s = None if until is None else until - asyncio.get_running_loop().time()
            if tasks and (wait_s is None or wait_s > 0):
                await asyncio.wait(tasks, timeout=wait_s)
        except BaseException:
            self.cancel(tasks)
            raise
        self._keep(tasks)

    def cancel(self, tasks: list[asyncio.Task[None]]) -> None:
        """Cancel `tasks`, kept until they have ended."""
        for task in tasks:
            task.cancel()
        self._keep(tasks)

    def _keep(self, tasks: list[asyncio.Task[None]]) -> None:
        for task in tasks:
            if not task.done():
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        for task in list(self._tasks):
            await cancel_and_wait(task)


def pending_cancels() -> int:
    """The running task's pending cancel requests (0 outside a task): what
    `raise_if_cancelled_since` compares against."""
    task = asyncio.current_task()
    return task.cancelling() if task is not None else 0


def raise_if_cancelled_since(cancels_before: int, error: BaseException | None = None) -> None:
    """Raise `CancelledError` when the running task was cancelled after it had
    `cancels_before` pending cancels (`Task.cancelling()`): redis-py can turn a cancel that
    lands mid-command into a `ConnectionError`, or return normally past it, and a loop
    that reads that as a store failure and sleeps on never ends, so its `stop()` (here,
    `cancel_and_wait`) waits for ever. A CI run hung 300 s on the global router's cluster
    poller that way."""
    if pending_cancels() > cancels_before:
        raise asyncio.CancelledError from error
