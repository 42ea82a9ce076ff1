"""``GET /v1/events/stream`` as an iterator (sync) and an async iterator (async) of typed events.

Hook for the client (``fleet/resources``): ``client.events.stream(**kw)`` is
``EventStream(client_http, **kw)`` and the async client's is ``AsyncEventStream(async_http, **kw)``,
where the httpx client carries the API's base URL (with or without ``/v1``) and the
``Authorization`` header. This module never sees the key itself.

What it guarantees, as ``packages/client/src/events.ts`` does: after a dropped connection (a
network error, the server ending the answer, a 5xx or 429, or a connection silent for
``heartbeat_timeout_s`` although the server sends a heartbeat every 15 s) it connects again with
``Last-Event-ID`` set to the last id it yielded (or the position the server said it started
from), waiting the server's ``retry:`` delay and longer while attempts fail (up to 30 s, at most
``max_attempts`` failures in a row). The cloud then sends every later event, so none is lost; ids
seen lately are remembered, so none is yielded twice even if a server repeats one. A 4xx answer
raises the API's error (401 and 403 are never retried), and so does any failure of the very
first connection, so a wrong URL or key shows at once.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import random as _random
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import httpx
import pydantic

from ._sse import SseComment, SseItem, SseMessage, SseParser, SsePosition, SseRetry
from .errors import FleetConnectionError, FleetStreamError, error_from_response
from .models import RobotStatusEvent, WebhookPayload

__all__ = [
    "EVENT_TYPES",
    "AsyncEventStream",
    "EpisodeEvent",
    "EpisodeEventType",
    "EventStream",
    "EventType",
    "FleetEvent",
    "Reconnect",
    "RobotStatusChange",
]

EpisodeEventType = Literal[
    "episode.finalized", "episode.synced", "episode.verified", "episode.failed", "episode.pruned"
]
EventType = Literal[EpisodeEventType, "robot.status"]
#: Every event type of the stream, in the order the API documents them.
EVENT_TYPES: tuple[EventType, ...] = (*get_args(EpisodeEventType), "robot.status")
_EPISODE_TYPES: frozenset[str] = frozenset(get_args(EpisodeEventType))


@dataclass(frozen=True)
class EpisodeEvent:
    """An episode event: ``data`` is the payload its webhook delivery carries."""

    id: str
    type: EpisodeEventType
    data: WebhookPayload


@dataclass(frozen=True)
class RobotStatusChange:
    """``robot.status``: a robot went online or offline, or its recording state changed."""

    id: str
    type: Literal["robot.status"]
    data: RobotStatusEvent


#: One event: ``id`` is its opaque ``evt_…`` (the ``X-Service-Event-Id`` of its webhook delivery).
FleetEvent = EpisodeEvent | RobotStatusChange


@dataclass(frozen=True)
class Reconnect:
    """What ``on_reconnect`` is told before each wait for a new connection."""

    attempt: int
    wait_s: float
    last_event_id: str | None
    error: Exception


_STREAM_PATH = "/events/stream"
_DEFAULT_RETRY_S = 2.0
# The waits after 1, 2, 3, 4, 5+ failures in a row, in multiples of the server's retry: delay.
_RECONNECT_FACTORS = (1, 2, 4, 8, 15)
_MAX_WAIT_S = 30.0
_MAX_RETRY_AFTER_S = 60.0
_JITTER = 0.2
#: Three of the server's 15 s heartbeats missed: the connection is taken as half-open.
DEFAULT_HEARTBEAT_TIMEOUT_S = 45.0
DEFAULT_MAX_ATTEMPTS = 10
# Far more than one reconnection can replay; a bound keeps a days-long stream's memory flat.
_RECENT_IDS = 10_000


def _retry_after_s(value: str | None) -> float | None:
    if value is None:
        return None
    v = value.strip()
    if v.isascii() and v.isdigit():
        return float(v)
    try:
        when = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class _Resumption:
    """The state of one logical stream across its connections: what the sync and async loops share."""

    def __init__(
        self,
        http: httpx.Client | httpx.AsyncClient,
        *,
        types: Sequence[EventType] | None,
        robot_id: str | None,
        last_event_id: str | None,
        heartbeat_timeout_s: float,
        reconnect: bool,
        max_attempts: int | None,
        random: Callable[[], float],
        on_open: Callable[[], None] | None,
        on_reconnect: Callable[[Reconnect], None] | None,
    ) -> None:
        if types is not None:
            if isinstance(types, str):
                raise TypeError("types must be a list of event types, e.g. ['robot.status']")
            unknown = [t for t in types if t not in EVENT_TYPES]
            if unknown or not types:
                raise ValueError(f"types must be one or more of {', '.join(EVENT_TYPES)}")
        if robot_id is not None and not (1 <= len(robot_id) <= 128):
            raise ValueError("robot_id must be 1 to 128 characters")
        if last_event_id is not None and not last_event_id.startswith("evt_"):
            raise ValueError("last_event_id must be an event id (evt_…)")
        if not heartbeat_timeout_s > 0:
            raise ValueError("heartbeat_timeout_s must be > 0")
        if max_attempts is not None and max_attempts < 1:
            raise ValueError("max_attempts must be >= 1 (or None to reconnect for ever)")
        base = str(http.base_url)
        if not base.startswith(("http://", "https://")):
            raise ValueError("the httpx client needs the API's base_url")
        self.path = _STREAM_PATH if base.rstrip("/").endswith("/v1") else "/v1" + _STREAM_PATH
        self.params: dict[str, str] = {}
        if types is not None:
            self.params["types"] = ",".join(dict.fromkeys(types))
        if robot_id is not None:
            self.params["robot_id"] = robot_id
        self.timeout = httpx.Timeout(10.0, read=heartbeat_timeout_s)
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.reconnect = reconnect
        self.max_attempts = max_attempts
        self.random = random
        self.on_open = on_open
        self.on_reconnect = on_reconnect
        self.last_id = last_event_id
        self.seen: OrderedDict[str, None] = OrderedDict()
        if last_event_id is not None:
            self._remember(last_event_id)
        self.retry_s = _DEFAULT_RETRY_S
        self.opened = False
        self.failures = 0

    def _remember(self, event_id: str) -> None:
        self.seen[event_id] = None
        if len(self.seen) > _RECENT_IDS:
            self.seen.popitem(last=False)

    def headers(self) -> dict[str, str]:
        h = {"accept": "text/event-stream", "cache-control": "no-cache"}
        if self.last_id is not None:
            h["last-event-id"] = self.last_id
        return h

    def refusal(self, response: httpx.Response) -> Exception:
        """The error of a non-2xx answer (its body read); raises it unless it is worth a reconnection."""
        try:
            body: Any = json.loads(response.content)
        except ValueError:
            body = None
        retry_after = _retry_after_s(response.headers.get("retry-after"))
        err = error_from_response(response.status_code, body, response.headers.get("x-request-id"), retry_after)
        transient = response.status_code >= 500 or response.status_code == 429
        if not transient or not self.opened or not self.reconnect:
            raise err
        return err

    def open(self, response: httpx.Response) -> None:
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "text/event-stream":
            raise FleetStreamError(
                "not_event_stream", f"GET {self.path} answered {kind or 'no content-type'}, not text/event-stream"
            )
        self.opened = True
        self.failures = 0
        if self.on_open is not None:
            self.on_open()

    def take(self, item: SseItem) -> FleetEvent | None:
        """The event to yield for one parsed item, if any; notes positions and the retry delay."""
        if isinstance(item, SseRetry):
            self.retry_s = item.ms / 1000
            return None
        if isinstance(item, SsePosition):
            # Where the server started this answer: resume from there if nothing came since.
            if item.id not in self.seen:
                self.last_id = item.id
            return None
        if isinstance(item, SseComment) or item.id is None or item.id in self.seen:
            return None
        self._remember(item.id)
        self.last_id = item.id
        return self._event(item)

    def _event(self, m: SseMessage) -> FleetEvent | None:
        if m.id is None:  # the caller yields only messages with an id
            raise RuntimeError("an event without an id reached _event")
        try:
            if m.event in _EPISODE_TYPES:
                return EpisodeEvent(m.id, m.event, WebhookPayload.model_validate_json(m.data))  # type: ignore[arg-type]
            if m.event == "robot.status":
                return RobotStatusChange(m.id, "robot.status", RobotStatusEvent.model_validate_json(m.data))
        except pydantic.ValidationError as e:
            raise FleetStreamError(
                "invalid_event",
                f"the data of event {m.id} ({m.event}) is not its payload: {e.error_count()} problem(s)",
            ) from None
        # A type this SDK does not know (a newer server's) is passed over; its id is noted.
        return None

    def dropped(self, err: Exception) -> Exception:
        if isinstance(err, httpx.TimeoutException) and self.opened:
            reason = f"nothing received for {self.heartbeat_timeout_s:g} s (the server sends a heartbeat every 15 s)"
        elif isinstance(err, httpx.TransportError):
            reason = f"{type(err).__name__}: {err}"
        else:
            reason = str(err)
        return FleetConnectionError("GET", self.path, reason)

    def wait(self, failure: Exception) -> float:
        """Seconds to wait before the next connection; raises ``failure`` when there is none."""
        if not self.reconnect or not self.opened:
            raise failure
        self.failures += 1
        if self.max_attempts is not None and self.failures > self.max_attempts:
            raise failure
        factor = _RECONNECT_FACTORS[min(self.failures, len(_RECONNECT_FACTORS)) - 1]
        base = min(_MAX_WAIT_S, self.retry_s * factor)
        wait = base * (1 + _JITTER * (2 * self.random() - 1))
        retry_after = getattr(failure, "retry_after_s", None)
        if isinstance(retry_after, (int, float)):
            wait = max(wait, min(float(retry_after), _MAX_RETRY_AFTER_S))
        if self.on_reconnect is not None:
            self.on_reconnect(Reconnect(self.failures, wait, self.last_id, failure))
        return wait


class EventStream:
    """The event stream on a sync ``httpx.Client``: ``for event in stream: ...``; ``close()`` ends it.

    ``types``: only these event types (default every type the key may read). ``robot_id``: one
    robot's events. ``last_event_id``: resume after this event (default: from the present).
    ``heartbeat_timeout_s``: a connection silent this long is replaced (default 45 s).
    ``reconnect``: connect again after a drop (default True); ``max_attempts``: failed
    connections in a row before giving up (default 10, None for ever). ``sleep`` and ``random``
    are the waits and the jitter, for tests. ``last_event_id`` (the attribute) is where a new
    stream would resume.
    """

    def __init__(
        self,
        http: httpx.Client,
        *,
        types: Sequence[EventType] | None = None,
        robot_id: str | None = None,
        last_event_id: str | None = None,
        heartbeat_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S,
        reconnect: bool = True,
        max_attempts: int | None = DEFAULT_MAX_ATTEMPTS,
        sleep: Callable[[float], None] = time.sleep,
        random: Callable[[], float] = _random.random,
        on_open: Callable[[], None] | None = None,
        on_reconnect: Callable[[Reconnect], None] | None = None,
    ) -> None:
        self._http = http
        self._state = _Resumption(
            http, types=types, robot_id=robot_id, last_event_id=last_event_id, heartbeat_timeout_s=heartbeat_timeout_s,
            reconnect=reconnect, max_attempts=max_attempts, random=random, on_open=on_open, on_reconnect=on_reconnect,
        )  # fmt: skip
        self._sleep = sleep
        self._events = self._run()

    @property
    def last_event_id(self) -> str | None:
        return self._state.last_id

    def __iter__(self) -> Iterator[FleetEvent]:
        return self

    def __next__(self) -> FleetEvent:
        return next(self._events)

    def close(self) -> None:
        """Closes the open connection; the iteration ends."""
        self._events.close()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> Generator[FleetEvent, None, None]:
        s = self._state
        while True:
            failure: Exception
            try:
                with self._http.stream(
                    "GET", s.path, params=s.params, headers=s.headers(), timeout=s.timeout
                ) as response:
                    if not response.is_success:
                        response.read()
                        failure = s.refusal(response)
                    else:
                        s.open(response)
                        parser = SseParser()
                        for chunk in response.iter_bytes():
                            for item in parser.feed(chunk):
                                event = s.take(item)
                                if event is not None:
                                    yield event
                        if not s.reconnect:
                            return
                        failure = FleetConnectionError("GET", s.path, "the server ended the stream")
            except httpx.TransportError as err:
                failure = s.dropped(err)
            self._sleep(s.wait(failure))


class AsyncEventStream:
    """The event stream on an ``httpx.AsyncClient``: ``async for event in stream: ...``; ``await aclose()``.

    The same options and guarantees as :class:`EventStream`; ``sleep`` is awaited.
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        types: Sequence[EventType] | None = None,
        robot_id: str | None = None,
        last_event_id: str | None = None,
        heartbeat_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S,
        reconnect: bool = True,
        max_attempts: int | None = DEFAULT_MAX_ATTEMPTS,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        random: Callable[[], float] = _random.random,
        on_open: Callable[[], None] | None = None,
        on_reconnect: Callable[[Reconnect], None] | None = None,
    ) -> None:
        self._http = http
        self._state = _Resumption(
            http, types=types, robot_id=robot_id, last_event_id=last_event_id, heartbeat_timeout_s=heartbeat_timeout_s,
            reconnect=reconnect, max_attempts=max_attempts, random=random, on_open=on_open, on_reconnect=on_reconnect,
        )  # fmt: skip
        self._sleep = sleep
        self._events = self._run()

    @property
    def last_event_id(self) -> str | None:
        return self._state.last_id

    def __aiter__(self) -> AsyncIterator[FleetEvent]:
        return self

    async def __anext__(self) -> FleetEvent:
        return await self._events.__anext__()

    async def aclose(self) -> None:
        """Closes the open connection; the iteration ends."""
        await self._events.aclose()

    async def __aenter__(self) -> AsyncEventStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _run(self) -> AsyncGenerator[FleetEvent, None]:
        s = self._state
        while True:
            failure: Exception
            try:
                async with self._http.stream(
                    "GET", s.path, params=s.params, headers=s.headers(), timeout=s.timeout
                ) as response:
                    if not response.is_success:
                        await response.aread()
                        failure = s.refusal(response)
                    else:
                        s.open(response)
                        parser = SseParser()
                        async for chunk in response.aiter_bytes():
                            for item in parser.feed(chunk):
                                event = s.take(item)
                                if event is not None:
                                    yield event
                        if not s.reconnect:
                            return
                        failure = FleetConnectionError("GET", s.path, "the server ended the stream")
            except httpx.TransportError as err:
                failure = s.dropped(err)
            await self._sleep(s.wait(failure))
