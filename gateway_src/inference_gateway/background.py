"""Background loops (scrapes, watches, tickers): how every one of them is stopped."""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["cancel_and_wait", "pending_cancels", "raise_if_cancelled_since"]


async def cancel_and_wait(task: asyncio.Task[None] | None) -> None:
    """Cancel a background task and wait until it has ended, so nothing it holds (a
    socket, a watch) outlives the caller's `stop()`; its cancellation is not an error."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


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
