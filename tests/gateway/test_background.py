"""`Stragglers`: the tasks a round stopped waiting for run on, and none outlives `stop`,
nor a round cancelled while it waits (background.py)."""

from __future__ import annotations

import asyncio

from inference_gateway.background import Stragglers


async def _sleeper(seconds: float, ended: list[str], name: str) -> None:
    try:
        await asyncio.sleep(seconds)
        ended.append(f"{name} done")
    except asyncio.CancelledError:
        ended.append(f"{name} cancelled")
        raise


async def test_a_round_waits_until_its_time_and_stop_ends_the_rest() -> None:
    loop = asyncio.get_running_loop()
    ended: list[str] = []
    left = Stragglers()
    fast = loop.create_task(_sleeper(0.01, ended, "fast"))
    slow = loop.create_task(_sleeper(30.0, ended, "slow"))
    began = loop.time()
    async with asyncio.timeout(5):
        await left.wait([fast, slow], loop.time() + 0.2)
    assert 0.15 <= loop.time() - began < 2.0, "waited until its time, not for the slow one"
    assert ended == ["fast done"] and len(left) == 1
    await left.stop()
    assert ended == ["fast done", "slow cancelled"] and slow.cancelled() and len(left) == 0


async def test_without_a_time_a_round_waits_for_all() -> None:
    loop = asyncio.get_running_loop()
    ended: list[str] = []
    left = Stragglers()
    tasks = [loop.create_task(_sleeper(0.05 * i, ended, str(i))) for i in range(3)]
    await left.wait(tasks, None)
    assert sorted(ended) == ["0 done", "1 done", "2 done"] and len(left) == 0


async def test_a_round_cancelled_while_it_waits_cancels_its_tasks_and_keeps_them_for_stop() -> None:
    loop = asyncio.get_running_loop()
    ended: list[str] = []
    left = Stragglers()
    tasks = [loop.create_task(_sleeper(30.0, ended, str(i))) for i in range(2)]
    waiting = loop.create_task(left.wait(tasks, None))
    await asyncio.sleep(0.01)
    waiting.cancel()
    async with asyncio.timeout(5):
        await asyncio.gather(waiting, return_exceptions=True)
        await left.stop()
    assert sorted(ended) == ["0 cancelled", "1 cancelled"] and len(left) == 0
