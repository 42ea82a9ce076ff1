"""What the sync and async clients share: the retry rule and schedules (data, not code paths),
query building, the answer-to-exception step and the NDJSON line splitter. Nothing here does I/O."""

from __future__ import annotations

import email.utils
import json
import logging
import random as _random
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import httpx

from .errors import FleetStreamError, error_from_response

logger = logging.getLogger("fleet")

#: The longest NDJSON line read, in bytes: 16 MiB (an episode line with 10,000 files is far less).
DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class RetryPolicy:
    """When to send a failed request again: ``schedule`` holds the waits (seconds) before each
    retry, so ``len(schedule) + 1`` is the most attempts; each wait is spread by ``jitter``
    (a fraction); a server's ``Retry-After`` longer than the wait is honoured up to
    ``max_retry_after_s``, and a longer one is not waited for (the error is raised)."""

    schedule: tuple[float, ...] = (0.5, 1.0, 2.0)
    jitter: float = 0.2
    max_retry_after_s: float = 60.0

    def __post_init__(self) -> None:
        if any(w < 0 for w in self.schedule):
            raise ValueError("RetryPolicy.schedule: waits are seconds >= 0")
        if not 0 <= self.jitter <= 1:
            raise ValueError("RetryPolicy.jitter is a fraction from 0 to 1")
        if self.max_retry_after_s < 0:
            raise ValueError("RetryPolicy.max_retry_after_s is seconds >= 0")

    @property
    def max_attempts(self) -> int:
        return len(self.schedule) + 1

    @classmethod
    def none(cls) -> RetryPolicy:
        return cls(schedule=())


#: Every request but robot commands: 3 retries after 0.5 s, 1 s and 2 s (±20 %).
DEFAULT_RETRY = RetryPolicy()
#: Robot commands wait for the robot, so they retry less: 2 retries after 0.25 s and 0.75 s.
DEFAULT_COMMAND_RETRY = RetryPolicy(schedule=(0.25, 0.75))
#: No robot command is sent again once this long has passed since its first attempt.
DEFAULT_COMMAND_RETRY_WINDOW_S = 2.0

ROBOT_COMMAND_ACTIONS: tuple[str, ...] = (
    "go-home",
    "go-to-start",
    "start-autonomous",
    "stop-autonomous",
    "stack/start",
    "stack/stop",
    "stack/status",
    "episodes/start",
    "episodes/finish",
    "episodes/fail",
    "episodes/discard",
)
_COMMAND_PATH = re.compile(r"/v1/robots/[^/]+/(?:" + "|".join(re.escape(a) for a in ROBOT_COMMAND_ACTIONS) + r")$")
#: POSTs the server does not deduplicate by Idempotency-Key (no API key, so no organization).
_UNKEYED_POSTS = frozenset({"/v1/robots/enroll"})


#: ``POST /v1/episodes/{id}/read-links``: its 501, 502 and 504 are the grant provider's verdict.
_READ_LINKS_PATH = re.compile(r"/v1/episodes/[^/]+/read-links$")


def is_robot_command_path(path: str) -> bool:
    return _COMMAND_PATH.search(path) is not None


def is_retryable(method: str, path: str, status: int | None) -> bool:
    """Whether a failed attempt (``status`` None: no answer at all) may be sent again.

    Robot commands: only after a network error, a 502 or a 503 (never a 4xx, a 500 the robot
    would repeat, or a 504 after which the cloud already waited its whole timeout). Anything
    else: after a 429; after a 5xx or a network error unless it is a PATCH (an outcome change
    writes an audit row per request) or a POST the server does not deduplicate (enrollment).
    Read links: not after a 501, 502 or 504 (the cloud already asked the grant provider and
    relays its answer: no read support, a bad answer, none within 10 s).
    """
    if method == "POST" and is_robot_command_path(path):
        return status is None or status in (502, 503)
    if method == "POST" and _READ_LINKS_PATH.search(path) is not None and status in (501, 502, 504):
        return False
    if status == 429:
        return True
    if status is not None and status < 500:
        return False
    if method in ("GET", "HEAD", "PUT", "DELETE"):
        return True
    if method == "POST":
        return path not in _UNKEYED_POSTS
    return False


