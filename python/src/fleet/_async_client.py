"""The async client, ``AsyncFleet``: one resource per area of /v1, as in ``@fleet/client``.

This file is the source of both clients: python/scripts/unasync.py writes ``_sync_client.py``
(``Fleet``) from it by dropping ``async``/``await`` and the ``Async`` prefixes, so the two
never differ in anything but I/O. Edit this file, then run the script.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel
from typing_extensions import Self, Unpack

from . import models as m
from ._download import DownloadReport, S3Source, download_members
from ._frames import TableBuilder
from ._http import (
    DEFAULT_COMMAND_RETRY,
    DEFAULT_COMMAND_RETRY_WINDOW_S,
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_RETRY,
    LineSplitter,
    QueryValue,
    RetryPolicy,
    Settings,
    build_query,
    check_id,
    check_limit,
    describe_failure,
    json_of,
    log_retry,
    raise_for_answer,
    request_id_of,
)
from ._runtime import AsyncSleep, run_blocking_async, sleep_async
from ._types import (
    CommandResult,
    EpisodeFilters,
    FilterValue,
    Outcome,
    Page,
    Scope,
    WebhookEvent,
    episode_filter_pairs,
    filter_mapping,
)
from ._version import __version__
from .errors import FleetConnectionError, MalformedApiKeyError, api_key_problem
from .events import AsyncEventStream, EventType

M = TypeVar("M", bound=BaseModel)

#: Page sizes: lists take 1 to 100, the NDJSON streams (export, manifest) 1 to 5,000.
LIST_LIMIT = 100
STREAM_LIMIT = 5000


def _seg(value: str, name: str = "id") -> str:
    """An id as one path segment: checked, and percent-encoded so it cannot reach another route."""
    return quote(check_id(name, value), safe="")


def _body(model: type[M], **fields: Any) -> dict[str, Any]:
    """A request body checked against the document's schema before sending (pydantic raises a
    ValidationError, a ValueError, naming each problem); fields given as None are left out."""
    given = {k: v for k, v in fields.items() if v is not None}
    return model.model_validate(given).model_dump(mode="json", exclude_unset=True, by_alias=True)


def _models(model: type[M], items: Any) -> list[M]:
    return [model.model_validate(x) for x in items]


class AsyncFleet:
    """The /v1 API over httpx.

    ``url`` (or ``FLEET_URL``) is the API's address, with or without ``/v1``; ``api_key`` (or
    ``FLEET_API_KEY``) an ``ak_…`` key, checked for its format before anything is sent (only
    robot enrollment works without one). Every POST carries an ``Idempotency-Key`` (a random
    UUID unless ``idempotency_key=`` is given), so a retry never acts twice. ``retry`` and
    ``command_retry`` are :class:`RetryPolicy` values (``RetryPolicy.none()`` turns retries
    off); ``timeout`` is seconds (or an ``httpx.Timeout``). Use it as a context manager, or
    call ``close()``.
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float | httpx.Timeout = 30.0,
        retry: RetryPolicy = DEFAULT_RETRY,
        command_retry: RetryPolicy = DEFAULT_COMMAND_RETRY,
        command_retry_window_s: float = DEFAULT_COMMAND_RETRY_WINDOW_S,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: AsyncSleep | None = None,
        settings: Settings | None = None,
    ) -> None:
        from ._http import api_base_url

        given_url = url if url is not None else os.environ.get("FLEET_URL")
        if not given_url:
            raise ValueError("no API address: pass url= or set FLEET_URL (e.g. http://127.0.0.1:8080)")
        self.url = api_base_url(given_url)
        key_source = "api_key" if api_key is not None else "FLEET_API_KEY"
        key = api_key if api_key is not None else os.environ.get("FLEET_API_KEY")
        sent: dict[str, str] = {"user-agent": f"fleet-client-python/{__version__}", **(headers or {})}
        if key is not None and key != "":
            problem = api_key_problem(key)
            if problem is not None:
                raise MalformedApiKeyError(problem, key_source)
            sent["authorization"] = f"Bearer {key.strip()}"
        self._settings = settings if settings is not None else Settings()
        self._settings.retry = retry
        self._settings.command_retry = command_retry
        self._settings.command_retry_window_s = command_retry_window_s
        self._settings.max_line_bytes = max_line_bytes
        self._sleep: AsyncSleep = sleep if sleep is not None else sleep_async
        # No redirects: an API answer is never a redirect, and following one would carry the key elsewhere.
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=sent, timeout=timeout, transport=transport, follow_redirects=False
        )

        self.api_keys = AsyncApiKeys(self)
        self.enrollment_tokens = AsyncEnrollmentTokens(self)
        self.robots = AsyncRobots(self)
        self.episodes = AsyncEpisodes(self)
        self.datasets = AsyncDatasets(self)
        self.webhooks = AsyncWebhooks(self)
        self.destinations = AsyncDestinations(self)
        self.routing_rules = AsyncRoutingRules(self)
        self.events = AsyncEvents(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(url={self.url!r})"

    @property
    def http(self) -> httpx.AsyncClient:
        """The underlying httpx client (base URL and Authorization set), for anything else."""
        return self._http

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- transport ---------------------------------------------------------------------------

    async def _send(
        self,
        method: str,
        path: str,
        *,
        params: Sequence[tuple[str, QueryValue]] = (),
        json: Any = None,
        idempotency_key: str | None = None,
        stream: bool = False,
    ) -> httpx.Response:
        """Sends with the retry rule; answers the last response (any status), or raises
        FleetConnectionError when no answer came. A streamed response must be closed."""
        headers: dict[str, str] = {}
        if method == "POST":
            headers["idempotency-key"] = (
                idempotency_key if idempotency_key is not None else self._settings.idempotency_key()
            )
        request = self._http.build_request(method, path, params=build_query(params), json=json, headers=headers)
        started = self._settings.now()
        attempt = 0
        while True:
            attempt += 1
            response: httpx.Response | None = None
            failure: BaseException | None = None
            try:
                response = await self._http.send(request, stream=stream)
            except httpx.TransportError as err:
                failure = err
            status = response.status_code if response is not None else None
            if response is not None and status is not None and status < 500 and status != 429:
                return response
            retry_after = None
            if response is not None:
                from ._http import parse_retry_after

                retry_after = parse_retry_after(response.headers.get("retry-after"))
            wait = self._settings.next_wait(method, path, status, retry_after, attempt, started)
            if wait is None:
                if response is not None:
                    return response
                raise FleetConnectionError(
                    method, path, describe_failure(failure or RuntimeError("no answer"))
                ) from failure
            if response is not None:
                await response.aclose()
            log_retry(method, path, attempt, wait, status)
            await self._sleep(wait)

    async def _json(self, method: str, path: str, **kw: Any) -> Any:
        response = await self._send(method, path, **kw)
        return json_of(response)

    async def _command(self, path: str, body: dict[str, Any], idempotency_key: str | None) -> CommandResult:
        response = await self._send("POST", path, json=body, idempotency_key=idempotency_key)
        data = json_of(response)
        return CommandResult.from_answer(data, response.headers.get("idempotent-replayed") == "true")

    async def _ndjson(
        self, path: str, params: Sequence[tuple[str, QueryValue]], limit: int | None
    ) -> AsyncIterator[Any]:
        """Every line of an NDJSON stream, page after page (``X-Next-Cursor``). A connection that
        drops mid-page is opened again at the same cursor, and the lines already yielded from
        that page are skipped (a page from a cursor starts with the same rows), so nothing is
        yielded twice or lost; the retries are bounded by the client's policy."""
        check_limit(limit, STREAM_LIMIT)
        cursor: str | None = None
        while True:
            query = [*params, ("limit", limit), ("cursor", cursor)]
            done_in_page = 0
            drops = 0
            while True:
                response = await self._send("GET", path, params=query, stream=True)
                try:
                    if not response.is_success:
                        raise_for_answer(response, await response.aread())
                    next_cursor = response.headers.get("x-next-cursor") or None
                    splitter = LineSplitter(self._settings.max_line_bytes)
                    seen = 0
                    try:
                        async for chunk in response.aiter_bytes():
                            for line in splitter.feed(chunk):
                                seen += 1
                                if seen > done_in_page:
                                    done_in_page = seen
                                    yield line
                        for line in splitter.end():
                            seen += 1
                            if seen > done_in_page:
                                done_in_page = seen
                                yield line
                    except httpx.TransportError as err:
                        drops += 1
                        wait = self._settings.next_wait("GET", path, None, None, drops, self._settings.now())
                        if wait is None:
                            raise FleetConnectionError("GET", path, describe_failure(err)) from err
                        log_retry("GET", path, drops, wait, None)
                        await self._sleep(wait)
                        continue
                finally:
                    await response.aclose()
                break
            if next_cursor is None:
                return
            cursor = next_cursor

    # -- small resources -----------------------------------------------------------------------

    async def entitlements(self) -> m.Entitlements:
        """What the organization's plan allows; any valid key may ask."""
        return m.Entitlements.model_validate(await self._json("GET", "/v1/entitlements"))

    async def usage(self, *, from_: str | None = None, to: str | None = None) -> builtins.list[m.UsageItem]:
        """Metered counts per UTC day (``from_``/``to`` as YYYY-MM-DD; the last 30 days by default)."""
        data = await self._json("GET", "/v1/usage", params=[("from", from_), ("to", to)])
        return m.Usage.model_validate(data).usage

    async def sync_health(self, *, robot_ids: Sequence[str] | None = None) -> builtins.list[m.SyncHealthRow]:
        """Per robot: what has not been verified at a destination yet (``robot_ids``: at most 100)."""
        if robot_ids is not None and not 1 <= len(robot_ids) <= 100:
            raise ValueError("robot_ids: 1 to 100 ids")
        params = [
            ("robot_id", ",".join(check_id("robot_ids", r) for r in robot_ids) if robot_ids is not None else None)
        ]
        data = await self._json("GET", "/v1/sync-health/robots", params=params)
        return _models(m.SyncHealthRow, data["robots"])


class _Resource:
    def __init__(self, client: AsyncFleet) -> None:
        self._c = client


class AsyncEvents(_Resource):
    """The organization's event log, live (``fleet.events``, written against this client's httpx client)."""

    def stream(
        self,
        *,
        types: Sequence[EventType] | None = None,
        robot_id: str | None = None,
        last_event_id: str | None = None,
        **options: Any,
    ) -> AsyncEventStream:
        """``GET /v1/events/stream`` as an iterator of typed events that resumes with
        ``Last-Event-ID`` after a dropped or silent connection and never yields an event twice.
        ``options``: ``heartbeat_timeout_s``, ``reconnect``, ``max_attempts``, ``on_reconnect``, …"""
        if robot_id is not None:
            check_id("robot_id", robot_id)
        return AsyncEventStream(self._c._http, types=types, robot_id=robot_id, last_event_id=last_event_id, **options)


class AsyncApiKeys(_Resource):
    async def create(
        self,
        *,
        name: str,
        scopes: Sequence[Scope],
        expires_at: datetime | str | None = None,
        idempotency_key: str | None = None,
    ) -> m.CreatedApiKey:
        """A new key; its plaintext ``key`` is in this answer only."""
        body = _body(m.CreateApiKeyRequestInput, name=name, scopes=list(scopes), expires_at=expires_at)
        return m.CreatedApiKey.model_validate(
            await self._c._json("POST", "/v1/api-keys", json=body, idempotency_key=idempotency_key)
        )

    async def list(self) -> builtins.list[m.ApiKey]:
        return _models(m.ApiKey, (await self._c._json("GET", "/v1/api-keys"))["api_keys"])

    async def revoke(self, key_id: str) -> None:
        await self._c._json("DELETE", f"/v1/api-keys/{_seg(key_id)}")


class AsyncEnrollmentTokens(_Resource):
    async def create(
        self,
        *,
        name_prefix: str | None = None,
        max_uses: int | None = None,
        expires_at: datetime | str | None = None,
        idempotency_key: str | None = None,
    ) -> m.EnrollmentToken:
        """A token robots exchange for their credentials (``ret_…``, shown once)."""
        body = _body(
            m.CreateEnrollmentTokenRequestInput, name_prefix=name_prefix, max_uses=max_uses, expires_at=expires_at
        )
        return m.EnrollmentToken.model_validate(
            await self._c._json("POST", "/v1/robots/enrollment-tokens", json=body, idempotency_key=idempotency_key)
        )

    async def list(self, *, cursor: str | None = None, limit: int | None = None) -> Page[m.EnrollmentTokenInfo]:
        check_limit(limit, LIST_LIMIT)
        data = await self._c._json("GET", "/v1/robots/enrollment-tokens", params=[("cursor", cursor), ("limit", limit)])
        return Page(_models(m.EnrollmentTokenInfo, data["enrollment_tokens"]), data.get("cursor"))

    async def iterate(self, *, limit: int | None = None) -> AsyncIterator[m.EnrollmentTokenInfo]:
        cursor: str | None = None
        while True:
            page = await self.list(cursor=cursor, limit=limit)
            for item in page.items:
                yield item
            if page.cursor is None:
                return
            cursor = page.cursor

    async def revoke(self, token_id: str) -> None:
        await self._c._json("DELETE", f"/v1/robots/enrollment-tokens/{_seg(token_id)}")


RecordingState = Literal["idle", "recording", "finalizing"]
RobotSort = Literal["id", "name", "last_seen_at"]


class AsyncRobots(_Resource):
    async def enroll(
        self, *, token: str, name: str | None = None, platform: str | None = None, runtime_version: str | None = None
    ) -> m.EnrollResponse:
        """Exchanges an enrollment token for a robot id and broker credentials (no API key needed)."""
        body = _body(m.EnrollRequestInput, token=token, name=name, platform=platform, runtime_version=runtime_version)
        return m.EnrollResponse.model_validate(await self._c._json("POST", "/v1/robots/enroll", json=body))

    async def list(
        self,
        *,
        cursor: str | None = None,
        limit: int | None = None,
        include_deenrolled: bool = False,
        q: str | None = None,
        connected: bool | None = None,
        recording_state: RecordingState | None = None,
        hours_to_full_below: int | None = None,
        sort: RobotSort | None = None,
        order: Literal["asc", "desc"] | None = None,
    ) -> Page[m.Robot]:
        """One page of robots; ``cursor`` of the answer is the next page, ``prev_cursor`` the one before."""
        check_limit(limit, LIST_LIMIT)
        if recording_state is not None and recording_state not in ("idle", "recording", "finalizing"):
            raise ValueError("recording_state: idle, recording or finalizing")
        if sort is not None and sort not in ("id", "name", "last_seen_at"):
            raise ValueError("sort: id, name or last_seen_at")
        if order is not None and order not in ("asc", "desc"):
            raise ValueError("order: asc or desc")
        if hours_to_full_below is not None and not 1 <= hours_to_full_below <= 1_000_000:
            raise ValueError("hours_to_full_below: whole hours from 1 to 1,000,000")
        params: list[tuple[str, QueryValue]] = [
            ("cursor", cursor),
            ("limit", limit),
            ("include_deenrolled", True if include_deenrolled else None),
            ("q", q or None),
            ("connected", connected),
            ("recording_state", recording_state),
            ("hours_to_full_below", hours_to_full_below),
            ("sort", sort),
            ("order", order),
        ]
        data = await self._c._json("GET", "/v1/robots", params=params)
        return Page(_models(m.Robot, data["robots"]), data.get("cursor"), data.get("prev_cursor"))

    async def iterate(self, *, limit: int | None = None, **filters: Any) -> AsyncIterator[m.Robot]:
        """Every robot, following the cursor (the filters of ``list``)."""
        cursor: str | None = None
        while True:
            page = await self.list(cursor=cursor, limit=limit, **filters)
            for robot in page.items:
                yield robot
            if page.cursor is None:
                return
            cursor = page.cursor

    async def get(self, robot_id: str) -> m.Robot:
        return m.Robot.model_validate(await self._c._json("GET", f"/v1/robots/{_seg(robot_id)}"))

    async def deenroll(self, robot_id: str) -> None:
        """Immediate and permanent: its broker credentials stop; its episodes stay."""
        await self._c._json("DELETE", f"/v1/robots/{_seg(robot_id)}")

    async def rotate_credentials(self, robot_id: str, *, idempotency_key: str | None = None) -> m.CredentialRotation:
        """A new broker secret over the robot's command channel: ``completed`` or ``pending``."""
        data = await self._c._json(
            "POST", f"/v1/robots/{_seg(robot_id)}/rotate-credentials", json={}, idempotency_key=idempotency_key
        )
        return m.CredentialRotation.model_validate(data)

    async def command(
        self, robot_id: str, action: str, *, body: Mapping[str, Any] | None = None, idempotency_key: str | None = None
    ) -> CommandResult:
        """Any command by its path (``go-home``, ``stack/status``, ``episodes/start``, …). A decline
        is a result (``ok`` False); 503 RobotOfflineError and 504 CommandTimeoutError are raised
        (retry with the same ``idempotency_key``: the robot does not act twice)."""
        from ._http import ROBOT_COMMAND_ACTIONS

        if action not in ROBOT_COMMAND_ACTIONS:
            raise ValueError(f"action: one of {', '.join(ROBOT_COMMAND_ACTIONS)}")
        return await self._c._command(f"/v1/robots/{_seg(robot_id)}/{action}", dict(body or {}), idempotency_key)

    async def go_home(self, robot_id: str, *, idempotency_key: str | None = None) -> CommandResult:
        return await self.command(robot_id, "go-home", idempotency_key=idempotency_key)

    async def go_to_start(self, robot_id: str, *, idempotency_key: str | None = None) -> CommandResult:
        return await self.command(robot_id, "go-to-start", idempotency_key=idempotency_key)

    async def start_autonomous(self, robot_id: str, *, idempotency_key: str | None = None) -> CommandResult:
        return await self.command(robot_id, "start-autonomous", idempotency_key=idempotency_key)

    async def stop_autonomous(self, robot_id: str, *, idempotency_key: str | None = None) -> CommandResult:
        return await self.command(robot_id, "stop-autonomous", idempotency_key=idempotency_key)

    async def stack_start(self, robot_id: str, *, idempotency_key: str | None = None) -> CommandResult:
        return await self.command(robot_id, "stack/start", idempotency_key=idempotency_key)

    async def stack_stop(self, robot_id: str, *, idempotency_key: str | None = None) -> CommandResult:
        return await self.command(robot_id, "stack/stop", idempotency_key=idempotency_key)

    async def stack_status(self, robot_id: str, *, idempotency_key: str | None = None) -> CommandResult:
        return await self.command(robot_id, "stack/status", idempotency_key=idempotency_key)

    async def start_episode(
        self,
        robot_id: str,
        *,
        task_id: str | None = None,
        subtask_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> CommandResult:
        """Starts recording (the robot must be idle; otherwise InternalError with ``details['robot_error']``)."""
        body = {
            k: v
            for k, v in (
                ("task_id", task_id),
                ("subtask_id", subtask_id),
                ("metadata", dict(metadata) if metadata is not None else None),
            )
            if v is not None
        }
        return await self.command(robot_id, "episodes/start", body=body, idempotency_key=idempotency_key)

    async def finish_episode(self, robot_id: str, *, idempotency_key: str | None = None) -> CommandResult:
        return await self.command(robot_id, "episodes/finish", idempotency_key=idempotency_key)

    async def fail_episode(self, robot_id: str, *, idempotency_key: str | None = None) -> CommandResult:
        return await self.command(robot_id, "episodes/fail", idempotency_key=idempotency_key)

    async def discard_episode(self, robot_id: str, *, idempotency_key: str | None = None) -> CommandResult:
        return await self.command(robot_id, "episodes/discard", idempotency_key=idempotency_key)


class AsyncEpisodes(_Resource):
    async def list(
        self, *, cursor: str | None = None, limit: int | None = None, **filters: Unpack[EpisodeFilters]
    ) -> Page[m.Episode]:
        """One page of episodes in the order they were indexed; ``metadata={…}`` and
        ``annotation={…}`` filter on those layers' values (their string form),
        ``has_metadata={…}`` and ``has_annotation={…}`` on whether a key is there at all."""
        check_limit(limit, LIST_LIMIT)
        params = [*episode_filter_pairs(filters), ("cursor", cursor), ("limit", limit)]
        data = await self._c._json("GET", "/v1/episodes", params=params)
        return Page(_models(m.Episode, data["episodes"]), data.get("cursor"))

    async def pages(
        self, *, limit: int | None = None, cursor: str | None = None, **filters: Unpack[EpisodeFilters]
    ) -> AsyncIterator[Page[m.Episode]]:
        """Page after page, following the cursor (keyset: no row skipped or repeated)."""
        while True:
            page = await self.list(cursor=cursor, limit=limit, **filters)
            yield page
            if page.cursor is None:
                return
            cursor = page.cursor

    async def iterate(self, *, limit: int = 100, **filters: Unpack[EpisodeFilters]) -> AsyncIterator[m.Episode]:
        """Every matching episode: ``for e in fleet.episodes.iterate(task_id="pick")``.

        Pages of ``limit`` (default 100, the largest the API allows: half the round trips of its
        default of 50; bench/python.ts). For every row with its files, ``export()`` is faster."""
        async for page in self.pages(limit=limit, **filters):
            for episode in page.items:
                yield episode

    async def export(
        self, *, limit: int | None = None, **filters: Unpack[EpisodeFilters]
    ) -> AsyncIterator[m.EpisodeWithLocations]:
        """Every matching episode with its files and locations, streamed from the NDJSON export."""
        async for line in self._c._ndjson("/v1/episodes/export", episode_filter_pairs(filters), limit):
            yield m.EpisodeWithLocations.model_validate(line)

    async def export_lines(
        self, *, limit: int | None = None, **filters: Unpack[EpisodeFilters]
    ) -> AsyncIterator[dict[str, Any]]:
        """The same rows as plain dicts (no model per row: the fastest way through many rows)."""
        async for line in self._c._ndjson("/v1/episodes/export", episode_filter_pairs(filters), limit):
            yield line

    async def export_to_file(
        self, path: str | os.PathLike[str], *, limit: int | None = None, **filters: Unpack[EpisodeFilters]
    ) -> int:
        """Writes the export as NDJSON (one episode a line) to ``path`` via a temporary file
        renamed at the end, so a partial export never looks complete; answers the row count."""
        import json as _json

        target = Path(path)
        tmp = target.with_name(target.name + ".partial")
        count = 0
        try:
            with tmp.open("w", encoding="utf-8") as out:
                async for line in self._c._ndjson("/v1/episodes/export", episode_filter_pairs(filters), limit):
                    out.write(_json.dumps(line, separators=(",", ":"), ensure_ascii=False))
                    out.write("\n")
                    count += 1
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        tmp.replace(target)
        return count

    async def get(self, episode_id: str) -> m.Episode:
        return m.Episode.model_validate(await self._c._json("GET", f"/v1/episodes/{_seg(episode_id)}"))

    async def annotate(self, episode_id: str, annotations: Mapping[str, Any]) -> m.Episode:
        """Shallow-merges ``annotations`` into the episode's annotation layer (None deletes a key)."""
        body = _body(m.PatchAnnotationsRequestInput, annotations=dict(annotations))
        return m.Episode.model_validate(await self._c._json("PATCH", f"/v1/episodes/{_seg(episode_id)}", json=body))

    async def set_outcome(self, episode_id: str, outcome: Outcome, *, reason: str) -> m.Episode:
        """Overrides the effective outcome (audited; ``recorded_outcome`` stays)."""
        body = _body(m.PatchOutcomeRequestInput, outcome=outcome, reason=reason)
        return m.Episode.model_validate(
            await self._c._json("PATCH", f"/v1/episodes/{_seg(episode_id)}/outcome", json=body)
        )

    async def override_outcome(self, episode_id: str, outcome: Outcome, *, reason: str) -> m.Episode:
        """The same as ``set_outcome``."""
        return await self.set_outcome(episode_id, outcome, reason=reason)

    async def segments(self, episode_id: str) -> builtins.list[m.Segment]:
        return _models(m.Segment, (await self._c._json("GET", f"/v1/episodes/{_seg(episode_id)}/segments"))["segments"])

    async def files(self, episode_id: str) -> m.EpisodeFiles:
        """The files the robot's manifest lists (path, size, SHA-256); never the bytes."""
        return m.EpisodeFiles.model_validate(await self._c._json("GET", f"/v1/episodes/{_seg(episode_id)}/files"))

    async def outcome_history(self, episode_id: str) -> builtins.list[m.OutcomeChange]:
        return _models(
            m.OutcomeChange,
            (await self._c._json("GET", f"/v1/episodes/{_seg(episode_id)}/outcome-history"))["outcome_history"],
        )

    async def read_links(
        self, episode_id: str, *, destination_id: str | None = None, files: Sequence[str] | None = None
    ) -> m.ReadLinks:
        """Short-lived GET URLs for the episode's files in your bucket (every manifest file, or
        ``files``, in that order), from the first verified replica or ``destination_id``'s,
        issued by your grant provider. Each URL is a bearer secret until its ``expires_at``:
        never log it. Every call gets fresh links (nothing is replayed). Errors:
        ``ReplicaNotVerifiedError`` (409), ``ReadLinksRefusedError`` (403),
        ``ReadLinksUnsupportedError`` (501), ``ProviderFailedError`` and
        ``ReadOriginNotAllowedError`` (502), ``ProviderTimeoutError`` (504)."""
        if isinstance(files, str):
            raise TypeError("files must be a list of manifest paths, not one string")
        body = _body(
            m.ReadLinksRequestInput,
            destination_id=destination_id,
            files=builtins.list(files) if files is not None else None,
        )
        return m.ReadLinks.model_validate(
            await self._c._json("POST", f"/v1/episodes/{_seg(episode_id)}/read-links", json=body)
        )


class AsyncDatasets(_Resource):
    async def create(
        self,
        *,
        name: str,
        filter: Mapping[str, FilterValue] | None = None,
        description: str | None = None,
        idempotency_key: str | None = None,
        **filters: Unpack[EpisodeFilters],
    ) -> m.Dataset:
        """A live dataset: a named episode filter, given as ``filter={"task_id": "pick"}`` or as the
        episode list's keyword filters (``task_id="pick", metadata={"site": "lab"}``)."""
        if filter is not None and filters:
            raise TypeError("give the filter either as filter={...} or as keyword filters, not both")
        spec: dict[str, Any] = {k: v for k, v in filter.items()} if filter is not None else filter_mapping(filters)
        body = _body(m.CreateDatasetRequestInput, name=name, description=description, filter=spec)
        return m.Dataset.model_validate(
            await self._c._json("POST", "/v1/datasets", json=body, idempotency_key=idempotency_key)
        )

    async def list(self, *, cursor: str | None = None, limit: int | None = None) -> Page[m.Dataset]:
        check_limit(limit, LIST_LIMIT)
        data = await self._c._json("GET", "/v1/datasets", params=[("cursor", cursor), ("limit", limit)])
        return Page(_models(m.Dataset, data["datasets"]), data.get("cursor"))

    async def iterate(self, *, limit: int | None = None) -> AsyncIterator[m.Dataset]:
        cursor: str | None = None
        while True:
            page = await self.list(cursor=cursor, limit=limit)
            for item in page.items:
                yield item
            if page.cursor is None:
                return
            cursor = page.cursor

    async def get(self, dataset_id: str) -> m.Dataset:
        return m.Dataset.model_validate(await self._c._json("GET", f"/v1/datasets/{_seg(dataset_id)}"))

    async def count(self, dataset_id: str) -> m.DatasetCount:
        """Its pinned count, or for a live dataset what a snapshot would pin now (``capped`` past 100,000)."""
        return m.DatasetCount.model_validate(await self._c._json("GET", f"/v1/datasets/{_seg(dataset_id)}/count"))

    async def snapshot(self, dataset_id: str, *, idempotency_key: str | None = None) -> m.DatasetSnapshot:
        """Pins the members now (ConflictError if already snapshotted)."""
        data = await self._c._json(
            "POST", f"/v1/datasets/{_seg(dataset_id)}/snapshot", json={}, idempotency_key=idempotency_key
        )
        return m.DatasetSnapshot.model_validate(data)

    async def manifest(
        self, dataset_id: str, *, limit: int | None = None
    ) -> AsyncIterator[m.ManifestHeader | m.EpisodeWithLocations]:
        """The snapshot's manifest: its header first, then one episode (with files and locations)
        per member, page after page. ConflictError while the dataset is live."""
        async for line in self._c._ndjson(f"/v1/datasets/{_seg(dataset_id)}/manifest", [], limit):
            if isinstance(line, dict) and "dataset_id" in line and "id" not in line:
                yield m.ManifestHeader.model_validate(line)
            else:
                yield m.EpisodeWithLocations.model_validate(line)

    async def members(self, dataset_id: str, *, limit: int | None = None) -> AsyncIterator[m.EpisodeWithLocations]:
        """The manifest's members only."""
        async for line in self.manifest(dataset_id, limit=limit):
            if isinstance(line, m.EpisodeWithLocations):
                yield line

    async def to_arrow(self, dataset_id: str, *, limit: int | None = None) -> Any:
        """The members as a ``pyarrow.Table``, one row per episode (needs the ``pandas`` extra)."""
        builder = TableBuilder()
        async for line in self._c._ndjson(f"/v1/datasets/{_seg(dataset_id)}/manifest", [], limit):
            if not ("dataset_id" in line and "id" not in line):
                builder.add(line)
        return builder.table()

    async def to_pandas(self, dataset_id: str, *, limit: int | None = None) -> Any:
        """The members as a ``pandas.DataFrame`` (needs the ``pandas`` extra)."""
        table = await self.to_arrow(dataset_id, limit=limit)
        # The Table's buffers are released column by column as the DataFrame is built, so the
        # two do not both stay whole in memory.
        return table.to_pandas(self_destruct=True, split_blocks=True)

    async def download(
        self,
        dataset_id: str,
        dir: str | os.PathLike[str],
        *,
        source: str,
        endpoint_url: str | None = None,
        path_style: bool = False,
        region: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        s3_client: Any = None,
        strict: bool = True,
    ) -> DownloadReport:
        """Fetches every member's files from your bucket (``source="s3://bucket[/prefix]"``,
        object ``prefix + object_key + path``) into ``dir/<episode_id>/<path>`` with boto3 (the
        ``s3`` extra), checking each file's size and SHA-256 against the manifest. A rerun
        skips files already complete and verified. ``dir/manifest.json`` records what was
        fetched, skipped and why; with ``strict`` a failed file raises DownloadError after it
        is written. ``endpoint_url`` and ``path_style`` are for S3-compatible stores (MinIO…)."""
        target = S3Source.parse(source)
        members = [line async for line in self.members(dataset_id)]
        return await run_blocking_async(
            download_members,
            dataset_id,
            members,
            Path(dir),
            target,
            endpoint_url=endpoint_url,
            path_style=path_style,
            region=region,
            aws_access_key_id=aws_access_key_id,
            aws_secret_access_key=aws_secret_access_key,
            aws_session_token=aws_session_token,
            s3_client=s3_client,
            strict=strict,
        )


class AsyncWebhooks(_Resource):
    async def create(
        self, *, url: str, events: Sequence[WebhookEvent], idempotency_key: str | None = None
    ) -> m.CreatedWebhook:
        """Subscribes an HTTPS endpoint; the ``whsec_…`` secret is in this answer only."""
        body = _body(m.CreateWebhookRequestInput, url=url, events=list(events))
        return m.CreatedWebhook.model_validate(
            await self._c._json("POST", "/v1/webhooks", json=body, idempotency_key=idempotency_key)
        )

    async def list(self) -> builtins.list[m.Webhook]:
        return _models(m.Webhook, (await self._c._json("GET", "/v1/webhooks"))["webhooks"])

    async def delete(self, webhook_id: str) -> None:
        await self._c._json("DELETE", f"/v1/webhooks/{_seg(webhook_id)}")

    async def enable(self, webhook_id: str, *, idempotency_key: str | None = None) -> m.Webhook:
        return m.Webhook.model_validate(
            await self._c._json(
                "POST", f"/v1/webhooks/{_seg(webhook_id)}/enable", json={}, idempotency_key=idempotency_key
            )
        )

    async def dead_letters(self, webhook_id: str) -> builtins.list[m.DeadLetter]:
        return _models(
            m.DeadLetter, (await self._c._json("GET", f"/v1/webhooks/{_seg(webhook_id)}/dead-letters"))["dead_letters"]
        )

    async def deliveries(
        self, webhook_id: str, *, cursor: str | None = None, limit: int | None = None
    ) -> Page[m.DeliveryAttempt]:
        """Delivery attempts, newest first."""
        check_limit(limit, LIST_LIMIT)
        data = await self._c._json(
            "GET", f"/v1/webhooks/{_seg(webhook_id)}/deliveries", params=[("cursor", cursor), ("limit", limit)]
        )
        return Page(_models(m.DeliveryAttempt, data["deliveries"]), data.get("cursor"))

    async def redeliver(
        self, webhook_id: str, delivery_id: str, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Puts a dead letter back at the end of the queue: ``{delivery_id, event_id}``."""
        path = f"/v1/webhooks/{_seg(webhook_id)}/dead-letters/{_seg(delivery_id, 'delivery_id')}/redeliver"
        data: dict[str, Any] = await self._c._json("POST", path, json={}, idempotency_key=idempotency_key)
        return data

    async def rotate_secret(self, webhook_id: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """A new secret at once: ``{secret, previous_secret_expires_at}``; the old one signs for 24 h more."""
        data: dict[str, Any] = await self._c._json(
            "POST", f"/v1/webhooks/{_seg(webhook_id)}/rotate-secret", json={}, idempotency_key=idempotency_key
        )
        return data

    async def test(self, webhook_id: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """Queues a synthetic ``episode.finalized`` with ``test: true``: ``{event_id}``."""
        data: dict[str, Any] = await self._c._json(
            "POST", f"/v1/webhooks/{_seg(webhook_id)}/test", json={}, idempotency_key=idempotency_key
        )
        return data


class AsyncDestinations(_Resource):
    async def create(
        self,
        *,
        url: str,
        retention: Literal["keep", "until_all_verified_plus_72h"] | None = None,
        idempotency_key: str | None = None,
    ) -> m.CreatedDestination:
        """Registers a grant provider (``type`` external); the ``dsec_…`` secret is in this answer only."""
        body = _body(m.CreateDestinationRequestInput, type="external", url=url, retention=retention)
        return m.CreatedDestination.model_validate(
            await self._c._json("POST", "/v1/destinations", json=body, idempotency_key=idempotency_key)
        )

    async def list(self) -> builtins.list[m.Destination]:
        return _models(m.Destination, (await self._c._json("GET", "/v1/destinations"))["destinations"])

    async def revoke(self, destination_id: str) -> None:
        await self._c._json("DELETE", f"/v1/destinations/{_seg(destination_id)}")

    async def check(self, destination_id: str, *, idempotency_key: str | None = None) -> m.DestinationCheck:
        """A synthetic signed grant request through the real path: ``pass`` for a grant or a deferral."""
        data = await self._c._json(
            "POST", f"/v1/destinations/{_seg(destination_id)}/check", json={}, idempotency_key=idempotency_key
        )
        return m.DestinationCheck.model_validate(data)


class AsyncRoutingRules(_Resource):
    async def create(
        self,
        *,
        destination_id: str,
        match: Mapping[str, str | Sequence[str]] | None = None,
        idempotency_key: str | None = None,
    ) -> m.RoutingRule:
        """Appends a rule; ``match`` fields are strings or lists of strings (any of which matches)."""
        body = _body(m.CreateRoutingRuleRequestInput, destination_id=destination_id, match=dict(match or {}))
        return m.RoutingRule.model_validate(
            await self._c._json("POST", "/v1/routing-rules", json=body, idempotency_key=idempotency_key)
        )

    async def list(self) -> builtins.list[m.RoutingRule]:
        return _models(m.RoutingRule, (await self._c._json("GET", "/v1/routing-rules"))["routing_rules"])

    async def delete(self, rule_id: str) -> None:
        await self._c._json("DELETE", f"/v1/routing-rules/{_seg(rule_id)}")

    async def set_order(self, rule_ids: Sequence[str]) -> builtins.list[m.RoutingRule]:
        """Every rule, each once, in the new order."""
        body = _body(m.SetRoutingRuleOrderRequestInput, rule_ids=list(rule_ids))
        return _models(
            m.RoutingRule, (await self._c._json("PUT", "/v1/routing-rules/order", json=body))["routing_rules"]
        )


__all__ = ["AsyncFleet", "request_id_of"]
