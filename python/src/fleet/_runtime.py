"""The two things the sync and async clients do differently besides I/O: waiting, and running
blocking work (boto3, hashing files). python/scripts/unasync.py maps each ``*_async`` name to its
``*_sync`` twin."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


async def sleep_async(seconds: float) -> None:
    await asyncio.sleep(seconds)


def sleep_sync(seconds: float) -> None:
    time.sleep(seconds)


async def run_blocking_async(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Blocking work in a worker thread, so the event loop keeps serving other tasks."""
    return await asyncio.to_thread(fn, *args, **kwargs)


def run_blocking_sync(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    return fn(*args, **kwargs)


#: How a client waits between retries (injectable: tests pass one that records the waits).
AsyncSleep = Callable[[float], Awaitable[None]]
Sleep = Callable[[float], None]