def retry_wait(
    policy: RetryPolicy, failed_attempts: int, retry_after_s: float | None, random: Callable[[], float]
) -> float | None:
    """Seconds to wait before the next attempt after ``failed_attempts`` failures, or None to stop."""
    if failed_attempts < 1 or failed_attempts > len(policy.schedule):
        return None
    base = policy.schedule[failed_attempts - 1]
    wait = base * (1 + policy.jitter * (2 * random() - 1)) if policy.jitter else base
    wait = max(wait, retry_after_s or 0.0)
    return None if wait > policy.max_retry_after_s else wait


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` in seconds: delay-seconds or an HTTP date; None when absent or invalid."""
    if value is None:
        return None
    v = value.strip()
    if re.fullmatch(r"\d{1,9}", v):
        return float(v)
    try:
        at = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError):
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=timezone.utc)
    return max(0.0, at.timestamp() - (time.time() if now is None else now))


def _uuid_text() -> str:
    return str(uuid.uuid4())


@dataclass
class Settings:
    """The options both clients take, checked once."""

    retry: RetryPolicy = DEFAULT_RETRY
    command_retry: RetryPolicy = DEFAULT_COMMAND_RETRY
    command_retry_window_s: float = DEFAULT_COMMAND_RETRY_WINDOW_S
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    idempotency_key: Callable[[], str] = field(default_factory=lambda: _uuid_text)
    random: Callable[[], float] = field(default_factory=lambda: _random.random)
    now: Callable[[], float] = field(default_factory=lambda: time.monotonic)

    def policy_for(self, method: str, path: str) -> tuple[RetryPolicy, bool]:
        command = method == "POST" and is_robot_command_path(path)
        return (self.command_retry if command else self.retry), command

    def next_wait(
        self,
        method: str,
        path: str,
        status: int | None,
        retry_after_s: float | None,
        failed_attempts: int,
        started: float,
    ) -> float | None:
        """The wait before the next attempt, or None: the one decision both transports make."""
        if not is_retryable(method, path, status):
            return None
        policy, command = self.policy_for(method, path)
        wait = retry_wait(policy, failed_attempts, retry_after_s, self.random)
        if wait is None:
            return None
        if command and self.now() - started + wait > self.command_retry_window_s:
            return None
        return wait


def api_base_url(url: str) -> str:
    """The API's address without trailing slashes or ``/v1`` (people paste it as printed)."""
    u = url.strip().rstrip("/")
    if u.lower().endswith("/v1"):
        u = u[:-3].rstrip("/")
    if not re.match(r"^https?://[^/]+", u):
        raise ValueError("url: expected the API's address, http(s)://host[:port] (FLEET_URL)")
    return u


QueryValue = str | int | float | bool | datetime | None


def query_text(value: str | int | float | bool | datetime) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("a datetime filter needs a timezone (e.g. datetime.now(timezone.utc))")
        return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    return str(value)


def build_query(pairs: Iterable[tuple[str, QueryValue]]) -> list[tuple[str, str | int | float | bool | None]]:
    """Query pairs with None left out; httpx percent-encodes keys and values (``metadata.a=b&c``)."""
    return [(k, query_text(v)) for k, v in pairs if v is not None]


def check_limit(limit: int | None, high: int) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= high):
        raise ValueError(f"limit: a whole number from 1 to {high}")


def check_id(name: str, value: str) -> str:
    if not isinstance(value, str) or value == "" or len(value) > 512:
        raise ValueError(f"{name}: a non-empty id string")
    return value


def request_id_of(response: httpx.Response) -> str | None:
    rid = response.headers.get("x-request-id")
    return str(rid) if rid is not None else None


def raise_for_answer(response: httpx.Response, body: bytes) -> None:
    """Raises the typed exception of a non-2xx answer whose body has been read."""
    if response.is_success:
        return
    parsed: Any = None
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        parsed = None
    raise error_from_response(
        response.status_code, parsed, request_id_of(response), parse_retry_after(response.headers.get("retry-after"))
    )


def json_of(response: httpx.Response) -> Any:
    raise_for_answer(response, response.content)
    return response.json() if response.content else None


class LineSplitter:
    """NDJSON lines from chunks as they arrive, holding at most one line (``max_bytes``)."""

    def __init__(self, max_bytes: int) -> None:
        self._pending = b""
        self._max = max_bytes

    def feed(self, chunk: bytes) -> list[Any]:
        out: list[Any] = []
        if b"\n" in chunk:
            # One split per chunk: the unfinished last piece is all that is kept.
            *lines, self._pending = (self._pending + chunk).split(b"\n")
            out = [_parse_line(line) for line in lines if line.strip()]
        else:
            self._pending += chunk
        if len(self._pending) > self._max:
            raise FleetStreamError("line_too_long", f"a stream line is longer than {self._max} bytes")
        return out

    def end(self) -> list[Any]:
        rest, self._pending = self._pending, b""
        return [_parse_line(rest)] if rest.strip() else []


def _parse_line(line: bytes) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        raise FleetStreamError("invalid_json", "a stream line is not valid JSON") from None


def describe_failure(err: BaseException) -> str:
    """A network failure in words, without the request (its headers hold the key)."""
    name = type(err).__name__
    text = str(err)
    return f"{name}: {text}" if text else name


def log_retry(method: str, path: str, attempt: int, wait: float, status: int | None) -> None:
    logger.info(
        "fleet: %s %s attempt %d got %s; retrying in %.2f s",
        method,
        path,
        attempt,
        status if status is not None else "no answer",
        wait,
    )


def mapping_or_empty(m: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(m) if m is not None else {}
